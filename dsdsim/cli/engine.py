"""dsdsim list engines | show engine, and `calibrate --measurements`: engine specs and fitting one to your points."""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Optional, Sequence

import typer

from dsdsim.cli.app import list_app, show_app
from dsdsim.cli.options import ShowFmt, ShowFormat
from dsdsim.cli.output import check_writable, console, emit, show, with_status, write_atomic
from dsdsim.errors import DsdsimError
from dsdsim.export.render import kv_table, to_json


def engine_summary(spec, source: Optional[str]) -> dict:
    from dsdsim.specs.engine import FITTABLE

    out = {"name": spec.name, "description": spec.description, "source_file": source}
    for key in FITTABLE:
        f = spec.figure(key)
        out[key] = {"value": f.value, "verified": f.verified.value, "source": f.source}
    out["host_overlaps_plain"] = spec.host_overlaps_plain.value
    out["host_overlaps_speculative"] = spec.host_overlaps_speculative.value
    g = spec.cuda_graphs
    out["cuda_graphs"] = {"capture_sizes": list(g.capture_sizes) if g.capture_sizes else None,
                          "padding": g.padding.value, "draft_graphs": g.draft_graphs}
    out["draft_shape"] = spec.draft_shape.value
    if spec.fit is not None:
        out["fit"] = {"date": spec.fit.date, "cases": len(spec.fit.cases),
                      "median_abs_residual": spec.fit.median_abs_residual,
                      "max_abs_residual": spec.fit.max_abs_residual}
    return out


@list_app.command("engines")
def list_engines(fmt: ShowFmt = ShowFormat.table) -> None:
    """Every known engine spec: host time, speculative costs, CUDA-graph padding, and whether fitted."""
    from rich.table import Table

    from dsdsim.specs.catalog import engine_names, engine_source, load_engine

    rows = [engine_summary(load_engine(n), engine_source(n)) for n in engine_names()]
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    t = Table(title="Engines (dsdsim list engines; times per step)")
    for col in ("name", "host", "per seq", "overlap plain/spec", "spec fixed", "per draft pass", "rejection/token",
                "graph padding", "fitted on"):
        t.add_column(col, justify="left" if col in ("name", "overlap plain/spec", "graph padding", "fitted on")
                     else "right")
    for r in rows:
        us = {k: f"{r[k]['value'] * 1e6:.1f} us" for k in ("host_step_s", "host_per_sequence_s", "spec_fixed_s",
                                                          "draft_pass_s", "rejection_per_token_s")}
        g = r["cuda_graphs"]
        pad = "every shape" if g["capture_sizes"] is None else f"{g['padding']} to {max(g['capture_sizes'])}"
        t.add_row(r["name"], us["host_step_s"], us["host_per_sequence_s"],
                  f"{'yes' if r['host_overlaps_plain'] else 'no'}/{'yes' if r['host_overlaps_speculative'] else 'no'}",
                  us["spec_fixed_s"], us["draft_pass_s"], us["rejection_per_token_s"], pad,
                  f"{r['fit']['cases']} cases" if "fit" in r else "-")
    show(t)


@show_app.command("engine")
def show_engine(name: str = typer.Argument(..., help="An engine name (dsdsim list engines) or a YAML path"),
                fmt: ShowFmt = ShowFormat.table) -> None:
    """One engine spec: every figure with its source, CUDA-graph capture sizes, and the fit's provenance."""
    from dsdsim.specs.catalog import engine_source, load_engine

    spec = load_engine(name)
    if fmt is ShowFormat.json:
        data = spec.model_dump(mode="json", exclude_none=True)
        data["source_file"] = engine_source(name)
        return emit(to_json(data), None)
    data = engine_summary(spec, engine_source(name))
    flat = {k: (f"{v['value']:.4g} s ({v['verified']}: {v['source']})" if isinstance(v, dict) and "value" in v else v)
            for k, v in data.items()}
    show(kv_table(f"Engine {spec.name}", flat))


def calibrate_measurements(measurements: Sequence[Path], model: str, hardware: str, deployment, drafter: str,
                           engine: str, context: int, name: Optional[str], output: Path, date: Optional[str]) -> None:
    """The `calibrate --measurements` path: read, fit engine figures, print per point, write NAME.yaml."""
    from rich.table import Table

    from dsdsim.calibrate_engine import EngineCalibration, read_measurements
    from dsdsim.specs.catalog import is_shipped_engine
    from dsdsim.specs.engine import engine_yaml

    if not name:
        raise DsdsimError("calibrate --measurements needs --name NAME (the engine spec it writes)")
    if is_shipped_engine(name):
        raise DsdsimError(f"--name {name!r} is a shipped engine spec; choose another name (e.g. {name}-mine)")
    check_writable(output)
    points = read_measurements(measurements, context)
    cal = with_status(f"fitting engine {name} to {len(points)} points",
                      lambda: EngineCalibration(model, hardware, engine, deployment, drafter).fit(points))
    spec = cal.engine_spec(name, [Path(m).name for m in measurements], date or dt.date.today().isoformat())
    t = Table(title=f"engine {name}: fitted on {len(points)} points (base {cal._setup.engine.name}, "
                    f"{cal._setup.model.name} on {cal._setup.hardware.name})")
    for col in ("batch", "K", "context", "AL", "measured ITL ms", "fitted ITL ms", "error", "leave-one-out error"):
        t.add_column(col, justify="right")
    for p, f, loo in zip(points, cal.fitted_ms_, cal.loo_error_):
        t.add_row(str(p.batch), str(p.k), str(p.context), f"{p.acceptance_length:.2f}", f"{p.itl_ms:.3f}",
                  f"{f:.3f}", f"{100 * (f / p.itl_ms - 1):+.1f}%", f"{100 * loo:+.1f}%")
    con = console()
    con.print(t)
    loo = [abs(x) for x in cal.loo_error_]
    con.print(f"leave-one-out |error|: median {100 * sorted(loo)[len(loo) // 2]:.1f}%, max {100 * max(loo):.1f}%")
    con.print("fitted: " + ", ".join(f"{k}={v * 1e6:.1f} us" for k, v in spec.model_dump().items()
                                     if k in cal.values_ for v in [spec.figure(k).value]))
    write_atomic(output, engine_yaml(spec))
    typer.echo(f"wrote {output} (use it with --engine {output})", err=True)
