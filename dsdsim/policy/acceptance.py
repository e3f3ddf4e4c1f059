"""Acceptance models: how many tokens one speculative step emits (the model; reading strings and vLLM files into it
is ``dsdsim.policy.acceptance_input``, which builds on this module and is never imported by it).

Notation (Leviathan et al. 2023; Chen et al. 2023):

    α_i   conditional acceptance: P(draft token i accepted | draft tokens 1..i−1 accepted), i = 1, 2, ...
    p_i   unconditional acceptance: P(draft tokens 1..i all accepted) = Π_{j≤i} α_j
    τ(K)  expected tokens emitted by one step that drafts K tokens
          = 1 + Σ_{i=1..K} p_i                      (the +1 is the bonus / correction token)
          = (1 − α^{K+1}) / (1 − α)                 for a constant α

τ(0) = 1 (plain decoding) and 1 ≤ τ(K) ≤ K + 1.

Where the numbers come from (every ``Acceptance`` carries a human ``source``):

* ``constant(0.8)``, ``from_list([0.8, 0.7, 0.6])`` — given conditional α.
* ``from_mean_acceptance_length(2.79, 3)`` — the constant α whose τ(3) is 2.79. vLLM's "mean acceptance
  length" is 1 + accepted / num_drafts, which is τ(K) including the bonus token.
* ``from_unconditional_rates([0.68, 0.39, ...])`` — vLLM's "Per-position acceptance rate" (accepted_per_pos /
  num_drafts) is p_i, not α_i; α_i = p_i / p_{i−1}.
* ``from_vllm_prometheus(text)``, ``from_vllm_request_metrics(obj)``, ``parse_acceptance(text)`` — ingestion,
  in ``dsdsim.policy.acceptance_input``.
* ``TreeAcceptance(2.55)`` — a draft tree's mean acceptance length as measured (τ of the tree, bonus included);
  a tree has no per-position chain α, so τ is the measured length itself.

Across requests. Acceptance differs between requests (prompts, domains). ``spread`` = κ models it: every
request draws a quality a ~ Beta(m κ, (1 − m) κ) with mean m = max_j α_j and scales every α_j by a / m, so
request r has α_{r,j} = α_j · a_r / m ∈ [0, 1]. The population then emits

    τ(K) = 1 + Σ_{i=1..K} p_i · E[a^i] / m^i,     E[a^i] = Π_{j=0}^{i−1} (m κ + j) / (κ + j).

For a constant α = m this is τ(K) = Σ_{i=0..K} E[a^i]. Because a ↦ a^i is convex, E[a^i] ≥ m^i (Jensen):
at the same mean α a spread RAISES the batch-average τ, and more so at large K — the requests that keep
being accepted are the good ones (survivorship). Two cautions: (1) population-level measurements (vLLM's
Prometheus counters, pooled histograms) already include the spread, so adding ``spread`` to them counts it
twice; use it with constant / al@K / per-request profiles. (2) The gain is in batch throughput; per-request
latency (the mean of T/τ_r) does not improve by the same amount.
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, finite_number, whole_number
from dsdsim.records import frozen

EXTRAPOLATIONS = ("repeat-last", "zero", "constant")


@frozen
class Acceptance:
    """Conditional acceptance α_1..α_n, how positions beyond n are filled, and an optional spread.

    alpha:          measured or given conditional α_1..α_n (n ≥ 1), each in [0, 1].
    source:         where the numbers came from, in words ("constant 0.8", "vLLM Prometheus metrics (file x)").
    extrapolation:  "repeat-last" (α_i = α_n for i > n, the default), "zero" (no token beyond n is accepted), or
                    "constant" (one α that holds at every position by construction, so nothing is extrapolated).
    spread:         Beta concentration κ of per-request acceptance (module docstring); None = every request alike.
    """

    alpha: tuple[float, ...]
    source: str
    extrapolation: str = "repeat-last"
    spread: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", _checked_alphas(self.alpha, "acceptance"))
        if self.extrapolation not in EXTRAPOLATIONS:
            raise DsdsimError(f"unknown extrapolation {self.extrapolation!r}; use one of: {', '.join(EXTRAPOLATIONS)}")
        if self.extrapolation == "constant" and len(self.alpha) != 1:
            raise DsdsimError(f"extrapolation 'constant' takes exactly one α, got {len(self.alpha)}; "
                              "use 'repeat-last'")
        if self.spread is not None:
            kappa = float(self.spread)
            if not (math.isfinite(kappa) and kappa > 0):
                raise DsdsimError(f"Beta concentration κ must be a finite number > 0 (e.g. 20), got {self.spread!r}")
            object.__setattr__(self, "spread", kappa)

    @property
    def n_measured(self) -> int:
        """n, the number of positions given (measured); later positions are extrapolated."""
        return len(self.alpha)

    def alpha_at(self, n: int) -> np.ndarray:
        """α_1..α_n as given, positions beyond the measured ones filled by ``extrapolation``. Shape (n,)."""
        n = whole_number(n, "number of positions")
        given = np.asarray(self.alpha[:n], dtype=float)
        fill = 0.0 if self.extrapolation == "zero" else self.alpha[-1]
        return np.concatenate([given, np.full(n - given.size, fill)])

    def unconditional(self, n: int) -> np.ndarray:
        """p_1..p_n, p_i = E[Π_{j≤i} α_j] over requests (spread included). vLLM's acceptance_rate_per_pos."""
        p = np.cumprod(self.alpha_at(n))
        return p * _spread_multiplier(n, self._spread_mean(), self.spread)

    def population_alpha(self, n: int) -> np.ndarray:
        """Effective conditional α_i = p_i / p_{i−1} of the whole population (equals alpha_at without spread)."""
        p = np.concatenate([[1.0], self.unconditional(n)])
        reached = p[:-1] > 0
        return np.where(reached, p[1:] / np.where(reached, p[:-1], 1.0), 0.0)

    def tau(self, k):
        """τ(K) = 1 + Σ_{i=1..K} p_i, expected tokens emitted per step; vectorised over integer K ≥ 0.

        Returns a float for a scalar K, else an array shaped like K. τ(0) = 1.
        """
        k_arr = _integer_array(k, "K")
        k_max = int(k_arr.max()) if k_arr.size else 0
        cumulative = np.concatenate([[1.0], 1.0 + np.cumsum(self.unconditional(k_max))])  # index K → τ(K)
        out = cumulative[k_arr]
        return float(out) if np.ndim(k) == 0 else out

    def extrapolated_positions(self, k_max: int) -> int:
        """How many of the positions 1..k_max are not measured but extrapolated (0 for a constant α)."""
        k_max = whole_number(k_max, "K")
        return 0 if self.extrapolation == "constant" else max(0, k_max - self.n_measured)

    def describe(self, k_max: int) -> str:
        """One line: source, α used, τ(k_max), extrapolation and spread when they apply."""
        shown = ", ".join(f"{a:.2f}" for a in self.alpha[:8]) + (", …" if self.n_measured > 8 else "")
        parts = [f"{self.source}: α=[{shown}]", f"τ({k_max})={self.tau(int(k_max)):.3f}"]
        extra = self.extrapolated_positions(k_max)
        if extra:
            how = (f"repeat last α={self.alpha[-1]:.3g}" if self.extrapolation == "repeat-last"
                   else "α=0, nothing accepted there")
            parts.append(f"positions > {self.n_measured} extrapolated ({how})")
        if self.spread is not None:
            parts.append(f"Beta spread across requests κ={self.spread:g}")
        return "; ".join(parts)

    def scaled(self, factor: float) -> "Acceptance":
        """Every α multiplied by ``factor`` and clipped to [0, 1] (uncertainty bands)."""
        f = finite_number(factor, "scale factor")
        if f < 0:
            raise DsdsimError(f"scale factor must be ≥ 0, got {factor!r}")
        alphas = tuple(float(a) for a in np.clip(np.asarray(self.alpha) * f, 0.0, 1.0))
        return replace(self, alpha=alphas, source=f"{self.source} (α×{f:g})")

    def shifted(self, delta: float) -> "Acceptance":
        """Every α plus ``delta``, clipped to [0, 1] (uncertainty bands)."""
        d = finite_number(delta, "shift")
        alphas = tuple(float(a) for a in np.clip(np.asarray(self.alpha) + d, 0.0, 1.0))
        return replace(self, alpha=alphas, source=f"{self.source} (α{d:+g})")

    def with_spread(self, concentration: float | None) -> "Acceptance":
        """The same mean acceptance with a Beta(m κ, (1 − m) κ) spread across requests (None removes it)."""
        return replace(self, spread=concentration)

    def _spread_mean(self) -> float:
        return max(self.alpha)


