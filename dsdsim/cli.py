"""The `dsdsim` command line: thin commands over the public API.

Each command builds its inputs, calls one library function and formats the result. Bad input ends with one
line on stderr naming the problem and the fix, exit code 2, no traceback, and no file written half-way.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from dsdsim.errors import DsdsimError

app = typer.Typer(
    name="dsdsim", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="How many draft tokens to speculate at each batch size: an analytical roofline simulator and K-policy "
         "designer for speculative decoding. Start with `dsdsim predict`.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
list_app = typer.Typer(help="List the shipped (and your own) hardware and model specs.", no_args_is_help=True)
show_app = typer.Typer(help="Show one spec in detail (table, or --format json).", no_args_is_help=True)
plot_app = typer.Typer(help="Draw pictures (needs matplotlib: pip install 'dsdsim[plot]').", no_args_is_help=True)
app.add_typer(list_app, name="list")
app.add_typer(show_app, name="show")
app.add_typer(plot_app, name="plot")


class ShowFormat(str, Enum):
    table = "table"
    json = "json"


SPECS_DIR_HELP = "Extra folder of your own specs (YAML hardware files, config.json models); also DSDSIM_SPECS_DIRS."


@app.callback()
def _root(specs_dir: Optional[List[Path]] = typer.Option(None, "--specs-dir", help=SPECS_DIR_HELP)) -> None:
    from dsdsim.specs.catalog import add_specs_dir

    for d in specs_dir or []:
        add_specs_dir(d)


# --- output helpers ---------------------------------------------------------------------------------


def _console():
    from rich.console import Console

    return Console(width=max(140, int(os.environ.get("COLUMNS", "0") or 0)), highlight=False)


def check_writable(path: Optional[Path]) -> None:
    """Fail early (before any work) when an output path cannot be written."""
    if path is None:
        return
    parent = path.expanduser().resolve().parent
    if path.exists() and path.is_dir():
        raise DsdsimError(f"output path {path} is a directory; give a file name")
    if not parent.is_dir():
        raise DsdsimError(f"cannot write {path}: folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK):
        raise DsdsimError(f"cannot write {path}: folder {parent} is not writable; choose another path")


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: never a half-written output."""
    path = path.expanduser()
    check_writable(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.resolve().parent))
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        write_atomic(output, text if text.endswith("\n") else text + "\n")
        typer.echo(f"wrote {output}", err=True)


def to_json(data) -> str:
    return json.dumps(data, indent=2, default=_json_default)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Enum):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# --- list / show --------------------------------------------------------------------------------------


@list_app.command("models")
def list_models(fmt: ShowFormat = typer.Option(ShowFormat.table, "--format", help="table or json")) -> None:
    """Every known model: family, parameters, active parameters, attention pattern, KV bytes per token."""
    from dsdsim.report import model_summary
    from dsdsim.specs.catalog import iter_models
    from dsdsim.units import format_count, format_si

    rows = [model_summary(m) for m in iter_models()]
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    from rich.table import Table

    t = Table(title="Models (dsdsim list models)")
    for col in ("name", "family", "params", "active", "layers", "attention", "MoE", "KV/token (bf16)"):
        t.add_column(col, justify="right" if col in ("params", "active", "layers", "KV/token (bf16)") else "left")
    for r in rows:
        moe = f"{r['num_experts']}e top-{r['experts_per_token']}" if r["num_experts"] else "dense"
        if r["shared_experts"]:
            moe += f" +{r['shared_experts']} shared"
        t.add_row(r["name"], r["family"], format_count(r["params_total"]), format_count(r["params_active"]),
                  str(r["num_layers"]), r["attention"], moe, format_si(r["kv_bytes_per_token"], "B"))
    _console().print(t)


