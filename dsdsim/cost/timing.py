"""Kernel time of an operator on a hardware spec: the roofline, bent the way real kernels bend it.

Per occurrence, with t_c = F_padded / (P_dtype * eta_c) and t_m = bytes / (BW * eta_m):
    GEMMs           (t_c^p + t_m^p)^(1/p)            time keeps rising with M before the ridge point
    fused MoE       the same over expert weights at the kernel family's eta_m, plus the family's launches and fixed
                    latency per call (``moe_family_rates``; a spec without families: one latency, one eta_m)
    decode attention t_m with eta_m = eta_max * c / (c + c_ramp) at c cached tokens per sequence
    other kernels   max(t_c, t_m)
    every kernel    at least ``kernel_floor_s`` per launch, plus the launch gap ``launch_overhead_s``
    collectives     the fastest all-reduce tier for the message size (one-shot, two-shot, NCCL), and the
                    scale-out network once the group spans more than one node
t = count * (work + collective + fixed). Without a ``kernels`` block in the spec this is the flat roofline
max(t_c, t_m) + launches * t_launch. Figures come from the hardware spec; calibration replaces them.

``terms`` is the one formula: an operator's rates on the hardware (``op_rates``) and its ``Demand``. A planned
operator and an operator record (``op_time``) are both timed by it.
"""
from __future__ import annotations

import functools
import math
import operator
from dataclasses import field
from typing import Callable, NamedTuple, Optional

import numpy as np

from dsdsim.cost.memo import by_value
from dsdsim.cost.num import is_scalar, isfinite, maximum, minimum, num, where
from dsdsim.cost.ops import (AllReduce, AllToAll, Attention, AttentionShape, Bound, Demand, Elementwise, Embedding,
                             Gather, Gemm, KernelClass, MoEExperts, OpCost, OpKind, Operator, Sampling)
from dsdsim.records import frozen
from dsdsim.specs.hardware import (GROUPED_GEMM_LAUNCHES, AllReduceAlgorithm, AllReduceTier, GemmFigures,
                                   HardwareSpec, MoEFamilyFigures)
from dsdsim.units import DType

_BOUNDS = (Bound.compute, Bound.memory, Bound.communication, Bound.overhead)


class OpTerms(NamedTuple):
    """Seconds per occurrence of one operator, by what bounds it (``OpTime.terms``)."""

    compute_per: np.ndarray | float
    memory_per: np.ndarray | float
    comm_per: np.ndarray | float
    overhead_per: np.ndarray | float     # launch gaps, host time, fixed per-call latencies, what a kernel floor adds
    work_per: np.ndarray | float         # the kernel's own time: max(t_c, t_m), or their p-norm for GEMMs
    transition_p: float | None           # the p-norm exponent where the smooth GEMM transition applies


@frozen(init=False)
class OpTime:
    """Seconds per step spent on one operator (all its occurrences), split by what bounds it.

    Only ``time_s`` is kept: a grid sweep needs nothing else, and holding the split for every operator of a large
    grid doubles the memory a step takes. The split per occurrence (``*_per``) is worked out again from the
    operator when asked for (``terms``, from the same rates) and scaled by ``count`` in ``*_s``.
    ``overhead_per`` holds launch gaps, host time, fixed per-call latencies and the time a kernel floor adds;
    ``transition_per`` the time the smooth GEMM transition adds above max(t_c, t_m).
    """

    op: OpCost
    time_s: np.ndarray
    hardware: HardwareSpec = field(repr=False, compare=False)
    cuda_graphs: bool | np.ndarray = field(default=True, repr=False, compare=False)
    rates: Optional["OpRates"] = field(default=None, repr=False, compare=False)

    def __init__(self, op: OpCost, time_s, hardware: HardwareSpec, cuda_graphs=True,
                 rates: Optional["OpRates"] = None):
        # one write instead of a frozen dataclass's object.__setattr__ per field (a step times ~40 operators)
        object.__setattr__(self, "__dict__", {"op": op, "time_s": time_s, "hardware": hardware,
                                              "cuda_graphs": cuda_graphs, "rates": rates})

    @functools.cached_property
    def terms(self) -> OpTerms:
        """The split, from the rates the time came from (a planned operator's, with its MoE family and shape)
        where given, else from the record's own (``record_rates``)."""
        rates = self.rates if self.rates is not None else record_rates(self.op, self.hardware)
        return terms(rates, self.op.demand, launch_overhead(self.hardware, self.cuda_graphs))

    @property
    def compute_per(self):
        return self.terms.compute_per

    @property
    def memory_per(self):
        return self.terms.memory_per

    @property
    def comm_per(self):
        return self.terms.comm_per

    @property
    def overhead_per(self):
        return self.terms.overhead_per

    @property
    def transition_p(self) -> float | None:
        return self.terms.transition_p

    @property
    def transition_per(self) -> np.ndarray | float:
        if self.transition_p is None:
            return 0.0
        return p_norm_time(self.compute_per, self.memory_per, self.transition_p) - maximum(self.compute_per,
                                                                                            self.memory_per)

    @property
    def compute_s(self) -> np.ndarray:
        return self.compute_per * self.op.count

    @property
    def memory_s(self) -> np.ndarray:
        return self.memory_per * self.op.count

    @property
    def comm_s(self) -> np.ndarray:
        return self.comm_per * self.op.count

    @property
    def overhead_s(self) -> np.ndarray:
        return self.overhead_per * self.op.count

    @property
    def bound(self) -> np.ndarray:
        """Index into (compute, memory, communication, overhead) of the largest term, per grid point."""
        stack = np.stack(np.broadcast_arrays(self.compute_s, self.memory_s, self.comm_s, self.overhead_s))
        return np.argmax(stack, axis=0)

    def bound_at(self, index=()) -> Bound:
        return _BOUNDS[int(np.asarray(self.bound)[index])]


