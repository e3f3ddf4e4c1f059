"""K tables an engine can use: per-batch K*, few ranges, few distinct K, robustness to acceptance.

A table is exported as ranges of batch sizes, each with one K. The exact per-batch best K* flips between
neighbours for gains under 1% (CUDA-graph padding favours one K, then the other), so by default the table is
the one with the FEWEST RANGES that gives up at most a tolerance of goodput at every batch size
(``fewest_ranges``, an exact dynamic program). Each distinct K in a vLLM table costs one CUDA-graph capture, so
users also want few of them: with S the allowed set of K values, every batch size takes its best K in S; the best
S of size <= N is found by exhaustive search over subsets (``compress``; exact, the K axis is short), maximising
the mean relative goodput G(B, K_S(B)) / G(B, K*(B)). Both together: the subset first, then the fewest ranges
within it.
"""
from __future__ import annotations

from itertools import combinations
from math import comb
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, whole_number
from dsdsim.records import frozen

_MAX_SUBSETS = 200_000

# A K table as engines take it: inclusive (start_bs, end_bs, K) ranges, contiguous and sorted from batch size 1;
# K = 0 is plain decoding.
Ranges = list[tuple[int, int, int]]


@frozen
class CompressedTable:
    """The exported K table: K per evaluated batch size, and the goodput it gives up against the exact best."""

    k_per_batch: np.ndarray          # K chosen for each evaluated batch size (-1 infeasible)
    k_set: tuple[int, ...]           # the distinct K values used
    mean_goodput_loss: float         # mean over feasible B of 1 - G(K_table)/G(K*), K* the exact per-batch best
    max_goodput_loss: float
    tolerance: float = 0.0           # goodput share each batch size was allowed to give up for fewer ranges
    ranges_before: Optional[int] = None   # ranges of the table before the tolerance was applied (None: not applied)
    max_distinct_k: Optional[int] = None  # the limit on distinct K the table was chosen under (None: no limit)
    max_ranges: Optional[int] = None      # the range budget that chose this table (None: the tolerance alone did)
    weighted: bool = False                # the budget weighed batch sizes by a histogram (else uniformly)
    loss_cap: Optional[float] = None      # the budget kept every batch size within this loss (None: it could not)
    ranges_for_cap: Optional[int] = None  # under a budget: the fewest ranges keeping every batch size within the cap
    weighted_mean_goodput_loss: Optional[float] = None   # the mean loss weighted by the batch weights

    @property
    def n_ranges(self) -> int:
        """Ranges of this table over the feasible evaluated batch sizes (one per run of equal K)."""
        return count_ranges(self.k_per_batch)

    @property
    def ranges_at_zero_tolerance(self) -> int:
        """Ranges of the table the tolerance started from (this table's own when none was applied)."""
        return self.ranges_before if self.ranges_before is not None else self.n_ranges


def count_ranges(k_per_batch) -> int:
    """Runs of equal K over the feasible (K >= 0) entries: the number of (start, end, K) ranges they export as."""
    k = np.asarray(k_per_batch)
    k = k[k >= 0]
    return int(k.size > 0) + int(np.count_nonzero(k[1:] != k[:-1]))


def loss_per_batch(goodput_kb: np.ndarray, k_values, k_per_batch) -> np.ndarray:
    """1 - G(B, K_table(B)) / G(B, K*(B)) per evaluated batch size, K* the best of all K; NaN where none fits."""
    g = np.where(np.isfinite(goodput_kb), goodput_kb, -np.inf)     # (K, B)
    k_per_batch = np.asarray(k_per_batch)
    out = np.full(k_per_batch.shape, np.nan)
    cols = np.flatnonzero(k_per_batch >= 0)
    if cols.size:
        row = {int(k): i for i, k in enumerate(np.asarray(k_values))}
        chosen = g[[row[int(k)] for k in k_per_batch[cols]], cols]
        out[cols] = 1.0 - chosen / np.max(g[:, cols], axis=0)
    return out


def table_losses(goodput_kb: np.ndarray, k_values, k_per_batch) -> tuple[float, float]:
    """(mean, max) over feasible batch sizes of 1 - G(B, K_table(B)) / G(B, K*(B)), K* the best of all K."""
    loss = loss_per_batch(goodput_kb, k_values, k_per_batch)
    loss = loss[np.isfinite(loss)]
    if not loss.size:
        return 0.0, 0.0
    return float(np.mean(loss)), float(np.max(loss))


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
    k_table = np.where(feasible_b, k_values[rows[np.argmax(g[rows], axis=0)]], -1)
    used = tuple(sorted({int(k) for k in k_table[feasible_b]}))
    return CompressedTable(k_table, used, *table_losses(goodput_kb, k_values, k_table))


