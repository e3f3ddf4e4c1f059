"""dsdsim list engines | show engine, and `calibrate --measurements`: engine specs and fitting one to your points."""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Optional, Sequence

from dsdsim.cli.app import list_app, show_app
from dsdsim.cli.command import Argument, echo
from dsdsim.cli.options import ShowFmt, ShowFormat
from dsdsim.cli.output import (check_fixed_format, check_writable, emit, show, with_progress, with_status,
                               write_atomic)
from dsdsim.errors import DsdsimError
from dsdsim.export.render import kv_table, to_json
from dsdsim.units import format_percent, median_abs


def term_value_text(t, value=None) -> str:
    """A term's value (or ``value`` in its unit): seconds as us/ms, kernel launches as a count."""
    from dsdsim.export.render import format_seconds
    from dsdsim.specs.engine import Unit

    v = t.value if value is None else value
    if t.unit is Unit.seconds:
        return format_seconds(v)
    return f"{v:g} {'eager ' if t.unit is Unit.eager_kernels else ''}kernels"


FITTED_TERMS_BEGIN = "<!-- fitted terms: written by scripts/regen_goldens.py from the shipped engine specs -->"
FITTED_TERMS_END = "<!-- end of fitted terms -->"


def fitted_terms_markdown() -> str:
    """The README's table of fitted engine terms, from the shipped specs: one row per fitted term (the file that
    defines it), the specs that use it, what it is, its value, sourced range and the train cases it was fitted on."""
    from dsdsim.fit.engine import term_origins
    from dsdsim.specs.catalog import engine_names, load_engine

    rows: dict[tuple[str, str], dict] = {}
    for stem in engine_names():
        spec = load_engine(stem)
        origins = term_origins(stem)
        for t in spec.terms:
            if t.verified.value != "fitted":
                continue
            row = rows.setdefault((origins.get(t.name, stem), t.name), {"term": t, "specs": []})
            row["specs"].append(stem)
    lines = ["| engine specs | term | what, where, per | value | range | cases |",
             "| --- | --- | --- | ---: | --- | ---: |"]
    for (_, name), row in sorted(rows.items()):
        t = row["term"]
        value = term_value_text(t) + (f" (**on its {t.on_bound} bound**)" if t.on_bound else "")
        who = t.component.value.replace("_", " ") + (f" ({', '.join(t.drafters)})" if t.drafters and len(
            t.drafters) <= 3 else "")
        lines.append(f"| {', '.join(row['specs'])} | {name} | {who}, {t.runs_on.value}, per {t.per.value.replace('_', ' ')} "
                     f"| {value} | {term_range_text(t)} | {len(t.cases or ())} |")
    return "\n".join(lines)


def term_range_text(t) -> str:
    from dsdsim.export.render import format_seconds
    from dsdsim.specs.engine import Unit

    lo, hi = t.range
    if t.unit is Unit.seconds:
        return f"{format_seconds(lo)} - {format_seconds(hi)}"
    return f"{lo:g} - {term_value_text(t, hi)}"


def prefill_text(spec) -> str:
    """How the serving simulation mixes prompts into steps on this engine (``EngineSpec.mixed_prefill``,
    ``chunked_prefill``, ``mla_chunked_prefill``): 'chunks mixed into decode steps' or 'prefill-first batches', the
    MLA rule, and where the spec states them the admission rule and the step's default limits."""
    mixed = spec.mixed_prefill is None or spec.mixed_prefill.value
    whole = spec.chunked_prefill is not None and not spec.chunked_prefill.value
    text = (("whole prompts mixed into decode steps, the queue stopping at one that does not fit" if whole
             else "chunks mixed into decode steps") if mixed else "prefill-first batches apart from decode steps")
    if spec.reserve_to_completion is not None and spec.reserve_to_completion.value:
        text += "; a request admitted with its whole sequence's blocks (never preempted)"
    if spec.max_running_requests is not None or spec.max_batched_tokens is not None:
        limits = [f"{lim.value:,} {what}" for lim, what in ((spec.max_running_requests, "requests"),
                                                            (spec.max_batched_tokens, "tokens")) if lim is not None]
        text += f"; at most {' and '.join(limits)} a step by default"
    mla = spec.mla_chunked_prefill
    if mla is not None and not mla.value:
        upto = f" through {mla.through}" if mla.through else ""
        text += f"; MLA models{upto}: whole prompts, prefill-first, no prefix cache"
    return text