_VECTOR_KINDS = (OpKind.elementwise, OpKind.logits)
_COLLECTIVE_KINDS = (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather)
_GEMM_KINDS = (OpKind.gemm, OpKind.moe_experts, OpKind.router)
_FP8_GEMM = frozenset({DType.fp8})      # weight formats whose GEMMs take efficiency.compute_fp8 / memory_fp8


def memory_efficiency(hw: HardwareSpec, kind: OpKind) -> float:
    """Fraction of bandwidth an operator class reaches: GEMMs stream weights (``memory``); attention reads the
    KV cache (``attention_memory``); norms, activations and sampling are vector kernels (``vector_memory``);
    an embedding gather streams whole rows like a weight read (``memory``). The latter two default to ``memory`` until measured."""
    eff = hw.efficiency
    if kind is OpKind.attention:
        return eff.attention_memory_value
    if kind in _VECTOR_KINDS:
        return eff.vector_memory_value
    return eff.memory.value


def launch_overhead(hw: HardwareSpec, cuda_graphs):
    """Gap per kernel launch: replayed from a CUDA graph or launched eagerly; ``cuda_graphs`` a truth value or an
    array of them (a grid whose points differ)."""
    if isinstance(cuda_graphs, (bool, np.bool_)):
        return hw.launch_overhead_s.value if cuda_graphs else hw.eager_launch_overhead_s.value
    return np.where(cuda_graphs, hw.launch_overhead_s.value, hw.eager_launch_overhead_s.value)


# --- kernel classes -------------------------------------------------------------------------------------------


def p_norm_time(compute_s, memory_s, p: float):
    """(t_c^p + t_m^p)^(1/p): equal to max(t_c, t_m) far from the ridge point, up to 2^(1/p) x at it."""
    if type(compute_s) is float and type(memory_s) is float:
        hi, lo = (compute_s, memory_s) if compute_s >= memory_s else (memory_s, compute_s)
        ratio = lo / hi if hi > 0 else 0.0
        return hi * (1.0 + ratio ** p) ** (1.0 / p)
    hi = np.asarray(maximum(compute_s, memory_s))
    lo = minimum(compute_s, memory_s)
    if hi.size and hi.min() > 0:
        # a new array (hi and lo share the broadcast shape; a 0-d one needs its own out), written in place below
        ratio = np.divide(lo, hi) if hi.ndim else np.divide(lo, hi, out=np.empty(()))
    else:
        ratio = np.divide(lo, hi, out=np.zeros(np.shape(hi)), where=hi > 0)
    ratio **= p                 # hi * (1 + ratio^p)^(1/p), computed in place: the same operations in the same order
    ratio += 1.0
    ratio **= 1.0 / p
    return np.multiply(hi, ratio, out=ratio)


def attention_bandwidth_fraction(hw: HardwareSpec, kernel: KernelClass, cached_tokens):
    """Fraction of bandwidth a decode-attention call reaches with ``cached_tokens`` per sequence:
    eta_max * c / (c + c_ramp). Without kernel figures: the flat ``attention_memory`` fraction."""
    kf = hw.kernels
    c = num(cached_tokens)
    if kf is None:
        return hw.efficiency.attention_memory_value if is_scalar(c) else np.full(c.shape, hw.efficiency.attention_memory_value)
    eta_max, ramp = _attention_curve(hw, kernel)
    return eta_max * c / (c + ramp)


def _attention_curve(hw: HardwareSpec, kernel: KernelClass) -> tuple[float, float]:
    """(eta_max, ramp tokens) of an attention kernel class. A calibrated ``attention_memory`` replaces eta_max of
    the FlashAttention/FlashInfer class; an 8-bit cache takes the part's fp8-cache figures where it has them, else
    the 16-bit ones."""
    kf = hw.kernels
    if kernel is KernelClass.mla_decode:
        return kf.mla_attention_bandwidth_fraction.value, kf.mla_attention_ramp_tokens.value
    if kernel is KernelClass.flash_decode_fp8 and kf.decode_attention_fp8_bandwidth_fraction is not None:
        return kf.decode_attention_fp8_bandwidth_fraction.value, kf.decode_attention_fp8_ramp_tokens.value
    eta = hw.efficiency.attention_memory
    eta_max = eta.value if eta is not None else kf.decode_attention_bandwidth_fraction.value
    return eta_max, kf.decode_attention_ramp_tokens.value


@frozen
class _Rates:
    """The figures of one hardware spec that ``op_rates`` reads for every operator, looked up once per spec object
    (specs are frozen): FLOP/s and bytes/s an operator class reaches, kernel-shape figures."""

    compute_flops_per_s: dict          # (dtype, fused MoE?) -> peak * compute fraction
    memory_bytes_per_s: dict           # (kind, kernel, fp8 weights?) -> bandwidth * the fraction that class reaches
    attention: dict                    # kernel class -> (eta_max, ramp tokens), with kernel figures only
    fp8_decode_by_head: bool           # an 8-bit-cache decode's fraction by head size (KernelFigures)
    kernel_floor_s: float | None       # None without kernel figures
    transition_p: float | None
    moe_call_latency_s: float


