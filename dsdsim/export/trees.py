"""A TreeFamilyPrediction (``dsdsim.policy.trees``) as a table, JSON and CSV, and why engines cannot read it.

JSON keys: ``model``, ``hardware``, ``engine``, ``deployment``, ``drafter``, ``context``, ``family`` [{tree, steps,
topk, tokens, verify_tokens_per_sequence, tau, mean_relative_goodput}], ``rows`` [{batch, choice, tau, step_ms,
itl_ms, tokens_per_s, vs_best_single, vs_plain, fits}], ``ranges`` [[start, end, choice]], ``best_single`` {tree,
mean_relative_goodput, gain_mean, gain_max}, ``sglang`` [{tree, batch_ranges, server_args}] and ``notes``. CSV: the
rows. No engine reads a tree per batch size: vLLM's and TensorRT-LLM's tables are chains, SGLang runs one tree per
server (``engine_refusal``).
"""
from __future__ import annotations

import json
from dataclasses import field
from typing import TYPE_CHECKING, Optional

from dsdsim.errors import DsdsimError
from dsdsim.export.prediction import EngineRef, IntervalsView, PredictFormat, _num, intervals_view
from dsdsim.records import frozen
from dsdsim.units import format_percent

if TYPE_CHECKING:
    from dsdsim.export.deployment import DeploymentView
    from dsdsim.policy.trees import TreeFamilyPrediction, TreeFamilyRow, TreeMember

# Why each engine format cannot carry a tree chosen per batch size (docs/reference/engines.md §1-§4).
_CHAIN_FORMATS = {
    PredictFormat.vllm: "vLLM's num_speculative_tokens_per_batch_size table gives a chain length K per batch size "
                        "and cannot carry a draft tree",
    PredictFormat.trtllm: "TensorRT-LLM's draft_len_schedule gives a chain length per batch size and cannot carry a "
                          "draft tree",
    PredictFormat.vllm_batch_stats: "vllm-batch-stats holds step times per batch size and chain length K for vLLM's "
                                    "profiling and cannot carry a draft tree",
}
# SGLang: --speculative-adaptive changes speculative_num_steps by batch size only for chains (topk 1); a tree is
# fixed for the server's life (docs/advanced_features/adaptive_speculative_decoding.md; engines.md §3)
SGLANG_ONE_TREE = ("SGLang runs one tree per server (its adaptive mode varies --speculative-num-steps only for "
                   "chains, topk 1)")


def early_refusal(fmt: PredictFormat) -> Optional[str]:
    """The one-line reason a chain-only format cannot carry a tree family (None: the format can be rendered, or
    SGLang, whose refusal names the trees and needs the result)."""
    reason = _CHAIN_FORMATS.get(fmt)
    if reason is None:
        return None
    return f"--tree-family chooses a tree per batch size; {reason}: export it as table, json or csv"


def sglang_args(member: "TreeMember") -> dict:
    """SGLang's launch arguments for one tree: num-draft-tokens counts the root (tokens + 1)."""
    t = member.tree
    return {"speculative_num_steps": t.steps, "speculative_eagle_topk": t.topk,
            "speculative_num_draft_tokens": t.tokens + 1}


def _flags(member: "TreeMember") -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sglang_args(member).items())


def spans_text(spans: list[tuple[int, int]]) -> str:
    """'1-12, 42-1024': batch ranges as the table and the advice print them."""
    return ", ".join(f"{s}-{e}" if s < e else str(s) for s, e in spans)


def choice_ranges(p: "TreeFamilyPrediction") -> dict[str, list[tuple[int, int]]]:
    """Each choice's batch ranges, in order of first appearance."""
    out: dict[str, list[tuple[int, int]]] = {}
    for s, e, c in p.ranges():
        out.setdefault(c, []).append((s, e))
    return out


def sglang_advice(p: "TreeFamilyPrediction") -> str:
    """Which tree to launch SGLang with for each batch range, in one line."""
    parts = []
    for choice, spans in choice_ranges(p).items():
        if choice == "plain":
            parts.append(f"batch {spans_text(spans)}: no speculative decoding")
        else:
            parts.append(f"batch {spans_text(spans)}: tree {choice} ({_flags(p.member(choice))})")
    return "launch it with the tree of the batch range it serves most: " + "; ".join(parts)


