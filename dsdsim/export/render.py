"""Results as text for people: tables (``dsdsim.export.text`` renderables, never printed here), JSON and TSV.

Each function takes a result the library computed (a step breakdown, a Prediction, plan rows, an accuracy
report, a spec summary) and returns something to print; the command line turns it into text
(``dsdsim.export.text.to_text``) and prints it.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Optional, Sequence

from dsdsim.files import to_json  # noqa: F401 - the one JSON writer (dsdsim.files), where the views import it
from dsdsim.units import format_percent

if TYPE_CHECKING:
    from dsdsim.policy.predict import Prediction
    from dsdsim.export.views import ExplainView


# --- JSON ---------------------------------------------------------------------------------------------



def engine_text(eng) -> str:
    """An engine and the releases its spec covers: 'vllm 0.8.5-0.13', 'vllm >=0.29 (model runner V2)', 'ideal'
    (``eng``: an EngineSpec, or a view with the range as text)."""
    versions = getattr(eng, "versions", None)
    versions = getattr(versions, "label", versions)
    text = f"{eng.name} {versions}" if versions and versions != "-" else str(eng.name)
    runner = getattr(eng, "runner", None)
    return text + (f" (model runner {runner.upper()})" if runner else "")

# --- spec summaries -----------------------------------------------------------------------------------


def models_table(rows: Sequence[dict]):
    from dsdsim.export.text import Table

    from dsdsim.units import format_count, format_si

    t = Table(title="Models (dsdsim list models)")
    for col in ("name", "family", "params", "active", "layers", "attention", "MoE", "KV/token (bf16)"):
        t.add_column(col, justify="right" if col in ("params", "active", "layers", "KV/token (bf16)") else "left",
                     no_wrap=col == "name")
    for r in rows:
        moe = f"{r['num_experts']}e top-{r['experts_per_token']}" if r["num_experts"] else "dense"
        if r["shared_experts"]:
            moe += f" +{r['shared_experts']} shared"
        t.add_row(r["name"], r["family"], format_count(r["params_total"]), format_count(r["params_active"]),
                  str(r["num_layers"]), r["attention"], moe, format_si(r["kv_bytes_per_token"], "B"))
    return t


def hardware_table(rows: Sequence[dict]):
    from dsdsim.export.text import Table

    from dsdsim.units import format_si

    t = Table(title="Hardware (dense peaks; dsdsim list hardware)")
    for col in ("name", "memory", "bandwidth", "bf16 peak", "fp8 peak", "ridge bf16", "link (1 dir)", "description"):
        t.add_column(col, justify="left" if col in ("name", "description") else "right", no_wrap=col == "name")
    for r in rows:
        peaks = r["peak_flops_per_s"]
        ridge = r["ridge_point_flop_per_byte"].get("bf16")
        t.add_row(r["name"], format_si(r["memory_bytes"], "B"), format_si(r["memory_bandwidth_bytes_per_s"], "B/s"),
                  format_si(peaks["bf16"], "FLOP/s") if "bf16" in peaks else "-",
                  format_si(peaks["fp8"], "FLOP/s") if "fp8" in peaks else "-",
                  f"{ridge:.0f} FLOP/B" if ridge else "-", format_si(r["link_bandwidth_bytes_per_s"], "B/s"),
                  r["description"])
    return t


def kv_table(title: str, data: dict):
    """A two-column field/value table. Units follow the key: *_bytes -> B, *_flops* -> FLOP, *_s -> µs/ms/s,
    efficiencies and fractions as plain numbers; nested spec figures show their value (sources: --format json)."""
    from dsdsim.export.text import Table

    t = Table(title=title, show_header=False)
    t.add_column("field")
    t.add_column("value")
    for k, v in data.items():
        t.add_row(k, format_field(k, v))
    return t


def format_seconds(s: float) -> str:
    """Seconds as µs below 1 ms, ms below 1 s (plain decimals, never 3.74e-06)."""
    a = abs(s)
    if a == 0:
        return "0 s"
    if a < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if a < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def format_field(key: str, v) -> str:
    """One value for people, its unit taken from the key's suffix (the spec files' naming convention)."""
    from dsdsim.units import format_si

    if isinstance(v, dict):
        if "value" in v:                           # a sourced figure: show the value only
            return format_field(key, v["value"])
        return ", ".join(f"{a}={format_field(a if _has_unit(a) else key, b)}" for a, b in v.items()
                         if a not in _PROVENANCE)
    if isinstance(v, list):
        return "; ".join(format_field(key, x) for x in v)
    if isinstance(v, float) and v == float("inf"):
        return "unlimited"
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return str(v)
    if isinstance(v, int) and key.startswith("params"):
        return f"{v:,}"
    if isinstance(v, (int, float)):
        if key.endswith("_s") and not key.endswith("per_s"):
            return format_seconds(float(v))
        if "bytes" in key:
            return format_si(float(v), "B/s" if key.endswith("per_s") else "B")
        if "flops" in key:
            return format_si(float(v), "FLOP/s" if key.endswith("per_s") else "FLOP")
        if key in _UNIT_OF_PARENT:
            return _UNIT_OF_PARENT[key](float(v))
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    return str(v)


_PROVENANCE = ("source", "verified", "note")      # shown by --format json, too long for a table cell


def _has_unit(key: str) -> bool:
    return key.endswith("_s") or "bytes" in key or "flops" in key or key.endswith(("fraction", "_p", "tokens"))


# dict-valued fields whose entries share the parent's unit
_UNIT_OF_PARENT = {
    "efficiency": lambda x: f"{x:.3g}",
    "ridge_point_flop_per_byte": lambda x: f"{x:.0f} FLOP/B",
}


# --- explain ------------------------------------------------------------------------------------------


def explain_view(data: "ExplainView"):
    """The per-operator breakdown of one step (a report.ExplainView) as header, tables and footer."""
    from dsdsim.export.text import Group, Table

    from dsdsim.units import format_si

    dep, eng = data.deployment, data.engine
    parts: list = [f"[bold]{data.model}[/bold] on {data.hardware} (tp {dep.tp}, ep {dep.ep}, " + (f"pp {dep.pp}, " if getattr(dep, "pp", 1) > 1 else "") +
                   f"{dep.weights_label}, {dep.kv_dtype} KV{dep.routing_label}) — drafter {data.drafter}, "
                   f"B={data.batch_size}, K={data.k}, context {data.context}, engine {engine_text(eng)}",
                   f"priced: the step of {data.server}"]
    for name, phase in (("draft", data.draft), ("verify", data.verify)):
        if not phase.ops:
            continue
        t = Table(title=f"{name} ({format_si(phase.totals.time_s, 's')})")
        for col in ("operator", "count", "FLOPs", "bytes", "FLOP/B", "time", "fixed", "BW %", "bound", "share"):
            t.add_column(col, justify="left" if col in ("operator", "bound") else "right", no_wrap=col == "operator")
        for r in phase.ops:
            ai, bw = r.intensity_flop_per_byte, r.bandwidth_fraction
            t.add_row(r.name, f"{r.count:g}", format_si(r.flops), format_si(r.bytes + r.comm_bytes, "B"),
                      "-" if ai is None else f"{ai:.1f}", format_si(r.time_s, "s"), format_si(r.overhead_s, "s"),
                      "-" if not bw or r.comm_bytes else f"{100 * bw:.0f}", r.bound, format_percent(r.share))
        parts.append(t)
    if eng.rows:
        t = Table(title=f"engine {engine_text(eng)} ({format_si(eng.time_s, 's')})")
        for col in ("term", "time", "note"):
            t.add_column(col, justify="right" if col == "time" else "left", no_wrap=col == "term")
        for r in eng.rows:
            t.add_row(r.term, format_si(r.time_s, "s"), r.note)
        t.add_row("CUDA graph", "-", eng.cuda_graph)
        parts.append(t)
    mem = data.memory
    band = (f" ({data.interval.split(',')[0]}: {format_si(data.step_time_low_s, 's')} - "
            f"{format_si(data.step_time_high_s, 's')}, held-out corpus errors of {data.interval.split(', ', 1)[1]})"
            if data.interval else "")
    parts.append(f"fixed overheads {format_si(data.overhead_s, 's')}; step time "
                 f"[bold]{format_si(data.step_time_s, 's')}[/bold]{band}")
    if data.stage_times_s:
        stages = ", ".join(f"stage {i} {format_si(t, 's')}" for i, t in enumerate(data.stage_times_s))
        parts.append(f"pipeline stages (each with its send to the next): {stages}; {data.microbatches} batches of "
                     f"B={data.batch_size} in flight, so the replica emits {data.microbatches} x B tokens per step time")
    if data.experts_touched is not None:
        parts.append(f"experts touched per MoE layer (verify): {data.experts_touched:.1f} of {data.num_experts}")
    parts.append(f"memory per GPU: {format_si(mem.used_bytes, 'B')} of {format_si(mem.capacity_bytes, 'B')} "
                 f"usable ({memory_parts(mem)}) — " + ("fits" if mem.feasible else "[red]DOES NOT FIT[/red]"))
    if data.fits_with:
        parts.append(data.fits_with)
    return Group(*parts)


def memory_parts(mem) -> str:
    """'weights 16.2 GB, KV 16.8 MB, activations 1.2 GB, drafter 0.4 GB, recurrent state 20 MB': every part of the
    used memory (a part that is zero is left out), so the parts add up to the total shown."""
    from dsdsim.units import format_si

    parts = [("weights", mem.weights_bytes), ("KV", mem.kv_bytes), ("activations", mem.activation_bytes),
             ("drafter", mem.draft_bytes), ("recurrent state", mem.state_bytes)]
    return ", ".join(f"{name} {format_si(v, 'B')}" for name, v in parts if v or name in ("weights", "KV"))


# --- predict ------------------------------------------------------------------------------------------


def display_batches(p: "Prediction") -> list[int]:
    """The batch sizes a table shows: all of them up to 24, else the ends, powers of two, range starts, and the
    first batch size of each run where the best K* differs from the table's K."""
    b = [int(x) for x in p.batch_sizes]
    if len(b) <= 24:
        return b
    keep = {b[0], b[-1]} | {x for x in b if x & (x - 1) == 0}
    keep |= {start for start, _, _ in p.ranges() if start in set(b)}
    best, table = [int(k) for k in p.k_best], [int(k) for k in p.table.k_per_batch]
    keep |= {b[j] for j in range(len(b)) if best[j] != table[j] and (j == 0 or best[j - 1] != best[j])}
    return sorted(keep)