@by_value
def _rates(hw: HardwareSpec) -> _Rates:
    kf = hw.kernels
    eff = hw.efficiency
    compute = {}
    for dtype in DType:
        for moe in (False, True):
            fraction = eff.compute.value
            if dtype in _FP8_GEMM and eff.compute_fp8 is not None:
                fraction = eff.compute_fp8.value
            if moe and kf is not None:
                fraction = kf.moe_compute_fraction.value
            compute[dtype, moe] = hw.peak(dtype) * fraction
    memory = {}
    for kind in OpKind:
        for kernel in KernelClass:
            for fp8 in (False, True):
                if kf is not None and kernel is KernelClass.fused_moe and kind is not OpKind.attention:
                    memory[kind, kernel, fp8] = hw.bandwidth * kf.moe_bandwidth_fraction.value
                elif fp8 and kind is OpKind.gemm and eff.memory_fp8 is not None:
                    memory[kind, kernel, fp8] = hw.bandwidth * eff.memory_fp8.value
                else:
                    memory[kind, kernel, fp8] = hw.bandwidth * memory_efficiency(hw, kind)
    attention = ({k: _attention_curve(hw, k) for k in KernelClass} if kf is not None else {})
    return _Rates(compute_flops_per_s=compute, memory_bytes_per_s=memory, attention=attention,
                  fp8_decode_by_head=bool(kf is not None and kf.decode_attention_fp8_head_dim_fractions),
                  kernel_floor_s=kf.kernel_floor_s.value if kf is not None else None,
                  transition_p=kf.gemm_transition_p.value if kf is not None else None,
                  moe_call_latency_s=kf.moe_call_latency_s.value if kf is not None else 0.0)


class OpRates(NamedTuple):
    """What one operator class reaches on one hardware spec (``op_rates``): its time is ``terms`` of these and of
    the operator's ``Demand``."""

    flops_per_s: float                  # peak of its format x the compute fraction its class reaches
    bytes_per_s: float                  # bandwidth x the fraction its class reaches (decode attention: eta_max)
    ramp_bytes_per_sequence: float | None   # decode attention with kernel figures: bytes of the c_ramp tokens
                                            # each sequence pays for
    transition_p: float | None          # GEMMs with kernel figures: the p-norm exponent
    floor_s: float | None               # the kernel floor per launch; None without kernel figures, for host
                                        # work and for collectives
    fixed_s: float                      # a fixed per-call latency (fused MoE)
    collective: Callable | None         # payload or bytes sent -> seconds, for a collective over > 1 rank
    helper_launches: float = 0.0        # launches beyond the operator's own, one launch gap each (a fused-MoE
                                        # family's routing, align, activation, quant and combine kernels)


class MoECall(NamedTuple):
    """The static shape of one fused-MoE call on one rank that a family's fixed work depends on."""

    expert_weight_bytes: float = 0.0    # one routed expert's weights (bytes); 0: the lead-expert term is left out
    experts: int = 0                    # routed experts on the rank; 0: the align term is left out


def op_rates(hw: HardwareSpec, kind: OpKind, kernel: KernelClass, dtype: DType, kv_bytes_per_token: float = 0.0,
             group: int = 1, moe_family: Optional[str] = None, moe_call: Optional[MoECall] = None,
             head_dim: int = 0) -> OpRates:
    """The rates of an operator of ``kind`` run by ``kernel`` in ``dtype`` (attention: ``kv_bytes_per_token``
    cached per token, ``head_dim`` elements per head; collectives: over ``group`` ranks). Fused MoE on a spec with
    kernel families: the family ``moe_family`` (the engine's; None: the spec's default) for weights in ``dtype``, over
    the call's static shape ``moe_call`` (``KernelFigures.moe_family`` resolves a family the part lacks)."""
    if kernel is KernelClass.fused_moe and hw.kernels is not None and kind is not OpKind.attention:
        family = hw.kernels.moe_family(moe_family, dtype)
        if family is not None:
            return moe_family_rates(hw, family[1], dtype, moe_call or MoECall())
    if kind is OpKind.gemm and hw.kernels is not None and hw.kernels.gemm:
        figures = hw.kernels.gemm_figures(dtype)
        if figures is not None:
            return gemm_rates(hw, figures, dtype)
    rates = _rates(hw)
    flops = rates.compute_flops_per_s[dtype, kernel is KernelClass.fused_moe]
    ramp = None
    if rates.attention and kind is OpKind.attention:
        # bytes / (BW * eta_max), every sequence also paying for c_ramp tokens it does not read: the per-call ramp
        # that keeps short-context decode attention far below bandwidth
        eta_max, ramp_tokens = rates.attention[kernel]
        if head_dim and kernel is KernelClass.flash_decode_fp8 and rates.fp8_decode_by_head:
            eta_max = hw.kernels.fp8_decode_fraction(head_dim)     # the kernel's rate follows the head size
        memory, ramp = hw.bandwidth * eta_max, kv_bytes_per_token * ramp_tokens
    else:
        memory = rates.memory_bytes_per_s[kind, kernel, dtype in _FP8_GEMM]
    collective = None
    if kind is OpKind.send:     # group: the nodes sender and receiver sit on (``SendRecv``)
        collective = functools.partial(_collective, send_time, hw, group)
    elif kind in _COLLECTIVE_KINDS and group > 1:
        time = all_reduce_time if kind is OpKind.all_reduce else exchange_time
        collective = functools.partial(_collective, time, hw, group)
    floor = rates.kernel_floor_s if kind is not OpKind.host and collective is None else None
    fixed = rates.moe_call_latency_s if floor is not None and kernel is KernelClass.fused_moe else 0.0
    return OpRates(flops, memory, ramp, rates.transition_p if kind in _GEMM_KINDS else None, floor, fixed,
                   collective)


