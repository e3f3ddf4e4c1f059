"""Expected distinct experts a step touches — the MoE term that makes verify cost grow with tokens.

Notation: E routed experts, k experts per token, B sequences each with q tokens in the step (N = B*q).

* Independent uniform routing: E * (1 - (1 - k/E)^N).
* Measured popularity p_e (P(token picks e), sum_e p_e = k): sum_e 1 - (1 - p_e)^N.
* Temporal overlap o: a token keeps o*k of the previous token's experts (same sequence) and draws the other
  (1-o)*k afresh from the E - o*k it does not hold. One sequence's q tokens then leave expert e untouched with
  probability (1 - p_e) * (1 - (1-o) p_e E / (E - o k))^(q-1); sequences are independent, so the batch leaves
  it untouched with that probability to the power B. o = 0 recovers the independent formulas exactly.
* Expert parallelism: experts are split contiguously over ep ranks; the step waits for the busiest rank. Under
  uniform routing each rank's count is Binomial(n = E/ep, P(touched)), and the busiest of ep independent ones has
  E[max] = sum_{x=1}^{n} P(max >= x) = sum_{x=1}^{n} 1 - F(x-1)^ep, F the binomial CDF.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import numpy as np

from dsdsim.cost.num import is_scalar, maximum, minimum


# --- routing locality: the overlap priced where none is given ------------------------------------------------------
# Consecutive tokens of one sequence pick many of the same experts. Cohere measured, on a production MoE with 128
# routed experts and top-8 routing, that the next token reuses 38.1% of a token's experts (chance: 8/128 = 6.25%) and
# that a 4-token verify touches 20.4 distinct experts per layer where independent routing would touch 25.4
# (https://cohere.com/blog/mixture-of-experts-models-get-more-from-speculative-decoding, 2026-04-21, via two
# digests that agree; measurements/cohere-blog.yaml). Mixtral's paper finds the same locality (arXiv 2401.04088
# section 5: consecutive tokens are assigned the same experts far more often than at random). The overlap o of this
# module's model that reproduces the measured reuse is the shipped default on every MoE model: an assumption that
# the above-chance locality carries from that model to others (o, not the reuse, which also holds chance k/E).
MEASURED_ADJACENT_REUSE = 0.381          # share of a token's experts the next token reuses (Cohere, above)
MEASURED_ROUTING = (128, 8)              # routed experts E and top-k of the model it was measured on


def adjacent_reuse(overlap: float, num_experts: int, top_k: int) -> float:
    """Expected share of a token's k experts the next token reuses: the o*k it keeps plus the fresh (1-o)*k draws
    (from the E - o*k experts it does not keep) that land on the previous token's other (1-o)*k:
    o + (1-o)^2 k / (E - o k)."""
    o, E, k = overlap, num_experts, top_k
    return o + (1.0 - o) ** 2 * k / (E - o * k)


def overlap_for_reuse(reuse: float, num_experts: int, top_k: int) -> float:
    """The overlap o whose ``adjacent_reuse`` is ``reuse``: s (E - o k) = o (E - o k) + (1-o)^2 k is linear in o,
    o = (s E - k) / (E - 2k + s k). Chance reuse (s = k/E) gives o = 0."""
    s, E, k = reuse, num_experts, top_k
    return (s * E - k) / (E - 2 * k + s * k)


DEFAULT_EXPERT_OVERLAP = overlap_for_reuse(MEASURED_ADJACENT_REUSE, *MEASURED_ROUTING)   # 0.354


def routing_overlap(given: Optional[float], is_moe: bool) -> float:
    """The expert overlap priced: the one given (0 = independent routing), else the measured locality on an MoE
    model (``DEFAULT_EXPERT_OVERLAP``), else 0."""
    if given is not None:
        return given
    return DEFAULT_EXPERT_OVERLAP if is_moe else 0.0


def _p_untouched_per_expert(num_experts: int, top_k: int, q, overlap: float, p: np.ndarray) -> np.ndarray:
    """P(an expert of popularity p_e is untouched by one sequence's q tokens); shape p.shape + q.shape (floats for
    one popularity and one q)."""
    E, k = num_experts, top_k
    if not (type(p) is float and type(q) is float or is_scalar(p) and is_scalar(q)):   # the p_e on a leading axis
        p = np.asarray(p, dtype=float).reshape((-1,) + (1,) * np.ndim(q))
        q = np.asarray(q, dtype=float)
    fresh = minimum(maximum((1.0 - overlap) * p * E / (E - overlap * k), 0.0), 1.0)
    return (1.0 - p) * (1.0 - fresh) ** (q - 1.0)


def _distinct_popularity(num_experts: int, top_k: int, popularity: Optional[np.ndarray]):
    """(distinct p_e values, how many experts share each): experts with equal p_e have equal P(touched), so the
    sum over E experts is a sum over the few distinct values (uniform routing: one value, E experts)."""
    if popularity is None:
        return np.array([top_k / num_experts]), np.array([float(num_experts)])
    values, counts = np.unique(np.asarray(popularity, dtype=float), return_counts=True)
    return values, counts.astype(float)


def check_popularity(popularity: Sequence[float], num_experts: int, top_k: int) -> np.ndarray:
    """Validate a per-expert popularity vector; rescale so it sums to top_k."""
    p = np.asarray(popularity, dtype=float)
    if p.shape != (num_experts,):
        raise ValueError(f"expert popularity has {p.size} entries; the model has {num_experts} routed experts")
    if np.any(~np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError("expert popularity must be non-negative numbers with a positive sum")
    p = p * (top_k / p.sum())
    if np.any(p > 1.0 + 1e-9):
        raise ValueError("expert popularity implies an expert chosen with probability > 1; check the vector")
    return np.minimum(p, 1.0)


def experts_touched(num_experts: int, top_k: int, batch, q, overlap: float = 0.0,
                    popularity: Optional[np.ndarray] = None) -> np.ndarray:
    """Expected distinct routed experts hit by B sequences x q tokens (one MoE layer)."""
    _check_overlap(overlap)
    if popularity is None and is_scalar(batch) and is_scalar(q):    # one point, uniform routing: in floats
        return num_experts * _p_touched_uniform(num_experts, top_k, float(batch), float(q), overlap)
    b, q = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(q, dtype=float))  # expert axis goes first
    p, multiplicity = _distinct_popularity(num_experts, top_k, popularity)
    untouched_seq = _p_untouched_per_expert(num_experts, top_k, q, overlap, p)          # (distinct p, ...)
    weights = multiplicity.reshape((-1,) + (1,) * b.ndim)
    return np.sum(weights * (1.0 - untouched_seq ** b), axis=0)


def experts_touched_busiest_rank(num_experts: int, top_k: int, batch, q, ep: int, overlap: float = 0.0,
                                 popularity: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(experts touched on the busiest of ep ranks, that rank's share of token->expert assignments).

    Uniform routing: each rank's count is Binomial(E/ep, P(touched)); the expected maximum of ep such
    counts is sum_x 1 - F(x-1)^ep. With a popularity vector, ranks hold contiguous expert blocks and the
    busiest block (largest expected load) sets both figures. One point (numbers for batch and q) gives floats.
    """
    if ep == 1:
        touched = experts_touched(num_experts, top_k, batch, q, overlap, popularity)
        return touched, 1.0 if is_scalar(touched) else np.ones_like(touched)
    if num_experts % ep:
        raise ValueError(f"ep {ep} does not divide the {num_experts} routed experts")
    per_rank = num_experts // ep
    if popularity is None and is_scalar(batch) and is_scalar(q) and per_rank <= _MAX_RANK_IN_FLOATS:
        p_touched = _p_touched_uniform(num_experts, top_k, float(batch), float(q), overlap)
        return _expected_max_binomial(per_rank, p_touched, ep), 1.0 / ep
    b, q = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(q, dtype=float))  # expert axis goes first
    if popularity is None:
        pt = 1.0 - _p_untouched_per_expert(num_experts, top_k, q, overlap, np.array([top_k / num_experts]))[0] ** b
        from scipy.special import bdtr  # binomial CDF; imported here to keep `import dsdsim` light

        x = np.arange(1, per_rank + 1).reshape((-1,) + (1,) * pt.ndim)
        cdf_below = bdtr(x - 1, per_rank, pt)                   # P(count <= x-1)
        touched = np.sum(1.0 - cdf_below ** ep, axis=0)
        share = np.full_like(touched, 1.0 / ep)
        return touched, share
    p_touched = 1.0 - _p_untouched_per_expert(num_experts, top_k, q, overlap, popularity) ** b   # (E, ...)
    blocks = p_touched.reshape((ep, per_rank) + p_touched.shape[1:]).sum(axis=1)
    load = np.asarray(popularity, dtype=float).reshape(ep, per_rank).sum(axis=1)
    busiest = int(np.argmax(load))
    share = np.full(blocks.shape[1:], load[busiest] / load.sum())
    return blocks[busiest], share