def prediction_view(p: "Prediction"):
    """Header, the exported table over the displayed batch sizes (its K and that K's figures; K* where the best K
    differs), the ranges, what the tolerance gave up, and the notes."""
    from dsdsim.export.text import Group, Table

    from dsdsim.export.prediction import (acceptance_view, budget_view, engine_ref, prediction_server, robust_view,
                                          row_view, table_summary, tolerance_merged)
    from dsdsim.export.deployment import deployment_view

    setup = p.setup
    dep = deployment_view(setup.model, setup.deployment)
    parts: list = [f"[bold]{setup.model.name}[/bold] on [bold]{setup.hardware.name}[/bold] (tp {dep.tp}, ep {dep.ep}, " + (f"pp {dep.pp}, " if getattr(dep, "pp", 1) > 1 else "") +
                   f"{dep.weights_label}, {dep.kv_dtype} KV{dep.routing_label}), drafter [bold]{setup.drafter.label}[/bold], context "
                   f"{p.context}, engine [bold]{engine_text(engine_ref(p))}[/bold]",
                   f"acceptance: {acceptance_view(p).description}",
                   f"priced: {prediction_server(p)}"]
    shown = display_batches(p)
    position = {int(b): j for j, b in enumerate(p.batch_sizes)}
    tree = p.tree
    differs = bool((p.table.k_per_batch != p.k_best).any())     # the table is not K* somewhere: show both
    if tree is None:
        title = "K per batch size" if differs else "Best K per batch size"
        cols = ("batch", "K", *(("K*",) if differs else ()), "tau", "step ms", "ITL ms", "tokens/s", "vs K=0",
                f"vs K={p.fixed_k}", "fits")
    else:
        title = f"Draft tree {tree.steps},{tree.topk},{tree.tokens} or plain decoding per batch size"
        cols = ("batch", "draft", *(("best",) if differs else ()), "tau", "step ms", "ITL ms", "tokens/s", "vs plain",
                "vs tree always", "fits")
    shown_note = f"rows shown: {len(shown)} of {len(position)}"
    if differs:
        title += " in the exported table, with its figures"
        shown_note = f"{cols[2]}: the best per batch size; " + shown_note
    t = Table(title=f"{title} ({shown_note})")
    for col in cols:
        t.add_column(col, justify="right")

    def f(x, spec):
        return "-" if x is None else format(x, spec)

    def k_cell(k):
        if k is None:
            return "-"
        return ("tree" if k > 0 else "plain") if tree is not None else str(k)

    def ranged(x, lo, hi, spec):
        if x is None:
            return "-"
        return format(x, spec) + (f" ({format(lo, spec)}-{format(hi, spec)})" if lo is not None else "")

    for b in shown:
        r = row_view(p.row(position[b]))
        best = (k_cell(r.k_best),) if differs else ()
        t.add_row(str(b), k_cell(r.k), *best, f(r.tau, ".2f"),
                  ranged(r.step_ms, r.step_ms_low, r.step_ms_high, ".2f"),
                  ranged(r.itl_ms, r.itl_ms_low, r.itl_ms_high, ".2f"),
                  ranged(r.tokens_per_s, r.tokens_per_s_low, r.tokens_per_s_high, ",.0f"),
                  f(r.speedup_vs_vanilla, ".2f") + ("x" if r.k is not None and
                  r.speedup_vs_vanilla is not None else ""),
                  f(r.speedup_vs_fixed_k, ".2f") + ("x" if r.speedup_vs_fixed_k is not None else ""),
                  "yes" if r.feasible else "[red]no[/red]")
    parts.append(t)
    from dsdsim.export.prediction import intervals_view

    iv = intervals_view(p)
    if iv is not None:
        parts.append(f"({format_percent(iv.coverage, 0)}: low-high) intervals from the held-out errors of comparable "
                     "corpus "
                     f"cases: {', '.join(iv.strata)}; 'vs K=0' compares with a server without speculation")
    ranges = p.ranges()
    fmt = engine_format(p)
    if ranges and tree is None:
        parts.append(f"K table ({ENGINE_TABLES[fmt][1]}): " + json.dumps([list(r) for r in ranges]))
    elif ranges:
        parts.append(f"tree ({tree.steps} draft passes over top-{tree.topk}, {tree.tokens + 1} verify tokens per "
                     "sequence) at batch sizes " + json.dumps([[s, e] for s, e, k in ranges if k > 0])
                     + f"; K = {tree.steps} stands for the tree in json/csv (with a 'draft' column)")
    if ranges:
        parts.append(table_summary(p) + ("; --max-ranges 0 for the exact table" if tolerance_merged(p) else ""))
        budget = budget_view(p)
        if budget is not None:
            parts.append(budget_table(budget))
    margins = p.margins()
    if margins:
        parts.append(margin_table(p, margins))
    r = robust_view(p)
    if r is not None:
        parts.append(f"robust K over acceptance band {r.band[0]} .. {r.band[1]}: worst regret at the low edge "
                     f"{format_percent(r.regret_low_edge_max or 0)}, high edge "
                     f"{format_percent(r.regret_high_edge_max or 0)}")
    for note in p.notes:
        if not note.startswith("acceptance:"):   # already in the header
            parts.append(f"note: {note}")
    from dsdsim.export.prediction import PredictFormat, best_speedup, export_refusals

    gain = best_speedup(p)
    if not ranges:
        pass                                     # the notes say that nothing fits: nothing to paste
    elif all(k == 0 for _, _, k in ranges):
        parts.append("Speculation never pays here: serve without speculative decoding (no engine table to paste)")
    elif gain is not None and gain <= 1.0 and tree is None:
        parts.append(f"This drafter does not pay here: at its best the table runs {gain:.2f}x a server without "
                     "speculation. Serve without speculative decoding; engine tables are not written without --force")
    elif tree is None:
        refusals = export_refusals(p, PredictFormat(fmt))
        others = ", ".join(n for n in ENGINE_TABLES if n != fmt)
        engine = ENGINE_TABLES[fmt][0]
        if refusals:
            parts.append(f"Not for {engine} as it stands: {refusals[0]} (--format {fmt} --force writes it anyway; "
                         f"also {others}, json, csv)")
        else:
            parts.append(f"Paste into {engine}: dsdsim predict ... --format {fmt}   (also {others}, json, csv)")
    else:
        parts.append("For SGLang: dsdsim predict ... --format sglang   (also json, csv; vLLM and TensorRT-LLM tables "
                     "are chains only)")
    return Group(*parts)


