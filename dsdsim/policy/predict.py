"""K* per batch size for a deployment: the grid, the table, and the comparisons users came for.

predict() evaluates T(B, K) for every batch size and K in one vectorised call, combines it with the
acceptance model's tau(K), and picks K*(B) = argmax_K B*tau(K)/T(B, K) over feasible points. The table it
exports is not K* itself but the table with the fewest batch ranges that gives up at most ``tolerance`` (0.5%) of
goodput at any batch size against K* (``dsdsim.policy.table.fewest_ranges``): K* flips between neighbours for
gains under 1% where CUDA-graph padding favours one K and then the other. ``tolerance=0`` exports K* exactly.

With a draft tree (``DrafterSpec.tree``) the K axis is replaced by the tree: two choices per batch size, plain
decoding (K = 0) or the tree, which stands in K tables as K = tree.steps (its depth); tau of the tree is its
measured mean acceptance length (``TreeAcceptance``, ``al=2.55@tree``).

Where the engine version reads a dynamic K table, every step is a step of a server running that table (its K = 0
rows are the table's off tier, which costs more than a server without speculation: vllm-project/vllm issue
#49548); "vs K=0" compares with a server without speculation. Every step time, ITL and tokens/s carries the
interval of the held-out corpus errors of comparable cases (``dsdsim.policy.intervals``).
"""
from __future__ import annotations

import math
import re
from dataclasses import field, replace
from typing import Mapping, Optional, Sequence

import numpy as np

from dsdsim.cost.step import simulate_step, step_time_grid
from dsdsim.specs.setup import Setup, resolve
from dsdsim.errors import DsdsimError, first_repeat, whole_number
from dsdsim.policy.acceptance import DEFAULT_ACCEPTANCE, Acceptance, TreeAcceptance, default_for
from dsdsim.policy.options import PredictOptions, parse_max_ranges, parse_tolerance
from dsdsim.policy.goodput import best_k, goodput, inter_token_latency
from dsdsim.policy.intervals import ranged, shipped_intervals, step_interval
from dsdsim.policy.margin import ROBUST_RULE, RangeMargin, range_margins, ratio_bounds
from dsdsim.policy.table import (CompressedTable, Ranges, RobustChoice, compress, count_ranges, fewest_ranges,
                                 loss_per_batch, most_goodput_in_ranges, ranges_from_k_per_batch, robust_k,
                                 table_losses)
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import MAX_K, DraftTree

from dsdsim.defaults import (CAP_RESOLUTION, RANGE_LOSS_CAP, DEFAULT_BATCH_SIZES, DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_FIXED_K, DEFAULT_HARDWARE,
                             DEFAULT_MAX_K, DEFAULT_MODEL)
from dsdsim.records import frozen
from dsdsim.units import format_percent

MAX_BATCH = 65536
# The most (batch, K, context) points one call evaluates: one table of MAX_BATCH batch sizes over every K a
# drafter allows (0..MAX_K). About a second and a few hundred MB; a context grid shares the same budget.
MAX_GRID_POINTS = MAX_BATCH * (MAX_K + 1)
# Contexts beyond any released model's window (the longest, 10M tokens, is Llama 4 Scout's): a model without
# max_position_embeddings in its config is still refused an absurd context.
MAX_CONTEXT = 2 ** 24


@frozen
class Row:
    """One evaluated batch size under the exported table: ``k`` is the table's K, and every figure (tau, step,
    ITL, tokens/s, speedups) is that K's; ``k_best`` is the exact per-batch best K*, which the table may differ
    from by at most the tolerance in goodput."""

    batch_size: int
    k: Optional[int]                 # the exported table's K; None where no K fits in memory
    tau: Optional[float]
    step_ms: Optional[float]
    itl_ms: Optional[float]
    tokens_per_s: Optional[float]
    speedup_vs_vanilla: Optional[float]
    speedup_vs_fixed_k: Optional[float]
    feasible: bool
    # with a draft tree only: "tree" (K > 0) or "plain" (K = 0); JSON leaves it out while None
    draft: Optional[str] = field(default=None, metadata={"omit_none": True})
    # the interval of comparable held-out corpus errors (dsdsim.policy.intervals); None where none is shipped
    step_ms_low: Optional[float] = None
    step_ms_high: Optional[float] = None
    itl_ms_low: Optional[float] = None
    itl_ms_high: Optional[float] = None
    tokens_per_s_low: Optional[float] = None
    tokens_per_s_high: Optional[float] = None
    k_best: Optional[int] = None     # the exact per-batch best K* (None where no K fits)


def _ratio(a: float, b: float) -> Optional[float]:
    """a / b, None where b is not a finite, non-zero figure (a server that does not fit)."""
    return a / b if math.isfinite(b) and b != 0 else None


