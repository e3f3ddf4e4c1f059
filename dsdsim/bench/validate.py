"""Validate the cost model against torch timings on a real device (``dsdsim validate``).

Loop 1, operators and steps. For a grid of batch size B, draft length K (verify q = K + 1) and context c,
the cost model's own OpCosts of a verify pass (pass_ops) and of the drafter's step (draft_ops) are each run
in torch (dsdsim.bench.shapes) and timed (dsdsim.bench.timing); every distinct shape is one point,
predicted = op_time of the same OpCost on the given spec (eager launches: cuda_graphs=False, as torch runs).
Whole passes are timed too ("step" points): a real torch decoder with one layer of each distinct kind plus
embedding, final norm, lm_head and sampling, and the EAGLE-3 draft head's first and later passes. Points
are split into interleaved train / held-out halves; efficiencies fitted on the train half
(dsdsim.fit.calibrate) are scored on the held-out half.

Loop 2, tables. Measured step times T(B, K) = sum over the step's operators of count x measured time give the
measured best K per batch under an acceptance model; regret = 1 - G(K_predicted) / G(K_best).

When the real layer does not fit the device or the time budget, every dimension is divided by a factor
(hidden, heads, FFN and expert widths, vocabularies; head_dim, experts and top_k kept) and the prediction is
made for THAT reduced spec; the report records the factor and the dimensions used.

This module runs the stages; each lives in its own module:

    dsdsim.bench.reduce       the reduced model (and the one-layer-per-kind slice a pass is timed on), torch-free
    dsdsim.bench.measure      timing operators, passes and whole steps with torch (imported when a run measures)
    dsdsim.fit.validation     calibration, errors by kind and the K table check, torch-free (also --reanalyse)
    dsdsim.export.validation  report.json, summary.md, the predicted-vs-measured plot, the calibrated spec
"""
from __future__ import annotations
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from dsdsim.bench.grid import FULL_GRID, GPU_GRID, QUICK_GRID, TINY_GRID, Grid
from dsdsim.bench.reduce import auto_reduction, reduce_drafter, reduce_model, slice_model
from dsdsim.cost.layers import PassContext, pass_ops
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.cost.step import Setup
from dsdsim.export.validation import write_report
from dsdsim.fit import validation as analysis
from dsdsim.fit.calibrate import Calibrator, Evaluator, Point, calibrate_points
from dsdsim.fit.validation import ValidationReport, default_acceptance, op_key, step_ops
from dsdsim.records import frozen
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterSpec, parse_drafter
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec
from dsdsim.units import DType

ProgressFn = Callable[[int, int, str], None]      # (done, total, what)


@frozen
class ValidateConfig:
    """What one validation run measures and against what. ``reduce`` None: 1 on a GPU, 2 (4 with ``quick``)
    on a CPU; ``grid`` None: GPU_GRID on a GPU, else QUICK_GRID or FULL_GRID; ``layers``: keep only the first
    N layers (real widths); ``time_budget_s``: skip what is left past it, and still report."""

    model: object
    hardware: object
    device: str = "cpu"
    quick: bool = True
    output_dir: Optional[str | Path] = None
    drafter: Optional[str | DrafterSpec] = "eagle3"
    reduce: Optional[int] = None
    grid: Optional[Grid] = None
    dtype: Optional[DType] = None
    acceptance: object = None
    steps: bool = True
    threads: Optional[int] = 1
    layers: Optional[int] = None
    time_budget_s: Optional[float] = None


def validate(model, hardware, device: str = "cpu", quick: bool = True, output_dir: Optional[str | Path] = None,
             progress: Optional[ProgressFn] = None, **options) -> ValidationReport:
    """Measure the model's operator shapes, passes and whole speculative steps on ``device``, compare with the
    prediction on ``hardware``, calibrate on half the points, check the K table on the whole steps. Writes
    report.json, summary.md, a plot and the calibrated spec to ``output_dir`` when given. ``options``: the other
    fields of ValidateConfig. On a CPU, torch runs ``threads`` threads (as ``probe`` measured with)."""
    return run_config(ValidateConfig(model, hardware, device, quick, output_dir, **options), progress)


def run_config(cfg: ValidateConfig, progress: Optional[ProgressFn] = None) -> ValidationReport:
    from dsdsim.bench.measure import measure
    from dsdsim.bench.timing import cpu_threads, on_device

    run = _resolve(cfg)
    with cpu_threads(cfg.device, cfg.threads), on_device(run.device):
        points, errors, clocks = measure(run, cfg, progress)
    if progress is not None:
        progress(len(points), len(points), "calibrating")
    return _analyse(run, cfg, points, errors, clocks)


@dataclass
class _Run:
    """A validation run's resolved inputs."""

    model_full: ModelSpec
    model: ModelSpec
    reduced: dict
    hw: HardwareSpec
    device: str
    drafter: Optional[DrafterSpec]
    grid: Grid
    graphs: bool
    dtype: DType
    deployment: Deployment
    pc: PassContext
    acceptance: object
    steps_bk: dict = field(default_factory=dict)
    unique: dict = field(default_factory=dict)
    op_points: dict = field(default_factory=dict)        # filled by _measure
    header: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")