def engine_summary(spec, source: Optional[str]) -> dict:
    """What `list engines` and `show engine` print (and their JSON): the range, the flags, every term."""
    g = spec.cuda_graphs
    ov = spec.overlap
    checked = spec.versions.checked_through if spec.versions is not None else None
    out = {"name": spec.name, "versions": spec.version_label, "label": spec.label, "source_file": source,
           "checked_through": checked,
           "overlap_plain": ov.plain.value, "overlap_speculative": ov.speculative.value,
           "overlap_speculative_drafters": list(ov.speculative_drafters) if ov.speculative_drafters else None,
           "dynamic_k_table": spec.supports_off_tier,
           "off_tier_drafts": bool(spec.off_tier_drafts and spec.off_tier_drafts.value),
           "prefill": prefill_text(spec),
           "cuda_graphs": {"capture_sizes": list(g.capture_sizes) if g.capture_sizes else None,
                           "padding": g.padding.value, "mode": g.mode.value,
                           "multiple_of_verify_tokens": g.multiple_of_verify_tokens, "draft_graphs": g.draft_graphs,
                           "piecewise_raw_sizes": g.piecewise_raw_sizes,
                           "speculative_capture_sizes": (list(g.speculative_capture_sizes)
                                                         if g.speculative_capture_sizes else None)},
           "draft_shape": spec.draft_shape.value,
           "terms": [{"name": t.name, "component": t.component.value, "runs_on": t.runs_on.value, "per": t.per.value,
                      "applies": t.applies.value, "drafters": list(t.drafters) if t.drafters else None,
                      "unit": t.unit.value, "value": t.value, "range": list(t.range),
                      "verified": t.verified.value, "fitted_cases": len(t.cases or ()), "on_bound": t.on_bound,
                      "mechanism": t.mechanism, "source": t.source} for t in spec.terms]}
    if spec.moe_kernels is not None:
        out["moe_kernels"] = {"by_generation": dict(spec.moe_kernels.by_generation),
                              "default": spec.moe_kernels.default}
    if spec.fit is not None:
        out["fit"] = {"date": spec.fit.date, "cases": len(spec.fit.cases),
                      "median_abs_residual": spec.fit.median_abs_residual,
                      "max_abs_residual": spec.fit.max_abs_residual}
    cal = spec.calibration
    if cal is not None:
        out["calibration"] = {"model": cal.model, "hardware": cal.hardware, "tp": cal.tp, "ep": cal.ep,
                              "drafter": cal.drafter, "base_engine": cal.base_engine, "points": len(cal.points),
                              "bandwidth_scale": cal.bandwidth_scale, "compute_scale": cal.compute_scale,
                              "launch_scale": cal.launch_scale, "engine_step_scale": cal.engine_step_scale,
                              "engine_token_scale": cal.engine_token_scale,
                              "loo_median_abs_error": cal.loo_median_abs_error,
                              "request_overhead_ms": cal.request_overhead_ms, "date": cal.date}
    return out


def calibration_text(c: dict) -> str:
    """A calibrated spec's one line: the deployment, its points and factors, the request overhead."""
    drafter = f", {c['drafter']}" if c["drafter"] else ""
    text = (f"{c['model']} on {c['hardware']} (tp {c['tp']}{drafter}) from {c['points']} points of "
            f"{c['base_engine']}, {c['date']}: bandwidth x{c['bandwidth_scale']:.3g}, compute x{c['compute_scale']:.3g}, "
            f"launch x{c['launch_scale']:.3g}, engine terms x{c['engine_step_scale']:.3g} per step and "
            f"x{c['engine_token_scale']:.3g} per token")
    if c["loo_median_abs_error"] is not None:
        text += f"; leave-one-out median {format_percent(c['loo_median_abs_error'])}"
    if c["request_overhead_ms"] is not None:
        text += f"; request overhead {c['request_overhead_ms']:.3g} ms"
    return text


