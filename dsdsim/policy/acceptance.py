"""Acceptance models: how many tokens one speculative step emits.

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
* ``from_vllm_prometheus(text)`` — ``/metrics`` counters ``vllm:spec_decode_num_accepted_tokens_per_pos`` and
  ``vllm:spec_decode_num_drafts`` (docs/reference/engines.md §2).
* ``from_vllm_request_metrics(obj)`` — per-request ``metrics.speculative_decoding`` histograms.

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

import json
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import numpy as np

from dsdsim.errors import DsdsimError

EXTRAPOLATIONS = ("repeat-last", "zero", "constant")


@dataclass(frozen=True)
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
        n = _whole_number(n, "number of positions")
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
        k_max = _whole_number(k_max, "K")
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
        f = _finite(factor, "scale factor")
        if f < 0:
            raise DsdsimError(f"scale factor must be ≥ 0, got {factor!r}")
        alphas = tuple(float(a) for a in np.clip(np.asarray(self.alpha) * f, 0.0, 1.0))
        return replace(self, alpha=alphas, source=f"{self.source} (α×{f:g})")

    def shifted(self, delta: float) -> "Acceptance":
        """Every α plus ``delta``, clipped to [0, 1] (uncertainty bands)."""
        d = _finite(delta, "shift")
        alphas = tuple(float(a) for a in np.clip(np.asarray(self.alpha) + d, 0.0, 1.0))
        return replace(self, alpha=alphas, source=f"{self.source} (α{d:+g})")

    def with_spread(self, concentration: float | None) -> "Acceptance":
        """The same mean acceptance with a Beta(m κ, (1 − m) κ) spread across requests (None removes it)."""
        return replace(self, spread=concentration)

    def _spread_mean(self) -> float:
        return max(self.alpha)


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
    a = _checked_alphas([alpha], "constant acceptance")[0]
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
                              f"{p[i]:g} > {p[i - 1]:g}); if these are conditional α, use from_list "
                              "(write them without 'unconditional:')")
    alphas, note = _conditional_from_unconditional(np.asarray(p))
    what = source or f"unconditional per-position rates ({len(p)} positions) → conditional"
    return Acceptance(alphas, what + note)


def from_mean_acceptance_length(al: float, k: int, spread: float | None = None) -> Acceptance:
    """The constant α whose τ(k) equals the measured mean acceptance length ``al`` (1 ≤ al ≤ k + 1).

    τ(k) is strictly increasing in α for k ≥ 1, so the root is unique (found by bisection). With ``spread``,
    the fitted α is the mean of the Beta distribution whose population τ(k) matches.
    """
    k = _whole_number(k, "K of the measurement")
    al = _finite(al, "mean acceptance length")
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


# ---------------------------------------------------------------------------------------------- vLLM ingestion

_PROM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_per_pos"
_PROM_DRAFTS = "vllm:spec_decode_num_drafts"
_PROM_LINE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*'
    r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?\s+'
    r'(?P<value>\S+)(?:\s+-?\d+)?\s*(?:#.*)?$')
_PROM_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def from_vllm_prometheus(text: str, source: str | None = None) -> Acceptance:
    """Conditional α from a vLLM ``/metrics`` scrape (Prometheus text exposition format).

    Reads ``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}`` and ``vllm:spec_decode_num_drafts``
    (with or without the ``_total`` suffix), summing over every other label (model_name, engine, ...).
    position="0" is the first draft token: p_{i+1} = accepted_per_pos[i] / num_drafts (unconditional), then
    α_1 = p_1 and α_i = p_i / p_{i−1}. Under dynamic K (DSD) steps with fewer drafts still count in num_drafts,
    so later positions read low; scrape a static-K run.
    """
    samples = _parse_prometheus(text)
    accepted = _summed_counter(samples, _PROM_ACCEPTED, by_position=True)
    drafts = _summed_counter(samples, _PROM_DRAFTS, by_position=False)
    if not accepted:
        raise DsdsimError(f"no {_PROM_ACCEPTED}{{position=...}} samples found; scrape /metrics of a vLLM server "
                          "running speculative decoding")
    if drafts is None or drafts[None] <= 0:
        raise DsdsimError(f"{_PROM_DRAFTS} is missing or 0; scrape /metrics after the server has served requests")
    n_drafts = drafts[None]
    positions = sorted(accepted)
    if positions != list(range(len(positions))):
        raise DsdsimError(f"{_PROM_ACCEPTED} positions must run 0, 1, 2, ... without gaps; got {positions}")
    counts = np.array([accepted[i] for i in positions])
    if counts[0] > n_drafts or np.any(np.diff(counts) > 0):
        raise DsdsimError(f"inconsistent counters: accepted per position {counts.tolist()} must be non-increasing and "
                          f"≤ num_drafts={n_drafts:g}; use one scrape of one server")
    alphas, note = _conditional_from_unconditional(counts / n_drafts)
    what = source or "vLLM Prometheus metrics"
    return Acceptance(alphas, f"{what} ({n_drafts:g} drafts, {len(positions)} positions){note}")


def _parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line; comment and blank lines skipped. Malformed → DsdsimError."""
    if not isinstance(text, str):
        raise DsdsimError("Prometheus metrics must be text (the body of GET /metrics)")
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line)
        value = _prom_value(match.group("value")) if match else None
        labels = _prom_labels(match.group("labels") or "") if match else None
        if match is None or value is None or labels is None:
            raise DsdsimError(f"malformed Prometheus line {number}: {line[:120]!r}; "
                              "expected 'name{label=\"v\"} value'")
        samples.append((match.group("name"), labels, value))
    return samples