def fewest_ranges(goodput_kb: np.ndarray, k_values, tolerance: float,
                  allowed_k: Optional[Sequence[int]] = None) -> CompressedTable:
    """The K table with the fewest ranges giving up at most ``tolerance`` of goodput at every batch size.

    Over the evaluated batch sizes where some K fits (the others stay -1), K(B) must be admissible: in
    ``allowed_k`` (default: every K) and G(B, K) >= (1 - tolerance) * max over allowed K of G(B, .). The table
    minimises the number of ranges (runs of equal K); among tables with that many ranges it maximises the sum of
    G(B, K(B)) / G_best(B) (the mean relative goodput; ties go to the smaller K).

    Exact: a Viterbi pass over batch sizes whose state is the K in force, with the cost (ranges so far,
    -relative goodput so far) compared lexicographically; a range may continue only while its K stays
    admissible, so a state's best history is either its own K's (continue the range) or the best state's (a new
    range). O(B * K). With ``tolerance`` 0 only the best K qualify and the table is the exact per-batch best.
    Losses are reported against the best of ALL K, so they include what limiting ``allowed_k`` gave up.
    """
    if not 0.0 <= tolerance < 1.0:
        raise DsdsimError(f"the goodput tolerance must be a fraction in [0, 1), got {tolerance:g}")
    k_values = np.asarray(k_values)
    g = np.where(np.isfinite(goodput_kb), goodput_kb, -np.inf)     # (K, B)
    if allowed_k is not None:
        g = np.where(np.isin(k_values, list(allowed_k))[:, None], g, -np.inf)
    cols = np.flatnonzero(np.max(g, axis=0) > -np.inf)             # batch sizes where an allowed K fits
    k_table = np.full(g.shape[1], -1, dtype=int)
    if cols.size:
        rel = g[:, cols] / np.max(g[:, cols], axis=0)               # (K, B') in (0, 1], -inf where infeasible
        k_table[cols] = k_values[_fewest_runs(rel, rel >= 1.0 - tolerance)]
    mean_loss, max_loss = table_losses(goodput_kb, k_values, k_table)
    used = tuple(sorted({int(k) for k in k_table[k_table >= 0]}))
    return CompressedTable(k_table, used, mean_loss, max_loss, float(tolerance))


def _fewest_runs(rel: np.ndarray, admissible: np.ndarray) -> np.ndarray:
    """Row index per column: admissible everywhere, fewest runs, then the largest sum of ``rel`` (Viterbi).

    count[k], score[k]: the best (runs, sum rel) of a choice for the columns so far that ends with row k.
    """
    n_k, n_b = rel.shape
    never = n_b + 1                                      # more runs than any real choice can have
    rel_t, ok_t = rel.T.tolist(), admissible.T.tolist()  # plain lists: the K axis is short, numpy calls cost more
    count = [1 if ok_t[0][k] else never for k in range(n_k)]
    score = [rel_t[0][k] if ok_t[0][k] else 0.0 for k in range(n_k)]
    came_from = []                                       # came_from[j][k]: the row of column j - 1 before k
    for j in range(1, n_b):
        best = min(range(n_k), key=lambda k: (count[k], -score[k]))
        new_c, new_s = count[best] + 1, score[best]
        ok, r = ok_t[j], rel_t[j]
        back = [best] * n_k
        for k in range(n_k):
            if not ok[k]:
                count[k], score[k] = never, 0.0
                continue
            if count[k] < new_c or (count[k] == new_c and score[k] >= new_s):
                back[k] = k                              # continue k's range
            else:
                count[k], score[k] = new_c, new_s        # a new range after the best choice so far
            score[k] += r[k]
        came_from.append(back)
    rows = [min(range(n_k), key=lambda k: (count[k], -score[k]))]
    for back in reversed(came_from):
        rows.append(back[rows[-1]])
    return np.array(rows[::-1], dtype=int)