def budget_table(b):
    """Each exported range under the range budget: the exact table's ranges it merged and its worst batch size."""
    from dsdsim.export.text import Table

    t = Table(title=f"What the budget of {b.max_ranges} ranges gives up (the exact table has {b.exact_ranges})")
    for col in ("range", "K", "exact table inside it", "worst loss"):
        t.add_column(col, justify="left" if col == "exact table inside it" else "right", no_wrap=col == "range")
    for r in b.ranges:
        inside = [f"{s}-{e}: K={k}" if s != e else f"{s}: K={k}" for s, e, k in r.exact_ranges]
        merged = ", ".join(inside) if len(inside) <= 6 else ", ".join(inside[:5]) + f", ... ({len(inside)} ranges)"
        t.add_row(f"{r.start}-{r.end}", str(r.k), merged if len(inside) > 1 else "the same",
                  "0%" if r.max_goodput_loss <= 0 else f"{format_percent(r.max_goodput_loss, 2)} at {r.worst_batch}")
    return t


# engine -> (its name, what its K table is): the table text advises the engine the prediction priced
ENGINE_TABLES = {"vllm": ("vLLM", "vLLM num_speculative_tokens_per_batch_size"),
                 "sglang": ("SGLang", "SGLang --speculative-adaptive steps per batch range"),
                 "trtllm": ("TensorRT-LLM", "TensorRT-LLM draft_len_schedule ranges")}