@frozen
class Prediction:
    """What ``predict`` worked out: the (K, B) grid of step times, goodput and fit, the best K per batch size, the
    exported table, and the rows people read (``row``, ``rows``)."""

    setup: Setup
    acceptance: Acceptance | TreeAcceptance
    context: int
    batch_sizes: np.ndarray          # (B,)
    k_values: np.ndarray             # (K,)
    step_s: np.ndarray               # (K, B)
    feasible: np.ndarray             # (K, B)
    tau: np.ndarray                  # (K,)
    goodput: np.ndarray              # (K, B) tokens/s, NaN where infeasible
    k_best: np.ndarray               # (B,) -1 where infeasible
    fixed_k: int
    table: CompressedTable           # the exported table: fewest ranges within the tolerance (and max distinct K)
    robust: Optional[RobustChoice] = None
    notes: list[str] = field(default_factory=list)
    plain_step_s: Optional[np.ndarray] = None    # (B,) a server without speculation (None: the K = 0 row's)
    dynamic: bool = False                        # the steps are those of a server running the K table
    intervals: Optional[object] = None           # dsdsim.policy.intervals.IntervalTable
    robust_table: bool = False                   # the table was chosen by the gain interval's low end (--robust)
    graphed: Optional[np.ndarray] = None         # (K, B) whether each step's verify pass replays a CUDA graph

    def __repr__(self) -> str:
        """One line: what was predicted and the table (the arrays are the fields; ``rows`` the table's figures)."""
        s, b = self.setup, self.batch_sizes
        ranges = self.ranges()
        shown = ", ".join(f"{r0}-{r1}: K={k}" for r0, r1, k in ranges[:6]) + (" ..." if len(ranges) > 6 else "")
        return (f"Prediction({s.model.name} on {s.hardware.name} (tp {s.deployment.tp}), "
                f"{s.drafter.label if s.drafter else 'no drafter'}, context {self.context}, batch {int(b[0])}-"
                f"{int(b[-1])} ({len(b)} sizes), K {int(self.k_values[0])}-{int(self.k_values[-1])}: "
                f"{len(ranges)} range{'s' if len(ranges) != 1 else ''} [{shown}])")

    def margins(self) -> list[RangeMargin]:
        """Each range's margin (``dsdsim.policy.margin``): its K's gain over no speculation with the interval, the
        runner-up, and whether the choice is sure (a draft tree's K is its steps); [] without shipped extra-time
        intervals."""
        extra = self.intervals.extra_time if self.intervals is not None else None
        if extra is None:
            return []
        cached = self.__dict__.get("_margins")
        if cached is None:
            cached = self.__dict__["_margins"] = range_margins(self, extra[0], extra[1], self.robust_table)
        return cached

    def interval(self, batch: int):
        """The interval factors for a step at ``batch`` (None without shipped intervals)."""
        return step_interval(self.intervals, self.setup, batch, self.__dict__.setdefault("_interval_of_regime", {}))

    @property
    def rows(self) -> list[Row]:
        return [self.row(j) for j in range(len(self.batch_sizes))]

    def row(self, j: int) -> Row:
        """The row of the j-th evaluated batch size (a table shows a few of them)."""
        c = self._row_columns()
        b, k = c["batch"][j], c["k"][j]
        if k < 0:
            return Row(b, None, None, None, None, None, None, None, False)
        g, g0, gf = c["goodput"][j], c["plain"][j], c["fixed"][j]
        step_ms, itl_ms = c["step_ms"][j], c["itl_ms"][j]
        return Row(
            batch_size=b, k=k, tau=c["tau"][j], step_ms=step_ms, itl_ms=itl_ms, tokens_per_s=g,
            speedup_vs_vanilla=_ratio(g, g0), speedup_vs_fixed_k=_ratio(g, gf), feasible=True,
            draft=None if self.tree is None else ("tree" if k > 0 else "plain"), k_best=c["k_best"][j],
            **ranged(self.interval(b), step_ms, itl_ms, g))

    def _row_columns(self) -> dict[str, list]:
        """The rows' figures per batch size under the table's K, as Python numbers, worked out once: a row reads
        its entries (each row had recomputed the plain server's goodput over every batch size)."""
        cached = self.__dict__.get("_columns")
        if cached is not None:
            return cached
        kv = [int(k) for k in self.k_values]
        k_table = np.asarray(self.table.k_per_batch, dtype=int)
        at = np.array([kv.index(k) if k >= 0 else 0 for k in k_table.tolist()], dtype=int)
        cols = np.arange(len(self.batch_sizes))
        step_s = self.step_s[at, cols]
        g = self.goodput[at, cols]
        fixed = self.goodput[kv.index(self.fixed_k)] if self.fixed_k in kv else np.full(len(cols), np.nan)
        c = {"batch": [int(b) for b in self.batch_sizes], "k": k_table.tolist(),
             "k_best": [int(k) for k in self.k_best], "tau": self.tau[at].tolist(),
             "step_ms": (step_s * 1e3).tolist(), "itl_ms": (inter_token_latency(self.tau[at], step_s) * 1e3).tolist(),
             "goodput": g.tolist(), "plain": np.asarray(self.plain_goodput, dtype=float).tolist(),
             "fixed": fixed.tolist()}
        self.__dict__["_columns"] = c
        return c

    def static_step_s(self) -> np.ndarray:
        """(K, B) step times of servers each running one fixed K, K = 0 a server without speculation: what a
        profiling sweep measures one server at a time (vLLM's batch_stats), not the steps of a dynamic table."""
        if not self.dynamic:
            return self.step_s
        s = self.setup
        step = step_time_grid(s.model, s.hardware, s.deployment, s.drafter, self.batch_sizes, self.k_values,
                              [self.context], setup=s)[0][:, :, 0].T
        step = np.array(step)
        step[list(self.k_values).index(0)] = self.plain_step_s
        return step

    @property
    def plain_goodput(self) -> np.ndarray:
        """(B,) tokens/s of a server without speculation (NaN where it does not fit)."""
        i0 = list(self.k_values).index(0)
        if self.plain_step_s is None:
            return self.goodput[i0]
        return np.where(self.feasible[i0], self.batch_sizes / self.plain_step_s, np.nan)

    @property
    def tree(self) -> Optional[DraftTree]:
        """The draft tree that replaces the K axis (K = tree.steps in k_values stands for it), or None."""
        return self.setup.drafter.tree if self.setup.drafter is not None else None

    @property
    def last_feasible_batch(self) -> Optional[int]:
        """The largest evaluated batch size at which some K fits in memory (None when none does)."""
        ok = np.asarray(self.table.k_per_batch) >= 0
        return int(self.batch_sizes[ok][-1]) if ok.any() else None

    def ranges(self, last_end: Optional[int] = None) -> Ranges:
        """The table as contiguous (start, end, K) batch ranges from 1 (vLLM's shape), ending at the last batch
        size that fits in memory (engines use the last range's K beyond it); [] when nothing fits.

        Batch sizes between two evaluated ones take the K of the evaluated size below (vLLM's step rule); sizes
        below the first evaluated one take its K (an engine table starts at 1), which predict's notes say.
        last_end: extend the last range to end there (never used to cover sizes that were found not to fit).
        """
        last = self.last_feasible_batch
        if last is None:
            return []
        keep = np.asarray(self.table.k_per_batch) >= 0
        ranges = ranges_from_k_per_batch([int(b) for b in self.batch_sizes[keep]],
                                         [int(k) for k in self.table.k_per_batch[keep]])
        if last_end is not None and last_end > ranges[-1][1] and last == int(self.batch_sizes[-1]):
            ranges[-1] = (ranges[-1][0], int(last_end), ranges[-1][2])
        return ranges


