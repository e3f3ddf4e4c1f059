"""A Prediction in every output format: JSON contract, CSV, and the engine tables.

With a draft tree the K axis holds two choices, plain decoding (K = 0) and the tree (K = the tree's steps):
JSON carries ``draft_tree`` {steps, topk, tokens, verify_tokens_per_sequence} and a ``draft`` of "tree" or "plain"
per row, CSV the same ``draft`` column. SGLang takes a tree (``--speculative-num-steps``, ``-eagle-topk``,
``-num-draft-tokens``); vLLM's and TensorRT-LLM's dynamic-K tables are chains of K tokens and cannot carry one.
"""
from __future__ import annotations

import json
import math
from dataclasses import field, fields, replace
from enum import Enum
from typing import TYPE_CHECKING, Optional

from dsdsim.defaults import CAP_RESOLUTION, RANGE_LOSS_CAP
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.units import format_percent

_OMIT_NONE = {"omit_none": True}

if TYPE_CHECKING:       # the command line imports PredictFormat at start-up; the views load numpy when used
    from dsdsim.policy.predict import Prediction, Row
    from dsdsim.export.deployment import DeploymentView


class PredictFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    vllm = "vllm"
    vllm_batch_stats = "vllm-batch-stats"
    sglang = "sglang"
    trtllm = "trtllm"


def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


@frozen
class EngineRef:
    """The engine spec a prediction used: its name, the file it was read from and the releases it covers."""

    name: Optional[str]
    source: Optional[str]
    versions: Optional[str] = field(default=None, metadata=_OMIT_NONE)   # the release range of the spec
    runner: Optional[str] = field(default=None, metadata=_OMIT_NONE)     # vLLM's model runner it prices (v1 | v2)


@frozen
class IntervalsView:
    """How the rows' *_low / *_high were obtained (dsdsim.policy.intervals)."""

    coverage: float
    method: str
    strata: tuple[str, ...]       # the groups of held-out corpus cases the rows' intervals came from, with n


@frozen
class AcceptanceView:
    """The acceptance a prediction assumed: per-position alphas of a chain (or a tree's measured length), where
    they came from, and how they were read (its one-line description)."""

    alpha: tuple[float, ...]                      # per-position acceptance of a chain; empty for a tree
    measured_positions: int
    mean_acceptance_length: Optional[float] = field(default=None, metadata=_OMIT_NONE)   # trees only
    source: Optional[str] = None
    description: str = ""


@frozen
class DraftTreeView:
    """A draft tree in the JSON: its shape, the tokens it verifies per sequence, and the K that stands for it in
    the rows."""

    steps: int
    topk: int
    tokens: int
    verify_tokens_per_sequence: int
    k_in_rows: int


@frozen
class KTableView:
    """The exported table (the rows' ``k``): the fewest ranges within ``tolerance`` of the best K at every batch size
    (and within ``max distinct K`` when limited); losses are against the exact per-batch best (the rows' ``k_best``)."""

    ranges: tuple[tuple[int, int, int], ...]     # (first batch, last batch, K)
    distinct_k: tuple[int, ...]
    mean_goodput_loss: float                     # mean over feasible batch sizes of 1 - G(table K) / G(K*)
    max_goodput_loss: float
    tolerance: float                             # goodput share any batch size may give up for fewer ranges
    ranges_at_zero_tolerance: int                # ranges of the table the tolerance started from
    max_distinct_k: Optional[int] = field(default=None, metadata=_OMIT_NONE)
    summary: str = ""                            # the same in one line, as the table format prints it
    # under a range budget (--max-ranges): what it gave up, per range and in all (BudgetView); None otherwise
    budget: Optional["BudgetView"] = field(default=None, metadata=_OMIT_NONE)
    # per range: its K's gain over no speculation with its interval, the runner-up, whether the choice is sure, and
    # the rule that chose it (dsdsim.policy.margin.RangeMargin); empty without shipped extra-time intervals
    margin: tuple = ()


@frozen
class GridView:
    """The whole (K, B) grid of step times behind a prediction, and each K's acceptance length tau."""

    k_values: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    tau: tuple[float, ...]
    step_ms: tuple[tuple[Optional[float], ...], ...]   # (K, B), None where infeasible


@frozen
class RobustView:
    """The K that holds up over an acceptance band, and its worst regret at each edge of the band."""

    k_per_batch: tuple[int, ...]
    band: tuple[float, float]
    regret_low_edge_max: Optional[float]
    regret_high_edge_max: Optional[float]