def engine_format(p: "Prediction") -> str:
    """The engine table format (``PredictFormat`` value) of the engine the prediction priced; vLLM's where it
    priced kernels only."""
    name = p.setup.engine.name if p.setup.engine is not None else "vllm"
    return name if name in ENGINE_TABLES else "vllm"


def margin_table(p: "Prediction", margins):
    """The exported ranges with their margins: each K's gain over no speculation (its interval from the held-out
    errors of T(K)/T(0)), the runner-up K and whether the choice is sure; the rule that chose each range."""
    from dsdsim.export.text import Table

    extra = p.intervals.extra_time
    robust = any(m.point_k is not None for m in margins)
    t = Table(title=f"K table ranges and their margins ({format_percent(p.intervals.coverage, 0)} intervals: the "
                    "extra time "
                    f"of a speculative step x{extra[0]:.2f}-x{extra[1]:.2f}, held-out T(K)/T(0) pairs, n {extra[2]})")
    cols = ["range", "K", "gain vs none at start", "runner-up", "margin"] + (["chosen by"] if robust else [])
    for col in cols:
        t.add_column(col, justify="left" if col in ("margin", "chosen by") else "right",
                     no_wrap=col in ("range", "gain vs none at start"))
    for m in margins:
        gain = "-" if m.gain is None else f"{m.gain:.2f}x ({m.gain_low:.2f}-{m.gain_high:.2f})"
        ru = "-" if m.runner_up_k is None else f"K={m.runner_up_k} {m.runner_up_gain:.2f}x"
        row = [f"{m.start}-{m.end}", str(m.k), gain, ru, m.text]
        if robust:
            row.append("robust low end" + (f" (point estimate K={m.point_k})" if m.point_k != m.k else ""))
        t.add_row(*row)
    return t