def _prom_value(token: str) -> float | None:
    try:
        return float(token)   # also accepts NaN, +Inf, -Inf as Prometheus writes them
    except ValueError:
        return None


def _prom_labels(body: str) -> dict[str, str] | None:
    labels, pos = {}, 0
    body = body.strip()
    while pos < len(body):
        match = _PROM_LABEL.match(body, pos)
        if match is None:
            return None
        labels[match.group(1)] = match.group(2)
        pos = match.end()
    return labels


def _summed_counter(samples, base: str, by_position: bool) -> dict | None:
    """Sum a counter over label sets; keyed by int position, or by None. Prefers the ``_total`` samples."""
    for name in (base + "_total", base):
        rows = [(labels, value) for n, labels, value in samples if n == name]
        if not rows:
            continue
        out: dict = {}
        for labels, value in rows:
            if not math.isfinite(value) or value < 0:
                raise DsdsimError(f"{name} has a negative or non-finite count {value!r}; counters are ≥ 0")
            key = None
            if by_position:
                pos = labels.get("position", "")
                if not pos.isdigit():
                    raise DsdsimError(f"{name} sample without an integer position label: {labels}")
                key = int(pos)
            out[key] = out.get(key, 0.0) + value
        return out
    return None


def from_vllm_request_metrics(obj, source: str | None = None) -> Acceptance:
    """Conditional α from vLLM per-request metrics (``--per-request-spec-decode-metrics summary|detailed``).

    ``obj``: one response / ``metrics`` / ``metrics.speculative_decoding`` object, or a list of them. Each holds
    ``acceptance_histogram_by_draft_length`` {"k": [steps that accepted 0..k drafts]} or ``acceptance_histogram``
    (length k + 1), or the detailed ``per_step_accepted`` / ``per_step_drafted`` arrays.

    Pooled over requests and draft lengths, per position i (only steps that drafted ≥ i tokens):
    α_i = #(accepted ≥ i) / #(accepted ≥ i − 1), i.e. α_i = P(≥ i) / P(≥ i − 1) for one draft length.
    """
    records = obj if isinstance(obj, list) else [obj]
    if not records:
        raise DsdsimError("no request metrics given: pass a response object or a non-empty list of them")
    hists: dict[int, np.ndarray] = {}   # draft length k → steps that accepted 0..k, shape (k + 1,)
    for number, record in enumerate(records, start=1):
        for k, h in _request_histograms(record, number):
            hists[k] = hists.get(k, np.zeros(k + 1)) + h
    hists = {k: h for k, h in hists.items() if k >= 1 and h.sum() > 0}
    if not hists:
        raise DsdsimError("the request metrics hold no speculative steps with draft length ≥ 1")
    k_max = max(hists)
    reached = np.zeros(k_max + 1)   # reached[i]: drafted ≥ i tokens and accepted ≥ i − 1 of them
    passed = np.zeros(k_max + 1)    # passed[i]: drafted ≥ i tokens and accepted ≥ i
    for k, h in hists.items():
        at_least = np.cumsum(h[::-1])[::-1]            # at_least[j] = steps that accepted ≥ j, j = 0..k
        reached[1:k + 1] += at_least[:k]
        passed[1:k + 1] += at_least[1:]
    alphas, unreached = [], None
    for i in range(1, k_max + 1):
        if reached[i] > 0:
            alphas.append(passed[i] / reached[i])
        else:
            alphas.append(0.0)
            unreached = unreached or i
    note = f"; positions ≥ {unreached} never reached, α=0 there" if unreached else ""
    steps = int(sum(h.sum() for h in hists.values()))
    what = source or "vLLM per-request metrics"
    return Acceptance(tuple(alphas), f"{what} ({len(records)} requests, {steps} steps){note}")