@frozen
class PredictionView:
    """A Prediction as the documented JSON contract (downstream tools and notebooks rely on these keys)."""

    model: str
    hardware: str
    engine: EngineRef
    deployment: DeploymentView
    drafter: str
    acceptance: AcceptanceView
    draft_tree: Optional[DraftTreeView]
    context: int
    fixed_k: int
    rows: tuple[Row, ...]                        # dsdsim.policy.predict.Row, non-finite numbers as None
    table: KTableView
    grid: GridView
    notes: tuple[str, ...]
    robust: Optional[RobustView] = field(default=None, metadata=_OMIT_NONE)
    intervals: Optional[IntervalsView] = field(default=None, metadata=_OMIT_NONE)
    baseline: str = "a server without speculation"      # what speedup_vs_vanilla compares with
    # which table the rows' k, tau, step, ITL, tokens/s and speedups describe
    rows_describe: str = "the exported table (table.ranges); k_best is the exact per-batch best K*"
    server: str = ""                             # the server whose steps the rows are (``prediction_server``)

    @classmethod
    def from_prediction(cls, p: "Prediction") -> "PredictionView":
        return _prediction_view(p)

    def to_dict(self) -> dict:
        from dsdsim.export.views import json_plain

        return json_plain(self)

    def to_json(self) -> str:
        """The JSON of ``dsdsim predict --format json``."""
        return json.dumps(self.to_dict(), indent=2)


def _prediction_view(p: "Prediction") -> PredictionView:
    from dsdsim.export.deployment import deployment_view

    s = p.setup
    step_ms = tuple(tuple(_num(float(p.step_s[i, j] * 1e3)) if p.feasible[i, j] else None
                          for j in range(len(p.batch_sizes))) for i in range(len(p.k_values)))
    return PredictionView(
        model=s.model.name, hardware=s.hardware.name,
        engine=engine_ref(p),
        deployment=deployment_view(s.model, s.deployment),
        drafter=s.drafter.label,
        acceptance=acceptance_view(p),
        draft_tree=None if p.tree is None else DraftTreeView(
            steps=p.tree.steps, topk=p.tree.topk, tokens=p.tree.tokens,
            verify_tokens_per_sequence=p.tree.tokens + 1, k_in_rows=p.tree.steps),
        context=p.context, fixed_k=p.fixed_k,
        rows=tuple(row_view(r) for r in p.rows),
        table=KTableView(ranges=tuple(tuple(r) for r in p.ranges()), distinct_k=tuple(p.table.k_set),
                         mean_goodput_loss=p.table.mean_goodput_loss, max_goodput_loss=p.table.max_goodput_loss,
                         tolerance=p.table.tolerance, ranges_at_zero_tolerance=p.table.ranges_at_zero_tolerance,
                         max_distinct_k=p.table.max_distinct_k, summary=table_summary(p),
                         budget=budget_view(p), margin=tuple(p.margins())),
        grid=GridView(k_values=tuple(int(k) for k in p.k_values), batch_sizes=tuple(int(b) for b in p.batch_sizes),
                      tau=tuple(float(t) for t in p.tau), step_ms=step_ms),
        notes=tuple(p.notes), robust=robust_view(p), intervals=intervals_view(p), server=prediction_server(p),
    )