def context_grid_dict(contexts: Sequence[int], preds: Sequence["Prediction"]) -> dict:
    """The exported K table over (batch x context): one table per context length, each with what its tolerance
    gave up; with a draft tree, K = the tree's steps stands for the tree (``draft_tree``)."""
    p0 = preds[0]
    tree = p0.tree
    out = {"model": p0.setup.model.name, "hardware": p0.setup.hardware.name, "drafter": p0.setup.drafter.label,
           "contexts": list(contexts), "tolerance": p0.table.tolerance}
    if tree is not None:
        out["draft_tree"] = {"steps": tree.steps, "topk": tree.topk, "tokens": tree.tokens,
                             "verify_tokens_per_sequence": tree.tokens + 1, "k_in_rows": tree.steps}
    out["tables"] = [{"context": c, "ranges": [list(r) for r in p.ranges()],
                      "k_per_batch": [int(k) for k in p.table.k_per_batch],
                      "k_best_per_batch": [int(k) for k in p.k_best],
                      "mean_goodput_loss": p.table.mean_goodput_loss, "max_goodput_loss": p.table.max_goodput_loss,
                      "ranges_at_zero_tolerance": p.table.ranges_at_zero_tolerance}
                     for c, p in zip(contexts, preds)]
    out["batch_sizes"] = [int(b) for b in p0.batch_sizes]
    return out