@list_app.command("engines")
def list_engines(fmt: ShowFmt = ShowFormat.table) -> None:
    """Every known engine spec and the releases it covers (ENGINE@VERSION picks one): overlap of host work,
    CUDA-graph padding, its terms and how many are fitted. `dsdsim show engine vllm@0.10.1` shows one whole."""
    from dsdsim.export.text import Table

    from dsdsim.specs.catalog import engine_source, iter_engines

    rows = [(n, engine_summary(spec, engine_source(n))) for n, spec in iter_engines()]
    if fmt is ShowFormat.json:
        return emit(to_json([{"file": n, **r} for n, r in rows]), None)
    t = Table(title="Engines: --engine NAME is the current release line, NAME@VERSION the spec covering a release",
              caption="dsdsim show engine SPEC (or NAME@VERSION) for every term, its mechanism and source")
    for col, kw in (("spec", {"no_wrap": True}), ("releases", {"no_wrap": True}), ("host overlaps", {}),
                    ("K table", {}), ("CUDA graphs", {}), ("terms (fitted)", {}), ("train cases", {"justify": "right"}),
                    ("what", {"max_width": 44})):
        t.add_column(col, **kw)
    for n, r in sorted(rows, key=lambda x: (x[1]["name"], x[1]["versions"] == "-", x[0])):
        g = r["cuda_graphs"]
        pad = "every shape" if g["capture_sizes"] is None else f"{g['padding']} to {max(g['capture_sizes'])}"
        fitted = [term for term in r["terms"] if term["verified"] == "fitted"]
        bound = sum(1 for term in fitted if term["on_bound"])
        overlap = {(True, True): "plain, spec", (True, False): "plain", (False, True): "spec",
                   (False, False): "none"}[(r["overlap_plain"], r["overlap_speculative"])]
        terms = f"{len(r['terms'])} ({len(fitted)}" + (f", {bound} on a bound)" if bound else ")")
        t.add_row(n if n == r["name"] or n.startswith(r["name"] + "-") else f"{n} ({r['name']})", r["versions"] + (f" (checked to {r['checked_through']})" if r.get("checked_through") else ""), overlap,
                  _yes(r["dynamic_k_table"]), pad, terms,
                  str(r["fit"]["cases"]) if "fit" in r else "0", r["label"])
    show(t)


def _drafters_text(drafters) -> str:
    """' (dflash, dspark)' for the drafter kinds paying a term, ' (not dflash)' where that is shorter."""
    from dsdsim.specs.drafters.base import DrafterKind

    if not drafters:
        return ""
    others = [k.value for k in DrafterKind if k.value not in drafters]
    return f" (not {', '.join(others)})" if len(others) < len(drafters) else f" ({', '.join(drafters)})"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