@list_app.command("hardware")
def list_hardware(fmt: ShowFormat = typer.Option(ShowFormat.table, "--format", help="table or json")) -> None:
    """Every known accelerator: memory, bandwidth, dense bf16 peak, ridge point."""
    from dsdsim.report import hardware_summary
    from dsdsim.specs.catalog import iter_hardware
    from dsdsim.units import format_si

    rows = [hardware_summary(h) for h in iter_hardware()]
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    from rich.table import Table

    t = Table(title="Hardware (dense peaks; dsdsim list hardware)")
    for col in ("name", "memory", "bandwidth", "bf16 peak", "fp8 peak", "ridge bf16", "link (1 dir)", "description"):
        t.add_column(col, justify="left" if col in ("name", "description") else "right")
    for r in rows:
        peaks = r["peak_flops_per_s"]
        ridge = r["ridge_point_flop_per_byte"].get("bf16")
        t.add_row(r["name"], format_si(r["memory_bytes"], "B"), format_si(r["memory_bandwidth_bytes_per_s"], "B/s"),
                  format_si(peaks["bf16"], "FLOP/s") if "bf16" in peaks else "-",
                  format_si(peaks["fp8"], "FLOP/s") if "fp8" in peaks else "-",
                  f"{ridge:.0f} FLOP/B" if ridge else "-", format_si(r["link_bandwidth_bytes_per_s"], "B/s"),
                  r["description"])
    _console().print(t)


@show_app.command("model")
def show_model(name: str = typer.Argument(..., help="A model name (dsdsim list models) or a path to a config.json"),
               fmt: ShowFormat = typer.Option(ShowFormat.table, "--format", help="table or json")) -> None:
    """One model: structure, parameter counts and KV-cache bytes per token, as dsdsim understood the config."""
    from dsdsim.report import model_summary
    from dsdsim.specs.catalog import load_model

    m = load_model(name)
    data = model_summary(m)
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    _kv_table(f"Model {m.name}", data)


@show_app.command("hardware")
def show_hardware(name: str = typer.Argument(..., help="A hardware name (dsdsim list hardware) or a YAML/JSON path"),
                  fmt: ShowFormat = typer.Option(ShowFormat.table, "--format", help="table or json")) -> None:
    """One accelerator: capacities, dense peaks per dtype, ridge points, efficiencies and overheads."""
    from dsdsim.report import hardware_summary
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(name)
    data = hardware_summary(hw)
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    _kv_table(f"Hardware {hw.name}", data)


def _kv_table(title: str, data: dict) -> None:
    from rich.table import Table

    from dsdsim.units import format_si

    t = Table(title=title, show_header=False)
    t.add_column("field")
    t.add_column("value")
    for k, v in data.items():
        if isinstance(v, dict):
            v = ", ".join(f"{a}={format_si(b) if isinstance(b, float) else b}" for a, b in v.items())
        elif isinstance(v, float) and ("bytes" in k or "flops" in k):
            v = format_si(v, "B" if "bytes" in k else "FLOP")
        elif isinstance(v, int) and k.startswith("params"):
            v = f"{v:,}"
        t.add_row(k, str(v))
    _console().print(t)


# --- explain ------------------------------------------------------------------------------------------


DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DRAFTER = "eagle3"


def deployment_from_options(tp: int, ep: int, dtype: Optional[str], kv_dtype: str, expert_overlap: float,
                            eager: bool = False, memory_utilization: float = 0.9):
    from dsdsim.specs.deployment import Deployment
    from dsdsim.units import parse_dtype

    if tp < 1 or ep < 1:
        raise DsdsimError(f"--tp and --ep must be >= 1 (got tp={tp}, ep={ep})")
    if not 0.0 <= expert_overlap < 1.0:
        raise DsdsimError(f"--expert-overlap must be in [0, 1), got {expert_overlap}")
    if not 0.0 < memory_utilization <= 1.0:
        raise DsdsimError(f"--memory-utilization must be in (0, 1], got {memory_utilization}")
    try:
        return Deployment(tp=tp, ep=ep, dtype=parse_dtype(dtype) if dtype else None, kv_dtype=parse_dtype(kv_dtype),
                          expert_overlap=expert_overlap, cuda_graphs=not eager,
                          memory_utilization=memory_utilization)
    except ValueError as exc:
        raise DsdsimError(str(exc).splitlines()[0]) from None