def parse_batch_sizes(text: str | Sequence[int] | None) -> np.ndarray:
    """'1-1024', '1,2,4,8', '1-64:8' (step) or a list; whole numbers in 1..65536, sorted, unique (a text that lists
    a size twice is refused; a list from code is deduplicated).

    Bounds are checked on each item before a range is expanded, so '1-100000000' fails at once.
    """
    if text is None:
        text = DEFAULT_BATCH_SIZES
    if not isinstance(text, str):
        values = [_batch_value(v, text) for v in text]
    else:
        parts = text.replace(" ", "").split(",")
        values = [] if not any(parts) else [v for part in parts for v in _batch_item(part, text)]
        twice = first_repeat(values)               # a text lists each batch size once (as --contexts does)
        if twice is not None:
            raise DsdsimError(f"batch size {twice} is listed twice in {text!r} (a value repeated, or ranges that "
                              "overlap); list each batch size once")
    if not values:
        raise DsdsimError("no batch sizes given; write a list (1,2,4,8) or a range (1-1024)")
    return np.array(sorted(set(values)), dtype=int)       # sorted, unique (np.unique would load numpy.ma)


_BATCH_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?", re.ASCII)


def _batch_item(part: str, text: str) -> list[int]:
    """One comma-separated item: N, LO-HI or LO-HI:STEP (ASCII digits), checked before expanding."""
    if not part:
        raise DsdsimError(f"batch sizes {text!r} have an empty item (two commas in a row, or one at an end)")
    m = _BATCH_ITEM.fullmatch(part)
    if m is None:
        raise DsdsimError(f"cannot read batch sizes {text!r} at {part!r}; write a list (1,2,4,8) or a range "
                          "(1-1024, 1-256:8) in ASCII digits")
    lo = _batch_value(int(m.group(1)), text)
    if m.group(2) is None:
        return [lo]
    hi, step = _batch_value(int(m.group(2)), text), int(m.group(3) or 1)
    if hi < lo or step < 1:
        raise DsdsimError(f"batch sizes: range {part!r} is empty; write LO-HI with LO <= HI and a step >= 1")
    return list(range(lo, hi + 1, step))