@show_app.command("engine")
def show_engine(name: str = Argument(..., help="An engine (vllm: its current release line), ENGINE@VERSION "
                                     "(vllm@0.10.1), a spec name from `dsdsim list engines`, or a YAML path"),
                fmt: ShowFmt = ShowFormat.table) -> None:
    """One engine spec: the releases it covers, every term (what it is in the engine, host or GPU, what it scales
    with, its value and sourced range, whether fitted and on a bound), overlap, CUDA graphs, the fit."""
    from dsdsim.export.text import Group, Table

    from dsdsim.specs.catalog import engine_source, load_engine

    spec = load_engine(name)
    summary = engine_summary(spec, engine_source(name))
    if fmt is ShowFormat.json:
        data = spec.model_dump(mode="json", exclude_none=True)
        data["source_file"] = summary["source_file"]
        for term, row in zip(data.get("terms", []), summary["terms"]):
            term["on_bound"] = row["on_bound"]
        return emit(to_json(data), None)
    head = {k: v for k, v in summary.items() if k not in ("terms", "cuda_graphs", "moe_kernels", "fit",
                                                          "calibration")}
    if not summary["overlap_speculative"]:     # the drafters async scheduling would cover, were it on
        head.pop("overlap_speculative_drafters", None)
    if "moe_kernels" in summary:
        mk = summary["moe_kernels"]
        head["moe_kernels"] = ", ".join([f"{fam} on {gen}" for gen, fam in mk["by_generation"].items()]
                                        + [f"{mk['default']} elsewhere" if mk["by_generation"] else
                                           f"{mk['default']} on every GPU"])
    if "calibration" in summary:
        head["calibration"] = calibration_text(summary["calibration"])
    if "fit" in summary:
        f = summary["fit"]
        what = "measured point" if "calibration" in summary else "train case"
        head["fit"] = (f"{f['date']}: {f['cases']} {what}{'' if f['cases'] == 1 else 's'}"
                       f"{'' if 'calibration' in summary else ' on this range'}, median |residual| "
                       f"{format_percent(f['median_abs_residual'])}, max {format_percent(f['max_abs_residual'])}")
    lists = ("capture_sizes", "speculative_capture_sizes")
    head["cuda_graphs"] = ", ".join(f"{k} {v}" for k, v in summary["cuda_graphs"].items() if k not in lists)
    sizes = summary["cuda_graphs"]["capture_sizes"]
    head["capture_sizes"] = "every shape" if not sizes else f"{len(sizes)} sizes, {sizes[0]}..{sizes[-1]}"
    spec_sizes = summary["cuda_graphs"]["speculative_capture_sizes"]
    if spec_sizes:
        head["speculative_capture_sizes"] = f"{len(spec_sizes)} sizes, {spec_sizes[0]}..{spec_sizes[-1]}"
    t = Table(title=f"terms of {summary['source_file'] or spec.name}")
    for col in ("term", "component", "runs on", "per", "steps", "value", "range", "verified"):
        t.add_column(col, justify="right" if col in ("value", "range") else "left", no_wrap=col == "term")
    for term in spec.terms:
        rng = term_range_text(term)
        verified = term.verified.value + (f" ({len(term.cases)} cases)" if term.cases else "")
        if term.on_bound:
            verified += f", ON ITS {term.on_bound.upper()} BOUND"
        steps = term.applies.value + _drafters_text(term.drafters)
        t.add_row(term.name, term.component.value, term.runs_on.value, term.per.value, steps,
                  term_value_text(term), rng, verified)
    mechanisms = Table(title="what each term is (sources: --format json)", show_header=False, box=False)
    mechanisms.add_column("term", no_wrap=True)
    mechanisms.add_column("mechanism")
    for term in spec.terms:
        mechanisms.add_row(term.name, term.mechanism)
    show(Group(kv_table(f"Engine {spec.name} {spec.version_label}", head), t, mechanisms))


def figure_text(unit: str, value: float) -> str:
    """A calibrated figure in its unit: a fraction, seconds, or a factor on the release's terms."""
    from dsdsim.export.render import format_seconds

    if unit == "s":
        return format_seconds(value)
    if unit == "x":
        return f"x{value:.2f}"
    return f"{value:.3f}"


def _spread(sigma: float) -> str:
    return f"+-{format_percent(math.exp(sigma) - 1, 0)}"


def _resolved(model: str, hardware: str, deployment, drafter: str, engine: str):
    from dsdsim.specs.setup import resolve

    return resolve(model, hardware, deployment, None if drafter in ("", "none") else drafter, engine)


