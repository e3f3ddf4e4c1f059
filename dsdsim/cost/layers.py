"""Operators of one forward pass, layer by layer, on ONE GPU of a tp-way replica.

``pass_plan`` is the single description of every pass shape: decode (q = 1), verify (q = K + 1), a draft model's
passes, an MTP module or an EAGLE head, written as a plan (``dsdsim.cost.plan``) whose sizes come per point.
``pass_ops`` and the other ``*_ops`` give the operator records at given sizes; batch, q and context broadcast as
numpy arrays.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import numpy as np

from dsdsim.cost import ops
from dsdsim.cost.experts import check_popularity, routed_expert_counts, routing_overlap
from dsdsim.cost.memo import by_value
from dsdsim.cost.num import minimum, num
from dsdsim.cost.ops import KernelClass, OpCost
from dsdsim.cost.plan import PassPoint, PlanOp, dp_ranks, head_rows, rank_rows, records, tokens
from dsdsim.records import frozen
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, Mamba2, ModelSpec
from dsdsim.units import DType


@frozen
class PassContext:
    """What every operator of a pass needs besides its own layer: formats, parallelism, tile, routing."""

    tp: int
    ep: int
    w_dtype: DType
    expert_dtype: DType
    kv_dtype: DType
    act_dtype: DType
    tile_m: int
    expert_overlap: float = 0.0
    expert_popularity: Optional[np.ndarray] = None
    dp_attention: bool = False
    moe_family: Optional[str] = None       # the fused-MoE kernel family the engine runs (None: the part's default)
    moe_tile_m: Optional[int] = None       # that family's row tile (None: tile_m)

    @classmethod
    def build(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment,
              moe_family: Optional[str] = None) -> "PassContext":
        """The context of passes of ``model`` on ``hw`` under ``dep`` (computed once per three spec objects and
        family); ``moe_family``: the engine's fused-MoE kernel family on this part (``MoEKernels.family``)."""
        return _pass_context(cls, model, hw, dep, moe_family)

    @classmethod
    def _build(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment, moe_family: Optional[str]) -> "PassContext":
        pop = None
        if dep.expert_popularity is not None and model.moe_ffn is not None:
            moe = model.moe_ffn
            pop = check_popularity(dep.expert_popularity, moe.num_experts, moe.top_k)
        expert_dtype = dep.routed_expert_dtype(model)
        moe_tile = hw.kernels.moe_tile_m(moe_family, expert_dtype) if hw.kernels is not None else None
        return cls(tp=dep.tp, ep=dep.ep, w_dtype=dep.weight_dtype(model), expert_dtype=expert_dtype,
                   kv_dtype=dep.kv_dtype, act_dtype=dep.act_dtype, tile_m=int(hw.gemm_tile_m.value),
                   expert_overlap=routing_overlap(dep.expert_overlap, model.moe_ffn is not None),
                   expert_popularity=pop, dp_attention=dep.dp_attention,
                   moe_family=moe_family, moe_tile_m=moe_tile)


@by_value
def _pass_context(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment, moe_family) -> PassContext:
    return cls._build(model, hw, dep, moe_family)


@by_value
def layer_groups(model: ModelSpec) -> list[tuple[Layer, int, str]]:
    """``model.layer_groups()`` with each group's operator-name tag, once per model object."""
    groups = model.layer_groups()
    return [(layer, count, "L." if len(groups) == 1 else f"L({_group_label(layer)}).") for layer, count in groups]