def engine_refusal(p: "TreeFamilyPrediction", fmt: PredictFormat) -> Optional[str]:
    """The one-line refusal of an engine format (None for table, json, csv)."""
    early = early_refusal(fmt)
    if early is not None:
        return early
    if fmt is PredictFormat.sglang:
        return (f"--tree-family chooses a tree per batch size; {SGLANG_ONE_TREE}: {sglang_advice(p)} (json and csv "
                "give the rows)")
    return None


@frozen
class FamilyMemberView:
    tree: str                            # STEPS,TOPK,TOKENS
    steps: int
    topk: int
    tokens: int
    verify_tokens_per_sequence: int      # tokens + 1 (the root)
    tau: float                           # the mean acceptance length measured with the tree
    mean_relative_goodput: float         # mean over batch sizes of its goodput / the best choice's (0: no fit)


@frozen
class BestSingleView:
    tree: str
    mean_relative_goodput: float
    gain_mean: Optional[float]           # mean of (best choice / this tree's goodput − 1) where the tree fits
    gain_max: Optional[float]


@frozen
class SglangTreeView:
    tree: str
    batch_ranges: tuple[tuple[int, int], ...]
    server_args: dict


@frozen
class TreeFamilyView:
    """The JSON contract of ``dsdsim predict --tree-family ... --format json``."""

    model: str
    hardware: str
    engine: EngineRef
    deployment: "DeploymentView"
    drafter: str
    context: int
    family: tuple[FamilyMemberView, ...]
    rows: tuple["TreeFamilyRow", ...]
    ranges: tuple[tuple[int, int, str], ...]
    best_single: BestSingleView
    sglang: tuple[SglangTreeView, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    intervals: Optional[IntervalsView] = field(default=None, metadata={"omit_none": True})   # how *_low/high came

    def to_dict(self) -> dict:
        from dsdsim.export.views import json_plain

        return json_plain(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _row(r: "TreeFamilyRow") -> "TreeFamilyRow":
    from dataclasses import fields, replace

    return replace(r, **{f.name: _num(getattr(r, f.name)) for f in fields(r)})


def family_view(p: "TreeFamilyPrediction") -> TreeFamilyView:
    from dsdsim.export.deployment import deployment_view

    s = p.setup
    e = s.engine
    gain_mean, gain_max = p.gain_over_best_single()
    by_choice = choice_ranges(p)
    return TreeFamilyView(
        model=s.model.name, hardware=s.hardware.name,
        engine=EngineRef(name=e.name if e is not None else None, source=s.engine_source,
                         versions=e.versions.label if e is not None and e.versions is not None else None),
        deployment=deployment_view(s.model, s.deployment), drafter=s.drafter.label, context=p.context,
        family=tuple(FamilyMemberView(m.label, m.tree.steps, m.tree.topk, m.tree.tokens, m.tree.tokens + 1,
                                      m.length, float(p.mean_relative_goodput[i])) for i, m in enumerate(p.family)),
        rows=tuple(_row(r) for r in p.rows),
        ranges=tuple(p.ranges()),
        best_single=BestSingleView(p.best_single_label, float(p.mean_relative_goodput[p.best_single]),
                                   _num(gain_mean), _num(gain_max)),
        sglang=tuple(SglangTreeView(c, tuple(spans), sglang_args(p.member(c)))
                     for c, spans in by_choice.items() if c != "plain"),
        notes=tuple(notes(p)), intervals=intervals_view(p))


def notes(p: "TreeFamilyPrediction") -> list[str]:
    import numpy as np

    out = []
    b = p.batch_sizes
    fits = p.choice >= 0
    if not fits.any():
        out.append(f"no batch size fits in memory at context {p.context} with any tree or plain decoding")
    elif not fits.all():
        out.append(f"batch sizes from {int(b[~fits][0])} do not fit in memory at context {p.context} (marked "
                   "infeasible)")
    for i, m in enumerate(p.family):
        bad = ~p.feasible[1 + i] & fits
        if bad.any():
            out.append(f"tree {m.label} does not fit from batch {int(b[bad][0])} (counted as 0 in its mean)")
    if len(b) > 1 and (np.diff(b) > 1).any():
        out.append("ranges: batch sizes between evaluated ones take the choice of the evaluated size below")
    return out


def render(p: "TreeFamilyPrediction", fmt: PredictFormat) -> str:
    """JSON or CSV text; the engine formats are refused in one line."""
    refusal = engine_refusal(p, fmt)
    if refusal is not None:
        raise DsdsimError(refusal)
    if fmt is PredictFormat.json:
        return family_view(p).to_json()
    if fmt is PredictFormat.csv:
        from dsdsim.export.engines import table_csv
        from dsdsim.export.views import json_plain

        return table_csv([json_plain(_row(r)) for r in p.rows])
    raise ValueError(f"no text renderer for {fmt}")


def display_batches(p: "TreeFamilyPrediction") -> list[int]:
    """All batch sizes up to 24, else the ends, the powers of two and the first batch size of every range."""
    b = [int(x) for x in p.batch_sizes]
    if len(b) <= 24:
        return b
    keep = {b[0], b[-1]} | {x for x in b if x & (x - 1) == 0}
    keep |= {start for start, _, _ in p.ranges() if start in set(b)}
    return sorted(keep)


def _pct(x: float) -> str:
    return format_percent(x, signed=True)


def family_table(p: "TreeFamilyPrediction"):
    """Header (setup, family), the best choice over the displayed batch sizes, the ranges, the gain over the best
    single tree, and which tree to launch SGLang with."""
    from dsdsim.export.text import Group, Table

    from dsdsim.export.render import engine_text

    view = family_view(p)
    dep = view.deployment
    family = ", ".join(f"{m.tree} (AL {m.tau:g})" for m in view.family)
    parts: list = [f"[bold]{view.model}[/bold] on [bold]{view.hardware}[/bold] (tp {dep.tp}, ep {dep.ep}, "
                   f"{dep.weights_label}, {dep.kv_dtype} KV{dep.routing_label}), drafter [bold]{view.drafter}[/bold], context "
                   f"{view.context}, engine [bold]{engine_text(view.engine)}[/bold]",
                   f"tree family (STEPS,TOPK,TOKENS, AL measured with each): {family}"]
    shown = display_batches(p)
    position = {int(b): j for j, b in enumerate(p.batch_sizes)}
    single = view.best_single.tree
    t = Table(title=f"Best draft tree (or plain decoding) per batch size (rows shown: {len(shown)} of "
                    f"{len(position)})")
    for col in ("batch", "choice", "tau", "step ms", "ITL ms", "tokens/s", f"vs {single}", "vs plain", "fits"):
        t.add_column(col, justify="right")

    def f(x, spec, suffix=""):
        return "-" if x is None else format(x, spec) + suffix

    def ranged(x, lo, hi, spec):        # as the K table shows them (dsdsim.export.render)
        return f(x, spec) + (f" ({format(lo, spec)}-{format(hi, spec)})" if x is not None and lo is not None else "")

    for b in shown:
        r = view.rows[position[b]]
        t.add_row(str(b), r.choice or "-", f(r.tau, ".2f"), ranged(r.step_ms, r.step_ms_low, r.step_ms_high, ".2f"),
                  ranged(r.itl_ms, r.itl_ms_low, r.itl_ms_high, ".2f"),
                  ranged(r.tokens_per_s, r.tokens_per_s_low, r.tokens_per_s_high, ",.0f"),
                  f(r.vs_best_single, ".2f", "x"), f(r.vs_plain, ".2f", "x"), "yes" if r.fits else "[red]no[/red]")
    parts.append(t)
    if view.intervals is not None:
        parts.append(f"({format_percent(view.intervals.coverage, 0)}: low-high) intervals from the held-out errors of "
                     f"comparable corpus cases: {', '.join(view.intervals.strata)}")
    if view.ranges:
        parts.append("ranges (start, end, choice): " + json.dumps([list(r) for r in view.ranges]))
        bs = view.best_single
        lo, hi = int(p.batch_sizes[0]), int(p.batch_sizes[-1])
        parts.append(f"best single tree over batch {lo}-{hi}: {bs.tree} "
                     f"(mean {format_percent(bs.mean_relative_goodput)} "
                     f"of the best choice's goodput); the best choice per batch size gains {_pct(bs.gain_mean)} "
                     f"mean, {_pct(bs.gain_max)} max over it")
        parts.append(f"For SGLang: {SGLANG_ONE_TREE}; {sglang_advice(p)}")
    for note in view.notes:
        parts.append(f"note: {note}")
    return Group(*parts)