def _request_histograms(record, number: int) -> list[tuple[int, np.ndarray]]:
    """[(draft length k, histogram over accepted 0..k)] from one request's metrics object."""
    if not isinstance(record, dict):
        raise DsdsimError(f"request {number}: expected a JSON object with metrics.speculative_decoding, "
                          f"got {type(record).__name__}")
    spec = record
    if isinstance(spec.get("metrics"), dict):
        spec = spec["metrics"]
    if isinstance(spec.get("speculative_decoding"), dict):
        spec = spec["speculative_decoding"]
    by_length = spec.get("acceptance_histogram_by_draft_length")
    if by_length:
        if not isinstance(by_length, dict):
            raise DsdsimError(f"request {number}: acceptance_histogram_by_draft_length must map 'k' "
                              "to a list of counts")
        out = []
        for key, counts in by_length.items():
            k = _whole_number(key, f"request {number}: draft length key")
            h = _counts(counts, f"request {number}: acceptance_histogram_by_draft_length[{key!r}]")
            if h.size != k + 1:
                raise DsdsimError(f"request {number}: histogram for draft length {k} has {h.size} entries; "
                                  f"expected {k + 1} (steps that accepted 0..{k})")
            out.append((k, h))
        return out
    hist = spec.get("acceptance_histogram")
    if hist is not None:
        h = _counts(hist, f"request {number}: acceptance_histogram")
        return [(h.size - 1, h)]
    acc, drafted = spec.get("per_step_accepted"), spec.get("per_step_drafted")
    if acc is not None and drafted is not None:
        a = _counts(acc, f"request {number}: per_step_accepted", allow_empty=True)
        d = _counts(drafted, f"request {number}: per_step_drafted", allow_empty=True)
        if a.size != d.size or np.any(a > d):
            raise DsdsimError(f"request {number}: per_step_accepted and per_step_drafted must have equal length "
                              "and accepted ≤ drafted at every step")
        out = []
        for k in np.unique(d).astype(int):
            out.append((int(k), np.bincount(a[d == k].astype(int), minlength=int(k) + 1).astype(float)))
        return out
    raise DsdsimError(f"request {number}: no acceptance_histogram_by_draft_length, acceptance_histogram or "
                      "per_step_* arrays; start vLLM with --per-request-spec-decode-metrics summary")


def _counts(values, what: str, allow_empty: bool = False) -> np.ndarray:
    if not isinstance(values, (list, tuple)) or (not values and not allow_empty):
        raise DsdsimError(f"{what} must be a non-empty list of step counts")
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must hold numbers, got {values!r:.80}") from None
    if arr.ndim != 1 or not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
        raise DsdsimError(f"{what} must hold whole counts ≥ 0, got {list(values)!r:.80}")
    return arr


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


# ---------------------------------------------------------------------------------------------- parsing

ACCEPTANCE_FORMS = ("0.8 (constant α)", "0.8,0.7,0.6 (conditional α per position)",
                    "unconditional:0.68,0.39,0.20 (vLLM per-position rates)",
                    "al=2.79@3 (mean acceptance length at K=3)",
                    "beta:0.8:20 (mean α 0.8, Beta concentration 20)", "default",
                    "a file: .json/.jsonl vLLM request metrics, otherwise a vLLM /metrics scrape")

