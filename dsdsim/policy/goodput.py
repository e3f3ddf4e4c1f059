"""Goodput of speculative decoding: G(B, K) = B * tau(K) / T(B, K) tokens/s.

T is the step time (draft + verify + overheads); per-sequence inter-token latency is T / tau.
Infeasible (B, K) points carry NaN so they are never ranked.
"""
from __future__ import annotations

import numpy as np


def goodput(batch, tau, step_s, feasible=True) -> np.ndarray:
    """Tokens/s emitted by the whole batch; NaN where the point does not fit in memory."""
    g = np.asarray(batch, dtype=float) * np.asarray(tau, dtype=float) / np.asarray(step_s, dtype=float)
    return np.where(np.asarray(feasible, dtype=bool), g, np.nan)


def inter_token_latency(tau, step_s) -> np.ndarray:
    """Seconds between emitted tokens of one sequence: T / tau."""
    return np.asarray(step_s, dtype=float) / np.asarray(tau, dtype=float)


def best_k(goodput_kb: np.ndarray, k_values: np.ndarray) -> np.ndarray:
    """K* per batch size from a (K, B) goodput grid; -1 where no K is feasible. Ties go to the smaller K."""
    g = np.asarray(goodput_kb, dtype=float)
    any_ok = np.any(np.isfinite(g), axis=0)
    idx = np.argmax(np.where(np.isfinite(g), g, -np.inf), axis=0)
    return np.where(any_ok, np.asarray(k_values)[idx], -1)