def calibrate_measurements(measurements: Sequence[Path], model: str, hardware: str, deployment, drafter: str,
                           engine: str, context: int, name: Optional[str], output: Path, date: Optional[str],
                           replay: bool = False) -> None:
    """The `calibrate --measurements` path: read, fit the figures (dsdsim.fit.shape), print them beside their priors
    and bounds and every point measured vs fitted with its leave-one-out error, write NAME.yaml. ``replay``: then
    refit through the serving simulation (dsdsim.fit.replay) and print each run measured vs replayed."""
    from dsdsim.export.text import Group

    from dsdsim.fit.points import read_measurements
    from dsdsim.fit.shape import ShapeCalibration
    from dsdsim.specs.catalog import is_shipped_engine
    from dsdsim.specs.engine import engine_yaml

    if not name:
        raise DsdsimError("calibrate --measurements needs --name NAME (the engine spec it writes)")
    if is_shipped_engine(name):
        raise DsdsimError(f"--name {name!r} is a shipped engine spec; choose another name (e.g. {name}-mine)")
    check_writable(output)
    runs = None
    if replay:
        from dsdsim.fit.replay import replayable_runs

        runs = replayable_runs(measurements, context)
        if not runs:
            raise DsdsimError("--replay: none of the --measurements files holds its requests; save the runs with "
                              "vllm bench serve --save-result --save-detailed (input_lens, output_lens)")
    points = read_measurements(measurements, context)
    setup = _resolved(model, hardware, deployment, drafter, engine)
    if setup.engine is not None and setup.engine.calibration is not None:
        raise DsdsimError(f"--engine {engine} is itself a calibrated spec; calibrate from the release it was "
                          f"based on (--engine {setup.engine.calibration.base_engine})")
    if any(p.k > 0 for p in points) and setup.drafter is None:
        raise DsdsimError("the points include K > 0 but --drafter is none: name the drafter they were measured with")
    cal = with_status(f"fitting 5 figures to {len(points)} points (and {len(points)} leave-one-out fits)",
                      lambda: ShapeCalibration(setup).fit(points))
    fit = overhead = None
    if runs:
        from dsdsim.fit.replay import ITERATIONS, fit_request_overhead, fit_through_replay

        timed = sum(r.ttft_p50_ms is not None for r in runs)

        def request_overhead(c):     # the runs' TTFT outside the steps, at calibration c's figures (or None)
            return with_status(f"replaying {timed} runs for their TTFT", lambda: fit_request_overhead(
                c.fitted_setups(), runs))

        first = request_overhead(cal) if timed else None   # the TPOT replays' clients wait for it too
        ov = first.overhead_ms / 1e3 if first is not None else 0.0
        fit = with_progress(f"replaying {len(runs)} runs x {ITERATIONS + 1} rounds",
                            lambda progress: fit_through_replay(cal, points, runs, progress=progress,
                                                                request_overhead_s=ov))
        cal = fit.calibration
        overhead = request_overhead(cal) if timed else None     # again, at the figures kept
    files = [Path(m).name for m in measurements]
    corrected = fit is not None and fit.kept > 0          # the figures kept were fitted to corrected targets
    spec = cal.engine_spec(name, files, date or dt.date.today().isoformat(), replayed=corrected,
                           request_overhead_ms=overhead.overhead_ms if overhead is not None else None)
    show(Group(_figures_table(cal, len(points)), _points_table(cal, name, setup, replayed=corrected)))
    if fit is not None:
        show(_replay_table(fit))
    if overhead is not None:
        show(_overhead_table(overhead))
    elif runs:
        echo("warning: no replayed run reports a TTFT (median_ttft_ms or ttfts): the spec prices no request overhead",
             err=True)
    loo = [abs(x) for x in cal.loo_error_]
    prior = [abs(f / p.itl_ms - 1) for f, p in zip(cal.prior_ms_, cal.points_)]
    show(f"leave-one-out |error|: median {format_percent(median_abs(loo))}, max {format_percent(max(loo))} "
         f"(the shipped figures: median {format_percent(median_abs(prior))}, max {format_percent(max(prior))}): "
         f"expect the leave-one-out "
         "error at the (batch, K) points you did not measure" +
         (" (the steady model, against the replay-corrected targets)" if corrected else ""))
    for f in cal.figures_:
        if f.on_bound:
            echo(f"warning: {f.kind.label} sits on its {f.on_bound} bound ({figure_text(f.kind.unit, f.value)}): "
                 "the points ask for more than its physical range; check the hardware (dsdsim probe) or the "
                 "points' batch sizes and acceptance lengths", err=True)
    write_atomic(output, engine_yaml(spec))
    echo(f"wrote {output} (use it with --engine {output}: predict, explain, simulate and plan take it)", err=True)


def _figures_table(cal, n: int):
    from dsdsim.export.text import Table

    t = Table(title=f"calibrated figures: maximum a posteriori on {n} points (prior: the shipped figure; soft-L1 "
                    "loss on log step time)")
    for col, kw in (("figure", {"no_wrap": True}), ("prior", {"justify": "right"}), ("fitted", {"justify": "right"}),
                    ("bounds", {"justify": "right"}), ("change", {"justify": "right"}), ("pinned by the points", {})):
        t.add_column(col, **kw)
    for f in cal.figures_:
        u = f.kind.unit
        change = format_percent(f.factor - 1, signed=True) + (f", ON ITS {f.on_bound.upper()} BOUND"
                                                               if f.on_bound else "")
        pinned = (f"{_spread(f.posterior_sigma)} (prior {_spread(f.kind.sigma)})" if f.seen else
                  "not seen by these points: stays at its prior")
        t.add_row(f.kind.label, figure_text(u, f.prior), figure_text(u, f.value),
                  f"{figure_text(u, f.low)} - {figure_text(u, f.high)}", change, pinned)
    return t


