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
def _root(specs_dir: Optional[List[Path]] = typer.Option(None, "--specs-dir", metavar="DIR", help=SPECS_DIR_HELP)) -> None:
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


def check_png(path: Path, option: str) -> None:
    """A writable path ending in .png (plots are written as PNG)."""
    check_writable(path)
    if path.suffix.lower() != ".png":
        raise DsdsimError(f"{option} writes a PNG; give a file name ending in .png (got {path})")


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
            v = format_si(v, ("B/s" if "per_s" in k else "B") if "bytes" in k else ("FLOP/s" if "per_s" in k else "FLOP"))
        elif isinstance(v, int) and k.startswith("params"):
            v = f"{v:,}"
        t.add_row(k, str(v))
    _console().print(t)


# --- explain ------------------------------------------------------------------------------------------


from dsdsim.defaults import (DEFAULT_CONTEXT, DEFAULT_DRAFTER, DEFAULT_FIXED_K, DEFAULT_HARDWARE,  # noqa: E402
                             DEFAULT_MAX_K, DEFAULT_MODEL)
from dsdsim.export.prediction import PredictFormat  # noqa: E402


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
    from pydantic import ValidationError

    from dsdsim.errors import pydantic_one_line

    w_dtype, c_dtype = (parse_dtype(dtype) if dtype else None), parse_dtype(kv_dtype)
    try:
        return Deployment(tp=tp, ep=ep, dtype=w_dtype, kv_dtype=c_dtype, expert_overlap=expert_overlap,
                          cuda_graphs=not eager, memory_utilization=memory_utilization)
    except ValidationError as exc:
        raise DsdsimError(pydantic_one_line(exc, "deployment")) from None


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
        for col in ("operator", "count", "FLOPs", "bytes", "FLOP/B", "time", "fixed", "BW %", "bound", "share"):
            t.add_column(col, justify="left" if col in ("operator", "bound") else "right")
        for r in ops:
            ai, bw = r["intensity_flop_per_byte"], r.get("bandwidth_fraction")
            t.add_row(r["name"], f"{r['count']:g}", format_si(r["flops"]), format_si(r["bytes"] + r["comm_bytes"], "B"),
                      "-" if ai is None else f"{ai:.1f}", format_si(r["time_s"], "s"), format_si(r["overhead_s"], "s"),
                      "-" if not bw or r["comm_bytes"] else f"{100 * bw:.0f}", r["bound"], f"{100 * r['share']:.1f}%")
        con.print(t)
    mem = data["memory"]
    con.print(f"fixed overheads {format_si(data['overhead_s'], 's')}; step time "
              f"[bold]{format_si(data['step_time_s'], 's')}[/bold]")
    if data["experts_touched"] is not None:
        con.print(f"experts touched per MoE layer (verify): {data['experts_touched']:.1f} of {data['num_experts']}")
    con.print(f"memory per GPU: {format_si(mem['used_bytes'], 'B')} of {format_si(mem['capacity_bytes'], 'B')} usable "
              f"(weights {format_si(mem['weights_bytes'], 'B')}, KV {format_si(mem['kv_bytes'], 'B')}) — "
              + ("fits" if mem["feasible"] else "[red]DOES NOT FIT[/red]"))


# --- predict ------------------------------------------------------------------------------------------

ACCEPTANCE_HELP = ("Acceptance: a constant (0.8), conditional per-position alphas (0.8,0.7,0.6), a mean acceptance "
                   "length measured at K (al=2.79@3), beta:MEAN:CONCENTRATION for spread across requests, or a file "
                   "(vLLM Prometheus metrics text, or per-request metrics JSON). Default: the per-position rates in "
                   "vLLM's DSD test data (an example, not your drafter).")