def table_summary(p: "Prediction") -> str:
    """One line: which table is exported and what it gave up against the exact per-batch best K*."""
    t = p.table
    before, after = t.ranges_at_zero_tolerance, t.n_ranges
    if after == 0:
        return "no K table: no batch size fits in memory"
    within = f", at most {t.max_distinct_k} distinct K" if t.max_distinct_k is not None else ""
    lost = (f"goodput given up against the best K per batch size: max {_percent(t.max_goodput_loss)}, mean "
            f"{_percent(t.mean_goodput_loss)}")
    if t.max_ranges is not None:
        b = budget_view(p)
        weighted = (f" (weighted by the batch weights {_percent(t.weighted_mean_goodput_loss)})"
                    if t.weighted_mean_goodput_loss is not None else "")
        text = (f"K table: {_count(after, 'range')} under a budget of {t.max_ranges} (the exact table has {before})"
                f"{within}; goodput given up against the best K per batch size: mean {_percent(t.mean_goodput_loss)}"
                f"{weighted}, worst {_percent(t.max_goodput_loss)} at batch {b.worst_batch}")
        if t.ranges_for_cap is None or t.ranges_for_cap <= t.max_ranges:
            return text + f"; every batch size within {100 * t.loss_cap:g}% of its best"
        return (text + f"; no {t.max_ranges}-range table keeps every batch size within "
                f"{100 * max(RANGE_LOSS_CAP, t.tolerance):g}% of its best: {t.ranges_for_cap} ranges do "
                f"(--max-ranges {t.ranges_for_cap}); its worst loss is the least a {t.max_ranges}-range table can have "
                f"(to {_percent(CAP_RESOLUTION)})")
    if t.tolerance > 0 and after < before:
        return (f"K table: {_count(after, 'range')} instead of {before}{within}, each batch size giving up at most "
                f"{100 * t.tolerance:g}% of goodput for fewer ranges; {lost}")
    merged = f" (a {100 * t.tolerance:g}% tolerance merges none)" if t.tolerance > 0 else ""
    if t.max_goodput_loss > 0:
        return f"K table: {_count(after, 'range')}{within}{merged}; {lost}"
    return f"K table: the exact best K per batch size, {_count(after, 'range')}{merged}"


@frozen
class BudgetRangeView:
    """One exported range under a range budget: the exact table's ranges it merged and the most it gives up."""

    start: int
    end: int
    k: int
    exact_ranges: tuple[tuple[int, int, int], ...]   # the exact per-batch best's ranges inside it
    max_goodput_loss: float                          # the worst batch size in it, against its best K
    worst_batch: int


@frozen
class BudgetView:
    """What a range budget cost (``table.budget`` in JSON): the exact table's ranges, the losses, each range."""

    max_ranges: int
    exact_ranges: int
    loss_cap: Optional[float]                 # every batch size within this of its best (the cap, or the least a
    #                                           table of max_ranges can keep: dsdsim.policy.predict.smallest_cap)
    ranges_for_cap: Optional[int]             # the fewest ranges that keep every batch size within the cap
    mean_goodput_loss: float
    weighted_mean_goodput_loss: Optional[float]
    max_goodput_loss: float
    worst_batch: int
    ranges: tuple[BudgetRangeView, ...]


def budget_view(p: "Prediction") -> Optional[BudgetView]:
    """The range budget's cost per range (None where the tolerance alone chose the table)."""
    import numpy as np

    from dsdsim.policy.table import loss_per_batch, ranges_from_k_per_batch

    t = p.table
    if t.max_ranges is None:
        return None
    b = [int(x) for x in p.batch_sizes]
    loss = loss_per_batch(p.goodput, p.k_values, t.k_per_batch)
    ok = np.asarray(t.k_per_batch) >= 0
    exact = ranges_from_k_per_batch([x for x, keep in zip(b, ok) if keep],
                                    [int(k) for k, keep in zip(p.k_best, ok) if keep])
    rows = []
    for start, end, k in p.ranges():
        inside = [i for i, x in enumerate(b) if start <= x <= end and ok[i]]
        worst = max(inside, key=lambda i: loss[i]) if inside else None
        rows.append(BudgetRangeView(start, end, k, tuple(r for r in exact if r[1] >= start and r[0] <= end),
                                    float(loss[worst]) if worst is not None else 0.0,
                                    b[worst] if worst is not None else start))
    worst_all = max(rows, key=lambda r: r.max_goodput_loss)
    return BudgetView(t.max_ranges, t.ranges_at_zero_tolerance, t.loss_cap, t.ranges_for_cap, t.mean_goodput_loss,
                      t.weighted_mean_goodput_loss, t.max_goodput_loss, worst_all.worst_batch, tuple(rows))


def tolerance_merged(p: "Prediction") -> bool:
    """Whether the tolerance removed ranges (so the exact table, tolerance 0, differs)."""
    return p.table.tolerance > 0 and p.table.n_ranges < p.table.ranges_at_zero_tolerance


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _percent(x: float) -> str:
    return "0%" if x <= 0 else ("<0.01%" if x < 1e-4 else format_percent(x, 2))


def prediction_server(p: "Prediction") -> str:
    """The server whose steps the rows and grid are, in words (explain names its own: ``views.step_server``)."""
    if p.dynamic:
        return ("one server running the K table: each row is its step at that row's K (K = 0 its off tier); "
                "`dsdsim explain --k-table` prices the same step")
    if p.tree is not None:
        return "a server per choice: one drafting the tree every step, one without speculation"
    return ("a server per K, each with that fixed K (K = 0 without speculation; this engine version's spec prices "
            "no K-table server of its own): `dsdsim explain -k K` prices the same step")