def _replay_table(fit):
    from dsdsim.export.text import Table

    from dsdsim.fit.replay import KEEP_RULE

    kept = "the steady fit's" if fit.kept == 0 else f"those of round {fit.kept}"
    t = Table(title="the runs replayed through the serving simulation (their requests, client limit and arrivals): "
                    f"mean TPOT, measured vs replayed at the steady fit's figures and at the figures kept ({kept}: "
                    f"{KEEP_RULE})")
    for col in ("run", "batch", "K", "measured ms", "steady fit ms", "error", "kept ms", "error"):
        t.add_column(col, justify="left" if col == "run" else "right")
    first, last = fit.rounds[0], fit.final
    for run, s0, s1, e0, e1 in zip(fit.runs, first.simulated_ms, last.simulated_ms, fit.errors(0), fit.errors()):
        p = run.point
        t.add_row(run.name, str(p.batch), str(p.k), f"{p.itl_ms:.3f}", f"{s0:.3f}", format_percent(e0, signed=True),
                  f"{s1:.3f}", format_percent(e1, signed=True))
    return t


def _overhead_table(fit):
    from dsdsim.export.text import Group, Table
    from dsdsim.fit.replay import OVERHEAD_RULE

    t = Table(title=f"request overhead {fit.overhead_ms:.3g} ms, written to the spec: TTFT p50, measured vs "
                    "replayed without it and with it")
    for col in ("run", "batch", "K", "measured ms", "without ms", "error", "with ms", "error", "read"):
        t.add_column(col, justify="left" if col == "run" else "right")
    for run, s0, s1, read in zip(fit.runs, fit.without_ms, fit.with_ms, fit.read_from):
        m = run.ttft_p50_ms
        t.add_row(run.name, str(run.point.batch), str(run.point.k), f"{m:.2f}", f"{s0:.2f}",
                  format_percent(s0 / m - 1, signed=True) if m else "-", f"{s1:.2f}",
                  format_percent(s1 / m - 1, signed=True) if m else "-", "yes" if read else "")
    return Group(t, f"request overhead: the time a request spends outside the GPU steps (API server, tokenisation, "
                    f"hand-over, streaming), which the simulation adds to its way to the scheduler; read as "
                    f"{OVERHEAD_RULE}")


def _points_table(cal, name: str, setup, replayed: bool = False):
    from dsdsim.export.text import Table

    title = (f"engine {name}: {len(cal.points_)} points (base {setup.engine.name if setup.engine else 'none'}"
             f", {setup.model.name} on {setup.hardware.name}, tp {setup.deployment.tp})")
    if replayed:
        title += "; the steady model against the replayed runs' corrected targets"
    t = Table(title=title)
    for col in ("batch", "K", "context", "AL", "target ITL ms" if replayed else "measured ITL ms", "shipped ITL ms",
                "fitted ITL ms", "error", "leave-one-out error"):
        t.add_column(col, justify="right")
    for p, f0, f, loo in zip(cal.points_, cal.prior_ms_, cal.fitted_ms_, cal.loo_error_):
        t.add_row(str(p.batch), str(p.k), str(p.context), f"{p.acceptance_length:.2f}", f"{p.itl_ms:.3f}",
                  f"{f0:.3f}", f"{f:.3f}", format_percent(f / p.itl_ms - 1, signed=True),
                  format_percent(loo, signed=True))
    return t