def check_drafter(drafter: Optional[str | DrafterSpec]) -> Optional[DrafterSpec]:
    """The drafter a run measures: EAGLE-3 or none (the step shapes dsdsim.bench builds in torch)."""
    d = parse_drafter(drafter) if isinstance(drafter, str) else drafter
    if d is not None and not d.info.validated:
        from dsdsim.specs.drafters import validated_kinds

        kinds = validated_kinds()
        raise ValueError(f"validate builds the torch passes of {', '.join(kinds)}, not {d.label}; pass drafter="
                         f"{kinds[0]!r} or None")
    return d


def native_dtype(model, hw, cuda: bool) -> DType:
    """The dtype a validation runs in where none is given: the model's (bf16 unless it says fp16 or fp32), except on a
    CPU whose measured GEMM peak in it is below its fp32 peak: a CPU without bf16 / fp16 instructions (AVX2 only, no
    AVX512-BF16 or AMX) converts in software (~1 GFLOP/s) on some shapes and not others, which no roofline describes,
    so it validates in fp32, the probe's own sweep dtype on a CPU."""
    want = model.default_dtype if model.default_dtype in (DType.bf16, DType.fp16, DType.fp32) else DType.bf16
    peaks = hw.peak_flops_per_s
    if cuda or want is DType.fp32 or want not in peaks or DType.fp32 not in peaks:
        return want
    return want if peaks[want].value >= peaks[DType.fp32].value else DType.fp32


def _resolve(cfg: ValidateConfig) -> _Run:
    """Load and reduce the model, pick the grid and dtype, and list the distinct operator shapes to time."""
    import torch

    d = check_drafter(cfg.drafter)
    model_full = load_model(cfg.model)
    hw = load_hardware(cfg.hardware)
    dev = str(torch.device(cfg.device))
    factor = auto_reduction(dev, cfg.quick) if cfg.reduce is None else int(cfg.reduce)
    m, reduced = reduce_model(model_full, factor)
    if cfg.layers is not None and cfg.layers < m.num_layers:
        m = m.model_copy(update={"layers": m.layers[:cfg.layers], "name": f"{m.name}[{cfg.layers} layers]"})
        reduced = {**reduced, "layers_kept": [model_full.num_layers, cfg.layers]}
    d = reduce_drafter(d, factor)
    cuda = dev.startswith("cuda")
    grid = cfg.grid or (GPU_GRID if cuda and not cfg.quick else QUICK_GRID if cfg.quick else FULL_GRID)
    graphs = grid.graphs and cuda
    wdt = cfg.dtype or native_dtype(m, hw, cuda)
    # random router weights over random inputs route each token independently: overlap 0, not the locality of
    # trained routers that predict assumes
    dep = Deployment(dtype=wdt, expert_dtype=wdt, act_dtype=wdt, kv_dtype=wdt, cuda_graphs=graphs, expert_overlap=0.0)
    run = _Run(model_full, m, reduced, hw, dev, d, grid, graphs, wdt, dep, PassContext.build(m, hw, dep),
               cfg.acceptance or default_acceptance())
    run.steps_bk, run.unique = _operator_shapes(run)
    return run


def _operator_shapes(run: _Run) -> tuple[dict, dict[str, OpCost]]:
    """Each (B, K) step's operators at the table context, and every distinct operator shape to time (attention
    also at the grid's longer contexts)."""
    g, m, d, pc = run.grid, run.model, run.drafter, run.pc
    steps_bk = {(b, k): step_ops(m, d, pc, b, k, g.contexts[0]) for b in g.batches for k in g.ks}
    unique: dict[str, OpCost] = {}
    for so in steps_bk.values():
        for key, op, _ in so.ops:
            unique.setdefault(key, op)
    for c in g.contexts[1:]:
        for b in g.batches:
            for k in g.ks:
                for op in pass_ops(m, pc, b, k + 1, c):
                    if op.kind is OpKind.attention:
                        single = replace(op, count=1)
                        unique.setdefault(op_key(single, None), single)
    return steps_bk, unique


def _table(tc: Optional[dict], acceptance, grid: Grid, why: str) -> dict:
    return tc or analysis.no_table(acceptance, int(max(grid.ks)), grid.contexts[0], why)