@app.command()
def explain(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Target model name or config.json path"),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-g", help="Accelerator name or spec path"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs (weights and heads split tp ways)"),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel groups inside the tp GPUs (must divide tp)"),
    drafter: Optional[str] = typer.Option(DEFAULT_DRAFTER, "--drafter", "-d",
                                          help="eagle3 | eagle | mtp | medusa | ngram | draft-model:MODEL | "
                                               "self-spec:KV_BUDGET"),
    batch: int = typer.Option(1, "--batch", "-b", help="Sequences in the step (batch size B)"),
    k: int = typer.Option(3, "--k", "-k", help="Draft tokens K (0 = plain decoding)"),
    context: int = typer.Option(1024, "--context", "-c", help="Tokens already in each sequence's KV cache"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Weight format (default: the checkpoint's)"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV-cache format"),
    expert_overlap: float = typer.Option(0.0, "--expert-overlap",
                                         help="MoE: share of a token's experts reused by the next token of the "
                                              "same sequence (0 = independent routing)"),
    eager: bool = typer.Option(False, "--eager", help="No CUDA graphs: eager per-kernel launch cost"),
    fmt: ShowFormat = typer.Option(ShowFormat.table, "--format", help="table or json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout"),
) -> None:
    """Per-operator breakdown of one speculative step: FLOPs, bytes, intensity, time, what bounds it."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.report import explain_dict

    check_writable(output)
    if batch < 1:
        raise DsdsimError(f"--batch must be >= 1, got {batch}")
    if k < 0:
        raise DsdsimError(f"--k must be >= 0, got {k}")
    if context < 0:
        raise DsdsimError(f"--context must be >= 0, got {context}")
    dep = deployment_from_options(tp, ep, dtype, kv_dtype, expert_overlap, eager)
    d = None if (drafter in (None, "", "none") or k == 0) else drafter
    step = simulate_step(model, hardware, dep, d, batch, k, context)
    data = explain_dict(step)
    if fmt is ShowFormat.json:
        return emit(to_json(data), output)
    if output is not None:
        raise DsdsimError("--output with the table format is not supported; add --format json")
    _print_explain(data)


def _print_explain(data: dict) -> None:
    from rich.table import Table

    from dsdsim.units import format_si

    con = _console()
    dep = data["deployment"]
    con.print(f"[bold]{data['model']}[/bold] on {data['hardware']} (tp {dep['tp']}, ep {dep['ep']}, {dep['dtype']} "
              f"weights, {dep['kv_dtype']} KV) — drafter {data['drafter']}, B={data['batch_size']}, K={data['k']}, "
              f"context {data['context']}")
    for phase in ("draft", "verify"):
        ops = data[phase]["ops"]
        if not ops:
            continue
        t = Table(title=f"{phase} ({format_si(data[phase]['totals']['time_s'], 's')})")
        for col in ("operator", "count", "FLOPs", "bytes", "FLOP/B", "time", "bound", "share"):
            t.add_column(col, justify="left" if col in ("operator", "bound") else "right")
        for r in ops:
            ai = r["intensity_flop_per_byte"]
            t.add_row(r["name"], f"{r['count']:g}", format_si(r["flops"]), format_si(r["bytes"] + r["comm_bytes"], "B"),
                      "-" if ai is None else f"{ai:.1f}", format_si(r["time_s"], "s"), r["bound"],
                      f"{100 * r['share']:.1f}%")
        con.print(t)
    mem = data["memory"]
    con.print(f"fixed overheads {format_si(data['overhead_s'], 's')}; step time "
              f"[bold]{format_si(data['step_time_s'], 's')}[/bold]")
    if data["experts_touched"] is not None:
        con.print(f"experts touched per MoE layer (verify): {data['experts_touched']:.1f} of {data['num_experts']}")
    con.print(f"memory per GPU: {format_si(mem['used_bytes'], 'B')} of {format_si(mem['capacity_bytes'], 'B')} usable "
              f"(weights {format_si(mem['weights_bytes'], 'B')}, KV {format_si(mem['kv_bytes'], 'B')}) — "
              + ("fits" if mem["feasible"] else "[red]DOES NOT FIT[/red]"))


# --- entry point ------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> None:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    import click

    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="dsdsim", standalone_mode=False)
    except DsdsimError as exc:
        typer.echo(f"dsdsim: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        typer.echo("dsdsim: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        msg = exc.format_message().replace("\n", " ")
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"dsdsim: error: {msg}{hint}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(rv, int) and rv:
        sys.exit(rv)