def calibrate_plan(n: int, model: str, hardware: str, deployment, drafter: str, engine: str, context: int,
                   max_batch: Optional[int], output_len: int, output: Optional[Path]) -> None:
    """The `calibrate --plan N` path: which N (batch, K) points to measure (dsdsim.fit.shape.plan_points) and the
    command lines that measure them (dsdsim.export.bench_plan)."""
    from dsdsim.export.bench_plan import bench_runs
    from dsdsim.export.text import Group, Table
    from dsdsim.fit.shape import FIGURES, StepModel, candidate_grid, plan_points
    from dsdsim.policy.acceptance import default_for

    if output is not None:
        check_fixed_format(output, "a plan (JSON, or a shell script)", (".json", ".sh"))
        check_writable(output)
    setup = _resolved(model, hardware, deployment, drafter, engine)
    family = setup.engine.name if setup.engine is not None else "vllm"
    family = setup.engine.calibration.base_engine if setup.engine is not None and setup.engine.calibration else family
    target = "sglang" if family.startswith("sglang") else "trtllm" if family.startswith("trtllm") else "vllm"
    max_k = min(8, setup.drafter.max_k) if setup.drafter is not None else 0
    import numpy as np

    from dsdsim.export.bench_plan import input_length

    sm = StepModel(setup)
    b, k, c = candidate_grid(sm, max_k, context, max_batch)
    example = default_for(setup.drafter)
    tau = (lambda kk: float(example.tau(kk))) if setup.drafter is not None else (lambda kk: 1.0)
    # the runs are serving benchmarks at these lengths: their steps also run the prefills of new requests
    lengths = (np.array([tau(int(x)) for x in k]), np.full(b.shape, float(input_length(context, output_len))),
               np.full(b.shape, float(output_len)))
    plan = plan_points(sm, n, b, k, c, tau=lengths[0], input_len=lengths[1], output_len=lengths[2])
    servers = bench_runs(setup, plan.points, tau, target)
    runs = {(r.batch, r.k): r for s in servers for r in s.runs}
    t = Table(title=f"measure these {len(plan.points)} points: {setup.model.name} on {setup.hardware.name}, tp "
                    f"{setup.deployment.tp}, {setup.drafter.label if setup.drafter else 'no drafter'}, context "
                    f"{context} ({plan.candidates} feasible candidates)")
    for col in ("#", "batch", "K", "mean step ms (shipped)", "pins most", "prompts", "about"):
        t.add_column(col, justify="left" if col == "pins most" else "right")
    label = {f.name: f.label for f in FIGURES}
    for i, p in enumerate(plan.points, start=1):
        r = runs[(p.batch, p.k)]
        t.add_row(str(i), str(p.batch), str(p.k), f"{p.step_ms:.2f}", label[p.informs], str(r.num_prompts),
                  f"{r.seconds / 60:.1f} min")
    lines = [f"rule: {plan.rule}",
             "how well they pin each figure (log-space spread, before -> after): " + "; ".join(
                 f"{f.name} {_spread(plan.prior_sigma[f.name])} -> {_spread(plan.posterior_sigma[f.name])}"
                 for f in FIGURES)]
    script = []
    for srv in servers:
        script.append(f"# server {'without speculation' if srv.k == 0 else f'with K = {srv.k}'}")
        if srv.config is not None:                     # the file the server reads, written first
            script += [f"cat > {srv.config[0]} <<'EOF'", srv.config[1].rstrip("\n"), "EOF"]
        script.append(srv.server)
        script += [r.command for r in srv.runs]
    calib = (f"dsdsim calibrate --measurements {' '.join(r.result_file for s in servers for r in s.runs)} "
             f"-m {setup.model.name} -g {setup.hardware.name}"
             + (f" --tp {setup.deployment.tp}" if setup.deployment.tp > 1 else "")
             + (f" -d {setup.drafter.label}" if setup.drafter is not None else " -d none")
             + f" -e {engine} --name my-{family} -o my-{family}.yaml")
    if output is not None:
        if output.suffix.lower() == ".json":
            data = {"rule": plan.rule, "model": setup.model.name, "hardware": setup.hardware.name,
                    "tp": setup.deployment.tp, "context": context, "engine": target,
                    "points": [{"batch": p.batch, "k": p.k, "context": p.context, "step_ms": p.step_ms,
                                "pins": p.informs, "num_prompts": runs[(p.batch, p.k)].num_prompts,
                                "result_file": runs[(p.batch, p.k)].result_file} for p in plan.points],
                    "servers": [{"k": s.k, "server": s.server, "runs": [r.command for r in s.runs],
                                 **({"config_file": {"name": s.config[0], "text": s.config[1]}} if s.config else {})}
                                for s in servers],
                    "prior_sigma": plan.prior_sigma, "posterior_sigma": plan.posterior_sigma, "then": calib}
            write_atomic(output, to_json(data) + "\n")
        else:
            write_atomic(output, "#!/usr/bin/env bash\n# dsdsim calibrate --plan: start each server, wait until it "
                                 "serves, run its benchmarks, stop it\n" + "\n".join(script) + f"\n# then\n# {calib}\n")
        echo(f"wrote {output}", err=True)
    show(Group(t, "\n".join(lines)))
    show("run them (one server per K; start it, wait until it serves, run its benchmarks, stop it):\n"
         + "\n".join(script) + f"\nthen:\n{calib}")