def context_grid_table(contexts: Sequence[int], preds: Sequence["Prediction"]):
    """The exported table's K (with a tree: tree or plain) by batch size and context, and one line per context on
    what its tolerance gave up."""
    from dsdsim.export.text import Group, Table

    from dsdsim.export.prediction import table_summary

    p0 = preds[0]
    tree = p0.tree
    what = f"draft tree {tree.steps},{tree.topk},{tree.tokens} or plain decoding" if tree is not None else "K table"
    t = Table(title=f"{what} by batch size (rows) and context (columns): {p0.setup.model.name} on "
                    f"{p0.setup.hardware.name}, {p0.setup.drafter.label}")
    t.add_column("batch", justify="right")
    for c in contexts:
        t.add_column(f"ctx {c}", justify="right")
    index = {int(b): j for j, b in enumerate(p0.batch_sizes)}

    def cell(k: int) -> str:
        if k < 0:
            return "-"
        return ("tree" if k > 0 else "plain") if tree is not None else str(k)

    for b in display_batches(p0):
        t.add_row(str(b), *[cell(int(p.table.k_per_batch[index[b]])) for p in preds])
    return Group(t, *(f"ctx {c}: {table_summary(p)}" for c, p in zip(contexts, preds)))


# --- plan ---------------------------------------------------------------------------------------------


_PLANNED = {"dsd": "DSD", "plain": "K=0"}    # the plan column: which server the GPUs and cost are for


def plan_table(title: str, rows: Sequence) -> "object":
    """Plan rows (dsdsim.plan.PlanRow) as one table, one candidate per line; why a candidate is infeasible below
    it, one line each (a note column would squeeze the candidates' names)."""
    from dsdsim.export.text import Group, Table

    def f(x, spec=",.0f"):
        return "-" if x is None else format(x, spec)

    def ranged(x, lo, hi, spec=",.0f"):
        return f(x, spec) + (f" ({format(lo, spec)}-{format(hi, spec)})" if x is not None and lo is not None else "")

    def name(r):
        return r.candidate

    t = Table(title=title)
    widest = max((len(name(r)) for r in rows), default=0)     # a candidate's name is never cut, however narrow
    for col in ("candidate", "GPUs", "B (K=0)", "tok/s/GPU (K=0)", "B (DSD)", "K", "ITL ms (DSD)", "tok/s/GPU (DSD)",
                "gain", "plan", "GPUs needed", "$/M tok"):
        t.add_column(col, justify="left" if col == "candidate" else "right", no_wrap=col == "candidate",
                     min_width=widest if col == "candidate" else None)
    for r in rows:
        t.add_row(name(r), str(r.gpus), f(r.batch_vanilla, "d"),
                  ranged(r.tokens_per_s_per_gpu_vanilla, r.tokens_per_s_per_gpu_vanilla_low,
                         r.tokens_per_s_per_gpu_vanilla_high), f(r.batch_dsd, "d"),
                  f(r.k_dsd, "d"), ranged(r.itl_ms_dsd, r.itl_ms_dsd_low, r.itl_ms_dsd_high, ".1f"),
                  ranged(r.tokens_per_s_per_gpu_dsd, r.tokens_per_s_per_gpu_dsd_low, r.tokens_per_s_per_gpu_dsd_high),
                  f(r.dsd_gain, ".2f"), _PLANNED.get(r.planned, "-"), f(r.gpus_needed, "d"),
                  f(r.cost_per_million_tokens, ".3f"))
    notes = [f"{name(r)}: {r.reason}" for r in rows if not r.feasible]
    lines = ["(ranges: the 80% interval of held-out corpus errors of comparable cases); K=0 is a server without "
             "speculation, DSD a server running the K table (its K = 0 tier included)"]
    plain = [name(r) for r in rows if r.planned == "plain" and r.tokens_per_s_per_gpu_dsd is not None]
    if any(r.gpus_needed is not None or r.cost_per_million_tokens is not None for r in rows):
        lines.append("plan: the server with more tokens/s per GPU; GPUs needed and $/M tok are that server's")
    if plain:
        lines.append(f"speculation does not pay on {', '.join(plain)} (gain <= 1): plan a server without "
                     "speculation there")
    edge = [r for r in rows if r.at_range_end]
    if edge:
        lines.append(f"{', '.join(name(r) for r in edge)}: an operating point at batch {edge[0].largest_batch}, the "
                     "largest evaluated, where the SLO may allow more: a wider range (-b 1-4096) says how far")
    return Group(t, *lines, *(f"not feasible: {n}" for n in notes))