def _split(n: int, tp: int) -> int:
    """Width per rank of a dimension split tp ways (rounded up: the busiest rank)."""
    return -(-n // tp)


def kv_heads_per_rank(attn: Attention, tp: int) -> int:
    """KV heads are split tp ways; with fewer KV heads than ranks each rank keeps one replica."""
    return max(1, attn.num_kv_heads // tp)


def kv_elements_per_token_per_rank(attn: Attention, tp: int) -> int:
    """Cached elements per token on one rank. The MLA latent is replicated on every rank (not split); linear
    attention caches none per token (its state per sequence: ``state_bytes_per_sequence_per_rank``)."""
    if attn.kind in (AttentionKind.mla, AttentionKind.linear) or attn.kv_shared:
        return attn.kv_elements_per_token
    return 2 * kv_heads_per_rank(attn, tp) * attn.head_dim


def kv_projection_per_rank(attn: Attention, tp: int) -> int:
    """k/v projection outputs per token on one rank: n_kv*d per projection (one where the value is the key's)."""
    return attn.kv_projections * kv_heads_per_rank(attn, tp) * attn.head_dim


def mamba_groups_per_rank(m: Mamba2, tp: int) -> int:
    """B/C groups of a Mamba-2 mixer on one rank: split tp ways, or one replica per rank with fewer groups than ranks
    (vLLM MambaMixer2 splits n_groups when tp divides it and replicates a single group on every rank)."""
    return max(1, m.n_groups // tp)


def state_bytes_per_sequence_per_rank(mixer: Optional[Attention | Mamba2], tp: int, conv_dtype: DType) -> float:
    """A recurrent layer's state of one sequence on one rank; 0 for attention over a KV cache and FFN-only layers
    (``mixer`` None).

    Gated DeltaNet: its value heads split tp ways x d_k x d_v in the layer's state format, and the convolution state
    (conv_kernel - 1 inputs of its channels split tp ways) in ``conv_dtype`` (vLLM ``gated_delta_net_state_shape``:
    divide(num_v_heads, tp) x d_k x d_v and divide(conv_dim, tp) x (conv_kernel - 1)). Mamba-2: H/tp x P x N in its
    state format and conv_kernel - 1 inputs of d_inner/tp + 2 G_rank N channels in ``conv_dtype`` (vLLM
    ``mamba2_state_shape``)."""
    if isinstance(mixer, Mamba2):
        heads = _split(mixer.num_heads, tp)
        state = heads * mixer.head_dim * mixer.state_size * mixer.state_dtype.bytes_per_element
        channels = heads * mixer.head_dim + 2 * mamba_groups_per_rank(mixer, tp) * mixer.state_size
        return state + channels * (mixer.conv_kernel - 1) * conv_dtype.bytes_per_element
    attn = mixer
    if attn is None or attn.kind is not AttentionKind.linear:
        return 0.0
    state = _split(attn.num_heads, tp) * attn.head_dim * attn.v_head_dim * attn.state_dtype.bytes_per_element
    return state + _split(attn.conv_channels, tp) * (attn.conv_kernel - 1) * conv_dtype.bytes_per_element


def context_limit(attn: Attention, kv_budget: Optional[int] = None) -> Optional[float]:
    """The most keys a query of this layer attends to, None for all: the window on sliding layers; chunked layers
    the chunk, the bound at a chunk's end (the mean over a chunk is chunk/2; the bound keeps cost monotone in c).
    A self-speculation draft attends to at most kv_budget tokens."""
    limits = [float(n) for n in (attn.window if attn.kind in (AttentionKind.sliding, AttentionKind.chunked) else None,
                                 kv_budget) if n is not None]
    return min(limits) if limits else None


def attention_plan(attn: Attention, hidden: int, pc: PassContext, kv_budget: Optional[int] = None,
                   qkv_in: Optional[int] = None) -> list[PlanOp]:
    """Projections, rotary, attention core and output projection for one layer (one rank), over the rows and
    sequences the rank holds (``PassPoint.rank_rows``, ``rank_batch``)."""
    heads = _split(attn.num_heads, pc.tp)
    k_in = qkv_in or hidden
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)

    limit = context_limit(attn, kv_budget)

    def core(p: PassPoint) -> tuple:
        return p.rank_batch, p.q, p.context if limit is None else minimum(p.context, limit)

    if attn.kind is AttentionKind.mla:
        qk = attn.qk_nope_head_dim + attn.qk_rope_head_dim
        latent = attn.kv_lora_rank + attn.qk_rope_head_dim

        def per_head(p: PassPoint) -> tuple:
            return (p.rank_rows * heads,)

        out = []
        if attn.q_lora_rank:
            out += [PlanOp("q_a", ops.Gemm(k_in, attn.q_lora_rank, **g), rank_rows),
                    PlanOp("q_b", ops.Gemm(attn.q_lora_rank, heads * qk, **g), rank_rows)]
        else:
            out.append(PlanOp("q", ops.Gemm(k_in, heads * qk, **g), rank_rows))
        if attn.sparse:
            core_op = ops.SparseAttention(heads, latent, attn.kv_lora_rank, latent, pc.kv_dtype, pc.act_dtype,
                                          attn.index_topk)
        else:
            core_op = ops.Attention(heads, latent, attn.kv_lora_rank, latent, pc.kv_dtype, pc.act_dtype,
                                    kernel=KernelClass.mla_decode)
        return out + [
            PlanOp("kv_a", ops.Gemm(k_in, latent, **g), rank_rows),
            *(indexer_plan(attn, k_in, pc) if attn.runs_indexer else ()),   # IndexShare: none of its own
            # weight absorption: q_nope @ W_UK per head moves queries into the latent space; the per-head absorbed
            # matrices are distinct weights: heads x (nope x lora) read once, not per token
            PlanOp("q_absorb", ops.Gemm(attn.qk_nope_head_dim, attn.kv_lora_rank, **g, weight_sets=heads), per_head),
            PlanOp("attn", core_op, core),
            PlanOp("v_absorb", ops.Gemm(attn.kv_lora_rank, attn.v_head_dim, **g, weight_sets=heads), per_head),
            PlanOp("o", ops.Gemm(heads * attn.v_head_dim, hidden, **g), rank_rows),
        ]
    if attn.kind is AttentionKind.linear:
        return linear_attention_plan(attn, hidden, pc)
    kv_heads = kv_heads_per_rank(attn, pc.tp)
    d = attn.head_dim
    kv = 2 * kv_heads * d                         # keys and values cached per token
    # a layer reading a shared cache projects, rotates and writes no keys or values of its own; where the value is
    # the key's output one projection serves both
    new_kv_heads, new_kv = (0, 0) if attn.kv_shared else (kv_heads, kv_projection_per_rank(attn, pc.tp))
    gate = heads * d if attn.output_gate else 0   # gated attention: q_proj also emits the output gate
    out = [PlanOp("qkv", ops.Gemm(k_in, heads * d + gate + new_kv, bias=attn.qkv_bias, **g), rank_rows)]
    if attn.qk_norm:
        # QK-norm (Qwen3, Gemma-3/4): an RMSNorm over each q and new k head before rotary (transformers
        # Qwen3Attention q_norm / k_norm), one kernel on the critical path: SGLang's Qwen3 attention runs k_norm on an
        # alternate stream beside q_norm under graph capture (``_apply_qk_norm``) and later releases fuse both
        # (``fused_inplace_qknorm``); reads and writes q and k once, 4 FLOPs an element as the layer norms
        out.append(PlanOp("qk_norm", ops.Elementwise((heads + new_kv_heads) * d, reads=1, writes=1,
                                                     act_dtype=pc.act_dtype, flops_per_element=4), rank_rows))
    if attn.rotary_dim != 0:     # rotary_dim 0: no positional encoding (Nemotron-H), no rotary kernel
        # rotary touches only the rotated part of each q and new k head (partial_rotary_factor), the rest is left as is
        out.append(PlanOp("rotary", ops.Elementwise((heads + new_kv_heads) * (attn.rotary_dim or d), reads=1,
                                                    writes=1, act_dtype=pc.act_dtype, flops_per_element=3), rank_rows))
    out.append(PlanOp("attn", ops.Attention(heads, d, d, kv, pc.kv_dtype, pc.act_dtype, ops.decode_kernel(pc.kv_dtype),
                                            writes_kv=not attn.kv_shared),
                      core))
    if attn.output_gate:
        # o * sigmoid(gate): reads both, writes one; sigmoid (exp, add, divide) and the multiply, 4 FLOPs
        out.append(PlanOp("output_gate", ops.Elementwise(heads * d, reads=2, writes=1, act_dtype=pc.act_dtype,
                                                         flops_per_element=4), rank_rows))
    return out + [PlanOp("o", ops.Gemm(heads * d, hidden, bias=attn.o_bias, **g), rank_rows)]


def indexer_plan(attn: Attention, hidden: int, pc: PassContext) -> list[PlanOp]:
    """The lightning indexer of a DeepSeek Sparse Attention layer on one rank (DeepSeek-V3.2-Exp inference/model.py
    ``Indexer``): wq_b from the q latent, wk from the hidden state (one key), weights_proj (one weight per head, kept
    in bf16: ``Linear(dim, n_heads, dtype=torch.get_default_dtype())``, here the activation format) and the scores of
    every cached token. Its weights, heads and K cache are whole on every rank (the reference builds them as plain
    ``Linear``, not column-parallel; vLLM's Indexer as ``ReplicatedLinear``), so nothing of it splits tp ways. The
    k LayerNorm, rotary, Hadamard rotation and fp8 quantisation of q and k ((n_i + 1) x d_i elements a token) are
    not counted."""
    n, d = attn.index_n_heads, attn.index_head_dim
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    return [
        PlanOp("indexer.q", ops.Gemm(attn.q_lora_rank, n * d, **g), rank_rows),
        PlanOp("indexer.k", ops.Gemm(hidden, d, **g), rank_rows),
        PlanOp("indexer.weights", ops.Gemm(hidden, n, w_dtype=pc.act_dtype, act_dtype=pc.act_dtype,
                                           tile_m=pc.tile_m), rank_rows),
        PlanOp("indexer", ops.IndexerScores(n, d, attn.indexer_cache_bytes_per_token, pc.act_dtype),
               _whole_context),
    ]


def _whole_context(p: PassPoint) -> tuple:
    return p.rank_batch, p.q, p.context


def _sequences_and_q(p: PassPoint) -> tuple:
    return p.rank_batch, p.q


def linear_attention_plan(attn: Attention, hidden: int, pc: PassContext) -> list[PlanOp]:
    """A gated DeltaNet layer on one rank (vLLM/transformers Qwen3NextGatedDeltaNet), its heads and channels split tp
    ways as vLLM shards them: in_proj_qkvz and in_proj_ba, the causal convolution over q, k and v, the delta-rule
    scan on the recurrent state, the gated RMSNorm of the output by SiLU(z), and out_proj. Its cost does not grow
    with the context: the state is read once per sequence per pass."""
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    v_heads, k_heads = _split(attn.num_heads, pc.tp), _split(attn.num_kv_heads, pc.tp)
    value = v_heads * attn.v_head_dim
    conv = _split(attn.conv_channels, pc.tp)
    return [
        PlanOp("qkvz", ops.Gemm(hidden, _split(attn.linear_qkvz_width, pc.tp), **g), rank_rows),
        PlanOp("ba", ops.Gemm(hidden, 2 * v_heads, **g), rank_rows),
        PlanOp("conv1d", ops.CausalConv1d(conv, attn.conv_kernel, pc.w_dtype, pc.act_dtype, pc.act_dtype),
               _sequences_and_q),
        PlanOp("delta_rule", ops.DeltaRuleScan(v_heads, k_heads, attn.head_dim, attn.v_head_dim, pc.act_dtype,
                                               attn.state_dtype), _sequences_and_q),
        # RMSNorm of o (4 FLOPs an element, as the layer norms) times SiLU(z) (5, as the SwiGLU activation)
        PlanOp("norm_gate", ops.Elementwise(value, reads=2, writes=1, act_dtype=pc.act_dtype, flops_per_element=9),
               rank_rows),
        PlanOp("out", ops.Gemm(value, hidden, **g), rank_rows),
    ]


def mamba2_plan(m: Mamba2, hidden: int, pc: PassContext) -> list[PlanOp]:
    """A Mamba-2 mixer on one rank (transformers NemotronHMamba2Mixer, vLLM MambaMixer2), its heads, d_inner and
    groups split tp ways as vLLM shards them: in_proj (z, x, B, C, dt), the causal convolution over x, B and C, the
    selective state update (``ops.Mamba2Scan``), the gated RMSNorm of y by SiLU(z), and out_proj (row-parallel: the
    layer's all-reduce follows). Its cost does not grow with the context: the state is read once per sequence per
    pass."""
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    heads, groups = _split(m.num_heads, pc.tp), mamba_groups_per_rank(m, pc.tp)
    inner = heads * m.head_dim
    bc = 2 * groups * m.state_size        # B and C on this rank
    conv_op = ops.CausalConv1dWithBias if m.conv_bias else ops.CausalConv1d
    return [
        PlanOp("in_proj", ops.Gemm(hidden, 2 * inner + bc + heads, bias=m.proj_bias, **g), rank_rows),
        PlanOp("conv1d", conv_op(inner + bc, m.conv_kernel, pc.w_dtype, pc.act_dtype, pc.act_dtype), _sequences_and_q),
        PlanOp("ssm", ops.Mamba2Scan(heads, m.head_dim, m.state_size, groups, pc.act_dtype, m.state_dtype),
               _sequences_and_q),
        # y * SiLU(z) (5 FLOPs an element, as the SwiGLU activation), then the grouped RMSNorm (4, as the layer
        # norms) with its d_inner weights (Zamba2RMSNormGated, norm_before_gate False)
        PlanOp("norm_gate", ops.Elementwise(inner, reads=2, writes=1, act_dtype=pc.act_dtype, flops_per_element=9,
                                            weight_elements=inner), rank_rows),
        PlanOp("out_proj", ops.Gemm(inner, hidden, bias=m.proj_bias, **g), rank_rows),
    ]


def ffn_plan(ffn: FFN, hidden: int, pc: PassContext) -> list[PlanOp]:
    """Dense SwiGLU (or a plain two-matrix MLP), or router + routed experts (+ shared experts; LatentMoE's
    projections into and out of the experts' latent space) for one layer (one rank).

    Layouts as engines run them. Tensor-parallel attention (vLLM): every rank holds all B*q tokens after the
    attention all-reduce, computes its experts' rows, and the FFN all-reduce that TP does anyway combines the
    experts: no all-to-all. Data-parallel attention: a rank holds its own ceil(B/tp) sequences, dispatches their
    token-expert rows to the expert ranks and combines the results by all-to-all (ep > 1), or gathers and
    reduce-scatters the tokens of all ranks (ep = 1, one all-reduce's traffic); the shared experts and dense FFN
    layers run on the rank's own tokens with whole weights (SGLang --moe-dense-tp-size 1)."""
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    dense_tp = 1 if pc.dp_attention else pc.tp
    mlp = _swiglu if ffn.gated else _plain_mlp
    if ffn.kind is FFNKind.dense:
        return mlp("mlp", hidden, _split(ffn.intermediate_size, dense_tp), ffn.bias, pc, g)
    out = [PlanOp("router", ops.Gemm(hidden, ffn.num_experts, w_dtype=pc.act_dtype, act_dtype=pc.act_dtype,
                                     tile_m=pc.tile_m, bias=ffn.router_bias), rank_rows)]

    def experts(p: PassPoint) -> tuple:
        return (p.tokens, *routed_experts(ffn, pc, p))

    expert_in = ffn.expert_input(hidden)       # LatentMoE: the experts read and write the latent width
    expert_op = ops.MoEExperts if ffn.gated else ops.PlainMoEExperts
    routed = expert_op(ffn.top_k, expert_in, _split(ffn.expert_intermediate_size, pc.tp // pc.ep),
                       w_dtype=pc.expert_dtype, act_dtype=pc.act_dtype, tile_m=pc.moe_tile_m or pc.tile_m,
                       bias=ffn.bias, experts=ffn.num_experts // pc.ep)
    if ffn.latent_size:   # fc1_latent_proj, whole on every rank (vLLM ReplicatedLinear), over the rank's rows
        out.append(PlanOp("latent_in", ops.Gemm(hidden, ffn.latent_size, bias=ffn.bias, **g), rank_rows))
    a2a = pc.dp_attention and pc.ep > 1
    if a2a:   # this rank's rows leave for the expert ranks; all_to_all counts the rows of the ep-rank group
        rows_per_token = ffn.top_k * pc.ep

        def exchanged(p: PassPoint) -> tuple:
            return (p.rank_rows * rows_per_token,)

        exchange = ops.AllToAll(expert_in, pc.act_dtype, pc.ep)
        out.append(PlanOp("dispatch", exchange, exchanged))
    out.append(PlanOp("experts", routed, experts))
    if a2a:
        out.append(PlanOp("combine", exchange, exchanged))
    if ffn.latent_size:   # fc2_latent_proj back to h, whole on every rank
        out.append(PlanOp("latent_out", ops.Gemm(ffn.latent_size, hidden, bias=ffn.bias, **g), rank_rows))
    if ffn.num_shared_experts:
        width = _split(ffn.num_shared_experts * ffn.shared_intermediate_size, dense_tp)
        out += mlp("shared", hidden, width, ffn.bias, pc, g)
    return out


def routed_experts(ffn: FFN, pc: PassContext, p: PassPoint) -> tuple:
    """(experts touched on the busiest rank, that rank's share of the token-expert rows, experts touched by all
    ranks) for B sequences x q tokens at ``p``; worked out once per point for all layers with this FFN."""
    key = id(ffn)
    hit = p.memo.get(key)
    if hit is None:
        rank, share, total = routed_expert_counts(ffn.num_experts, ffn.top_k, p.batch, p.q, pc.ep,
                                                  pc.expert_overlap, pc.expert_popularity)
        hit = p.memo[key] = (num(rank), num(share), num(total))    # floats for one point, as the point's sizes
    return hit


def _swiglu(prefix: str, hidden: int, width: int, bias: bool, pc: PassContext, g: dict) -> list[PlanOp]:
    return [
        PlanOp(f"{prefix}.gate_up", ops.Gemm(hidden, 2 * width, bias=bias, **g), rank_rows),
        PlanOp(f"{prefix}.act", ops.Elementwise(width, reads=2, writes=1, act_dtype=pc.act_dtype,
                                                flops_per_element=5), rank_rows),
        PlanOp(f"{prefix}.down", ops.Gemm(width, hidden, bias=bias, **g), rank_rows),
    ]


def _plain_mlp(prefix: str, hidden: int, width: int, bias: bool, pc: PassContext, g: dict) -> list[PlanOp]:
    """A two-matrix MLP, up (h -> width), its elementwise activation and down (width -> h). The activation is
    Nemotron-H's ReLU^2: one multiply an element counted (the ReLU, a comparison, is not, as in IndexerScores)."""
    return [
        PlanOp(f"{prefix}.up", ops.Gemm(hidden, width, bias=bias, **g), rank_rows),
        PlanOp(f"{prefix}.act", ops.Elementwise(width, reads=1, writes=1, act_dtype=pc.act_dtype,
                                                flops_per_element=1), rank_rows),
        PlanOp(f"{prefix}.down", ops.Gemm(width, hidden, bias=bias, **g), rank_rows),
    ]


def layer_plan(layer: Layer, hidden: int, pc: PassContext, *, kv_budget: Optional[int] = None,
               qkv_in: Optional[int] = None) -> list[PlanOp]:
    """One decoder layer: norms (with residual adds), its mixer (attention or Mamba-2) and FFN blocks, whichever it
    has, and their TP all-reduces."""
    attn_pc = replace(pc, tp=1) if pc.dp_attention else pc   # own sequences, all heads, no attention all-reduce
    norm = ops.Elementwise(hidden, reads=2, writes=2, act_dtype=pc.act_dtype, flops_per_element=4)
    out = [PlanOp("input_norm+residual", norm, rank_rows)]
    if layer.attention is not None:
        out += [o.renamed("attn.") for o in attention_plan(layer.attention, hidden, attn_pc, kv_budget, qkv_in)]
        if pc.tp > 1 and not pc.dp_attention:
            out.append(PlanOp("attn.all_reduce", ops.AllReduce(hidden, pc.act_dtype, pc.tp), tokens))
    elif layer.mamba is not None:
        out += [o.renamed("mamba.") for o in mamba2_plan(layer.mamba, hidden, attn_pc)]
        if pc.tp > 1 and not pc.dp_attention:
            out.append(PlanOp("mamba.all_reduce", ops.AllReduce(hidden, pc.act_dtype, pc.tp), tokens))
    out += [PlanOp(("post_attn_" if i == 0 else f"extra{i}_") + "norm+residual", norm, rank_rows)
            for i in range(max(0, layer.norms - 1))]
    if layer.ffn is None:
        return out
    out += [o.renamed("ffn.") for o in ffn_plan(layer.ffn, hidden, pc)]
    tp_reduce = not pc.dp_attention or (layer.ffn.kind is FFNKind.moe and pc.ep == 1)
    if pc.tp > 1 and tp_reduce:
        out.append(PlanOp("ffn.all_reduce", ops.AllReduce(hidden, pc.act_dtype, pc.tp), tokens))
    return out


def head_plan(hidden: int, vocab: int, pc: PassContext, prefix: str = "") -> list[PlanOp]:
    """Final norm, vocab-parallel lm_head (logits in the activation dtype, as vLLM computes them), the logits
    gather under TP, and sampling, which upcasts to fp32 and sweeps N x V x 4 bytes per pass; over the point's
    ``head_rows``."""
    out = [
        PlanOp(f"{prefix}final_norm", ops.Elementwise(hidden, reads=2, writes=1, act_dtype=pc.act_dtype,
                                                      flops_per_element=4), head_rows),
        PlanOp(f"{prefix}lm_head", ops.Gemm(hidden, _split(vocab, pc.tp), w_dtype=pc.w_dtype, act_dtype=pc.act_dtype,
                                            tile_m=pc.tile_m), head_rows),
    ]
    if pc.tp > 1:
        out.append(PlanOp(f"{prefix}logits_gather", ops.Gather(vocab, pc.act_dtype.bytes_per_element, pc.tp),
                          head_rows))
    out.append(PlanOp(f"{prefix}sampling", ops.Sampling(vocab), _sampled))
    return out


def _sampled(p: PassPoint) -> tuple:
    return p.head_rows, p.sampling_passes


def pass_plan(model: ModelSpec, pc: PassContext, *, kv_budget: Optional[int] = None) -> list[PlanOp]:
    """A full forward pass of ``model``: embedding, every layer group (its layers as the count), the head."""
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    out = [PlanOp("embed", ops.Embedding(model.hidden_size, pc.w_dtype, pc.act_dtype), tokens)]
    projections = [PlanOp(name, ops.Gemm(p.inputs, p.outputs, **g), tokens)
                   for name, p in zip(("pre_projection", "post_projection"), model.backbone_projections)]
    out += projections[:1]
    for layer, count, tag in layer_groups(model):
        out += [o.renamed(tag, count) for o in layer_plan(layer, model.hidden_size, pc, kv_budget=kv_budget)]
    return out + projections[1:] + head_plan(model.hidden_size, model.vocab_size, pc)


# --- the operators at given sizes (explain, tests, the benches) ------------------------------------------------


def point(batch, q, context, pc: PassContext, head_rows=None, sampling_passes=1.0) -> PassPoint:
    return PassPoint(batch, q, context, dp_ranks=dp_ranks(pc.dp_attention, pc.tp), head_rows=head_rows,
                     sampling_passes=sampling_passes)


def attention_ops(attn: Attention, hidden: int, batch, q, context, pc: PassContext,
                  kv_budget: Optional[int] = None, qkv_in: Optional[int] = None) -> list[OpCost]:
    """``attention_plan`` for ``batch`` sequences (the caller's: the rank's own under data-parallel attention)."""
    return records(attention_plan(attn, hidden, pc, kv_budget, qkv_in), PassPoint(batch, q, context))


def ffn_ops(ffn: FFN, hidden: int, batch, q, pc: PassContext) -> list[OpCost]:
    return records(ffn_plan(ffn, hidden, pc), point(batch, q, 0.0, pc))


def layer_ops(layer: Layer, hidden: int, batch, q, context, pc: PassContext, *,
              kv_budget: Optional[int] = None, qkv_in: Optional[int] = None) -> list[OpCost]:
    return records(layer_plan(layer, hidden, pc, kv_budget=kv_budget, qkv_in=qkv_in), point(batch, q, context, pc))


def head_ops(hidden: int, vocab: int, rows, pc: PassContext, sampling_passes, prefix: str = "") -> list[OpCost]:
    return records(head_plan(hidden, vocab, pc, prefix), PassPoint(rows, 1.0, 0.0, head_rows=rows,
                                                                   sampling_passes=sampling_passes))


def pass_ops(model: ModelSpec, pc: PassContext, batch, q, context, *, head_rows=None, sampling_passes=1.0,
             kv_budget: Optional[int] = None) -> list[OpCost]:
    """``pass_plan`` over q tokens for each of ``batch`` sequences at ``context`` cached tokens.

    head_rows: rows that go through the lm_head (verify: all B*q; a draft pass: B).
    """
    return records(pass_plan(model, pc, kv_budget=kv_budget), point(batch, q, context, pc, head_rows, sampling_passes))


def _group_label(layer: Layer) -> str:
    """'full,moe', 'sliding1024,dense', ...; a layer with one part names that part ('mamba2', 'full', 'dense')."""
    parts = []
    a = layer.attention
    if a is not None:
        parts.append(a.kind.value + (f"{a.window}" if a.window else ""))
    if layer.mamba is not None:
        parts.append("mamba2")
    if layer.ffn is not None:
        parts.append(layer.ffn.kind.value)
    return ",".join(parts)