def gemm_rates(hw: HardwareSpec, fig: GemmFigures, weight: DType) -> OpRates:
    """The rates of a dense GEMM with ``weight`` weights timed by the part's fitted GEMM figures (``GemmFigures``):
    t_c at peak(weight) * compute_fraction, t_m at BW * bandwidth_fraction, their p-norm at transition_p, plus the
    call's fixed latency_s (no kernel floor)."""
    return OpRates(hw.peak(weight) * fig.compute_fraction.value, hw.bandwidth * fig.bandwidth_fraction.value, None,
                   fig.transition_p.value, None, fig.latency_s.value, None)


def _collective(time: Callable, hw: HardwareSpec, group: int, comm_bytes):
    return time(hw, comm_bytes, group)


def moe_family_rates(hw: HardwareSpec, fam: MoEFamilyFigures, weight: DType, call: MoECall,
                     launches: Optional[float] = None) -> OpRates:
    """The rates of one fused-MoE call of kernel family ``fam`` with ``weight`` weights (``MoEFamilyFigures``):

        fixed_s = latency_s + W_e / (BW * lead_expert_bandwidth_fraction) + E * align_s_per_expert
        the call's ``launches`` (None: the family's for ``weight``) each pay a launch gap; the two grouped GEMMs
        (the operator's own launches) also the kernel floor; t_m at BW * bandwidth_fraction, t_c at
        peak(weight) * the family's compute fraction for ``weight`` (else moe_compute_fraction), their p-norm at
        gemm_transition_p.
    A published timing that leaves kernels out (top-k outside the timed graph, GEMMs only) gives its own
    ``launches`` (dsdsim.fit.kernels)."""
    kf = hw.kernels
    fixed = fam.latency_s.value
    if fam.lead_expert_bandwidth_fraction is not None:
        fixed += call.expert_weight_bytes / (hw.bandwidth * fam.lead_expert_bandwidth_fraction.value)
    if fam.align_s_per_expert is not None:
        fixed += call.experts * fam.align_s_per_expert.value
    n = fam.launches(weight) if launches is None else launches
    compute = fam.compute_fraction(weight, kf.moe_compute_fraction.value)
    return OpRates(hw.peak(weight) * compute, hw.bandwidth * fam.bandwidth_fraction.value,
                   None, kf.gemm_transition_p.value, kf.kernel_floor_s.value, fixed, None,
                   n - GROUPED_GEMM_LAUNCHES)


# --- collectives ----------------------------------------------------------------------------------------------


def _tier_time(tier: AllReduceTier, payload_bytes, group: int, link_bytes_per_s: float):
    traffic = ((group - 1) if tier.algorithm is AllReduceAlgorithm.one_shot else 2.0 * (group - 1) / group)
    t = tier.latency_s + payload_bytes * traffic / (link_bytes_per_s * tier.bandwidth_fraction)
    return where(payload_bytes <= tier.max_bytes, t, np.inf)


def link_bytes_per_s(hw: HardwareSpec, group: int) -> float:
    """Scale-up bandwidth per GPU, one direction, that a collective over ``group`` GPUs of one node runs on: the whole
    link bandwidth through a switch; on a full mesh (``link_peer_bandwidth_bytes_per_s``) the group-1 peer links a GPU
    has to the others, at most the whole (MI300X: 7 x 64 GB/s, so a TP 4 group runs on 192 GB/s, TP 8 on all 448)."""
    total = hw.link_bandwidth_bytes_per_s.value
    peer = hw.link_peer_bandwidth_bytes_per_s
    return total if peer is None else min(total, (max(int(group), 2) - 1) * peer.value)


def scale_up_all_reduce_time(hw: HardwareSpec, payload_bytes, group: int):
    """All-reduce of ``payload_bytes`` per rank over ``group`` GPUs of one node: the fastest tier the engine
    allows at that size; without a tier table, ring traffic at ``collective`` efficiency plus ``link_latency_s``."""
    s = num(payload_bytes)
    link = link_bytes_per_s(hw, group)
    tiers = hw.kernels.all_reduce if hw.kernels is not None else ()
    if group <= 1:
        return 0.0 if is_scalar(s) else np.zeros(s.shape)
    if not tiers:
        return hw.link_latency_s.value + 2.0 * (group - 1) / group * s / (link * hw.efficiency.collective.value)
    best = np.inf if is_scalar(s) else np.full(s.shape, np.inf)
    for tier in tiers:
        best = minimum(best, _tier_time(tier, s, group, link))
    ring = hw.link_latency_s.value + 2.0 * (group - 1) / group * s / (link * hw.efficiency.collective.value)
    return where(isfinite(best), best, ring)