def _batch_value(v, text) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise DsdsimError(f"batch sizes must be whole numbers >= 1 (got {v!r} in {text!r})")
    if v < 1:
        raise DsdsimError(f"batch sizes must be whole numbers >= 1 (got {v})")
    if v > MAX_BATCH:
        raise DsdsimError(f"batch size {v} is absurd; the largest accepted is {MAX_BATCH}")
    return int(v)


# vllm-project/vllm#14117: speculative decoding is not supported with pipeline parallelism (dsdsim.cost.memory)
PREDICT_PP_ERROR = ("predict chooses K for speculative decoding, which vLLM does not run with pipeline parallelism "
                    "(vllm-project/vllm#14117): predict with --pp 1; a pp server without speculation is priced by "
                    "`dsdsim explain --pp 2 -d none -k 0` and planned by `dsdsim plan -d none`")


def predict(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment: Optional[Deployment] = None,
            drafter=DEFAULT_DRAFTER, *, engine=DEFAULT_ENGINE, options: Optional[PredictOptions] = None,
            **option_values) -> Prediction:
    """Best K per batch size for a model on hardware (names, paths or specs, as ``resolve`` takes them).

    engine: an engine name (``vllm``: its current release line; ``vllm@0.10.1``), path or spec; ``ideal`` for
    kernels only. options: a PredictOptions; keyword values (``acceptance=0.8, context=8192``) replace its fields.
    """
    o = (options or PredictOptions()).with_values(option_values)
    acceptance, context, batch_sizes, max_k, fixed_k = o.acceptance, o.context, o.batch_sizes, o.max_k, o.fixed_k
    max_distinct_k, acceptance_band = o.max_distinct_k, o.acceptance_band
    tolerance = parse_tolerance(o.tolerance)
    max_ranges = parse_max_ranges(o.max_ranges)
    hist = _histogram(o.batch_weights)
    if deployment is not None and getattr(deployment, "pp", 1) > 1:
        raise DsdsimError(PREDICT_PP_ERROR)
    setup = resolve(model, hardware, deployment, drafter, engine)
    context = check_context(context, setup)
    acc, ks, fixed_k = _k_axis(setup, acceptance, max_k, fixed_k, acceptance_band)
    b = parse_batch_sizes(batch_sizes)
    check_grid_size(len(b), len(ks), 1)
    weights = None
    if hist is not None:
        from dsdsim.policy.batch_weights import weights_for      # read only with --batch-weights

        weights = weights_for(b, hist)
    max_k = int(ks.max())
    dynamic = setup.engine is not None and setup.engine.supports_off_tier
    grid = simulate_step(None, None, batch=b.astype(float)[None, :], k=ks.astype(float)[:, None],
                         context=float(context), setup=setup, dynamic=dynamic)       # (K, B): one step program
    shape = (ks.size, b.size)
    step_kb = np.array(np.broadcast_to(grid.step_time_s, shape))
    feas_kb = np.array(np.broadcast_to(grid.feasible, shape))
    graphed_kb = np.array(np.broadcast_to(grid.verify_graphed, shape))   # kept: export reads it, not recomputes
    plain_s = None
    if dynamic:     # the baseline: the same deployment served without speculation
        plain_s = step_time_grid(setup.model, setup.hardware, setup.deployment, None, b, [0], [context],
                                 setup=plain_setup(setup))[0][:, 0, 0]
    tau = np.asarray(acc.tau(ks), dtype=float)
    g = goodput(b[None, :], tau[:, None], step_kb, feas_kb)
    k_best = best_k(g, ks)
    intervals = shipped_intervals()
    if o.robust:
        extra = intervals.extra_time if intervals is not None else None
        if extra is None:
            raise DsdsimError("--robust needs the shipped intervals of T(K)/T(0) (measurements/intervals.json "
                              "extra_time); none are shipped")
        plain = plain_s if plain_s is not None else step_kb[list(ks).index(0)]
        _, high_s = ratio_bounds(step_kb, plain, extra[0], extra[1])
        g_sel = goodput(b[None, :], tau[:, None], high_s, feas_kb)
        table = export_table(g_sel, ks, best_k(g_sel, ks), tolerance, max_distinct_k, max_ranges, weights)
        mean_loss, max_loss = table_losses(g, ks, table.k_per_batch)
        table = replace(table, mean_goodput_loss=mean_loss, max_goodput_loss=max_loss)
    else:
        table = export_table(g, ks, k_best, tolerance, max_distinct_k, max_ranges, weights)
    if weights is not None:
        loss = loss_per_batch(g, ks, table.k_per_batch)
        ok = np.isfinite(loss)
        if ok.any() and weights[ok].sum() > 0:
            table = replace(table, weighted_mean_goodput_loss=float(np.sum(loss[ok] * weights[ok]) / weights[ok].sum()))
    robust = None
    if acceptance_band:
        scenarios = [acc.shifted(-acceptance_band), acc, acc.shifted(+acceptance_band)]
        gs = [goodput(b[None, :], np.asarray(s.tau(ks))[:, None], step_kb, feas_kb) for s in scenarios]
        robust = robust_k(gs, ks, (f"alpha - {acceptance_band:g}", f"alpha + {acceptance_band:g}"))
    notes = []
    extra = acc.extrapolated_positions(max_k)
    if extra:
        notes.append(f"acceptance: {acc.describe(max_k)}")
    from dsdsim.specs.runners import v1_drafter_note

    why_v1 = v1_drafter_note(setup.engine, setup.drafter.kind.value if setup.drafter is not None else None)
    if why_v1 is not None:
        notes.append(why_v1)
    if 0 in ks:
        eager = eager_rise_note(b, np.asarray(table.k_per_batch), graphed_kb[list(ks).index(0)])
        if eager is not None:
            notes.append(eager)
    limit = getattr(setup.engine, "speculative_max_requests", None) if setup.engine is not None else None
    if limit is not None and int(b[-1]) > limit.value:
        notes.append(f"{setup.engine.speculative_cap_text}; the rows past batch {limit.value} are for a server started so")
    fits = feas_kb.any(axis=0)
    if not fits.any():
        from dsdsim.policy.fits import fit_note

        advice = fit_note(setup, context, int(ks[ks > 0].min()) if (ks > 0).any() else 0)
        notes.append(f"no batch size fits in memory at context {context}: there is no table to export"
                     + (f"; {advice}" if advice else ""))
    elif not fits.all():
        first_bad = int(b[~fits][0])
        notes.append(f"batch sizes from {first_bad} do not fit in memory at context {context} (marked infeasible); "
                     f"the K table ends at {int(b[fits][-1])}, the last that fits")
    if fits.any() and int(b[0]) > 1:
        notes.append(f"K table: its first range starts at batch size 1, as engines require, but sizes 1-{int(b[0]) - 1} "
                     f"were not evaluated: they take the K of batch {int(b[0])}; evaluate from 1 to rank them")
    if len(b) > 1 and (np.diff(b) > 1).any():
        notes.append("K table: batch sizes between evaluated ones take the K of the evaluated size below "
                     "(step rule, as vLLM reads its table)")
    if dynamic:
        notes += off_tier_notes(b, step_kb[0], plain_s, feas_kb[0], setup.engine)

    if o.robust:
        notes.append(f"K table chosen by {ROBUST_RULE}; its losses are against the point estimate's best K")
    tree_note = chain_engine_tree_note(setup)
    if tree_note is not None:
        notes.append(tree_note)
    if weights is not None and table.max_ranges is None:
        notes.append(f"batch weights: unused, the {100 * tolerance:g}% tolerance already gives {table.n_ranges} "
                     f"range{'' if table.n_ranges == 1 else 's'}, within the budget of {max_ranges}"
                     if max_ranges else "batch weights: unused without a range budget (--max-ranges N)")
    return Prediction(setup, acc, int(context), b, ks, step_kb, feas_kb, tau, g, k_best, int(fixed_k), table,
                      robust, notes, plain_s, dynamic, intervals, bool(o.robust), graphed_kb)