@app.command()
def predict(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Target model name or config.json path"),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-g", help="Accelerator name or spec path"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs"),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel groups inside the tp GPUs (must divide tp)"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Weight format (default: the checkpoint's)"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV-cache format"),
    drafter: str = typer.Option(DEFAULT_DRAFTER, "--drafter", "-d",
                                help="eagle3 | eagle | mtp | medusa | ngram | draft-model:MODEL | self-spec:KV_BUDGET"),
    acceptance: Optional[str] = typer.Option(None, "--acceptance", "-a", help=ACCEPTANCE_HELP),
    acceptance_band: Optional[float] = typer.Option(
        None, "--acceptance-band", help="+/- change of every alpha: adds a robust K choice and its regret"),
    expert_overlap: float = typer.Option(0.0, "--expert-overlap",
                                         help="MoE: share of a token's experts reused by the next token of the same "
                                              "sequence (e.g. 0.38 reported for a 128-expert top-8 model)"),
    context: int = typer.Option(DEFAULT_CONTEXT, "--context", "-c", help="Tokens in each sequence's KV cache"),
    contexts: Optional[str] = typer.Option(None, "--contexts",
                                           help="Context axis: a comma list (1024,8192,32768) gives K* over batch x "
                                                "context (table or json)"),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", "-b",
                                              help="List (1,2,4,8) or range (1-1024, 1-256:8); default 1-1024"),
    max_k: int = typer.Option(DEFAULT_MAX_K, "--max-k", help="Largest K considered"),
    fixed_k: int = typer.Option(DEFAULT_FIXED_K, "--fixed-k", help="The static K to compare against"),
    max_distinct_k: Optional[int] = typer.Option(
        None, "--max-distinct-k", help="At most this many distinct K in the table (each is a CUDA-graph capture)"),
    eager: bool = typer.Option(False, "--eager", help="No CUDA graphs: eager per-kernel launch cost"),
    memory_utilization: float = typer.Option(0.9, "--memory-utilization", help="Usable share of GPU memory"),
    fmt: PredictFormat = typer.Option(PredictFormat.table, "--format", "-f",
                                      help="table | json | csv | vllm | vllm-batch-stats | sglang | trtllm"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw goodput vs batch and K* vs batch (PNG)"),
) -> None:
    """Best number of draft tokens K at every batch size, as a table an engine accepts.

    \b
    Examples:
      dsdsim predict
      dsdsim predict -m llama-3.1-70b -g h100-sxm --tp 8 -a 0.8,0.7,0.6 --format vllm
      dsdsim predict -m qwen3-30b-a3b -g h200-sxm --expert-overlap 0.38 --max-distinct-k 3 --plot k.png
    """
    from dsdsim.export.prediction import prediction_dict, render
    from dsdsim.policy.predict import predict as run_predict

    check_writable(output)
    if plot is not None:
        check_png(plot, "--plot")
    dep = deployment_from_options(tp, ep, dtype, kv_dtype, expert_overlap, eager, memory_utilization)
    if contexts is not None:
        return _predict_contexts(contexts, fmt, output, model=model, hardware=hardware, deployment=dep,
                                 drafter=drafter, acceptance=acceptance, batch_sizes=batch_sizes, max_k=max_k,
                                 fixed_k=fixed_k, max_distinct_k=max_distinct_k)
    p = run_predict(model, hardware, dep, drafter, acceptance, context, batch_sizes, max_k, fixed_k, max_distinct_k,
                    acceptance_band)
    text = None if fmt is PredictFormat.table else render(p, fmt)
    if plot is not None:
        from dsdsim.plot import PredictionDisplay, save_png

        save_png(PredictionDisplay.from_prediction(p).plot(), plot)
        typer.echo(f"wrote {plot}", err=True)
    if text is not None:
        return emit(text, output)
    if output is not None:
        return emit(_prediction_text(prediction_dict(p), p), output)
    _print_prediction(p)


def _predict_contexts(text: str, fmt, output: Optional[Path], **kwargs) -> None:
    """K* over (batch range x context range): one prediction per context length."""
    from dsdsim.export.prediction import PredictFormat as F
    from dsdsim.policy.predict import predict_context_grid

    try:
        ctxs = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        raise DsdsimError(f"cannot read --contexts {text!r}; write a comma list such as 1024,8192,32768") from None
    if not ctxs or min(ctxs) < 0:
        raise DsdsimError("--contexts needs one or more context lengths >= 0, e.g. 1024,8192")
    if fmt not in (F.table, F.json):
        raise DsdsimError("--contexts gives a batch x context table: use --format table or json")
    preds = predict_context_grid(ctxs, **kwargs)
    if fmt is F.json:
        data = {"model": preds[0].setup.model.name, "hardware": preds[0].setup.hardware.name,
                "drafter": preds[0].setup.drafter.label, "contexts": ctxs,
                "tables": [{"context": c, "ranges": [list(r) for r in p.ranges()],
                            "k_per_batch": [int(k) for k in p.table.k_per_batch]} for c, p in zip(ctxs, preds)],
                "batch_sizes": [int(b) for b in preds[0].batch_sizes]}
        return emit(to_json(data), output)
    if output is not None:
        raise DsdsimError("--output with the table format is not supported; add --format json")
    from rich.table import Table

    t = Table(title=f"K* by batch size (rows) and context (columns): {preds[0].setup.model.name} on "
                    f"{preds[0].setup.hardware.name}, {preds[0].setup.drafter.label}")
    t.add_column("batch", justify="right")
    for c in ctxs:
        t.add_column(f"ctx {c}", justify="right")
    index = {int(b): j for j, b in enumerate(preds[0].batch_sizes)}
    for b in _display_batches(preds[0]):
        t.add_row(str(b), *["-" if p.table.k_per_batch[index[b]] < 0 else str(int(p.table.k_per_batch[index[b]]))
                            for p in preds])
    _console().print(t)


def _display_batches(p) -> list[int]:
    b = [int(x) for x in p.batch_sizes]
    if len(b) <= 24:
        return b
    keep = {b[0], b[-1]} | {x for x in b if x & (x - 1) == 0}
    keep |= {start for start, _, _ in p.ranges() if start in set(b)}
    return sorted(keep)


def _print_prediction(p) -> None:
    from rich.table import Table

    from dsdsim.export.prediction import prediction_dict

    con = _console()
    d = prediction_dict(p)
    dep = d["deployment"]
    con.print(f"[bold]{d['model']}[/bold] on [bold]{d['hardware']}[/bold] (tp {dep['tp']}, ep {dep['ep']}, "
              f"{dep['dtype']} weights, {dep['kv_dtype']} KV), drafter [bold]{d['drafter']}[/bold], context "
              f"{d['context']}")
    con.print(f"acceptance: {d['acceptance']['description']}")
    rows = {r["batch_size"]: r for r in d["rows"]}
    t = Table(title=f"Best K per batch size (rows shown: {len(_display_batches(p))} of {len(rows)})")
    for col in ("batch", "K*", "tau", "step ms", "ITL ms", "tokens/s", "vs K=0", f"vs K={p.fixed_k}", "fits"):
        t.add_column(col, justify="right")

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    for b in _display_batches(p):
        r = rows[b]
        t.add_row(str(b), f(r["k"], "d"), f(r["tau"], ".2f"), f(r["step_ms"], ".2f"), f(r["itl_ms"], ".2f"),
                  f(r["tokens_per_s"], ",.0f"), f(r["speedup_vs_vanilla"], ".2f") + ("x" if r["k"] is not None and
                  r["speedup_vs_vanilla"] is not None else ""),
                  f(r["speedup_vs_fixed_k"], ".2f") + ("x" if r["speedup_vs_fixed_k"] is not None else ""),
                  "yes" if r["feasible"] else "[red]no[/red]")
    con.print(t)
    ranges = d["table"]["ranges"]
    con.print("K table (vLLM num_speculative_tokens_per_batch_size): " + json.dumps(ranges))
    if p.table.mean_goodput_loss:
        con.print(f"compressed to {len(d['table']['distinct_k'])} distinct K: mean goodput given up "
                  f"{100 * p.table.mean_goodput_loss:.2f}%, worst batch {100 * p.table.max_goodput_loss:.2f}%")
    if "robust" in d:
        r = d["robust"]
        con.print(f"robust K over acceptance band {r['band'][0]} .. {r['band'][1]}: worst regret at the low edge "
                  f"{100 * (r['regret_low_edge_max'] or 0):.1f}%, high edge {100 * (r['regret_high_edge_max'] or 0):.1f}%")
    for note in d["notes"]:
        if not note.startswith("acceptance:"):   # already in the header
            con.print(f"note: {note}")
    con.print("Paste into vLLM: dsdsim predict ... --format vllm   (also sglang, trtllm, json, csv)")


def _prediction_text(d: dict, p) -> str:
    lines = [f"# {d['model']} on {d['hardware']}, drafter {d['drafter']}, context {d['context']}",
             f"# acceptance: {d['acceptance']['description']}",
             "batch\tK\ttau\tstep_ms\titl_ms\ttokens_per_s\tspeedup_vs_vanilla\tspeedup_vs_fixed_k\tfeasible"]
    for r in d["rows"]:
        lines.append("\t".join(str(r[k]) for k in ("batch_size", "k", "tau", "step_ms", "itl_ms", "tokens_per_s",
                                                   "speedup_vs_vanilla", "speedup_vs_fixed_k", "feasible")))
    return "\n".join(lines)


@plot_app.command("roofline")
def plot_roofline(
    output: Path = typer.Option(..., "--output", "-o", help="PNG file to write"),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Target model"),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-g", help="Accelerator"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs"),
    drafter: str = typer.Option(DEFAULT_DRAFTER, "--drafter", "-d", help="Drafter (its ops are drawn as triangles)"),
    batch: int = typer.Option(8, "--batch", "-b", help="Batch size"),
    k: int = typer.Option(3, "--k", "-k", help="Draft tokens"),
    context: int = typer.Option(1024, "--context", "-c", help="Context length"),
) -> None:
    """The hardware roofline with the verify (and draft) step's operators placed on it."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.plot import RooflineDisplay, save_png

    check_png(output, "--output")
    if batch < 1 or k < 0 or context < 0:
        raise DsdsimError("--batch must be >= 1, --k >= 0 and --context >= 0")
    dep = deployment_from_options(tp, 1, None, "bf16", 0.0)
    step = simulate_step(model, hardware, dep, drafter if k > 0 else None, batch, k, context)
    save_png(RooflineDisplay.from_step(step).plot(), output)
    typer.echo(f"wrote {output}", err=True)


@plot_app.command("sensitivity")
def plot_sensitivity(
    output: Path = typer.Option(..., "--output", "-o", help="PNG file to write"),
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Target model"),
    hardware: str = typer.Option(DEFAULT_HARDWARE, "--hardware", "-g", help="Accelerator"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs"),
    drafter: str = typer.Option(DEFAULT_DRAFTER, "--drafter", "-d", help="Drafter"),
    alphas: str = typer.Option("0.6,0.7,0.8,0.9", "--alphas", help="Constant acceptance values to compare"),
    contexts: str = typer.Option("1024,8192", "--contexts", help="Context lengths to compare"),
    batch_sizes: str = typer.Option("1-512", "--batch-sizes", "-b", help="Batch sizes"),
) -> None:
    """How the K table and the speedup move when acceptance or context change (K* and speedup vs batch)."""
    from dsdsim.plan import sensitivity
    from dsdsim.plot import SensitivityDisplay, save_png

    check_png(output, "--output")
    try:
        a_list = [float(x) for x in alphas.split(",") if x.strip()]
        c_list = [int(x) for x in contexts.split(",") if x.strip()]
    except ValueError:
        raise DsdsimError("--alphas takes numbers (0.6,0.8) and --contexts whole numbers (1024,8192)") from None
    if not a_list or not c_list:
        raise DsdsimError("--alphas and --contexts need at least one value each")
    dep = deployment_from_options(tp, 1, None, "bf16", 0.0)
    frame = sensitivity(model, hardware, a_list, c_list, deployment=dep, drafter=drafter, batch_sizes=batch_sizes)
    save_png(SensitivityDisplay.from_frame(frame).plot(), output)
    typer.echo(f"wrote {output}", err=True)


# --- plan ---------------------------------------------------------------------------------------------


class PlanFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


@app.command()
def plan(
    model: str = typer.Option(..., "--model", "-m", help="Target model name or config.json path"),
    candidates: str = typer.Option(..., "--candidates", "-g",
                                   help="Comma list of HARDWARE[:tpN[:epM]], e.g. h100-sxm:tp8,h200-sxm:tp4"),
    itl_slo_ms: float = typer.Option(..., "--itl-slo-ms", help="Per-sequence inter-token latency target (ms)"),
    context: int = typer.Option(DEFAULT_CONTEXT, "--context", "-c", help="Tokens in each sequence's KV cache"),
    drafter: str = typer.Option(DEFAULT_DRAFTER, "--drafter", "-d", help="Drafter for the DSD columns"),
    acceptance: Optional[str] = typer.Option(None, "--acceptance", "-a", help=ACCEPTANCE_HELP),
    target_tokens_per_s: Optional[float] = typer.Option(None, "--target-tokens-per-s",
                                                        help="Aggregate output rate to size the fleet for"),
    price_per_gpu_hour: Optional[float] = typer.Option(None, "--price-per-gpu-hour",
                                                       help="Your price per GPU-hour (no prices are shipped)"),
    batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", "-b", help="Batch sizes searched; default 1-1024"),
    max_k: int = typer.Option(DEFAULT_MAX_K, "--max-k", help="Largest K considered"),
    fmt: PlanFormat = typer.Option(PlanFormat.table, "--format", "-f", help="table | json | csv"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout"),
) -> None:
    """Capacity planning: per candidate GPU and parallelism, the largest batch meeting an ITL SLO with and
    without dynamic speculation, tokens/s per GPU, GPUs for a target rate and cost per million tokens.

    \b
    Example:
      dsdsim plan -m llama-3.1-70b -g h100-sxm:tp4,h100-sxm:tp8,h200-sxm:tp4 --itl-slo-ms 30 \
          --target-tokens-per-s 50000 --price-per-gpu-hour 2.5
    """
    from dataclasses import asdict

    from dsdsim.plan import plan_rows

    check_writable(output)
    rows = plan_rows(model, [c for c in candidates.split(",") if c.strip()], itl_slo_ms, context=context,
                     drafter=drafter, acceptance=acceptance, target_tokens_per_s=target_tokens_per_s,
                     price_per_gpu_hour=price_per_gpu_hour, batch_sizes=batch_sizes, max_k=max_k)
    recs = [asdict(r) for r in rows]
    if fmt is PlanFormat.json:
        return emit(to_json({"model": model, "itl_slo_ms": itl_slo_ms, "context": context, "drafter": drafter,
                             "candidates": recs}), output)
    if fmt is PlanFormat.csv:
        from dsdsim.export.engines import table_csv

        return emit(table_csv(recs), output)
    if output is not None:
        raise DsdsimError("--output with the table format is not supported; add --format json or csv")
    from rich.table import Table

    def f(x, spec=",.0f"):
        return "-" if x is None else format(x, spec)

    t = Table(title=f"{model}: ITL SLO {itl_slo_ms:g} ms, context {context}, drafter {drafter}")
    for col in ("candidate", "GPUs", "max B (K=0)", "tok/s/GPU (K=0)", "max B (DSD)", "K", "tok/s/GPU (DSD)",
                "gain", "GPUs needed", "$/M tok (DSD)", "note"):
        t.add_column(col, justify="left" if col in ("candidate", "note") else "right")
    for r in rows:
        t.add_row(f"{r.hardware}:tp{r.tp}" + (f":ep{r.ep}" if r.ep > 1 else ""), str(r.gpus),
                  f(r.max_batch_vanilla, "d"), f(r.tokens_per_s_per_gpu_vanilla), f(r.max_batch_dsd, "d"),
                  f(r.k_at_max_batch, "d"), f(r.tokens_per_s_per_gpu_dsd), f(r.dsd_gain, ".2f"),
                  f(r.gpus_needed_dsd, "d"), f(r.cost_per_million_tokens_dsd, ".3f"),
                  r.reason if not r.feasible else "")
    _console().print(t)


# --- accuracy -----------------------------------------------------------------------------------------


class AccuracyFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class AccuracySplit(str, Enum):
    train = "train"
    test = "test"
    all = "all"


@app.command()
def accuracy(
    split: AccuracySplit = typer.Option(AccuracySplit.all, "--split", help="train (may be fitted on), test (never "
                                        "fitted on) or all"),
    engine: Optional[str] = typer.Option(None, "--engine", help="Only cases measured on this engine (the case's "
                                         "engine field: vllm, sglang, tensorrt-llm, gpt-fast, magicdec). A filter "
                                         "for now: there are no engine specs yet, every case uses the same defaults"),
    fmt: AccuracyFormat = typer.Option(AccuracyFormat.table, "--format", "-f", help="table | json | csv"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw predicted vs measured (PNG, log axes)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout"),
    corpus: Optional[Path] = typer.Option(None, "--corpus", metavar="DIR",
                                          help="A folder of measurement YAML files (default: the shipped corpus)"),
) -> None:
    """Predict every public measurement in the corpus with the shipped defaults (no calibration) and report the
    relative error per case, then the median and max |error| per split and per group.

    \b
    Examples:
      dsdsim accuracy
      dsdsim accuracy --split test --format json -o accuracy.json
      dsdsim accuracy --engine vllm --plot accuracy.png
    """
    from dsdsim.corpus.evaluate import accuracy as run_accuracy

    check_writable(output)
    if plot is not None:
        check_png(plot, "--plot")
    if fmt is AccuracyFormat.table and output is not None:
        raise DsdsimError("--output with the table format is not supported; add --format json or csv")
    report = _with_progress("predicting measurement cases", lambda progress: run_accuracy(
        split.value, engine, corpus, progress=progress))
    if plot is not None:
        from dsdsim.corpus.display import AccuracyDisplay
        from dsdsim.plot import save_png

        save_png(AccuracyDisplay.from_report(report).plot(), plot)
        typer.echo(f"wrote {plot}", err=True)
    if fmt is AccuracyFormat.json:
        return emit(to_json(report.to_dict()), output)
    if fmt is AccuracyFormat.csv:
        from dataclasses import asdict

        from dsdsim.export.engines import table_csv

        return emit(table_csv([asdict(c) for c in report.cases]), output)
    _print_accuracy(report)


def _with_progress(label: str, run):
    """Run `run(progress)`; a transient progress bar on a terminal when it takes more than about a second."""
    if not sys.stderr.isatty():
        return run(None)
    import time

    from rich.console import Console
    from rich.progress import Progress

    start = time.monotonic()
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None, visible=False)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, visible=time.monotonic() - start > 1.0)

        return run(progress)


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _print_accuracy(report) -> None:
    from rich.table import Table

    con = _console()
    t = Table(title="Predicted vs measured (shipped defaults, no calibration)")
    for col in ("case", "split", "quantity", "measured", "predicted", "error", "acceptance"):
        t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left")
    skipped = []
    for c in report.cases:
        if c.predicted is None:
            skipped.append(c)
            continue
        t.add_row(c.id, c.split, c.quantity, f"{c.measured:.4g}", f"{c.predicted:.4g}", _pct(c.rel_error),
                  c.acceptance + ("" if c.fits_in_memory else " [red](does not fit)[/red]"))
    con.print(t)
    if skipped:
        con.print(f"{len(skipped)} cases in the corpus are not predicted (kernel-level, acceptance-only or missing "
                  f"conditions); `--format json` lists each with its reason.")
    g = Table(title="|relative error| by split and group")
    for col in ("split", "group", "n", "median |err|", "max |err|"):
        g.add_column(col, justify="right" if col in ("n", "median |err|", "max |err|") else "left")

    def row(split: str, group: str, s) -> None:
        if s.n:
            g.add_row(split, group, str(s.n), f"{100 * s.median_abs_rel_error:.1f}%", f"{100 * s.max_abs_rel_error:.1f}%")

    for split, s in report.summary.items():
        row(split, "all", s)
        for grp in report.groups:
            if grp.split == split:
                row(split, f"{grp.axis}={grp.value}", grp.summary)
    con.print(g)
    for f in report.fitted:
        con.print(f"acceptance fitted where the source gives none: {f.group} ({f.split}, n={f.n}): alpha {f.alpha:.3f}")


# --- validation (torch; imported only when these commands run) ----------------------------------------


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise DsdsimError("this command measures with torch: pip install 'dsdsim[validate]' (CPU: pip install "
                          "torch)") from None


def _check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DsdsimError(f"--device {device}: no CUDA device is visible to torch; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise DsdsimError(f"--device {device!r} is not supported; use cpu or cuda (cuda:N)")


@app.command()
def probe(
    device: str = typer.Option("cpu", "--device", help="torch device to measure: cpu, cuda, cuda:1"),
    output: Path = typer.Option(Path("probe.yaml"), "--output", "-o", help="Hardware spec YAML to write"),
    name: Optional[str] = typer.Option(None, "--name", help="Spec name (default: from the device name)"),
    threads: int = typer.Option(1, "--threads", help="torch threads on a CPU (validate uses the same)"),
    quick: bool = typer.Option(False, "--quick", help="Smaller sweeps (a few seconds on a CPU)"),
    sweeps: bool = typer.Option(True, "--sweeps/--no-sweeps",
                                help="Also run the sweeps (GEMM over M, decode attention over context, kernel "
                                     "floor, copy sizes) into SPEC.sweeps.json beside the spec"),
) -> None:
    """Measure a device (streaming bandwidth, matmul peak per dtype, launch overhead eager and under CUDA
    graphs) into a hardware spec that every command accepts (`-g probe.yaml`); every figure is flagged
    measured, with date and torch version. The sweeps go to a JSON file beside the spec.
    Example: dsdsim probe --device cuda --name h200-sxm@measured -o h200-sxm@measured.yaml"""
    check_writable(output)
    if threads < 1:
        raise DsdsimError(f"--threads must be >= 1, got {threads}")
    _need_torch()
    _check_device(device)
    from dsdsim.bench.probe import run_probe, sweeps_path
    from dsdsim.specs.catalog import load_hardware

    path = run_probe(device, output, name, lambda msg: typer.echo(f"  {msg}", err=True), threads, sweeps=sweeps,
                     quick=quick)
    spec = load_hardware(path)
    typer.echo(f"wrote {path}" + (f" and {sweeps_path(path)}" if sweeps else ""), err=True)
    _kv_table(f"Probed {spec.name}", {
        "memory_bandwidth_bytes_per_s": spec.bandwidth,
        "peak_flops_per_s": {d.value: f.value for d, f in spec.peak_flops_per_s.items()},
        "launch_overhead_s": spec.launch_overhead_s.value,
        "eager_launch_overhead_s": spec.eager_launch_overhead_s.value})


@app.command()
def validate(
    model: str = typer.Option(DEFAULT_MODEL, "--model", "-m", help="Model whose layer shapes are measured"),
    hardware: str = typer.Option(..., "--hardware", "-g",
                                 help="Spec to predict with: a probe of this device, or a shipped name"),
    device: str = typer.Option("cpu", "--device", help="torch device: cpu, cuda, cuda:1"),
    quick: bool = typer.Option(False, "--quick", help="Small grid (well under 2 minutes on a laptop CPU)"),
    output: Path = typer.Option(Path("validation"), "--output", "-o", help="Folder for report.json, summary.md, plot"),
    drafter: str = typer.Option("eagle3", "--drafter", "-d", help="Drafter whose step shapes are measured (or none)"),
    reduce: Optional[int] = typer.Option(None, "--reduce",
                                         help="Divide widths by this factor where the real layer is too big "
                                              "(default: 1 on GPU, 2 on CPU, 4 with --quick on CPU)"),
    layers: Optional[int] = typer.Option(None, "--layers",
                                         help="Keep only the first N layers (real widths; predictions use the "
                                              "same truncated model), e.g. a large MoE on one GPU"),
    grid: Optional[str] = typer.Option(None, "--grid",
                                       help="Measurement grid: quick, full, gpu or tiny (default: gpu on CUDA, "
                                            "quick with --quick, else full)"),
    time_budget: Optional[float] = typer.Option(None, "--time-budget", min=1.0,
                                                help="Seconds of measuring at most; items past it are skipped and "
                                                     "listed, and the report is still complete"),
    reanalyse: Optional[Path] = typer.Option(None, "--reanalyse",
                                             help="Measure nothing: re-predict, re-calibrate and re-check the K "
                                                  "table of this report.json with the current cost model"),
) -> None:
    """Time the model's real operator shapes, whole passes and whole speculative steps (draft passes + verify
    pass + rejection sampling) with torch, compare with the prediction, calibrate on half the points and report
    the error on the other half, and check the predicted K table's regret on the measured whole steps.

    On a GPU every item is captured in a CUDA graph and replayed (kernel time, as engines run decode steps).
    Example: dsdsim validate -m llama-3.1-8b -g h200-sxm --device cuda -o val/"""
    if output.exists() and not output.is_dir():
        raise DsdsimError(f"--output {output} is a file; give a folder")
    check_writable(output / "report.json" if output.is_dir() else output)
    if reduce is not None and reduce < 1:
        raise DsdsimError(f"--reduce must be >= 1, got {reduce}")
    if layers is not None and layers < 1:
        raise DsdsimError(f"--layers must be >= 1, got {layers}")
    from dsdsim.bench.validate import GRIDS

    if grid is not None and grid not in GRIDS:
        raise DsdsimError(f"--grid {grid!r} is unknown; use one of {', '.join(GRIDS)}")
    if reanalyse is not None:
        _reanalyse(reanalyse, hardware, output)
        return
    _need_torch()
    _check_device(device)
    from dsdsim.bench.validate import run_validate
    from dsdsim.specs.catalog import load_hardware, load_model

    load_model(model)          # resolve names before any measuring (unknown names fail in one line)
    load_hardware(hardware)
    output.mkdir(parents=True, exist_ok=True)
    rep = run_validate(model, hardware, device, quick, output, show_progress=sys.stderr.isatty(), progress_lines=True,
                       drafter=None if drafter in ("none", "") else drafter, reduce=reduce, layers=layers,
                       grid=GRIDS[grid] if grid else None, time_budget_s=time_budget)
    _print_validation(rep)


def _print_validation(rep) -> None:
    s = rep.summary
    con = _console()
    for key, label in (("uncalibrated", "uncalibrated (all points)"), ("calibrated", "calibrated (held-out half)")):
        b = s[key]
        con.print(f"{label}: n={b['n']}, median |error| {b['median_abs_pct_error']:.1f}%, "
                  f"MAPE {b['mape']:.1f}%, max {b['max_abs_pct_error']:.1f}%")
    whole = s.get("by_measurement", {}).get("spec_step")
    if whole:
        u, c = whole["uncalibrated"], whole["calibrated_test"]
        con.print(f"whole speculative steps: n={u['n']}, median |error| {u['median_abs_pct_error']:.1f}% uncalibrated, "
                  f"{c['median_abs_pct_error']:.1f}% calibrated held-out (max {c['max_abs_pct_error']:.1f}%)")
    tc = rep.table_check
    if tc and tc.get("per_batch"):
        cal = (f"; calibrated mean {tc['mean_regret_calibrated']:.3f}, max {tc['max_regret_calibrated']:.3f}"
               if "mean_regret_calibrated" in tc else "")
        con.print(f"K-table regret ({tc['measured_from'].split(' (')[0]}): mean {tc['mean_regret']:.3f}, "
                  f"max {tc['max_regret']:.3f}{cal}")
    if rep.data.get("errors"):
        con.print(f"{len(rep.data['errors'])} item(s) failed or were skipped: see 'errors' in the report")
    for what, path in rep.paths.items():
        con.print(f"{what}: {path}")


def _comm_sweep(backend: str, world_size: int, hardware: Optional[str], output: Optional[Path]) -> None:
    import torch

    from dsdsim.bench.distributed import run_distributed

    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise DsdsimError(f"--world-size {world_size} with nccl needs {world_size} GPUs; "
                          f"{torch.cuda.device_count()} visible")
    if hardware is not None:
        from dsdsim.specs.catalog import load_hardware

        load_hardware(hardware)
    rep = run_distributed(backend, world_size, hardware)
    if output is not None:
        write_atomic(output, to_json(rep.to_json()) + "\n")
        typer.echo(f"wrote {output}", err=True)
    typer.echo(to_json(rep.to_json()))


def _reanalyse(report: Path, hardware: str, output: Path) -> None:
    from dsdsim.bench.validate import reanalyse
    from dsdsim.specs.catalog import load_hardware

    if not report.is_file():
        raise DsdsimError(f"--reanalyse {report}: no such file")
    load_hardware(hardware)
    try:
        rep = reanalyse(report, hardware, output)
    except (KeyError, ValueError) as exc:
        raise DsdsimError(f"--reanalyse {report}: {exc}") from None
    _print_validation(rep)


@app.command()
def loop(
    device: str = typer.Option("cpu", "--device", help="torch device: cpu, cuda, cuda:1"),
    k: int = typer.Option(4, "--k", "-k", help="Draft tokens per step (K >= 1)"),
    batch: int = typer.Option(8, "--batch", "-b", help="Sequences decoded together"),
    new_tokens: int = typer.Option(48, "--new-tokens", help="Tokens generated per sequence"),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-g",
                                           help="Spec to predict the loop's step time with (optional)"),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights (prompts and samples follow it)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the result as JSON to this file"),
) -> None:
    """Run a real speculative-decoding loop (draft -> verify -> rejection sampling, batched, KV caches) on small
    random-weight models; report per-position acceptance, the measured tau against the acceptance model's, and
    step times. Example: dsdsim loop --device cuda -k 4 -b 32 -o loop.json"""
    check_writable(output)
    if k < 1:
        raise DsdsimError(f"--k must be >= 1 for a speculative loop, got {k}")
    if batch < 1 or new_tokens < 1:
        raise DsdsimError("--batch and --new-tokens must be >= 1")
    _need_torch()
    _check_device(device)
    from dsdsim.bench.loop import run_loop

    if hardware is not None:
        from dsdsim.specs.catalog import load_hardware

        load_hardware(hardware)
    res = run_loop(k=k, batch=batch, new_tokens=new_tokens, hardware=hardware, device=device, seed=seed,
                   prompt=max(16, k + 2))
    data = res.to_json()
    data["device"] = device
    if output is not None:
        write_atomic(output, to_json(data) + "\n")
        typer.echo(f"wrote {output}", err=True)
    _kv_table(f"speculative loop K={k}, B={batch} on {device}", {
        "alpha per position": ", ".join(f"{a:.3f}" for a in res.alpha), "tau measured": f"{res.tau_measured:.3f}",
        "tau from alpha (model)": f"{res.tau_model:.3f}", "step ms (median)": f"{res.step_s_median * 1e3:.3f}",
        "predicted step ms": "-" if res.predicted_step_s is None else f"{res.predicted_step_s * 1e3:.3f}"})


@app.command("comm-check")
def comm_check(
    backend: str = typer.Option("gloo", "--backend", help="nccl (GPU) or gloo (CPU)"),
    device: str = typer.Option("cpu", "--device", help="torch device of this rank: cpu, cuda, cuda:1 "
                                                      "(LOCAL_RANK picks the GPU under torchrun)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the result as JSON to this file"),
    world_size: int = typer.Option(1, "--world-size", "-n",
                                   help="1: the one-process check; N > 1: N spawned ranks time all-reduce sizes "
                                        "and a tensor-parallel MLP against the link model (N GPUs for nccl)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-g",
                                           help="Spec whose link figures the N-rank sweep is compared with"),
) -> None:
    """Prove the collective code path: with one process, init_process_group, all_reduce (small and 64 MiB,
    timed), barrier, destroy; with --world-size N, an all-reduce sweep and a tensor-parallel MLP over N ranks.
    Example: dsdsim comm-check --backend nccl --device cuda -o comm.json"""
    check_writable(output)
    if backend not in ("nccl", "gloo"):
        raise DsdsimError(f"--backend {backend!r}: use nccl (GPU) or gloo (CPU)")
    if world_size < 1:
        raise DsdsimError(f"--world-size must be >= 1, got {world_size}")
    _need_torch()
    _check_device(device)
    if backend == "nccl" and not device.startswith("cuda"):
        raise DsdsimError("--backend nccl needs --device cuda (NCCL runs on GPUs); use --backend gloo on a CPU")
    if world_size > 1:
        _comm_sweep(backend, world_size, hardware, output)
        return
    from dsdsim.bench.distributed import nccl_smoke

    res = nccl_smoke(device=device, backend=backend)
    if output is not None:
        write_atomic(output, to_json(res) + "\n")
        typer.echo(f"wrote {output}", err=True)
    _kv_table(f"{backend} world-size-1 check on {device}", {k: v for k, v in res.items() if not isinstance(v, (dict, list))})
    if not res.get("ok"):
        raise DsdsimError(f"{backend} check failed: {res.get('error')}")


@app.command()
def calibrate(
    report: Path = typer.Option(..., "--report", "-r",
                                help="A validation report.json, or a vLLM batch_stats JSON of measured ITL per (B, K)"),
    hardware: str = typer.Option(..., "--hardware", "-g", help="The spec to calibrate (the one predictions used)"),
    output: Path = typer.Option(..., "--output", "-o", help="Calibrated hardware spec YAML to write"),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model (batch_stats input only)"),
    drafter: str = typer.Option("eagle3", "--drafter", "-d", help="Drafter (batch_stats input only)"),
    context: int = typer.Option(DEFAULT_CONTEXT, "--context", "-c", help="Context length (batch_stats input only)"),
    name: Optional[str] = typer.Option(None, "--name", help="Name of the calibrated spec"),
) -> None:
    """Fit efficiencies (compute; memory for GEMMs, attention and vector kernels), launch and step overhead
    and the GEMM tile to measurements; write a spec that predict accepts. A report is fitted on its train half
    and scored on its held-out half."""
    import json as _json

    check_writable(output)
    if not report.is_file():
        raise DsdsimError(f"--report {report}: no such file")
    try:
        data = _json.loads(report.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DsdsimError(f"--report {report}: not JSON; give a validation report.json or a batch_stats file") from None
    if not isinstance(data, dict) or not ("points" in data or "batch_stats" in data):
        raise DsdsimError(f"--report {report}: has neither 'points' (validation report) nor 'batch_stats'")
    if "batch_stats" in data and model is None:
        raise DsdsimError("calibrating from a batch_stats file needs --model (the model that was measured)")
    from dsdsim.bench.calibrate import run_calibrate
    from dsdsim.specs.catalog import load_hardware

    load_hardware(hardware)
    try:
        spec, summary = run_calibrate(report, hardware, output, model=model, drafter=drafter, context=context, name=name)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DsdsimError):
            raise
        raise DsdsimError(f"--report {report}: cannot calibrate from it ({exc})") from None
    typer.echo(f"wrote {output}", err=True)
    con = _console()
    for key in ("uncalibrated", "calibrated"):
        b = summary.get(key)
        if b and b.get("n"):
            con.print(f"{key}: n={b['n']}, median |error| {b['median_abs_pct_error']:.1f}%, MAPE {b['mape']:.1f}%")
    fitted = summary.get("fitted", {})
    con.print("fitted: " + ", ".join(f"{k}={v:.3g}" for k, v in fitted.items() if isinstance(v, (int, float))))


# --- entry point ------------------------------------------------------------------------------------


def _click_exceptions():
    """(ClickException, NoArgsIsHelpError, Abort) classes: typer >= 0.2x bundles its own click, older uses click."""
    try:
        from typer._click import exceptions as exc_mod
    except ImportError:  # typer that depends on the click package
        import click.exceptions as exc_mod
    no_args = getattr(exc_mod, "NoArgsIsHelpError", None)
    abort = getattr(exc_mod, "Abort", None)
    classes = (exc_mod.ClickException,)
    try:
        import click.exceptions as click_exc  # both may be present; errors may come from either

        classes = classes + (click_exc.ClickException,)
        no_args = no_args or getattr(click_exc, "NoArgsIsHelpError", None)
        abort = abort or click_exc.Abort
    except ImportError:
        pass
    return classes, no_args, abort


def main(argv: Optional[list[str]] = None) -> None:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    click_errors, no_args_error, abort_error = _click_exceptions()
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="dsdsim", standalone_mode=False)
    except DsdsimError as exc:
        typer.echo(f"dsdsim: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click/typer usage errors, from whichever click is in use
        if no_args_error is not None and isinstance(exc, no_args_error):
            ctx = getattr(exc, "ctx", None)
            typer.echo(ctx.get_help() if ctx is not None else "dsdsim --help")
            sys.exit(0)
        if abort_error is not None and isinstance(exc, abort_error):
            typer.echo("dsdsim: aborted", err=True)
            sys.exit(130)
        if not isinstance(exc, click_errors):
            raise
        msg = " ".join(exc.format_message().split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"dsdsim: error: {msg}{hint}", err=True)
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    if isinstance(rv, int) and rv:
        sys.exit(rv)