def intervals_view(p: "Prediction") -> Optional[IntervalsView]:
    if p.intervals is None:
        return None
    used = []
    for b in p.batch_sizes:
        iv = p.interval(int(b))
        label = f"{iv.stratum} (n {iv.n})" if iv is not None else None
        if label and label not in used:
            used.append(label)
    return IntervalsView(coverage=p.intervals.coverage, method="split conformal over the leave-one-source-out "
                         "errors of corpus cases on the same engine family, architecture and batch regime "
                         "(measurements/intervals.json)", strata=tuple(used))


def prediction_dict(p: "Prediction") -> dict:
    """The documented JSON contract as plain data (``PredictionView.from_prediction(p).to_dict()``)."""
    return PredictionView.from_prediction(p).to_dict()


def row_view(r: "Row") -> "Row":
    """The row with non-finite numbers as None (the row itself where every number is finite)."""
    values = {f.name: getattr(r, f.name) for f in fields(r)}
    not_finite = {name: None for name, v in values.items() if v is not None and _num(v) is None}
    return replace(r, **not_finite) if not_finite else r


def engine_ref(p: "Prediction") -> EngineRef:
    s = p.setup
    e = s.engine
    return EngineRef(name=e.name if e is not None else None, source=s.engine_source,
                     versions=e.versions.label if e is not None and e.versions is not None else None,
                     runner=e.runner if e is not None else None)


def acceptance_view(p: "Prediction") -> AcceptanceView:
    k_max = int(p.k_values.max())
    a = p.acceptance
    if p.tree is not None:      # a TreeAcceptance: one measured length, no per-position chain alpha
        return AcceptanceView(alpha=(), measured_positions=0, mean_acceptance_length=a.length, source=a.source,
                              description=a.describe(k_max))
    return AcceptanceView(alpha=tuple(float(x) for x in a.alpha_at(k_max)), measured_positions=len(a.alpha),
                          source=a.source, description=a.describe(k_max))


def robust_view(p: "Prediction") -> Optional[RobustView]:
    if p.robust is None:
        return None
    return RobustView(k_per_batch=tuple(int(k) for k in p.robust.k_per_batch), band=tuple(p.robust.band),
                      regret_low_edge_max=_num(float(_nanmax(p.robust.regret_low))),
                      regret_high_edge_max=_num(float(_nanmax(p.robust.regret_high))))


def _nanmax(a):
    import numpy as np

    a = np.asarray(a, dtype=float)
    return float(np.nanmax(a)) if np.isfinite(a).any() else float("nan")


def prediction_csv(p: "Prediction") -> str:
    from dsdsim.export.engines import table_csv
    from dsdsim.export.views import json_plain

    return table_csv([json_plain(row_view(r)) for r in p.rows])


def best_speedup(p: "Prediction") -> Optional[float]:
    """The table's best speedup over a server without speculation at any batch size where it speculates (None
    where it never does)."""
    gains = [r.speedup_vs_vanilla for r in p.rows if r.k and r.feasible and r.speedup_vs_vanilla is not None]
    return max(gains) if gains else None


def export_refusals(p: "Prediction", fmt: PredictFormat) -> list[str]:
    """Why the engine reading ``fmt`` could not use this table, one line each: it would not start with it, ignore
    it, or read no such table; or the table speculates where no batch size gains over a server without
    speculation. ``render`` refuses such an export unless forced (one rule for every engine)."""
    if fmt not in ENGINE_TABLES or not p.ranges():
        return []
    from dsdsim.export import engines

    out = []
    if fmt is not PredictFormat.vllm:     # vLLM's refusals are hard: without a method there is no config to write
        refusal = engines.engine_refusal(p.setup.drafter, _FORMAT_ENGINES[fmt][0])
        if refusal:
            out.append(refusal)
    out += [text for text, blocks in _table_findings(p, fmt) if blocks]
    gain = best_speedup(p)
    if gain is not None and gain <= 1.0 and p.tree is None:
        out.append(f"this table does not pay: at its best it runs {gain:.2f}x a server without speculation "
                   f"({p.setup.drafter.label} on {p.setup.model.name}, {p.setup.hardware.name}); serve without "
                   "speculative decoding")
    return out