def _k_axis(setup: Setup, acceptance, max_k: Optional[int], fixed_k: Optional[int],
            acceptance_band: Optional[float]):
    """(acceptance model, the K values evaluated, the fixed K compared against), every conflict refused."""
    if setup.drafter is None:
        raise DsdsimError("predict needs a drafter (e.g. eagle3)")
    tree = setup.drafter.tree
    acc = acceptance_for(acceptance, tree, setup.drafter)
    if tree is not None:
        for what, value in (("max K", max_k), ("fixed K", fixed_k), ("acceptance band", acceptance_band)):
            if value is not None:
                raise DsdsimError(f"a draft tree replaces the K axis (plain decoding or the {tree.label}); "
                                  f"{what} applies to chains only")
        return acc, np.array([0, tree.steps]), tree.steps
    given_max_k = max_k is not None
    if max_k is None:
        max_k = min(DEFAULT_MAX_K, setup.drafter.max_k)
    if max_k < 1:
        raise DsdsimError(f"max K must be >= 1, got {max_k}")
    if max_k > setup.drafter.max_k:
        raise DsdsimError(f"max K {max_k} is beyond the {setup.drafter.label} drafter's limit of "
                          f"{setup.drafter.max_k}; lower it")
    if (given_max_k and acceptance is not None and acc.n_measured > max_k
            and getattr(acc, "extrapolation", None) != "constant"):
        import warnings

        from dsdsim.errors import ArgumentWarning

        warnings.warn(ArgumentWarning(
            f"acceptance is given for {acc.n_measured} positions and K goes to {max_k}: positions "
            f"{max_k + 1}-{acc.n_measured} are not used (raise --max-k to use them)"), stacklevel=3)
    if fixed_k is None:
        fixed_k = min(DEFAULT_FIXED_K, max_k)
    if not 0 <= fixed_k <= max_k:
        raise DsdsimError(f"fixed K must be in 0..max K ({max_k}), got {fixed_k}")
    if acceptance_band and not 0 < acceptance_band < 1:
        raise DsdsimError(f"acceptance band must be in (0, 1), got {acceptance_band}")
    return acc, np.arange(0, max_k + 1), fixed_k