@frozen
class TreeAcceptance:
    """A draft tree's mean acceptance length: tokens one tree step emits on average, bonus token included, as
    measured with that tree (SGLang's ``spec_accept_length`` / ``avg_spec_accept_length``).

    A tree verifies several branches at once, so its emitted length is not τ of a chain with the same α: dsdsim
    does not derive one from the other. τ(0) = 1 (plain decoding) and τ(K ≥ 1) = ``length`` (the tree).

    length:  the measured mean acceptance length, ≥ 1.
    source:  where the number came from, in words.
    """

    length: float
    source: str = ""

    def __post_init__(self) -> None:
        length = finite_number(self.length, "mean acceptance length of a tree")
        if length < 1.0:
            raise DsdsimError(f"mean acceptance length {length:g} of a tree must be >= 1 (it counts the bonus token)")
        object.__setattr__(self, "length", length)
        if not self.source:
            object.__setattr__(self, "source", f"mean acceptance length {length:g} measured with a draft tree")

    def tau(self, k):
        """1 where K = 0 (plain decoding), the measured length where K ≥ 1 (the tree). Float for a scalar K."""
        k_arr = _integer_array(k, "K")
        out = np.where(k_arr > 0, self.length, 1.0)
        return float(out) if np.ndim(k) == 0 else out

    def check_tree(self, steps: int, what: str = "the draft tree") -> "TreeAcceptance":
        """Refuse a length no tree of ``steps`` draft passes can emit: at most ``steps`` drafts + the bonus."""
        if self.length > steps + 1:
            raise DsdsimError(f"mean acceptance length {self.length:g} is more than {what} can emit per step "
                              f"({steps} draft steps + 1 bonus token = {steps + 1})")
        return self

    def extrapolated_positions(self, k_max: int) -> int:
        """Nothing is extrapolated: the length is measured for the tree as a whole."""
        return 0

    def describe(self, k_max: int = 1) -> str:
        return f"{self.source}: τ(tree)={self.length:.3f} tokens per step"