def routed_expert_counts(num_experts: int, top_k: int, batch, q, ep: int, overlap: float = 0.0,
                         popularity: Optional[np.ndarray] = None) -> tuple:
    """(experts touched on the busiest rank, that rank's share of assignments, experts touched over all ranks):
    ``experts_touched_busiest_rank`` and ``experts_touched`` together, P(touched) worked out once for one point."""
    if popularity is None and is_scalar(batch) and is_scalar(q) and (
            ep == 1 or num_experts % ep == 0 and num_experts // ep <= _MAX_RANK_IN_FLOATS):
        _check_overlap(overlap)
        p_touched = _p_touched_uniform(num_experts, top_k, float(batch), float(q), overlap)
        total = num_experts * p_touched
        busiest = total if ep == 1 else _expected_max_binomial(num_experts // ep, p_touched, ep)
        return busiest, 1.0 / ep, total
    busiest, share = experts_touched_busiest_rank(num_experts, top_k, batch, q, ep, overlap, popularity)
    total = busiest if ep == 1 else experts_touched(num_experts, top_k, batch, q, overlap, popularity)
    return busiest, share, total


# --- one point in floats ------------------------------------------------------------------------------------------

# Walking up X past its mode, the walk stops at the first pmf term below this: the rest of the tail is then below
# ~1e-20 too, so each term left, 1 - F^ep <= ep (1 - F), is 0 to well within a rounding error of the total.
_NEGLIGIBLE_PMF = 1e-20
# Walking up Y, the walk stops once F^ep is below half an ulp of 1: every term left, 1 - F^ep with a smaller F,
# then rounds to exactly 1.
_HALF_ULP_OF_ONE = 2.0 ** -54
# The walk starts at P(X = 0) = (1-p)^n or P(Y = 0) = p^n, at least 2^-n, a normal double (> 2.2e-308) for n up
# to 1022; larger ranks take the array path.
_MAX_RANK_IN_FLOATS = 1000


def _check_overlap(overlap: float) -> None:
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"expert_overlap must be in [0, 1), got {overlap}")


def _p_touched_uniform(num_experts: int, top_k: int, batch: float, q: float, overlap: float) -> float:
    """P(a given expert is touched by B sequences x q tokens) under uniform routing, one point in floats."""
    return 1.0 - _p_untouched_per_expert(num_experts, top_k, q, overlap, top_k / num_experts) ** batch


@functools.lru_cache(maxsize=None)
def _pmf_ratios(n: int) -> tuple:
    """(n-j)/(j+1) for j = 0..n-1: the binomial pmf steps f(j+1) = f(j) (n-j)/(j+1) p/(1-p)."""
    return tuple((n - j) / (j + 1) for j in range(n))


def _expected_max_binomial(n: int, p: float, ep: int) -> float:
    """E[max of ep independent X ~ Binomial(n, p)] = sum_{x=0}^{n-1} 1 - F(x)^ep, for one p in floats.

    F comes from the pmf recurrence f(j+1) = f(j) (n-j)/(j+1) p/(1-p), walked up from the likelier end so that its
    first term, at least 2^-n, cannot underflow. p <= 1/2: up X from P(X = 0) = (1-p)^n, F rising from 0, until
    the pmf past the mode is negligible (the terms left are 0). p > 1/2: up the untouched count Y = n - X ~
    Binomial(n, 1-p) from P(Y = 0) = p^n, where F(n-1-i) = 1 - P(Y <= i) falls from 1, until F^ep rounds away
    against 1 (the terms left are 1). Within ~3e-14 of the exact sum at the same p (tests/test_experts_point.py).
    """
    ratios = _pmf_ratios(n)
    power = float(ep)
    total = 0.0
    if p > 0.5:
        odds = (1.0 - p) / p                        # 1 - p exact here (Sterbenz)
        f, cdf = p ** n, 1.0                        # P(Y = 0); F(n) = 1
        for i in range(n):
            cdf -= f                                # F(n-1-i) = 1 - P(Y <= i)
            x = cdf ** power
            total += 1.0 - x
            if x < _HALF_ULP_OF_ONE:
                return total + (n - 1 - i)
            f *= ratios[i] * odds
        return total
    odds = p / (1.0 - p)
    f, cdf = math.exp(n * math.log1p(-p)), 0.0      # P(X = 0) = (1-p)^n, without rounding 1 - p first
    mode = min(int((n + 1) * p), n - 1)             # floor((n+1) p): a mode of Binomial(n, p)
    for j in range(mode + 1):                       # up to the mode: every term counts
        cdf += f                                    # F(j)
        total += 1.0 - cdf ** power
        f *= ratios[j] * odds
    terms = n
    for j in range(mode + 1, n):                    # past it: until the tail is negligible
        if f < _NEGLIGIBLE_PMF:
            terms = j
            break
        cdf += f
        total += 1.0 - cdf ** power
        f *= ratios[j] * odds
    # The pmf terms share the rounding of f(0) and of the odds (~n ulp), so they sum to 1 + eps, not 1, which ep
    # amplifies in the terms near F = 1. Rescale F by that sum m: sum 1 - (F/m)^ep = total + sum F^ep (1 - m^-ep),
    # with sum F^ep = terms - total.
    mass = cdf + f                                  # F(j) + P(X = j+1); the tail past it is negligible
    return total - (terms - total) * math.expm1(-power * math.log(mass))