def export_table(goodput_kb: np.ndarray, k_values: np.ndarray, k_best: np.ndarray, tolerance: float,
                 max_distinct_k: Optional[int] = None, max_ranges: Optional[int] = None,
                 weights: Optional[np.ndarray] = None) -> CompressedTable:
    """The table predict exports: the distinct-K subset first (when limited), then the fewest ranges within the
    tolerance inside that subset; where that still leaves more than ``max_ranges`` ranges, the table of at most
    ``max_ranges`` with the most (``weights``-weighted) relative goodput among those keeping every batch size within
    ``RANGE_LOSS_CAP`` of its best; where no such table exists, within the smallest share that a table of
    ``max_ranges`` can keep every batch size (``smallest_cap``: the budget first bounds the worst batch size, then
    maximises goodput under that bound). Tolerance 0 or ``max_ranges`` 0: the exact table. ``ranges_before`` counts the ranges of the exact table."""
    if max_distinct_k is None:
        exact = CompressedTable(k_best, tuple(sorted({int(k) for k in k_best if k >= 0})), 0.0, 0.0)
    else:
        exact = compress(goodput_kb, k_values, max_distinct_k)
    if max_ranges == 0:
        tolerance = 0.0
    table = fewest_ranges(goodput_kb, k_values, tolerance, allowed_k=exact.k_set)
    if max_ranges and tolerance > 0 and table.n_ranges > max_ranges:
        cap = max(RANGE_LOSS_CAP, tolerance)
        needed = fewest_ranges(goodput_kb, k_values, cap, allowed_k=exact.k_set).n_ranges
        if needed > max_ranges:   # no table of max_ranges keeps every batch size within the cap: the smallest
            cap = smallest_cap(goodput_kb, k_values, max_ranges, cap, exact.k_set)   # worst loss that one can
        budget = most_goodput_in_ranges(goodput_kb, k_values, max_ranges, weights, allowed_k=exact.k_set,
                                        loss_cap=cap)
        table = replace(budget, tolerance=float(tolerance), ranges_for_cap=needed)
    return replace(table, ranges_before=count_ranges(exact.k_per_batch), max_distinct_k=max_distinct_k)


def smallest_cap(goodput_kb: np.ndarray, k_values: np.ndarray, max_ranges: int, low: float, allowed_k) -> float:
    """The smallest share of goodput c such that some table of at most ``max_ranges`` ranges keeps every batch
    size within c of its best (``fewest_ranges(..., c)`` has at most ``max_ranges`` ranges; it only falls as c
    grows), by bisection above ``low`` to ``CAP_RESOLUTION``. A budget too small for the cap then trades the least
    it can at its worst batch size (a mean-only optimum left a batch size 41% below its best: deepseek-v3, 5
    ranges), and maximises goodput within that."""
    hi = 1.0 - CAP_RESOLUTION          # a tolerance is below 1 (every K within 100% of the best is no rule)
    if fewest_ranges(goodput_kb, k_values, hi, allowed_k=allowed_k).n_ranges > max_ranges:
        return hi
    lo = low
    while hi - lo > CAP_RESOLUTION:
        mid = 0.5 * (lo + hi)
        if fewest_ranges(goodput_kb, k_values, mid, allowed_k=allowed_k).n_ranges <= max_ranges:
            hi = mid
        else:
            lo = mid
    return hi