AcceptanceModel = Acceptance | TreeAcceptance


def _spread_multiplier(n: int, m: float, kappa: float | None) -> np.ndarray:
    """E[a^i] / m^i for i = 1..n, a ~ Beta(m κ, (1 − m) κ); ones when there is no spread. Shape (n,).

    E[a^i] / m^i = Π_{j=0}^{i−1} (m κ + j) / (m (κ + j)), a product of factors ≥ 1 (Jensen).
    """
    if kappa is None or n == 0 or m <= 0.0 or m >= 1.0:   # m = 0 or 1: Beta degenerates, no spread possible
        return np.ones(n)
    j = np.arange(n, dtype=float)
    return np.cumprod((m * kappa + j) / (m * (kappa + j)))


# ---------------------------------------------------------------------------------------------- builders


def constant(alpha: float) -> Acceptance:
    """The same conditional α at every position: τ(K) = (1 − α^{K+1}) / (1 − α)."""
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise DsdsimError(f"constant acceptance α must be a number in [0, 1], got {alpha!r}") from None
    if not (math.isfinite(a) and 0.0 <= a <= 1.0):
        raise DsdsimError(f"constant acceptance α {a:g} is outside [0, 1]; acceptance rates are probabilities")
    return Acceptance((a,), f"constant α={a:g}", extrapolation="constant")


def from_list(alphas: Sequence[float], source: str | None = None) -> Acceptance:
    """Conditional α_1..α_n per position; positions beyond n repeat α_n."""
    checked = _checked_alphas(alphas, "acceptance list")
    return Acceptance(checked, source or f"given per-position α ({len(checked)} positions)")


def from_unconditional_rates(rates: Sequence[float], source: str | None = None) -> Acceptance:
    """Unconditional p_1..p_n (vLLM's per-position acceptance rate) → conditional α_i = p_i / p_{i−1}.

    p must be non-increasing in [0, 1] (drafts 1..i all accepted implies drafts 1..i−1 were). Where p_{i−1} = 0
    the position is never reached; its α is set to 0 and the source says so.
    """
    p = _checked_alphas(rates, "unconditional acceptance rate")
    for i in range(1, len(p)):
        if p[i] > p[i - 1]:
            raise DsdsimError(f"unconditional acceptance rates must be non-increasing (position {i + 1}: "
                              f"{p[i]:g} > {p[i - 1]:g}): all of drafts 1..i accepted implies drafts 1..i-1 were; "
                              "if these are conditional α per position, give them as conditional α")
    alphas, note = _conditional_from_unconditional(np.asarray(p))
    what = source or f"unconditional per-position rates ({len(p)} positions) → conditional"
    return Acceptance(alphas, what + note)