def most_goodput_in_ranges(goodput_kb: np.ndarray, k_values, max_ranges: int,
                           weights: Optional[np.ndarray] = None, allowed_k: Optional[Sequence[int]] = None,
                           loss_cap: Optional[float] = None) -> CompressedTable:
    """The K table of at most ``max_ranges`` ranges that maximises the weighted mean relative goodput
    sum_B w(B) G(B, K(B)) / G*(B) over the batch sizes where an allowed K fits (the others stay -1).

    ``weights`` (one per evaluated batch size, >= 0; None: uniform) is the share of serving time spent at each
    batch size: a histogram from a trace, ``simulate`` or vLLM's ``vllm:num_requests_running``. Relative goodput
    makes every batch size count by its weight, not by its tokens/s. Exact: a dynamic programme over (batch size,
    ranges used, K in force), O(B * N * K); among tables of equal score the one with fewer ranges, then smaller
    K, wins. Losses are reported against the best of ALL K, unweighted, as ``fewest_ranges`` reports them.
    ``loss_cap``: only K within this share of each batch size's best are allowed (the caller checks that a table of
    ``max_ranges`` exists under it: ``fewest_ranges(..., loss_cap)``).
    """
    if isinstance(max_ranges, bool) or not isinstance(max_ranges, (int, np.integer)) or max_ranges < 1:
        raise DsdsimError(f"a range budget is a whole number of ranges >= 1, got {max_ranges!r}")
    k_values = np.asarray(k_values)
    g = np.where(np.isfinite(goodput_kb), goodput_kb, -np.inf)     # (K, B)
    if allowed_k is not None:
        g = np.where(np.isin(k_values, list(allowed_k))[:, None], g, -np.inf)
    cols = np.flatnonzero(np.max(g, axis=0) > -np.inf)
    k_table = np.full(g.shape[1], -1, dtype=int)
    if cols.size:
        w = np.ones(cols.size) if weights is None else np.asarray(weights, dtype=float)[cols]
        rel = g[:, cols] / np.max(g[:, cols], axis=0)
        ok = np.isfinite(rel) if loss_cap is None else np.isfinite(rel) & (rel >= 1.0 - loss_cap)
        gain = np.where(ok, np.where(ok, rel, 0.0) * w[None, :], -np.inf)   # (K, B'), -inf where not allowed
        k_table[cols] = k_values[_most_in_runs(gain, int(max_ranges))]
    mean_loss, max_loss = table_losses(goodput_kb, k_values, k_table)
    used = tuple(sorted({int(k) for k in k_table[k_table >= 0]}))
    return CompressedTable(k_table, used, mean_loss, max_loss, max_ranges=int(max_ranges),
                           weighted=weights is not None, loss_cap=loss_cap)


def _most_in_runs(gain: np.ndarray, max_runs: int) -> np.ndarray:
    """Row index per column maximising the summed ``gain`` with at most ``max_runs`` runs of equal row.

    best[r, k]: the best sum over the columns so far of a choice with r + 1 runs ending in row k. A column either
    continues row k's run (best[r, k]) or starts one after the best choice of r runs (max over rows of best[r - 1]);
    continuing wins ties, so the table has no range it does not need.
    """
    n_k, n_b = gain.shape
    n_r = min(max_runs, n_b)
    rows = np.arange(n_k)
    best = np.full((n_r, n_k), -np.inf)
    best[0] = gain[:, 0]
    came_from = np.zeros((n_b, n_r, n_k), dtype=int)       # the row of the previous column, per state
    continued = np.ones((n_b, n_r, n_k), dtype=bool)         # whether that state continued its run
    for j in range(1, n_b):
        top = best.max(axis=1)
        arg = best.argmax(axis=1)
        start = np.concatenate([[-np.inf], top[:-1]])[:, None]          # a new run after r - 1 runs
        cont = best >= start
        continued[j] = cont
        came_from[j] = np.where(cont, rows[None, :], np.concatenate([[0], arg[:-1]])[:, None])
        best = np.where(cont, best, start) + gain[:, j][None, :]
    flat = best.ravel()                                        # r-major, then K: fewer runs, smaller K win ties
    top = flat.max()
    state = int(np.flatnonzero(flat >= top - 1e-12 * max(abs(top), 1.0))[0])
    r, k = divmod(state, n_k)
    out = [k]
    for j in range(n_b - 1, 0, -1):
        if not continued[j, r, k]:
            k, r = int(came_from[j, r, k]), r - 1
        out.append(k)
    return np.array(out[::-1], dtype=int)


@frozen
class RobustChoice:
    """K per batch size chosen over an acceptance band, with its regret at the band's two edges."""

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


def validate_vllm_schedule(schedule) -> Ranges:
    """Mirror of vLLM ``validate_and_normalize_dynamic_sd_schedule``: returns the schedule sorted by start.

    Rules: a non-empty list; each entry 3 items; batch sizes > 0; start ≤ end; K ≥ 0; sorted by start, the
    ranges must not overlap; the first range starts at 1. Gaps are allowed (the lookup fills them).
    """
    if not isinstance(schedule, (list, tuple)) or not schedule:
        raise DsdsimError("num_speculative_tokens_per_batch_size must be a non-empty list of [start_bs, end_bs, K]")
    rows = sorted(_as_triples(schedule, "num_speculative_tokens_per_batch_size"), key=lambda r: r[0])
    previous_end = 0
    for start, end, k in rows:
        if start <= 0 or end <= 0:
            raise DsdsimError(f"vLLM batch-size range ({start}, {end}) must be positive; batch sizes start at 1")
        if start > end:
            raise DsdsimError(f"vLLM batch-size range ({start}, {end}, {k}) has start > end; write [start, end, K]")
        if k < 0:
            raise DsdsimError(f"vLLM range ({start}, {end}, {k}) has K < 0; use K = 0 to switch speculation off")
        if start <= previous_end:
            raise DsdsimError(f"vLLM batch-size ranges overlap at ({start}, {end}, {k}); "
                              "ranges must be non-overlapping")
        previous_end = end
    if rows[0][0] != 1:
        raise DsdsimError(f"the first vLLM batch-size range starts at {rows[0][0]}; it must start at 1")
    return rows