_NUMBER = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"      # ASCII digits only


def parse_acceptance(text: str) -> Acceptance:
    """Build an ``Acceptance`` from a command-line string; the forms are listed in ``ACCEPTANCE_FORMS``."""
    raw = str(text).strip()
    lower = raw.lower().replace(" ", "")
    if lower == "default":
        return DEFAULT_ACCEPTANCE
    if re.fullmatch(_NUMBER, lower):
        value = float(lower)
        if value > 1.0:
            raise DsdsimError(f"acceptance {value:g} is not a probability in [0, 1]; for a mean acceptance length "
                              f"write al={value:g}@K (K it was measured at)")
        return constant(value)
    if re.fullmatch(rf"{_NUMBER}(,{_NUMBER})+,?", lower):
        return from_list([float(v) for v in lower.rstrip(",").split(",")])
    if lower.startswith("unconditional:"):
        return from_unconditional_rates(_numbers(lower.partition(":")[2], raw))
    match = re.fullmatch(rf"al=({_NUMBER})@(?:k=)?([0-9]+)", lower)
    if match:
        return from_mean_acceptance_length(float(match.group(1)), int(match.group(2)))
    match = re.fullmatch(rf"beta:({_NUMBER}):({_NUMBER})", lower)
    if match:
        return constant(float(match.group(1))).with_spread(float(match.group(2)))
    if os.path.isfile(raw):
        return _from_file(raw)
    if os.path.isdir(raw):
        raise DsdsimError(f"acceptance {raw!r} is a directory; give a file (vLLM metrics text or request metrics "
                          "JSON) or one of the inline forms")
    if not raw.isascii() and any(ch.isdigit() for ch in raw):
        raise DsdsimError(f"acceptance {raw!r} has non-ASCII digits; write the numbers with 0-9")
    if raw.lower().endswith((".json", ".jsonl", ".txt", ".prom")) or os.sep in raw:
        raise DsdsimError(f"acceptance file {raw!r} not found; give an existing path or one of the inline forms")
    raise DsdsimError(f"unknown acceptance {raw!r}; use one of: " + "; ".join(ACCEPTANCE_FORMS))


def _numbers(body: str, raw: str) -> list[float]:
    if not body.isascii():
        raise DsdsimError(f"cannot read numbers in {raw!r}; write them with ASCII digits like 0.68,0.39,0.20")
    try:
        return [float(v) for v in body.strip(",").split(",")]
    except ValueError:
        raise DsdsimError(f"cannot read numbers in {raw!r}; write comma-separated values like 0.68,0.39,0.20") from None


def _from_file(path: str) -> Acceptance:
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as fh:
            body = fh.read()
    except UnicodeDecodeError:
        raise DsdsimError(f"{name}: not a text file; give vLLM Prometheus metrics text or per-request metrics "
                          "JSON") from None
    except OSError as exc:
        raise DsdsimError(f"{name}: cannot read ({exc.strerror})") from None
    if path.lower().endswith(".jsonl"):
        try:
            obj = [json.loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"{name}: not JSON Lines ({exc.msg} at line {exc.lineno}); "
                              "write one JSON object per line") from None
        return from_vllm_request_metrics(obj, source=f"vLLM per-request metrics (file {name})")
    if path.lower().endswith(".json"):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno}); "
                              "save the response body as-is") from None
        return from_vllm_request_metrics(obj, source=f"vLLM per-request metrics (file {name})")
    return from_vllm_prometheus(body, source=f"vLLM Prometheus metrics (file {name})")


# ---------------------------------------------------------------------------------------------- validation


def _checked_alphas(values: Iterable[float], what: str) -> tuple[float, ...]:
    if isinstance(values, (str, bytes)):
        raise DsdsimError(f"{what} must be numbers, got the text {values!r}; use parse_acceptance for strings")
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


def _finite(value, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise DsdsimError(f"{what} must be finite, got {value!r}")
    return v


def _whole_number(value, what: str) -> int:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be a whole number ≥ 0, got {value!r}") from None
    if not (math.isfinite(v) and v == round(v) and v >= 0):
        raise DsdsimError(f"{what} must be a whole number ≥ 0, got {value!r}")
    return int(v)


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
