"""How sure a K table's choices are: the interval of each K's gain over no speculation, and a robust pick.

A K's gain over a server without speculation at batch B is g_K = tau_K / R_K, R_K = T_K / T_0 the step-time ratio.
What dsdsim gets wrong in R_K is mostly the extra time x_K = R_K - 1 a speculative step adds (the plain step's error
cancels in the ratio). So the interval of R_K is 1 + x_K * [f_low, f_high], f the split-conformal quantiles of
(R_measured - 1) / (R_predicted - 1) over the corpus's T(K)/T(0) pairs predicted with their source held out
(``dsdsim.fit.intervals.ExtraTimeIntervals``, measurements/intervals.json ``extra_time``), and the gain's interval is
[tau / (1 + x f_high), tau / (1 + x f_low)]: wider for the K that add more work.

A range's margin says whether its K is sure: over no speculation (the gain's interval stays above 1) and over the
runner-up (the best other K's gain lies outside the interval). ``--robust`` picks, at each batch size, the K whose
gain interval's low end is highest (``ROBUST_RULE``), then the fewest ranges within the tolerance of that choice.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dsdsim.records import frozen

ROBUST_RULE = ("the robust rule: at each batch size the K whose gain interval's low end is highest (the step-time ratio "
               "at the high end of its interval), then the fewest ranges within the tolerance of that choice")
POINT_RULE = "the point estimate: the K of the highest predicted goodput"


def ratio_bounds(step_kb: np.ndarray, plain_s: np.ndarray, f_low: float, f_high: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(K, B) step times at the low and high end of each ratio's interval: T_0 (1 + x [f_low, f_high])."""
    x = step_kb / plain_s[None, :] - 1.0
    lo = plain_s[None, :] * (1.0 + x * np.where(x >= 0, f_low, f_high))
    hi = plain_s[None, :] * (1.0 + x * np.where(x >= 0, f_high, f_low))
    return lo, hi


@frozen
class RangeMargin:
    """One range of the exported table: its K's gain over no speculation at the range's first batch size with the
    interval, the runner-up K there, and whether the choice is sure over each anywhere in the range."""

    start: int
    end: int
    k: int
    gain: Optional[float]                 # tau_K T_0 / T_K at ``start``
    gain_low: Optional[float]
    gain_high: Optional[float]
    runner_up_k: Optional[int]
    runner_up_gain: Optional[float]
    sure_over_plain: bool                 # the interval stays above 1 at every evaluated batch size of the range
    sure_over_runner_up: bool             # the runner-up's gain lies outside the interval at every one
    chosen_by: str                        # POINT_RULE or ROBUST_RULE
    point_k: Optional[int] = None         # with --robust: the K the point estimate picks at ``start``
    unsure_over_plain_from: Optional[int] = None      # the first batch size where the interval reaches 1
    unsure_over_runner_up_from: Optional[int] = None  # the first where the best other K lies inside it

    @property
    def text(self) -> str:
        """The margin column: what the choice is sure of."""
        if self.gain is None:
            return "-"
        def where(b):
            return "" if b is None or b == self.start else f" from batch {b}"
        if self.k == 0:
            return "sure" if self.sure_over_plain else f"speculation may pay{where(self.unsure_over_plain_from)}"
        parts = [] if self.sure_over_plain else [f"may not beat no speculation{where(self.unsure_over_plain_from)}"]
        if not self.sure_over_runner_up:
            parts.append(f"another K as good{where(self.unsure_over_runner_up_from)}")
        return "; ".join(parts) if parts else "sure"


def range_margins(p, f_low: float, f_high: float, robust: bool = False) -> list[RangeMargin]:
    """The margin of each range of ``p``'s exported table (``dsdsim.policy.predict.Prediction``)."""
    kv = [int(k) for k in p.k_values]
    b = np.asarray(p.batch_sizes, dtype=int)
    plain = np.asarray(p.plain_step_s if p.plain_step_s is not None else p.step_s[kv.index(0)], dtype=float)
    lo_s, hi_s = ratio_bounds(np.asarray(p.step_s, dtype=float), plain, f_low, f_high)
    tau = np.asarray(p.tau, dtype=float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(p.feasible, tau * plain[None, :] / p.step_s, np.nan)
        g_low = np.where(p.feasible, tau * plain[None, :] / hi_s, np.nan)
        g_high = np.where(p.feasible, tau * plain[None, :] / lo_s, np.nan)
    g = np.where(np.isfinite(gain), gain, -np.inf)
    cols_all = np.arange(len(b))
    out = []
    for start, end, k in p.ranges():
        cols = np.flatnonzero((b >= start) & (b <= end))
        if not cols.size or k not in kv:
            continue
        i = kv.index(k)
        # the best other K at each batch size (its gain, its K), -inf where none fits
        others = g.copy()
        others[i] = -np.inf
        best_other = others[:, cols].max(axis=0)
        best_other_k = np.asarray(kv)[others[:, cols].argmax(axis=0)]
        ok = np.isfinite(gain[i, cols])
        if k > 0:
            unsure_plain = g_low[i, cols] <= 1.0
        else:
            high = np.where(np.isfinite(g_high[1:, cols]), g_high[1:, cols], -np.inf)
            unsure_plain = high.max(axis=0) > 1.0
        unsure_other = np.isfinite(best_other) & (g_low[i, cols] <= best_other) & (best_other <= g_high[i, cols])
        plain_from = _first(b[cols], ok & unsure_plain)
        other_from = _first(b[cols], ok & unsure_other)
        j0 = int(cols[0]) if start not in b else int(cols_all[b == start][0])
        at = int(np.flatnonzero(cols == j0)[0])
        has_ru = bool(np.isfinite(best_other[at]))
        point = int(p.k_best[j0]) if robust else None
        out.append(RangeMargin(start, end, k, _num(gain[i, j0]), _num(g_low[i, j0]), _num(g_high[i, j0]),
                               int(best_other_k[at]) if has_ru else None, _num(best_other[at]) if has_ru else None,
                               plain_from is None, other_from is None, ROBUST_RULE if robust else POINT_RULE, point,
                               plain_from, other_from))
    return out


def _first(batches: np.ndarray, where: np.ndarray) -> Optional[int]:
    hit = np.flatnonzero(where)
    return int(batches[hit[0]]) if hit.size else None


def _num(x) -> Optional[float]:
    x = float(x)
    return x if np.isfinite(x) else None