def _histogram(batch_weights) -> Optional[dict]:
    """The batch-size histogram of ``PredictOptions.batch_weights`` (a file or a mapping), None without one."""
    from dsdsim.policy.batch_weights import check_histogram, read_batch_weights

    if batch_weights is None:
        return None
    if isinstance(batch_weights, Mapping):
        return check_histogram(batch_weights)
    return read_batch_weights(batch_weights)


def check_context(context, setup: Setup) -> int:
    """A context length the model can hold: whole, >= 0, within its max_position_embeddings (config.json)."""
    if isinstance(context, (int, np.integer)) and not isinstance(context, bool):
        if context < 0:
            raise DsdsimError(f"context must be >= 0 tokens, got {context}")
        context = int(context)
    else:
        context = whole_number(context, "context (tokens)")
    window = setup.model.max_position_embeddings
    if window is not None and context > window:
        raise DsdsimError(f"context {context} is beyond {setup.model.name}'s window of {window} tokens "
                          f"(max_position_embeddings in its config.json); give a context of at most {window}")
    if context > MAX_CONTEXT:
        raise DsdsimError(f"context {context} is absurd; the largest accepted is {MAX_CONTEXT} tokens")
    d = setup.drafter
    budget = getattr(d, "kv_budget", None) if d is not None else None
    if budget is not None and budget >= context:
        import warnings

        from dsdsim.errors import ArgumentWarning

        warnings.warn(ArgumentWarning(
            f"{d.label}: a KV budget of {budget} tokens holds the whole context of {context}, so the draft is the "
            "target itself (every draft pass costs a target pass); give a budget below the context"), stacklevel=2)
    return int(context)


def check_grid_size(n_batch: int, n_k: int, n_context: int) -> None:
    """Refuse, before any work, a (batch x K x context) grid beyond MAX_GRID_POINTS."""
    points = n_batch * n_k * n_context
    if points > MAX_GRID_POINTS:
        raise DsdsimError(f"the batch x K x context grid has {n_batch} x {n_k} x {n_context} = {points:,} points; "
                          f"the limit is {MAX_GRID_POINTS:,} ({MAX_BATCH} batch sizes x {MAX_K + 1} K): evaluate "
                          "fewer batch sizes (e.g. 1-1024 or 1-4096:16), fewer context lengths or a smaller max K")


def plain_setup(setup: Setup) -> Setup:
    """The same deployment on a server without speculation (no drafter)."""
    return replace(setup, drafter=None, draft_model=None)


def eager_rise_note(batch: np.ndarray, k_table: np.ndarray, k0_graphed: np.ndarray) -> Optional[str]:
    """Why the table's K rises again at the batch past which a step without speculation stops replaying a CUDA
    graph (the engine's largest capture), or None where it does not: past it every step launches its kernels
    eagerly, so K draft tokens share those launches, where below it they cost a verify step its graph (B (K + 1)
    tokens pass the largest capture from batch largest / (K + 1))."""
    if not k0_graphed.any() or k0_graphed.all():
        return None
    last = int(np.flatnonzero(k0_graphed)[-1])
    if last + 1 >= batch.size or k0_graphed[last + 1:].any() or k_table[last] < 0 or k_table[last + 1] < 0:
        return None
    before, after = int(k_table[last]), int(k_table[last + 1])
    if after <= before:
        return None
    return (f"K rises from {before} to {after} past batch {int(batch[last])}: there even a step without speculation "
            f"passes the engine's largest CUDA graph and runs eagerly, as a speculative step of B x (K + 1) tokens "
            f"already did from a smaller batch, so the draft tokens share the eager launches again")


def chain_engine_tree_note(setup: Setup) -> Optional[str]:
    """A line where a draft tree is priced on an engine release whose spec drafts chains (vLLM, TensorRT-LLM): the
    tree takes that release's chain terms, which no measurement of a tree there checks; None otherwise."""
    eng = setup.engine
    if setup.drafter is None or setup.drafter.tree is None or eng is None or eng.draft_shape.value != "chain" \
            or eng.name == "ideal":
        return None
    return (f"draft tree: the {eng.name} {eng.version_label} spec drafts chains "
            f"({eng.draft_shape_source or 'its draft_shape'}); the tree is priced with that release's chain terms, "
            "which no measurement of a tree there checks: -e sglang prices a release that runs trees")