def nodes_spanned(hw: HardwareSpec, group: int) -> int:
    gpn = int(hw.gpus_per_node.value)
    return -(-group // gpn)


def nccl_all_reduce_time(hw: HardwareSpec, payload_bytes, group: int):
    """NCCL's all-reduce inside a node: the ``ring`` tier, else ring traffic at ``collective`` efficiency plus
    ``link_latency_s``."""
    s = num(payload_bytes)
    tiers = [t for t in (hw.kernels.all_reduce if hw.kernels is not None else ()) if t.algorithm is
             AllReduceAlgorithm.ring]
    if tiers:
        return _tier_time(tiers[0], s, group, link_bytes_per_s(hw, group))
    link = link_bytes_per_s(hw, group) * hw.efficiency.collective.value
    return hw.link_latency_s.value + 2.0 * (group - 1) / group * s / link


def all_reduce_time(hw: HardwareSpec, payload_bytes, group: int):
    """Within a node: ``scale_up_all_reduce_time``. Across nodes the custom (one-/two-shot) kernels do not apply:
    NCCL runs it hierarchically, reducing within each node, all-reducing each GPU's 1/g shard over the scale-out
    network (one NIC per GPU, ``scale_out_latency_s`` per call), and gathering within the node."""
    nodes = nodes_spanned(hw, group)
    out_bw, out_lat = hw.scale_out_bandwidth_bytes_per_s, hw.scale_out_latency_s
    if nodes <= 1 or out_bw is None or out_lat is None:
        return scale_up_all_reduce_time(hw, payload_bytes, group)
    g = min(group, int(hw.gpus_per_node.value))
    s = num(payload_bytes)
    inter = out_lat.value + 2.0 * (nodes - 1) / nodes * (s / g) / (out_bw.value * hw.efficiency.collective.value)
    return nccl_all_reduce_time(hw, s, g) + inter


def exchange_time(hw: HardwareSpec, sent_bytes, group: int):
    """All-to-all / all-gather: a rank sends ``sent_bytes``; past one node the off-node share goes over the
    scale-out network (NIC and NVLink work in parallel: the slower sets the time)."""
    s = num(sent_bytes)
    eff = hw.efficiency.collective.value
    link = link_bytes_per_s(hw, min(group, int(hw.gpus_per_node.value)))
    nodes = nodes_spanned(hw, group)
    out_bw, out_lat = hw.scale_out_bandwidth_bytes_per_s, hw.scale_out_latency_s
    if nodes <= 1 or out_bw is None or out_lat is None:
        return hw.link_latency_s.value + s / (link * eff)
    g = min(group, int(hw.gpus_per_node.value))
    off_node = (group - g) / (group - 1)
    return maximum(hw.link_latency_s.value + s * (1 - off_node) / (link * eff),
                      out_lat.value + s * off_node / (out_bw.value * eff))


def send_time(hw: HardwareSpec, sent_bytes, nodes: int):
    """A point-to-point send of ``sent_bytes`` to one peer: over the scale-up link inside a node, over the scale-out
    network (one NIC per GPU) between two nodes; a latency per call and the bytes at ``collective`` efficiency, as
    ``exchange_time`` times each side of an all-to-all."""
    s = num(sent_bytes)
    eff = hw.efficiency.collective.value
    out_bw, out_lat = hw.scale_out_bandwidth_bytes_per_s, hw.scale_out_latency_s
    if nodes <= 1 or out_bw is None or out_lat is None:
        return hw.link_latency_s.value + s / (link_bytes_per_s(hw, 2) * eff)       # one peer's link
    return out_lat.value + s / (out_bw.value * eff)


# --- one operator ---------------------------------------------------------------------------------------------


def terms(r: OpRates, d: Demand, gap) -> OpTerms:
    """The terms of one occurrence of an operator with rates ``r`` and demand ``d``; ``gap`` the launch gap
    (``launch_overhead``: one figure, or an array over the grid)."""
    return OpTerms(*_terms(r, d, gap), r.transition_p)


def seconds(r: OpRates, d: Demand, gap):
    """Seconds of one occurrence: work + communication + overhead (``terms``)."""
    _, _, comm, overhead, work = _terms(r, d, gap)
    if type(comm) is not float or comm != 0.0:
        overhead = comm + overhead
    if type(work) is float and type(overhead) is float:
        return work + overhead
    return in_place(work, overhead, np.add)


def seconds_at_two_gaps(r: OpRates, d: Demand, gap, other_gap) -> tuple:
    """(``seconds`` at launch gap ``gap``, the same at ``other_gap``): the gap enters linearly, once per launch (the
    kernel's and its helpers', ``_terms``), so the second is the first plus that many launches times the difference."""
    first = seconds(r, d, gap)
    launches = d.launches + r.helper_launches if r.helper_launches else d.launches
    return first, first + launches * (other_gap - gap)


def _terms(r: OpRates, d: Demand, gap) -> tuple:
    """(compute, memory, communication, overhead, work) seconds: ``OpTerms`` without the record, for ``seconds``."""
    compute = d.flops_padded / r.flops_per_s
    if r.collective is not None:
        comm = r.collective(d.collective_bytes)
        memory = 0.0            # the collective's own buffer traffic hides under the link time
    else:
        comm = 0.0
        ramp = r.ramp_bytes_per_sequence
        memory = (d.bytes if ramp is None else d.bytes + d.sequences * ramp) / r.bytes_per_s
    p = r.transition_p
    work = p_norm_time(compute, memory, p) if p is not None else maximum(compute, memory)
    overhead = d.launches * gap + d.host_s
    if r.helper_launches:
        overhead = overhead + r.helper_launches * gap
    if r.fixed_s and r.floor_s is None:          # a call's fixed latency without a floor (fitted GEMM figures)
        overhead = overhead + r.fixed_s
    if r.floor_s is not None:
        if r.fixed_s:
            overhead = overhead + r.fixed_s
        added = d.launches * r.floor_s - work   # the time a kernel floor adds to short kernels: max(floor - work, 0)
        if type(added) is float and type(overhead) is float:
            overhead = maximum(added, 0.0) + overhead
        else:
            added = np.maximum(added, 0.0, out=added) if isinstance(added, np.ndarray) and added.ndim else maximum(added, 0.0)
            overhead = in_place(added, overhead, np.add)     # overhead + added (a new array: work is left as it was)
    return compute, memory, comm, overhead, work


def record_rates(op: OpCost, hw: HardwareSpec, moe_family: Optional[str] = None) -> OpRates:
    """The rates of an operator record (fused MoE: of family ``moe_family``, None the spec's default). A record does
    not carry the rank's expert count: the align term is left out (a planned operator's rates, ``rates_of``, hold it)."""
    call = _record_call(op) if op.kind is OpKind.moe_experts else None
    head_dim = op.shape.qk_dim if type(op.shape) is AttentionShape else 0
    return op_rates(hw, op.kind, op.kernel, op.dtype, op.kv_bytes_per_token, op.comm_group, moe_family, call,
                    head_dim)


def _record_call(op: OpCost) -> MoECall:
    """One expert's weight bytes from a fused-MoE record: its weight bytes over the experts it touched."""
    touched = 0.0 if op.experts_touched is None else op.experts_touched
    w, t = np.broadcast_arrays(np.ravel(op.weight_bytes), np.ravel(touched))
    hit = t > 0
    return MoECall(float(w[hit][0] / t[hit][0])) if hit.any() else MoECall()


def rates_of(op: Operator, hw: HardwareSpec, moe_family: Optional[str] = None) -> OpRates:
    """The rates of a planned operator (``dsdsim.cost.ops``: Gemm, Attention, ...); fused MoE of family
    ``moe_family`` (the engine's, ``MoEKernels.family``; None: the spec's default)."""
    call = MoECall(op.expert_weight_bytes, op.experts) if isinstance(op, MoEExperts) else None
    return op_rates(hw, op.kind, op.kernel, op.dtype, getattr(op, "kv_bytes_per_token", 0.0), getattr(op, "group", 1),
                    moe_family, call, getattr(op, "qk_dim", 0))


def op_time(op: OpCost, hw: HardwareSpec, cuda_graphs=True, moe_family: Optional[str] = None) -> OpTime:
    """count * (work + communication + overhead): seconds per step on ``op``."""
    rates = record_rates(op, hw, moe_family)
    per = seconds(rates, op.demand, launch_overhead(hw, cuda_graphs))
    return OpTime(op, in_place(per, num(op.count), np.multiply), hw, cuda_graphs, rates)


def in_place(a, b, ufunc):
    """ufunc(a, b), written into `a` when `a` is an array already of the result's shape (same values, one
    grid-sized allocation fewer)."""
    if isinstance(a, np.ndarray) and a.ndim:
        if type(b) is float or a.shape == np.broadcast_shapes(a.shape, np.shape(b)):    # a float: a's shape
            return ufunc(a, b, out=a)
    return _OPERATORS[ufunc](a, b)     # a + b, a * b: Python floats stay floats (np.add would make numpy scalars)


_OPERATORS = {np.add: operator.add, np.multiply: operator.mul}


def sum_by_shape(parts: list) -> np.ndarray | float:
    """Sum of per-operator times. Summed within each array shape first (most operators do not depend on the context
    axis), then the few partial sums are broadcast together: the same sum, far fewer full-grid adds."""
    total = 0.0
    for a in parts:                  # one point: the floats in order
        if type(a) is not float:
            break
        total += a
    else:
        return total
    by_shape: dict[tuple, np.ndarray] = {}
    owned: set[tuple] = set()        # partial sums this function made (added to in place; operators' own arrays never)
    for a in parts:
        shape = () if type(a) is float else np.shape(a)
        if shape not in by_shape:
            by_shape[shape] = a
        elif shape in owned:
            by_shape[shape] += a
        else:
            by_shape[shape] = by_shape[shape] + a
            owned.add(shape)
    out = 0.0
    for part in by_shape.values():
        out = out + part
    return out


# --- one planned operator at one point, in Python floats ------------------------------------------------------
#
# ``seconds(rates, op.demand(*size), gap)`` builds a Demand and walks the general terms for every operator at every
# point. A step program (``dsdsim.cost.step.step_plan``) binds each planned operator's figures and rates once into a
# ``timer``: the same operations in the same order on plain floats, so the same bits, for the operator kinds a step
# runs most. Any other operator (fused MoE, collectives, host work), or rates with terms these do not carry, is
# timed by ``seconds`` itself.


def timer(op: Operator, r: OpRates, hw: Optional[HardwareSpec] = None) -> Callable:
    """``(gap, *size) -> seconds`` of one occurrence of planned operator ``op`` with rates ``r`` (on ``hw``, which
    collectives need) at one point (sizes and the launch gap Python floats), equal to
    ``seconds(r, op.demand(*size), gap)``."""
    if r.collective is not None and hw is not None and isinstance(op, (AllReduce, AllToAll, Gather)):
        link_time = _one_node_collective(hw, op)
        if link_time is not None:
            return link_time
    plain = r.collective is None and not r.fixed_s and not r.helper_launches and r.ramp_bytes_per_sequence is None
    if (isinstance(op, Gemm) and r.collective is None and r.fixed_s and r.floor_s is None and not r.helper_launches
            and r.ramp_bytes_per_sequence is None and r.transition_p is not None):
        return _fitted_gemm_timer(r, op.tile_m, op._flops_per_row, op._weight_bytes, op._in_per_row, op._out_per_row)
    if isinstance(op, (Gemm, Elementwise)) and plain:
        return _rows_timer(r, op.tile_m if isinstance(op, Gemm) else 1, op._flops_per_row, op._weight_bytes,
                           op._in_per_row, op._out_per_row)
    if isinstance(op, Embedding) and plain:
        return _rows_timer(r, 1, 0.0, 0.0, op._weight_per_token, op._out_per_token)
    if isinstance(op, Attention) and r.collective is None and not r.fixed_s and not r.helper_launches:
        return _attention_timer(op, r)
    if isinstance(op, Sampling) and plain:
        return _sampling_timer(op, r)
    if isinstance(op, MoEExperts) and r.collective is None and r.ramp_bytes_per_sequence is None:
        return _experts_timer(op, r)
    demand = op.demand

    def general(gap, *size):
        return seconds(r, demand(*size), gap)
    return general


def _finish(r: OpRates) -> Callable:
    """(compute, memory, launches, gap) -> seconds: the kernel's own time (the p-norm of compute and memory for GEMMs
    with kernel figures, else the larger), what the kernel floor adds to it, the launch gaps (``_terms``)."""
    p, floor = r.transition_p, r.floor_s
    inv = None if p is None else 1.0 / p
    if p is not None and floor is not None:
        def floored_p_norm(compute, memory, launches, gap):
            hi, lo = (compute, memory) if compute >= memory else (memory, compute)
            work = hi * (1.0 + (lo / hi if hi > 0 else 0.0) ** p) ** inv          # p_norm_time
            added = launches * floor - work
            return work + ((added if added >= 0.0 or added != added else 0.0) + (launches * gap + 0.0))
        return floored_p_norm
    if floor is not None:
        def floored(compute, memory, launches, gap):
            work = compute if compute >= memory or compute != compute else memory   # maximum
            added = launches * floor - work
            return work + ((added if added >= 0.0 or added != added else 0.0) + (launches * gap + 0.0))
        return floored
    if p is not None:
        def p_norm(compute, memory, launches, gap):
            hi, lo = (compute, memory) if compute >= memory else (memory, compute)
            return hi * (1.0 + (lo / hi if hi > 0 else 0.0) ** p) ** inv + (launches * gap + 0.0)
        return p_norm

    def roofline(compute, memory, launches, gap):
        return (compute if compute >= memory or compute != compute else memory) + (launches * gap + 0.0)
    return roofline


def _rows_timer(r: OpRates, tile: int, flops_per_row: float, weight_bytes: float, in_per_row: float,
                out_per_row: float) -> Callable:
    """A GEMM, vector kernel or gather over m rows: flops_padded = pad(m) f, bytes = W + m in + m out. With kernel
    figures (a floor per launch; GEMMs also the p-norm), the terms are written out in one function, the common case."""
    peak, bandwidth, finish = r.flops_per_s, r.bytes_per_s, _finish(r)
    tile_f, p, floor = float(tile), r.transition_p, r.floor_s
    if floor is not None and p is not None:
        inv = 1.0 / p

        def gemm_rows(gap, m):
            padded = m if tile <= 1 else (m if m >= tile else tile_f) if m > 0 else 0.0     # pad_rows
            compute = padded * flops_per_row / peak
            memory = (weight_bytes + m * in_per_row + m * out_per_row) / bandwidth
            hi, lo = (compute, memory) if compute >= memory else (memory, compute)
            work = hi * (1.0 + (lo / hi if hi > 0 else 0.0) ** p) ** inv                   # p_norm_time
            added = floor - work                                                           # one launch
            return work + ((added if added >= 0.0 or added != added else 0.0) + (gap + 0.0))
        return gemm_rows
    if floor is not None:
        def vector_rows(gap, m):
            compute = (m if tile <= 1 else (m if m >= tile else tile_f) if m > 0 else 0.0) * flops_per_row / peak
            memory = (weight_bytes + m * in_per_row + m * out_per_row) / bandwidth
            work = compute if compute >= memory or compute != compute else memory          # maximum
            added = floor - work
            return work + ((added if added >= 0.0 or added != added else 0.0) + (gap + 0.0))
        return vector_rows

    def rows(gap, m):
        padded = m if tile <= 1 else (m if m >= tile else tile_f) if m > 0 else 0.0
        return finish(padded * flops_per_row / peak, (weight_bytes + m * in_per_row + m * out_per_row) / bandwidth,
                      1, gap)
    return rows


def _fitted_gemm_timer(r: OpRates, tile: int, flops_per_row: float, weight_bytes: float, in_per_row: float,
                       out_per_row: float) -> Callable:
    """A GEMM timed by fitted GEMM figures (``gemm_rates``), written out: the p-norm of compute and memory, then one
    launch gap and the call's fixed latency (``_terms``: gap first, then the latency; no floor)."""
    peak, bandwidth, p, fixed = r.flops_per_s, r.bytes_per_s, r.transition_p, r.fixed_s
    inv, tile_f = 1.0 / p, float(tile)

    def fitted_gemm_rows(gap, m):
        padded = m if tile <= 1 else (m if m >= tile else tile_f) if m > 0 else 0.0     # pad_rows
        compute = padded * flops_per_row / peak
        memory = (weight_bytes + m * in_per_row + m * out_per_row) / bandwidth
        hi, lo = (compute, memory) if compute >= memory else (memory, compute)
        work = hi * (1.0 + (lo / hi if hi > 0 else 0.0) ** p) ** inv                   # p_norm_time
        return work + ((gap + 0.0) + fixed)
    return fitted_gemm_rows


def _attention_timer(op: "Attention", r: OpRates) -> Callable:
    """``Attention.demand`` written out: B q queries against c + q keys, the cache read once per sequence."""
    peak, bandwidth, finish = r.flops_per_s, r.bytes_per_s, _finish(r)
    per_key, q_in, q_out = op._flops_per_query_key, op._in_per_query, op._out_per_query
    kv_read, kv_write, ramp = op.kv_bytes_per_token, op._kv_write_per_query, r.ramp_bytes_per_sequence
    launches = 2 if kv_write else 1              # the cache write is a kernel of its own (``Attention``)

    def attention(gap, b, q, c):
        queries = b * q
        moved = queries * q_in + queries * q_out + b * c * kv_read + queries * kv_write
        return finish(queries * per_key * (c + q) / peak,
                      (moved if ramp is None else moved + b * ramp) / bandwidth, launches, gap)
    return attention


def _experts_timer(op: MoEExperts, r: OpRates) -> Callable:
    """``MoEExperts.demand`` and ``seconds`` written out for the fused-MoE kernel figures (p-norm, floor, the
    family's per-call work and helper launches): the rank's token->expert assignments, each touched expert's rows
    padded to the M tile, its weights read once."""
    peak, bandwidth, top_k, tile = r.flops_per_s, r.bytes_per_s, op.top_k, op.tile_m
    per_row, per_expert, act_per_row = op._flops_per_row, op._weight_bytes_per_expert, op._act_per_row
    p, floor, fixed, helpers = r.transition_p, r.floor_s, r.fixed_s, r.helper_launches
    inv = None if p is None else 1.0 / p
    launches = float(GROUPED_GEMM_LAUNCHES)

    def experts(gap, tokens, touched, share, total=None):
        assignments = tokens * top_k * share
        act = assignments * act_per_row
        t = touched if touched >= 1e-12 or touched != touched else 1e-12                  # _padded_rows
        m = assignments / t
        padded = m if tile <= 1 else (m if m >= tile else float(tile)) if m > 0 else 0.0  # pad_rows
        compute = t * padded * per_row / peak
        memory = (touched * per_expert + act + act + 0.0 + 0.0) / bandwidth              # Demand.bytes
        if p is not None:                                                                 # p_norm_time
            hi, lo = (compute, memory) if compute >= memory else (memory, compute)
            work = hi * (1.0 + (lo / hi if hi > 0 else 0.0) ** p) ** inv
        else:
            work = compute if compute >= memory or compute != compute else memory
        overhead = launches * gap + 0.0
        if helpers:
            overhead = overhead + helpers * gap
        if floor is not None:
            if fixed:
                overhead = overhead + fixed
            added = launches * floor - work
            overhead = (added if added >= 0.0 or added != added else 0.0) + overhead
        return work + overhead
    return experts


def _sampling_timer(op: "Sampling", r: OpRates) -> Callable:
    """``Sampling.demand`` written out: the fp32 logits swept ``passes`` times, probabilities written once."""
    peak, bandwidth, finish = r.flops_per_s, r.bytes_per_s, _finish(r)
    sweep_per_row, flops_per_row = op.vocab * 4.0, op.vocab * 5.0

    def sampling(gap, rows, passes):
        sweep = rows * sweep_per_row
        launches = float(round(passes))
        return finish(rows * flops_per_row * passes / peak, (sweep * passes + sweep) / bandwidth,
                      launches if launches >= 1.0 else 1.0, gap)
    return sampling


def _one_node_collective(hw: HardwareSpec, op: Operator) -> Optional[Callable]:
    """A collective within one node, written out: an all-reduce's fastest tier for its payload
    (``scale_up_all_reduce_time``), an exchange's bytes sent over the link (``exchange_time``); the time is the link
    time plus one launch gap. None past one node (the scale-out terms: ``seconds`` itself)."""
    group = op.group
    if group <= 1 or (nodes_spanned(hw, group) > 1 and hw.scale_out_bandwidth_bytes_per_s is not None
                      and hw.scale_out_latency_s is not None):
        return None
    link, latency = link_bytes_per_s(hw, group), hw.link_latency_s.value
    collective_bw = link * hw.efficiency.collective.value
    if not isinstance(op, AllReduce):
        sent_bytes = op.sent_bytes

        def exchange(gap, size):
            return 0.0 + ((latency + sent_bytes(size) / collective_bw) + (gap + 0.0))
        return exchange
    ring_traffic = 2.0 * (group - 1) / group
    tiers = [(t.latency_s, (group - 1) if t.algorithm is AllReduceAlgorithm.one_shot else ring_traffic,
              link * t.bandwidth_fraction, t.max_bytes) for t in (hw.kernels.all_reduce if hw.kernels else ())]
    per_row = op.width * op.act_dtype.bytes_per_element

    def all_reduce(gap, rows):
        payload = rows * per_row
        best = math.inf
        for tier_latency, traffic, tier_bw, max_bytes in tiers:
            t = tier_latency + payload * traffic / tier_bw if payload <= max_bytes else math.inf
            best = best if best <= t else t
        if best == math.inf:
            best = latency + ring_traffic * payload / collective_bw
        return 0.0 + (best + (gap + 0.0))
    return all_reduce