def from_mean_acceptance_length(al: float, k: int, spread: float | None = None) -> Acceptance:
    """The constant α whose τ(k) equals the measured mean acceptance length ``al`` (1 ≤ al ≤ k + 1).

    τ(k) is strictly increasing in α for k ≥ 1, so the root is unique (found by bisection). With ``spread``,
    the fitted α is the mean of the Beta distribution whose population τ(k) matches.
    """
    k = whole_number(k, "K of the measurement")
    al = finite_number(al, "mean acceptance length")
    if k < 1:
        raise DsdsimError("a mean acceptance length needs the K it was measured at, K ≥ 1 (write al=2.79@3)")
    if not 1.0 <= al <= k + 1:
        raise DsdsimError(f"mean acceptance length {al:g} at K={k} must lie in [1, {k + 1}] "
                          "(it counts the bonus token)")

    def tau_k(a: float) -> float:
        return Acceptance((a,), "fit", extrapolation="constant", spread=spread).tau(k)

    if al <= 1.0:
        alpha = 0.0
    elif al >= k + 1:
        alpha = 1.0
    else:
        alpha = _bisect_increasing(tau_k, al, 0.0, 1.0)
    return Acceptance((alpha,), f"mean acceptance length {al:g} at K={k} → constant α={alpha:.4f}",
                      extrapolation="constant", spread=spread)


def _bisect_increasing(f, target: float, lo: float, hi: float, iterations: int = 60) -> float:
    """x in [lo, hi] with f(x) = target for an increasing f (60 halvings: |Δx| < 1e-18 on [0, 1])."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def beta_spread(base: Acceptance, concentration: float) -> Acceptance:
    """``base`` with a Beta(m κ, (1 − m) κ) spread across requests, κ = ``concentration`` (module docstring)."""
    return base.with_spread(concentration)


def _conditional_from_unconditional(p: np.ndarray) -> tuple[tuple[float, ...], str]:
    """α_1 = p_1, α_i = p_i / p_{i−1}; 0 (with a note) where p_{i−1} = 0 (position never reached)."""
    alphas, unreached = [], None
    prev = 1.0
    for i, pi in enumerate(p, start=1):
        if prev > 0:
            alphas.append(min(1.0, float(pi) / prev))
        else:
            alphas.append(0.0)
            unreached = unreached or i
        prev = float(pi)
    return tuple(alphas), (f"; positions ≥ {unreached} never reached, α=0 there" if unreached else "")


# ---------------------------------------------------------------------------------------------- validation


def _checked_alphas(values: Iterable[float], what: str) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)):
        raise DsdsimError(f"{what} must be numbers, got the text {values!r}; write the acceptance as numbers "
                          "like 0.8 or 0.8,0.7,0.6")
    try:
        arr = np.asarray(list(values), dtype=float).ravel()
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be numbers in [0, 1], got {values!r:.80}") from None
    if arr.size == 0:
        raise DsdsimError(f"{what} is empty; give at least one acceptance rate in [0, 1]")
    for i, a in enumerate(arr, start=1):
        if not (math.isfinite(a) and 0.0 <= a <= 1.0):
            raise DsdsimError(f"{what}: position {i} has {a:g}, outside [0, 1]; acceptance rates are probabilities "
                              "(a mean acceptance length is written al=2.8@K)")
    return tuple(float(a) for a in arr)


def _integer_array(k, what: str) -> np.ndarray:
    try:
        arr = np.asarray(k, dtype=float)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be whole numbers ≥ 0, got {k!r}") from None
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise DsdsimError(f"{what} must be whole numbers ≥ 0, got {np.asarray(k).ravel()[:6].tolist()}")
    return arr.astype(np.int64)


# vLLM PR #32374 (dynamic speculative decoding), vllm/v1/spec_decode/dynamic/manager.py, _DYNAMIC_STATS_TEST
# acceptance_rate_per_pos (docs/reference/engines.md §1.3). These are unconditional rates p_i.
VLLM_PR32374_RATES = (0.68, 0.39, 0.20, 0.10, 0.06, 0.03, 0.02)

DEFAULT_ACCEPTANCE = from_unconditional_rates(
    VLLM_PR32374_RATES,
    source="vLLM PR #32374 test data (acceptance_rate_per_pos), unconditional → conditional; "
           "an example, not a measurement of your drafter")


def default_for(drafter) -> Acceptance:
    """The example acceptance where none is given: the drafter kind's own (``DrafterInfo.default_acceptance``: a mean
    acceptance length measured with that kind, as the constant α that reproduces it) where it has one, else
    ``DEFAULT_ACCEPTANCE``."""
    if drafter is None:
        return DEFAULT_ACCEPTANCE
    from dsdsim.specs.drafters import drafter_info

    own = drafter_info(drafter.kind).default_acceptance
    return DEFAULT_ACCEPTANCE if own is None else _kind_default(*own)


@functools.lru_cache(maxsize=None)
def _kind_default(al: float, k: int, source: str) -> Acceptance:
    fit = from_mean_acceptance_length(al, k)
    return Acceptance(fit.alpha, f"{source}: mean acceptance length {al:g} at K={k} → constant "
                      f"α={fit.alpha[0]:.3f}; an example for this drafter kind, not a measurement of your workload",
                      extrapolation="constant")