# --- accuracy -----------------------------------------------------------------------------------------


def _pct(x: Optional[float]) -> str:
    return format_percent(x, signed=True)


def accuracy_view(report):
    """Per-case predicted vs measured, then |relative error| by split and group (an AccuracyReport)."""
    from dsdsim.export.text import Group, Table

    parts: list = []
    t = Table(title="Predicted vs measured (shipped defaults, no calibration)")
    for col in ("case", "split", "quantity", "measured", "predicted", "error", "acceptance"):
        t.add_column(col, justify="right" if col in ("measured", "predicted", "error") else "left",
                     no_wrap=col == "case")
    skipped = []
    for c in report.cases:
        if c.predicted is None:
            skipped.append(c)
            continue
        t.add_row(c.id, c.split, c.quantity, f"{c.measured:.4g}", f"{c.predicted:.4g}", _pct(c.rel_error),
                  c.acceptance + (" [red](does not fit)[/red]" if c.fits_in_memory is False else ""))
    parts.append(t)
    if skipped:
        parts.append(f"{len(skipped)} cases in the corpus are not predicted (kernel-level, acceptance-only or "
                     f"missing conditions); `--format json` lists each with its reason.")
    g = Table(title="|relative error| by split and group")
    for col in ("split", "group", "n", "median |err|", "max |err|"):
        g.add_column(col, justify="right" if col in ("n", "median |err|", "max |err|") else "left")

    def row(split: str, group: str, s) -> None:
        if s.n:
            g.add_row(split, group, str(s.n), format_percent(s.median_abs_rel_error),
                      format_percent(s.max_abs_rel_error))

    for split, s in report.summary.items():
        row(split, "all", s)
        for grp in report.groups:
            if grp.split == split:
                row(split, f"{grp.axis}={grp.value}", grp.summary)
    parts.append(g)
    for f in report.fitted:
        parts.append(f"acceptance fitted where the source gives none: {f.group} ({f.split}, n={f.n}): "
                     f"alpha {f.alpha:.3f}")
    if report.checks is not None:
        parts += checks_lines(report.checks)
    if report.cv is not None:
        parts.append(points_cv_table(report.cv) if hasattr(report.cv, "grids") else cv_table(report.cv))
    return Group(*parts)