def off_tier_notes(batch: np.ndarray, off_tier_s: np.ndarray, plain_s: np.ndarray, fits: np.ndarray, engine) -> list:
    """What the K = 0 tier of a dynamic table costs against a server without speculation, in one line."""
    ok = fits & np.isfinite(off_tier_s) & np.isfinite(plain_s)
    if not ok.any():
        return []
    extra = off_tier_s[ok] / plain_s[ok] - 1.0
    lo, hi = float(extra.min()), float(extra.max())
    what = "the drafter's first pass still runs, " if engine.off_tier_drafts and engine.off_tier_drafts.value else ""
    if hi < 5e-4:        # no term of this release charges the K = 0 tier: say so rather than "0.0% to 0.0% slower"
        return [f"K = 0 rows are the table's off tier ({engine.name} {engine.version_label}): priced as a server "
                f"without speculation (its spec charges the off tier nothing)"]
    return [f"K = 0 rows are the table's off tier ({engine.name} {engine.version_label}: {what}speculative bookkeeping "
            f"continues): {format_percent(lo)} to {format_percent(hi)} slower than a server without speculation over "
            f"batch {int(batch[ok][0])}-{int(batch[ok][-1])}; 'vs K=0' compares with that server, which is the better "
            "choice where the table would sit at K = 0"]


def _acceptance(a) -> Acceptance | TreeAcceptance:
    from dsdsim.policy.acceptance import constant

    if a is None:
        return DEFAULT_ACCEPTANCE
    if isinstance(a, (Acceptance, TreeAcceptance)):
        return a
    if isinstance(a, (int, float)):
        return constant(float(a))
    from dsdsim.policy.acceptance_input import parse_acceptance     # text or a file: loaded only when given

    return parse_acceptance(str(a))


def acceptance_for(a, tree: Optional[DraftTree], drafter=None) -> Acceptance | TreeAcceptance:
    """The acceptance model for a chain (``tree`` None) or a draft tree, refusing the ambiguous pairings. Without one
    given (None or "default"), the drafter kind's example (``dsdsim.policy.acceptance.default_for``).

    A tree verifies several branches per step; how many tokens it emits depends on its shape and is measured as
    a mean acceptance length with that tree. A chain's α or al@K does not determine it, and a tree's length does
    not give a chain's α per position, so neither is converted into the other.
    """
    if tree is not None and a is None:
        raise DsdsimError(f"a draft tree ({tree.label}) needs the mean acceptance length measured with it, e.g. "
                          "al=2.55@tree; there is no default acceptance for trees")
    given = not (a is None or (isinstance(a, str) and a.strip().lower() == "default"))
    acc = _acceptance(a) if given else default_for(drafter)
    if tree is None and isinstance(acc, TreeAcceptance):
        raise DsdsimError(f"acceptance al={acc.length:g}@tree was measured with a draft tree but this drafter "
                          "drafts a chain: give the tree shape (steps, topk, tokens), or a chain's acceptance "
                          "(al=2.79@3, or alpha)")
    if tree is not None and not isinstance(acc, TreeAcceptance):
        raise DsdsimError(f"a draft tree ({tree.label}) takes the mean acceptance length measured with it "
                          f"(al=2.55@tree); '{acc.source}' describes a chain of draft tokens, which does not "
                          "determine a tree's")
    if tree is not None:
        # one step accepts a path of the tree: at most `steps` deep and at most `tokens` draft tokens long, then the
        # bonus token (the target's own next token) is emitted
        longest = min(tree.steps, tree.tokens)
        bound = f"{tree.steps} draft steps" if tree.steps <= tree.tokens else f"{tree.tokens} verified draft tokens"
        if acc.length > longest + 1:
            raise DsdsimError(f"mean acceptance length {acc.length:g} is more than the {tree.label} can emit per step "
                              f"({bound} + 1 bonus token = {longest + 1}); give the length measured with this tree")
    return acc


def predict_context_grid(contexts: Sequence[int], model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE,
                         deployment: Optional[Deployment] = None, drafter=DEFAULT_DRAFTER, *, engine=DEFAULT_ENGINE,
                         options: Optional[PredictOptions] = None, **option_values) -> list[Prediction]:
    """The optional context axis: one prediction per context length (a table over batch x context).

    Every context and the size of the whole grid are checked before anything is computed. The options are
    predict's; their ``context`` is replaced by each of ``contexts``."""
    if not contexts:
        raise DsdsimError("no context lengths given")
    if "context" in option_values:
        raise DsdsimError("give the context lengths as the contexts list, not also one context")
    o = (options or PredictOptions()).with_values(option_values)
    setup = resolve(model, hardware, deployment, drafter, engine)
    for c in contexts:
        check_context(c, setup)
    _, ks, _ = _k_axis(setup, o.acceptance, o.max_k, o.fixed_k, o.acceptance_band)
    check_grid_size(len(parse_batch_sizes(o.batch_sizes)), len(ks), len(contexts))
    return [predict(model, hardware, deployment, drafter, engine=engine, options=replace(o, context=int(c)))
            for c in contexts]
