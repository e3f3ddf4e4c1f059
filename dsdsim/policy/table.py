"""K tables an engine can use: per-batch K*, compression to few distinct K, robustness to acceptance.

Each distinct K in a vLLM table costs one CUDA-graph capture, so users want few of them. With S the allowed
set of K values, every batch size takes its best K in S; the best S of size <= N is found by exhaustive search
over subsets (exact; the K axis is short), maximising the mean relative goodput G(B, K_S(B)) / G(B, K*(B)).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import Iterable, Mapping, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, whole_number

_MAX_SUBSETS = 200_000

# A K table as engines take it: inclusive (start_bs, end_bs, K) ranges, contiguous and sorted from batch size 1;
# K = 0 is plain decoding.
Ranges = list[tuple[int, int, int]]


@dataclass(frozen=True)
class CompressedTable:
    k_per_batch: np.ndarray          # K chosen for each batch size (-1 infeasible)
    k_set: tuple[int, ...]           # the distinct K values used
    mean_goodput_loss: float         # mean over feasible B of 1 - G(K_table)/G(K*)
    max_goodput_loss: float


def compress(goodput_kb: np.ndarray, k_values, max_distinct: int) -> CompressedTable:
    """Best table using at most `max_distinct` distinct K values (exact subset search)."""
    if max_distinct < 1:
        raise DsdsimError(f"a K table needs at least 1 distinct K value, got {max_distinct}")
    g = np.where(np.isfinite(goodput_kb), goodput_kb, -np.inf)     # (K, B)
    k_values = np.asarray(k_values)
    feasible_b = np.any(np.isfinite(goodput_kb), axis=0)
    best = np.max(g, axis=0)
    n_k = len(k_values)
    size = min(max_distinct, n_k)
    if comb(n_k, size) > _MAX_SUBSETS:
        raise DsdsimError(f"too many K subsets to search ({n_k} choose {size}); evaluate fewer K values or allow fewer "
                          "distinct K")
    best_score, best_subset = -np.inf, tuple(range(n_k))
    for subset in combinations(range(n_k), size):
        chosen = np.max(g[list(subset)], axis=0)
        ratio = np.where(feasible_b, chosen / np.where(feasible_b, best, 1.0), 0.0)
        score = float(np.mean(ratio[feasible_b])) if feasible_b.any() else 0.0
        if score > best_score + 1e-12:
            best_score, best_subset = score, subset
    rows = np.array(best_subset)
    pick = rows[np.argmax(g[rows], axis=0)]
    k_table = np.where(feasible_b, k_values[pick], -1)
    ratio = np.where(feasible_b, np.max(g[rows], axis=0) / np.where(feasible_b, best, 1.0), 1.0)
    loss = 1.0 - ratio[feasible_b] if feasible_b.any() else np.zeros(1)
    used = tuple(sorted({int(k) for k in k_table[feasible_b]}))
    return CompressedTable(k_table, used, float(np.mean(loss)), float(np.max(loss)))


@dataclass(frozen=True)
class RobustChoice:
    k_per_batch: np.ndarray          # K maximising goodput averaged over the acceptance band
    regret_low: np.ndarray           # 1 - G_low(K_robust)/max_K G_low at the band's low edge, per B
    regret_high: np.ndarray
    band: tuple[str, str]            # descriptions of the two edges


def robust_k(goodput_by_scenario: list[np.ndarray], k_values, band: tuple[str, str]) -> RobustChoice:
    """K per batch maximising the mean goodput over acceptance scenarios (first = low edge, last = high edge).

    Each scenario's goodput is normalised by its own best K first, so the mean weighs scenarios equally.
    """
    stack = np.stack([np.where(np.isfinite(g), g, -np.inf) for g in goodput_by_scenario])   # (S, K, B)
    k_values = np.asarray(k_values)
    ok = np.isfinite(stack).any(axis=(0, 1))
    best = np.max(stack, axis=1, keepdims=True)                                          # (S, 1, B)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(np.isfinite(stack), stack / np.where(ok, best, 1.0), 0.0)
    idx = np.argmax(rel.mean(axis=0), axis=0)
    k_rob = np.where(ok, k_values[idx], -1)
    cols = np.arange(stack.shape[2])

    def regret(s: int) -> np.ndarray:
        return np.where(ok, 1.0 - rel[s, idx, cols], np.nan)

    return RobustChoice(k_rob, regret(0), regret(len(stack) - 1), band)


# --- K tables as batch ranges ------------------------------------------------------------------------


def validate_ranges(ranges: Iterable[Sequence[int]]) -> Ranges:
    """Check a dsdsim K table: non-empty, (start, end, K) whole numbers, contiguous from 1, K ≥ 0. Returns tuples."""
    rows = _as_triples(ranges, "K table")
    expected_start = 1
    for start, end, k in rows:
        if start != expected_start:
            where = "must start at batch size 1" if expected_start == 1 else f"must start at {expected_start}"
            raise DsdsimError(f"K table range ({start}, {end}, {k}) {where}; ranges are contiguous, sorted, from 1")
        if end < start:
            raise DsdsimError(f"K table range ({start}, {end}, {k}) ends before it starts; "
                              "write (start, end, K) with start ≤ end")
        if k < 0:
            raise DsdsimError(f"K table range ({start}, {end}, {k}) has K < 0; K = 0 already means no speculation")
        expected_start = end + 1
    return rows


def ranges_from_k_per_batch(batch_sizes: Sequence[int], ks: Sequence[int]) -> Ranges:
    """Compress K per listed batch size into contiguous ranges covering 1..max(batch_sizes).

    Step semantics, as vLLM's lookup: a batch size not listed takes the K of the nearest listed size below it;
    sizes below the first listed one take the first K (the first range always starts at 1). Equal neighbours merge.
    """
    bs = [whole_number(b, "batch size") for b in batch_sizes]
    kk = [whole_number(k, "K") for k in ks]
    if not bs or len(bs) != len(kk):
        raise DsdsimError(f"need one K per batch size, got {len(bs)} batch sizes and {len(kk)} K values")
    if min(bs) < 1:
        raise DsdsimError(f"batch sizes must be ≥ 1, got {min(bs)}")
    pairs = sorted(zip(bs, kk))
    for (b0, k0), (b1, k1) in zip(pairs, pairs[1:]):
        if b0 == b1:
            raise DsdsimError(f"batch size {b0} is listed twice (K={k0} and K={k1}); give one K per batch size")
    out: Ranges = []
    for i, (b, k) in enumerate(pairs):
        start = 1 if i == 0 else b
        end = pairs[i + 1][0] - 1 if i + 1 < len(pairs) else b
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], end, k)
        else:
            out.append((start, end, k))
    return out


def expand_ranges(ranges: Iterable[Sequence[int]]) -> list[int]:
    """K for every batch size 1..end of the table, as a list indexed by batch size (index 0 unused, 0)."""
    rows = validate_ranges(ranges)
    out = [0]
    for start, end, k in rows:
        out.extend([k] * (end - start + 1))
    return out


def _as_triples(entries, what: str) -> Ranges:
    if isinstance(entries, (str, bytes, Mapping)):
        raise DsdsimError(f"{what} must be a list of (start_bs, end_bs, K) entries")
    rows = []
    for entry in list(entries):
        if isinstance(entry, (str, bytes)) or not hasattr(entry, "__len__") or len(entry) != 3:
            raise DsdsimError(f"{what} entry {entry!r} must have exactly 3 items: (start_bs, end_bs, K)")
        rows.append(tuple(whole_number(v, f"{what} entry {list(entry)!r}", allow_negative=True) for v in entry))
    if not rows:
        raise DsdsimError(f"{what} is empty; give at least one (start_bs, end_bs, K) range starting at 1")
    return rows