def _analyse(run: _Run, cfg: ValidateConfig, points: list[Point], errors: list[dict], clocks: dict
             ) -> ValidationReport:
    summary, cal_hw, fitted = analysis.calibrate_run(points, run.hw, run.graphs,
                                                     f"dsdsim validate {run.model.name} on {run.device}", errors)
    summary["by_kind"] = analysis.by_kind(points)
    summary["by_measurement"] = analysis.by_measurement(points)
    spec_points = [p for p in points if p.measured_as == "spec_step"]
    pass_points = [p for p in points if p.measured_as == "pass"]
    g = run.grid
    tc = analysis.table_from_whole_steps(spec_points, run.acceptance, g.spec_batches, g.spec_ks, g.spec_contexts)
    if tc is None and run.op_points:                # no whole steps: the older sum-of-operators check, labelled
        tc = analysis.table_from_operator_sums(run.steps_bk, run.op_points, g.batches, g.ks, g.contexts[0],
                                               Setup(run.model, run.hw, run.deployment, run.drafter, None), cal_hw,
                                               run.acceptance)
    tc = _table(tc, run.acceptance, g, "nothing (no whole steps or operators measured)")
    tc["composition"] = analysis.composition(pass_points, run.op_points, slice_model(run.model), run.drafter, run.pc)
    data = {**run.header, "partial": False, "errors": errors, "clocks": clocks,
            "points": [p.to_json() for p in points], "summary": summary, "calibration": fitted,
            "calibrated_hardware": cal_hw.model_dump(mode="json", exclude_none=True), "table_check": tc}
    report = ValidationReport(data=data, points=points, calibrated_hardware=cal_hw)
    if cfg.output_dir is not None:
        report.paths = write_report(report, cfg.output_dir)
    return report


def reanalyse(report: str | Path, hardware, output_dir: Optional[str | Path] = None, acceptance=None
              ) -> ValidationReport:
    """Re-analyse a report's measurements with the current cost model, no re-measuring (no torch): every point is
    re-predicted from its operator records on ``hardware``, the same train / held-out halves are re-calibrated,
    and the K table is checked again on the measured whole steps. Writes report.json, summary.md, the plot and
    the calibrated spec to ``output_dir`` (the original report is left as it is)."""
    src = Path(report)
    data = json.loads(src.read_text(encoding="utf-8"))
    points = [Point.from_json(p) for p in data.get("points", [])]
    if not points or not all(p.ops for p in points):
        raise ValueError(f"{src}: its points carry no operator records (a report from an older dsdsim); "
                         "re-run dsdsim validate to measure them again")
    hw = load_hardware(hardware)
    graphs = bool(data.get("cuda_graphs", False))
    start = Calibrator.for_spec(hw, graphs).start
    for p, t in zip(points, Evaluator(points, hw, graphs).times(replace(start, step_overhead_s=0.0),
                                                               extra_kernels=False)):
        p.predicted_s = float(t)
    cal, summary = calibrate_points(points, hw, cuda_graphs=graphs)
    cal_hw = cal.calibrated_spec(hw, what=f"dsdsim validate --reanalyse {src.parent.name}", cuda_graphs=graphs)
    summary["by_kind"] = analysis.by_kind(points)
    summary["by_measurement"] = analysis.by_measurement(points)
    g = data["grid"]
    grid = replace(TINY_GRID, batches=tuple(g["batches"]), ks=tuple(g["ks"]), contexts=tuple(g["contexts"]),
                   spec_batches=tuple(g.get("spec_batches", ())), spec_ks=tuple(g.get("spec_ks", ())),
                   spec_contexts=tuple(g.get("spec_contexts", ())))
    acc = acceptance or default_acceptance()
    tc = analysis.table_from_whole_steps([p for p in points if p.measured_as == "spec_step"], acc,
                                         grid.spec_batches, grid.spec_ks, grid.spec_contexts)
    tc = _table(tc, acc, grid, "nothing (no whole steps in the report)")
    tc["composition"] = data.get("table_check", {}).get("composition", {"n": 0})
    out = {**data, "hardware": hw.name, "points": [p.to_json() for p in points], "summary": summary,
           "calibration": cal.fitted(), "calibrated_hardware": cal_hw.model_dump(mode="json", exclude_none=True),
           "table_check": tc,
           "reanalysed": {"date": _dt.date.today().isoformat(), "from": str(src),
                          "measured_on": data.get("date"), "note": "measurements unchanged; predictions, "
                          "calibration and the table check recomputed with the current cost model"}}
    rep = ValidationReport(data=out, points=points, calibrated_hardware=cal_hw)
    if output_dir is not None:
        rep.paths = write_report(rep, output_dir)
    return rep


def run_validate(model, hardware, device: str = "cpu", quick: bool = True, output_dir: str | Path = "validation",
                 show_progress: bool = False, progress_lines: bool = False, **kwargs) -> ValidationReport:
    """CLI entry point: validate with a rich progress bar on a terminal, or plain progress lines on stderr
    (``progress_lines``: a log file fills as the run goes); writes the report to ``output_dir``."""
    if not show_progress:
        return validate(model, hardware, device, quick, output_dir,
                        progress=_line_progress() if progress_lines else None, **kwargs)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task("validate", total=None)

        def cb(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what[:28])

        return validate(model, hardware, device, quick, output_dir, progress=cb, **kwargs)


def _line_progress(every_s: float = 5.0) -> ProgressFn:
    """A progress callback printing one line to stderr at most every ``every_s`` seconds, and at each stage."""
    import sys
    import time

    t0 = time.perf_counter()
    last = [-every_s, ""]

    def cb(done: int, total: int, what: str) -> None:
        now = time.perf_counter() - t0
        stage = what.split(" ")[0]
        if now - last[0] >= every_s or stage != last[1] or done >= total:
            print(f"  [{now:6.1f}s] {done}/{total} {what}", file=sys.stderr, flush=True)
            last[0], last[1] = now, stage

    return cb