def render(p: "Prediction", fmt: PredictFormat, force: bool = False) -> str:
    """Text for every non-table format. An engine table the engine could not use (``export_refusals``) is refused
    unless ``force``."""
    from dsdsim.export import engines

    if not force:
        refusals = export_refusals(p, fmt)
        if refusals:
            raise DsdsimError(f"{refusals[0]}; nothing written (--force writes the table anyway)")

    if fmt is PredictFormat.json:
        return PredictionView.from_prediction(p).to_json()
    if fmt is PredictFormat.csv:
        return prediction_csv(p)
    ranges = p.ranges()
    if not ranges:
        from dsdsim.policy.fits import fit_note

        advice = fit_note(p.setup, p.context)
        raise DsdsimError(f"no batch size fits in memory at context {p.context} ({p.setup.model.name} on "
                          f"{p.setup.deployment.tp} x {p.setup.hardware.name}): there is no K table to export"
                          + (f"; {advice}" if advice else ""))
    max_bs = ranges[-1][1]
    if fmt in ENGINE_TABLES and all(k == 0 for _, _, k in ranges):
        # one behaviour for every engine: a table that never speculates is not exported (vLLM would need
        # num_speculative_tokens >= 1 and run its off tier everywhere, TensorRT-LLM cannot express it)
        what = "the tree never beats plain decoding" if p.tree is not None else "K = 0 at every batch size"
        raise DsdsimError(f"{what} at context {p.context} ({p.setup.model.name} on {p.setup.deployment.tp} x "
                          f"{p.setup.hardware.name}): speculation does not pay here; serve without speculative "
                          "decoding (no engine table is written; json and csv give the rows)")
    refusal = engines.engine_refusal(p.setup.drafter, "vllm") if fmt is PredictFormat.vllm else None
    if refusal:    # vLLM has no method for this drafter kind (its registry entry says why): nothing to write
        raise DsdsimError(refusal)
    if p.tree is not None:
        return _tree_export(p, fmt, ranges)
    if fmt is PredictFormat.vllm:
        cfg = engines.vllm_speculative_config(ranges, method=p.setup.drafter, max_num_seqs=max_bs)
        return json.dumps(cfg, indent=2)
    if fmt is PredictFormat.sglang:
        return json.dumps(engines.sglang_adaptive_config(ranges), indent=2)
    if fmt is PredictFormat.trtllm:
        sched = engines.trtllm_draft_len_schedule(ranges)
        return json.dumps({"draft_len_schedule": {str(k): v for k, v in sched.items()}}, indent=2)
    if fmt is PredictFormat.vllm_batch_stats:
        # vLLM's DSD design scores K by (1 + sum a_i) / ITL with ITL measured by `vllm bench` between streamed
        # chunks: one chunk per step, so its "ITL" is the step time, not step time / tau. Its profiling runs one
        # server per K (k = 0: without speculation), so the export holds those servers' steps.
        static = p.static_step_s()
        step_ms = [[float(static[i, j] * 1e3) if p.feasible[i, j] else float("nan")
                    for j in range(len(p.batch_sizes))] for i in range(len(p.k_values))]
        rates = [float(r) for r in p.acceptance.unconditional(int(p.k_values.max()))]
        data = engines.vllm_batch_stats([int(b) for b in p.batch_sizes], [int(k) for k in p.k_values], step_ms,
                                        rates, int(p.k_values.max()))
        return json.dumps(data, indent=2)
    raise ValueError(f"no text renderer for {fmt}")


ENGINE_TABLES = (PredictFormat.vllm, PredictFormat.sglang, PredictFormat.trtllm)

# engine names (EngineSpec.name) that read each format's table
_FORMAT_ENGINES = {PredictFormat.vllm: ("vllm", "vllm-mrv2"), PredictFormat.sglang: ("sglang",),
                   PredictFormat.trtllm: ("trtllm",)}


def _releases_reading_a_table(engine_name: str) -> list[str]:
    """The shipped releases of ``engine_name`` that read a per-batch-size K table, as NAME@RANGE labels."""
    from dsdsim.specs.catalog import iter_engines

    return [f"{spec.name} {spec.version_label}" for _, spec in iter_engines()
            if spec.name == engine_name and spec.supports_off_tier]


