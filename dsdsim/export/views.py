"""Views of results: typed, frozen views (explain) and plain summaries (catalog), with their JSON. No printing here."""
from __future__ import annotations

import json
from dataclasses import field, fields, is_dataclass
from enum import Enum
from typing import TYPE_CHECKING, Optional

import numpy as np

from dsdsim.cost.experts import routing_overlap
from dsdsim.export.deployment import DeploymentView, deployment_view
from dsdsim.records import frozen
from dsdsim.units import DType, format_percent

if TYPE_CHECKING:       # the export layer imports the views at start-up; the cost model stays unloaded until used
    from dsdsim.cost.step import PassCost, StepCost
    from dsdsim.specs.hardware import HardwareSpec
    from dsdsim.specs.model import ModelSpec


def _scalar(x) -> float:
    a = np.asarray(x, dtype=float)
    return float(a.reshape(-1)[0]) if a.size else 0.0


def model_summary(m: ModelSpec) -> dict:
    moe = m.moe_ffn
    return {**_model_fields(m, moe), **_sparse_attention(m)}


def _sparse_attention(m: ModelSpec) -> dict:
    """The indexer of DeepSeek Sparse Attention layers, for models that have one (none listed otherwise)."""
    sparse = [layer.attention for layer in m.layers if layer.attention is not None and layer.attention.sparse]
    if not sparse:
        return {}
    a = sparse[0]
    shared = sum(x.index_shared for x in sparse)
    indexer = f"indexer {a.index_n_heads} heads x {a.index_head_dim}"
    if shared:      # GLM-5.2 IndexShare: a shared layer reuses the top-k of the full layer before it
        text = (f"{len(sparse)} layers attend to the top-{a.index_topk} keys per query; {len(sparse) - shared} run "
                f"an indexer of {a.index_n_heads} heads x {a.index_head_dim}, {shared} reuse the top-k of the indexer "
                "layer before them")
    else:
        text = f"{len(sparse)} layers: {indexer}, top-{a.index_topk} keys per query"
    return {"sparse_attention": text,
            "indexer_cache_bytes_per_token": sum(x.indexer_cache_bytes_per_token for x in sparse)}


def _model_fields(m: ModelSpec, moe) -> dict:
    return {
        "name": m.name, "family": m.family, "params_total": m.params_total, "params_active": m.params_active,
        "params_mtp": m.params_mtp, "kv_bytes_per_token": m.kv_bytes_per_token(DType.bf16),
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "vocab_size": m.vocab_size,
        "attention": m.attention_pattern(), "moe_layers": m.num_moe_layers,
        "layer_pattern": ", ".join(f"{n} {k}" for k, n in m.layer_pattern().items() if n),
        "recurrent_state_bytes_per_sequence": m.state_bytes_per_sequence(DType.bf16),
        "num_experts": moe.num_experts if moe else None, "experts_per_token": moe.top_k if moe else None,
        "shared_experts": moe.num_shared_experts if moe else None,
        "expert_overlap": routing_overlap(None, True) if moe else None,    # the routing locality priced by default
        "mtp_layers": m.mtp_layers,
        "tie_word_embeddings": m.tie_word_embeddings, "default_dtype": m.default_dtype.value,
        "expert_dtype": (m.default_expert_dtype or m.default_dtype).value if moe else None,
        "source": m.source,
    }


def hardware_summary(hw: HardwareSpec) -> dict:
    return {
        "name": hw.name, "description": hw.description, "vendor": hw.vendor,
        "generation": hw.generation.value.value if hw.generation else None,
        "compute_capability": hw.compute_capability.value if hw.compute_capability else None,
        "memory_bytes": hw.memory_capacity, "memory_bandwidth_bytes_per_s": hw.bandwidth,
        "peak_flops_per_s": {d.value: f.value for d, f in hw.peak_flops_per_s.items()},
        "ridge_point_flop_per_byte": {d.value: hw.ridge_point(d) for d in hw.peak_flops_per_s},
        "last_level_cache_bytes": hw.last_level_cache_bytes.value,
        "link_bandwidth_bytes_per_s": hw.link_bandwidth_bytes_per_s.value, "link_latency_s": hw.link_latency_s.value,
        "link_peer_bandwidth_bytes_per_s": hw.link_peer_bandwidth_bytes_per_s.value
        if hw.link_peer_bandwidth_bytes_per_s else None,
        "scale_out_bandwidth_bytes_per_s": hw.scale_out_bandwidth_bytes_per_s.value
        if hw.scale_out_bandwidth_bytes_per_s else None,
        "kernels": None if hw.kernels is None else hw.kernels.model_dump(mode="json"),
        "gpus_per_node": int(hw.gpus_per_node.value),
        "efficiency": {k: getattr(hw.efficiency, k).value for k in ("compute", "memory", "collective")},
        "launch_overhead_s": hw.launch_overhead_s.value, "step_overhead_s": hw.step_overhead_s.value,
        "gemm_tile_m": int(hw.gemm_tile_m.value),
        "sources": {"memory_bandwidth": hw.memory_bandwidth_bytes_per_s.source,
                    "bf16": hw.peak_flops_per_s[DType.bf16].source if DType.bf16 in hw.peak_flops_per_s else None},
        "measured": hw.measured.model_dump() if hw.measured else None,
    }