def checks_lines(chk) -> list[str]:
    """One line each: T(K)/T(0) against the measured pairs, and the K choice where a source measured several K."""
    out = []
    s = chk.step_ratio_summary()
    if s["n"]:
        out.append(f"T(K)/T(0), modern engines (async scheduling with speculation), batch 8-256: n {s['n']}, median "
                   f"|error| {format_percent(s['median_abs_rel_error'])}, max {format_percent(s['max_abs_rel_error'])}")
    a = chk.step_ratio_summary(modern_only=False)
    if a["n"]:
        out.append(f"T(K)/T(0), every measured pair: n {a['n']}, median |error| "
                   f"{format_percent(a['median_abs_rel_error'])}, "
                   f"max {format_percent(a['max_abs_rel_error'])}")
    lb = chk.large_batch_summary()
    if lb["n"]:
        out.append(f"T(K)/T(0) at batch >= 32 (target median <= 8%): n {lb['n']}, median |error| "
                   f"{format_percent(lb['median_abs_rel_error'])}, max {format_percent(lb['max_abs_rel_error'])}")
    by_source = chk.regret_by_source()
    if by_source:
        worst = max(by_source.items(), key=lambda kv: kv[1]["max_regret"])
        out.append(f"K choice per source (target: no source above 5%): worst {worst[0]} max "
                   f"{format_percent(worst[1]['max_regret'])} (mean {format_percent(worst[1]['mean_regret'])}, "
                   f"n {worst[1]['n']})")
    for split in ("train", "test"):
        r = chk.regret_summary(split)
        if r["n"]:
            out.append(f"K choice where a source measured several K ({split}): {r['best_k_matches']} of {r['n']} best K "
                       f"matched; goodput given up mean {format_percent(r['mean_regret'])}, "
                       f"max {format_percent(r['max_regret'])}")
    return out


def points_cv_table(cv):
    """Each source grid calibrated on the points the plan rule picks (dsdsim.fit.cv.PointsCV): the held-out error and
    the K choice, calibrated and with the shipped figures."""
    from dsdsim.export.text import Group, Table

    t = Table(title=f"Calibrated on {cv.n} points of each source grid (the points `dsdsim calibrate --plan {cv.n}` "
                    "picks), the other points scored")

    pct = format_percent
    for col in ("source grid", "split", "points", "median |err|", "max |err|", "shipped median", "regret mean / max",
                "shipped regret mean / max"):
        t.add_column(col, justify="left" if col in ("source grid", "split") else "right")
    for name, g in cv.grids.items():
        t.add_row(name, g.split, f"{g.n_points - len(g.calibrated_on)} of {g.n_points}", pct(g.median_abs_rel_error),
                  pct(g.max_abs_rel_error), pct(g.uncalibrated_median_abs_rel_error),
                  f"{pct(g.regret_mean)} / {pct(g.regret_max)}",
                  f"{pct(g.uncalibrated_regret_mean)} / {pct(g.uncalibrated_regret_max)}")
    lines = [t] if cv.grids else ["no source grid holds 8 or more (batch, K) points"]
    return Group(*lines, "targets: held-out median <= 5%, regret <= 1% mean / <= 3% max on every source grid")


def cv_table(cv):
    """Leave-one-source-out error per source (dsdsim.fit.cv.SourceCV), worst first, then the summary lines."""
    from dsdsim.export.text import Group, Table

    t = Table(title="Leave one source out: every fitted figure refitted without the source, the source predicted")
    for col in ("source", "split", "n", "median |err|", "max |err|"):
        t.add_column(col, justify="right" if col in ("n", "median |err|", "max |err|") else "left")
    rows = sorted(cv.sources.values(), key=lambda s: -(s.median_abs_rel_error or 0.0))
    for s in rows:
        if s.n:
            note = f" ({s.acceptance_fitted} with acceptance fitted)" if s.acceptance_fitted else ""
            t.add_row(s.source + note, s.split, str(s.n), format_percent(s.median_abs_rel_error),
                      format_percent(s.max_abs_rel_error))
    lines = [t]
    med = cv.median_of_source_medians
    if med is not None:
        worst = cv.worst_source
        lines.append(f"median of per-source medians {format_percent(med)}; worst source {worst.source} "
                     f"{format_percent(worst.median_abs_rel_error)}")
    for split in ("train", "test"):
        o = cv.overall(split)
        if o["n"]:
            lines.append(f"{split}, every case held out with its source: n {o['n']}, median "
                         f"{format_percent(o['median_abs_rel_error'])}, max {format_percent(o['max_abs_rel_error'])}")
    return Group(*lines)
