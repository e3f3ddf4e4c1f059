"""Expected distinct experts a step touches — the MoE term that makes verify cost grow with tokens.

Notation: E routed experts, k experts per token, B sequences each with q tokens in the step (N = B*q).

* Independent uniform routing: E * (1 - (1 - k/E)^N).
* Measured popularity p_e (P(token picks e), sum_e p_e = k): sum_e 1 - (1 - p_e)^N.
* Temporal overlap o: a token keeps o*k of the previous token's experts (same sequence) and draws the other
  (1-o)*k afresh from the E - o*k it does not hold. One sequence's q tokens then leave expert e untouched with
  probability (1 - p_e) * (1 - (1-o) p_e E / (E - o k))^(q-1); sequences are independent, so the batch leaves
  it untouched with that probability to the power B. o = 0 recovers the independent formulas exactly.
* Expert parallelism: experts are split contiguously over ep ranks; the step waits for the busiest rank.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from dsdsim.cost.num import is_scalar, maximum, minimum


def _p_untouched_per_expert(num_experts: int, top_k: int, q, overlap: float, p: np.ndarray) -> np.ndarray:
    """P(an expert of popularity p_e is untouched by one sequence's q tokens); shape p.shape + q.shape (floats for
    one popularity and one q)."""
    E, k = num_experts, top_k
    if not (is_scalar(p) and is_scalar(q)):     # the popularity values on a leading axis
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
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"expert_overlap must be in [0, 1), got {overlap}")
    if popularity is None and is_scalar(batch) and is_scalar(q):    # one point, uniform routing: in floats
        untouched_seq = _p_untouched_per_expert(num_experts, top_k, float(q), overlap, top_k / num_experts)
        return num_experts * (1.0 - untouched_seq ** float(batch))
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
    busiest block (largest expected load) sets both figures.
    """
    if ep == 1:
        touched = experts_touched(num_experts, top_k, batch, q, overlap, popularity)
        return touched, 1.0 if is_scalar(touched) else np.ones_like(touched)
    if num_experts % ep:
        raise ValueError(f"ep {ep} does not divide the {num_experts} routed experts")
    per_rank = num_experts // ep
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