_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}     # a view class's (field name, omit while None)
_AS_IS = frozenset((str, int, float, bool, type(None)))   # already JSON (an Enum on str is not: its type is the Enum)


def json_plain(obj):
    """A typed view as plain JSON data: dataclass fields in declaration order (a field whose metadata says
    ``omit_none`` is left out while None), tuples as lists, enums as values, numpy scalars as Python numbers."""
    kind = type(obj)
    if kind in _AS_IS:
        return obj
    named = _FIELDS.get(kind)
    if named is None and is_dataclass(obj) and not isinstance(obj, type):
        named = _FIELDS[kind] = tuple((f.name, bool(f.metadata.get("omit_none"))) for f in fields(obj))
    if named is not None:
        out = {}
        for name, omit_none in named:
            v = getattr(obj, name)
            if v is None and omit_none:
                continue
            out[name] = v if type(v) in _AS_IS else json_plain(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [v if type(v) in _AS_IS else json_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: v if type(v) in _AS_IS else json_plain(v) for k, v in obj.items()}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


_OMIT_NONE = {"omit_none": True}


@frozen
class OpRow:
    """One operator of a scalar step, summed over its calls."""

    name: str
    kind: str
    count: float
    flops: float                                  # FLOP, all calls
    bytes: float                                  # DRAM bytes, all calls
    comm_bytes: float                             # interconnect bytes, all calls
    intensity_flop_per_byte: Optional[float]      # None when no bytes move
    time_s: float
    bound: str
    share: float                                  # of the step time
    # kernel-shape terms: the fraction of datasheet bandwidth the operator reaches, and the time spent in fixed
    # costs (launch gaps, kernel floors, per-call latencies, host) and in the GEMM transition
    bandwidth_fraction: Optional[float]
    overhead_s: float
    transition_s: float
    kernel: str


@frozen
class PhaseTotals:
    flops: float
    bytes: float
    time_s: float


@frozen
class PhaseView:
    """The operators of one phase (draft or verify) and their totals."""

    ops: tuple[OpRow, ...]
    totals: PhaseTotals


@frozen
class EngineRow:
    term: str
    time_s: float
    note: str


@frozen
class EngineView:
    """The engine's terms of one step; with no engine only name (None), no rows and zero time."""

    name: Optional[str]
    rows: tuple[EngineRow, ...]
    time_s: float
    cuda_graph: Optional[str] = field(default=None, metadata=_OMIT_NONE)
    verify_padded_tokens: Optional[float] = field(default=None, metadata=_OMIT_NONE)
    verify_graphed: Optional[bool] = field(default=None, metadata=_OMIT_NONE)
    versions: Optional[str] = field(default=None, metadata=_OMIT_NONE)      # the releases the engine spec covers


@frozen
class MemoryView:
    """Memory per GPU (bytes): used = weights + kv + activation + draft + state."""

    used_bytes: float
    capacity_bytes: float
    weights_bytes: float
    kv_bytes: float
    activation_bytes: float
    draft_bytes: float
    feasible: bool
    state_bytes: float = 0.0       # linear-attention / Mamba recurrent states and their speculative snapshots


@frozen
class ExplainView:
    """The per-operator breakdown of one scalar step: what ``dsdsim explain`` shows and writes as JSON."""

    model: str
    hardware: str
    deployment: DeploymentView
    drafter: Optional[str]
    batch_size: int
    k: int
    context: int
    verify: PhaseView
    draft: PhaseView
    overhead_s: float
    step_time_s: float
    engine: EngineView
    experts_touched: Optional[float]              # per MoE layer in the verify pass; None for dense models
    num_experts: Optional[int]
    memory: MemoryView
    # the interval of held-out corpus errors of comparable cases (dsdsim.policy.intervals); None where none is shipped
    step_time_low_s: Optional[float] = field(default=None, metadata=_OMIT_NONE)
    step_time_high_s: Optional[float] = field(default=None, metadata=_OMIT_NONE)
    interval: Optional[str] = field(default=None, metadata=_OMIT_NONE)    # "80%, vllm/dense/1-8 (n 23)"
    # pipeline parallelism: each stage's seconds in the step (its send to the next included), and the batches of B
    # in flight at once (pp): the replica emits microbatches x B x tau tokens per step time; None with pp = 1
    stage_times_s: Optional[tuple[float, ...]] = field(default=None, metadata=_OMIT_NONE)
    microbatches: Optional[int] = field(default=None, metadata=_OMIT_NONE)
    server: str = ""                              # the server whose step this is (``step_server``)
    # where the step does not fit: the smallest change that would (dsdsim.policy.fits.fit_note)
    fits_with: Optional[str] = field(default=None, metadata=_OMIT_NONE)

    def to_dict(self) -> dict:
        return json_plain(self)

    def to_json(self) -> str:
        """The documented JSON contract of ``dsdsim explain --format json``."""
        return json.dumps(self.to_dict(), indent=2)


def pass_rows(p: PassCost, step_time: float, hw_bandwidth: float = 0.0) -> list[OpRow]:
    """One row per operator (scalar step): name, count, FLOPs, bytes, intensity, time, bound, share."""
    rows = []
    for t in p.op_times:
        count = _scalar(t.op.count)
        if count == 0:
            continue
        flops = _scalar(t.op.flops) * count
        nbytes = _scalar(t.op.bytes) * count
        time_s = _scalar(t.time_s)
        per_call = time_s / count if count else 0.0
        rows.append(OpRow(
            name=t.op.name, kind=t.op.kind.value, count=count, flops=flops, bytes=nbytes,
            comm_bytes=_scalar(t.op.comm_bytes) * count,
            intensity_flop_per_byte=flops / nbytes if nbytes else None, time_s=time_s,
            bound=t.bound_at().value, share=time_s / step_time if step_time else 0.0,
            bandwidth_fraction=(_scalar(t.op.bytes) / (per_call * hw_bandwidth)) if per_call and hw_bandwidth
            else None,
            overhead_s=_scalar(t.overhead_s), transition_s=_scalar(t.transition_per) * count,
            kernel=t.op.kernel.value,
        ))
    return rows


def explain_step(step: StepCost, setup=None) -> ExplainView:
    """The typed breakdown of one scalar step. ``setup``: the step's Setup, for what would fit where it does not
    (``dsdsim.policy.fits``)."""
    total = _scalar(step.step_time_s)

    def phase(p: PassCost) -> PhaseView:
        return PhaseView(ops=tuple(pass_rows(p, total, step.hardware.bandwidth)),
                         totals=PhaseTotals(flops=_scalar(p.flops), bytes=_scalar(p.bytes), time_s=_scalar(p.time_s)))

    touched: Optional[float] = None if step.experts_touched is None else _scalar(step.experts_touched)
    moe = step.model.moe_ffn
    mem = step.memory
    iv = step_interval(step)
    return ExplainView(
        model=step.model.name, hardware=step.hardware.name,
        deployment=deployment_view(step.model, step.deployment),
        drafter=step.drafter.label if step.drafter else None,
        batch_size=int(_scalar(step.batch)), k=int(_scalar(step.k)), context=int(_scalar(step.context)),
        verify=phase(step.verify), draft=phase(step.draft),
        overhead_s=_scalar(step.overhead_s), step_time_s=total, engine=engine_view(step),
        experts_touched=touched, num_experts=moe.num_experts if moe else None,
        memory=MemoryView(used_bytes=_scalar(mem.used_bytes), capacity_bytes=mem.capacity_bytes,
                          weights_bytes=mem.weights_bytes, kv_bytes=_scalar(mem.kv_bytes),
                          activation_bytes=_scalar(mem.activation_bytes), draft_bytes=_scalar(mem.draft_bytes),
                          feasible=bool(np.asarray(mem.feasible).reshape(-1)[0]),
                          state_bytes=_scalar(mem.state_bytes)),
        step_time_low_s=total * iv.low if iv else None, step_time_high_s=total * iv.high if iv else None,
        interval=f"{format_percent(iv.coverage, 0)}, {iv.stratum} (n {iv.n})" if iv else None,
        stage_times_s=tuple(_scalar(t) for t in step.stage_times_s) if step.stage_ops else None,
        microbatches=int(step.microbatches) if step.stage_ops else None,
        server=step_server(step),
        fits_with=_fits_with(step, setup),
    )


def _fits_with(step: StepCost, setup) -> Optional[str]:
    if setup is None or bool(np.asarray(step.memory.feasible).reshape(-1)[0]):
        return None
    from dsdsim.policy.fits import fit_note

    return fit_note(setup, int(_scalar(step.context)), int(_scalar(step.k)))


def step_server(step) -> str:
    """The server a step belongs to, in words: without speculation, with a fixed K (or tree), or running a dynamic
    K table at this K (its off tier at K = 0). explain and predict price different servers for one (B, K) where
    the engine reads a K table: every output names its own."""
    d, k = step.drafter, int(_scalar(step.k))
    if d is None:
        return "a server without speculation"
    if step.dynamic:
        return (f"a server running a dynamic K table, at K={k}"
                + (" (the table's off tier: the drafter held, its bookkeeping kept)" if k == 0 else ""))
    if k == 0:
        return "a server holding the drafter, not speculating (K=0)"
    if d.tree is not None:
        return f"a server drafting the {d.tree.label} every step"
    return f"a server with a fixed K={k} (every step drafts {k} tokens)"


def step_interval(step: StepCost):
    """The shipped interval factors for one scalar step (engine family, dense or MoE, batch regime), or None."""
    from dsdsim.policy.intervals import engine_family, shipped_intervals

    ivs = shipped_intervals()
    if ivs is None:
        return None
    eng = step.engine
    return ivs.interval(engine_family(eng.name if eng is not None else None),
                        "moe" if step.model.moe_ffn is not None else "dense", _scalar(step.batch))


def _host_shares(terms, overlapped: bool, host: float, exposed: float, draft_device_s: float
                 ) -> dict[str, tuple[float, str]]:
    """(share the step waits for, what hides the rest) of each host term, as ``dsdsim.cost.engine._exposed``
    charges it: overlapped, one share for all (what exceeds the device time); not overlapped, every term whole
    except the per-draft-pass work, which the draft passes' kernels hide up to their device time."""
    from dsdsim.specs.engine import Per, RunsOn

    host_terms = [(t, s) for t, s in terms if t.runs_on is RunsOn.host]
    if overlapped:
        share = exposed / host if host > 0 else 0.0
        return {t.name: (share, "device time") for t, _ in host_terms}
    per_pass = sum(s for t, s in host_terms if t.per is Per.draft_pass)
    pass_share = max(per_pass - draft_device_s, 0.0) / per_pass if per_pass > 0 else 1.0
    return {t.name: (pass_share, "the draft kernels") if t.per is Per.draft_pass else (1.0, "")
            for t, _ in host_terms}


def engine_view(step: StepCost) -> EngineView:
    """The engine's terms of one (scalar) step as their own rows, so a reader sees where the time goes: each GPU
    term with the device time it adds, each host term with its share of the host time the step waits for."""
    from dsdsim.cost.engine import small_kernel_s, term_seconds
    from dsdsim.specs.engine import RunsOn

    eng, et = step.engine, step.engine_time
    if eng is None or et is None:
        return EngineView(name=None, rows=(), time_s=0.0)
    b, q = _scalar(step.batch), _scalar(step.verify_tokens)
    padded, graphed = _scalar(step.verify_padded_tokens), bool(np.asarray(step.verify_graphed).reshape(-1)[0])
    host, exposed = _scalar(et.host_s), _scalar(et.host_exposed_s)
    terms = term_seconds(eng, step)
    shares = _host_shares(terms, bool(np.asarray(et.overlapped).reshape(-1)[0]), host, exposed,
                          _scalar(step.draft.time_s))
    rows = []
    for term, seconds in terms:
        if term.runs_on is RunsOn.host:
            share, behind = shares[term.name]
            hidden = f", {(1 - share) * 100:.0f}% hidden behind {behind}" if share < 1 else ""
            rows.append(EngineRow(term.name, seconds * share,
                                  f"host {term.component.value}, {seconds * 1e6:.0f} us per step{hidden}"))
        else:
            rows.append(EngineRow(term.name, seconds, f"gpu {term.component.value}, per {term.per.value}"))
    piecewise = bool(np.asarray(step.verify_piecewise).reshape(-1)[0])
    if piecewise:
        from dsdsim.cost.engine import piecewise_attention_s

        layers = float(step.model.graph_split_ops)
        rows.append(EngineRow("piecewise_graph", float(piecewise_attention_s(True, layers,
                                                                             *small_kernel_s(step.hardware))),
                              f"gpu, {layers:g} split ops (attention) launched eagerly between PIECEWISE graph pieces"))
    kind = "a PIECEWISE CUDA graph" if piecewise else "a CUDA graph"
    if graphed:
        pad = (f"verify replays {kind} for {padded:g} tokens ({b * q:g} padded)" if padded > b * q
               else f"verify replays {kind} (no padding)")
    else:
        pad = "verify runs eager (past the largest CUDA-graph capture size, or --eager)"
    return EngineView(name=eng.name, rows=tuple(rows), time_s=_scalar(et.added_s), cuda_graph=pad,
                      verify_padded_tokens=padded, verify_graphed=graphed,
                      versions=eng.versions.label if eng.versions is not None else None)