def table_warnings(p: "Prediction", fmt: PredictFormat) -> list[str]:
    """Where the engine that reads the ``fmt`` table would ignore it, not start, or run some of its ranges eager;
    one line each (the caller prints them: an engine table carries no notes)."""
    return [text for text, _ in _table_findings(p, fmt)]


def _table_findings(p: "Prediction", fmt: PredictFormat) -> list[tuple[str, bool]]:
    """(line, whether the engine cannot use the table because of it) for the ``fmt`` table."""
    if fmt not in ENGINE_TABLES or not p.ranges():
        return []
    out = []
    dep, eng = p.setup.deployment, p.setup.engine
    if fmt is PredictFormat.vllm and dep.dp_attention:
        # vLLM docs, dynamic speculative decoding "Limitations", and its test: "Dynamic speculative decoding is not
        # supported with data parallelism"; K falls back to num_speculative_tokens (docs/reference/engines.md 1.2)
        out.append(("vLLM runs data-parallel attention with data_parallel_size > 1, and disables dynamic speculative "
                    "decoding under data parallelism: it would ignore this table and speculate num_speculative_tokens "
                    "everywhere", True))
    if fmt is PredictFormat.sglang and p.tree is None:
        # SGLang docs/advanced_features/adaptive_speculative_decoding.md: adaptive steps are not supported with
        # attention DP, nor with algorithms other than EAGLE / EAGLE3 (docs/reference/engines.md 3)
        if dep.dp_attention:
            out.append(("SGLang's adaptive speculative decoding (--speculative-adaptive) does not support "
                        "data-parallel attention (--enable-dp-attention): it would not start with this table", True))
        kind = p.setup.drafter.kind.value
        if kind not in ("eagle", "eagle3", "mtp"):
            out.append((f"SGLang's adaptive speculative decoding supports EAGLE and EAGLE3 only (MTP runs as EAGLE); "
                        f"a {p.setup.drafter.label} drafter cannot read this table", True))
    if eng is not None and eng.name in _FORMAT_ENGINES[fmt]:
        flag = eng.dynamic_k_table
        if flag is not None and not flag.value:
            readers = _releases_reading_a_table(eng.name)
            where = (f"export for a release that does ({', '.join(readers)})" if readers else
                     "no release dsdsim has a spec for does: this table is for a build that reads one")
            out.append((f"{eng.name} {eng.version_label} does not read a per-batch-size K table ({flag.source}); "
                        f"{where}", True))
        eager = eager_ranges(p)
        if eager:
            out.append((eager, False))
    return out


def eager_ranges(p: "Prediction") -> Optional[str]:
    """The ranges whose evaluated batch sizes run eager at the table's K (past the engine's largest CUDA-graph
    capture: the prediction's own ``graphed``, what its step times were priced with), as one line."""
    import numpy as np

    from dsdsim.cost.engine import graphs_on
    from dsdsim.specs.engine import GraphPadding

    eng = p.setup.engine
    graphs = graphs_on(eng.cuda_graphs, p.setup.hardware, p.setup.model.architecture) if eng is not None else None
    if graphs is None or graphs.capture_sizes is None or not p.setup.deployment.cuda_graphs or p.graphed is None:
        return None
    kv = [int(k) for k in p.k_values]
    b_all = np.asarray(p.batch_sizes)
    parts = []
    for start, end, k in p.ranges():
        at = (b_all >= start) & (b_all <= end)
        eager = b_all[at & ~np.asarray(p.graphed[kv.index(k)], dtype=bool)]
        if eager.size:
            parts.append(f"{int(eager[0])}-{end} (K={k})" if eager[0] < end else f"{end} (K={k})")
    if not parts:
        return None
    unit = "tokens" if graphs.padding is GraphPadding.tokens else "sequences"
    return (f"{eng.name} {eng.version_label} captures CUDA graphs up to {graphs.capture_sizes[-1]} {unit} per step "
            f"(its engine spec's cuda_graphs): batch sizes {', '.join(parts)} run eager, as the step times assume")


def _tree_export(p: "Prediction", fmt: PredictFormat, ranges) -> str:
    """A draft tree for SGLang; one clear refusal for the chain-only formats."""
    from dsdsim.export import engines

    if fmt is not PredictFormat.sglang:
        raise DsdsimError(f"the {fmt.value} format is a table of chain lengths K and cannot carry a draft tree "
                          f"({p.tree.label}); export it as sglang, json or csv")
    return json.dumps(engines.sglang_tree_config(p.setup.drafter.kind.value, p.tree, ranges), indent=2)
