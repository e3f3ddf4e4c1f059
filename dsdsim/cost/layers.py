"""Operators of one forward pass, layer by layer, on ONE GPU of a tp-way replica.

``pass_ops`` is the single code path for every pass shape: decode (q = 1), verify (q = K + 1),
a draft model's passes, an MTP module or an EAGLE head. batch, q and context broadcast as numpy arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from dsdsim.cost import ops
from dsdsim.cost.experts import check_popularity, experts_touched, experts_touched_busiest_rank
from dsdsim.cost.memo import by_identity
from dsdsim.cost.num import ceil, minimum, num
from dsdsim.cost.ops import KernelClass, OpCost
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, ModelSpec
from dsdsim.units import DType


@dataclass(frozen=True)
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

    @classmethod
    def build(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> "PassContext":
        """The context of passes of ``model`` on ``hw`` under ``dep`` (computed once per three spec objects)."""
        return _pass_context(cls, model, hw, dep)

    @classmethod
    def _build(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> "PassContext":
        pop = None
        if dep.expert_popularity is not None and model.moe_ffn is not None:
            moe = model.moe_ffn
            pop = check_popularity(dep.expert_popularity, moe.num_experts, moe.top_k)
        return cls(tp=dep.tp, ep=dep.ep, w_dtype=dep.weight_dtype(model), expert_dtype=dep.routed_expert_dtype(model),
                   kv_dtype=dep.kv_dtype, act_dtype=dep.act_dtype, tile_m=int(hw.gemm_tile_m.value),
                   expert_overlap=dep.expert_overlap, expert_popularity=pop, dp_attention=dep.dp_attention)


@by_identity
def _pass_context(cls, model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> PassContext:
    return cls._build(model, hw, dep)


@by_identity
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
    """Cached elements per token on one rank. The MLA latent is replicated on every rank (not split)."""
    if attn.kind is AttentionKind.mla:
        return attn.kv_elements_per_token
    return 2 * kv_heads_per_rank(attn, tp) * attn.head_dim


def effective_context(attn: Attention, context, kv_budget: Optional[int] = None):
    """Keys a query attends to: min(c, window) on sliding layers; chunked layers use min(c, chunk), the bound
    at a chunk's end (the mean over a chunk is chunk/2; the bound keeps cost monotone in c).
    A self-speculation draft attends to at most kv_budget tokens."""
    c = num(context)
    if attn.window is not None and attn.kind in (AttentionKind.sliding, AttentionKind.chunked):
        c = minimum(c, attn.window)
    if kv_budget is not None:
        c = minimum(c, kv_budget)
    return c


def attention_ops(attn: Attention, hidden: int, batch, q, context, pc: PassContext,
                  kv_budget: Optional[int] = None, qkv_in: Optional[int] = None) -> list[OpCost]:
    """Projections, rotary, attention core and output projection for one layer (one rank)."""
    tokens = num(batch) * num(q)
    c_eff = effective_context(attn, context, kv_budget)
    heads = _split(attn.num_heads, pc.tp)
    k_in = qkv_in or hidden
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    if attn.kind is AttentionKind.mla:
        qk = attn.qk_nope_head_dim + attn.qk_rope_head_dim
        latent = attn.kv_lora_rank + attn.qk_rope_head_dim
        out = []
        if attn.q_lora_rank:
            out += [ops.gemm("q_a", tokens, k_in, attn.q_lora_rank, **g),
                    ops.gemm("q_b", tokens, attn.q_lora_rank, heads * qk, **g)]
        else:
            out.append(ops.gemm("q", tokens, k_in, heads * qk, **g))
        out += [
            ops.gemm("kv_a", tokens, k_in, latent, **g),
            # weight absorption: q_nope @ W_UK per head moves queries into the latent space
            ops.gemm("q_absorb", tokens * heads, attn.qk_nope_head_dim, attn.kv_lora_rank, **g),
            ops.attention("attn", batch, q, c_eff, heads, latent, attn.kv_lora_rank, latent, pc.kv_dtype,
                          pc.act_dtype, kernel=KernelClass.mla_decode),
            ops.gemm("v_absorb", tokens * heads, attn.kv_lora_rank, attn.v_head_dim, **g),
            ops.gemm("o", tokens, heads * attn.v_head_dim, hidden, **g),
        ]
        # per-head absorbed matrices are distinct weights: heads x (nope x lora) read once, not per token
        out[-4] = _per_head_weights(out[-4], heads)
        out[-2] = _per_head_weights(out[-2], heads)
        return out
    kv_heads = kv_heads_per_rank(attn, pc.tp)
    d = attn.head_dim
    return [
        ops.gemm("qkv", tokens, k_in, (heads + 2 * kv_heads) * d, bias=attn.qkv_bias, **g),
        ops.elementwise("rotary", tokens, (heads + kv_heads) * d, reads=1, writes=1, act_dtype=pc.act_dtype,
                        flops_per_element=3),
        ops.attention("attn", batch, q, c_eff, heads, d, d, 2 * kv_heads * d, pc.kv_dtype, pc.act_dtype),
        ops.gemm("o", tokens, heads * d, hidden, bias=attn.o_bias, **g),
    ]


def _per_head_weights(op: OpCost, heads: int) -> OpCost:
    """A batched GEMM whose m = tokens*heads rows use one of `heads` weight matrices each."""
    return replace(op, weight_bytes=op.weight_bytes * heads)


def ffn_ops(ffn: FFN, hidden: int, batch, q, pc: PassContext) -> list[OpCost]:
    """Dense SwiGLU, or router + routed experts (+ shared experts) for one layer (one rank).

    Layouts as engines run them. Tensor-parallel attention (vLLM): every rank holds all B*q tokens after the
    attention all-reduce, computes its experts' rows, and the FFN all-reduce that TP does anyway combines the
    experts: no all-to-all. Data-parallel attention: a rank holds its own ceil(B/tp) sequences, dispatches their
    token-expert rows to the expert ranks and combines the results by all-to-all (ep > 1), or gathers and
    reduce-scatters the tokens of all ranks (ep = 1, one all-reduce's traffic); the shared experts and dense FFN
    layers run on the rank's own tokens with whole weights (SGLang --moe-dense-tp-size 1)."""
    tokens = num(batch) * num(q)
    local = dp_rank_batch(batch, pc) * num(q) if pc.dp_attention else tokens
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    dense_tp = 1 if pc.dp_attention else pc.tp
    if ffn.kind is FFNKind.dense:
        width = _split(ffn.intermediate_size, dense_tp)
        return _swiglu("mlp", local, hidden, width, ffn.bias, pc, g)
    out = [ops.gemm("router", local, hidden, ffn.num_experts, w_dtype=pc.act_dtype, act_dtype=pc.act_dtype,
                    tile_m=pc.tile_m, bias=ffn.router_bias)]
    touched_rank, share = experts_touched_busiest_rank(
        ffn.num_experts, ffn.top_k, batch, q, pc.ep, pc.expert_overlap, pc.expert_popularity)
    width = _split(ffn.expert_intermediate_size, pc.tp // pc.ep)
    total = experts_touched(ffn.num_experts, ffn.top_k, batch, q, pc.expert_overlap, pc.expert_popularity)
    experts = ops.moe_experts("experts", tokens, ffn.top_k, hidden, width, touched_rank, share,
                              w_dtype=pc.expert_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m, bias=ffn.bias,
                              experts_touched_total=total)
    a2a = pc.dp_attention and pc.ep > 1
    if a2a:   # this rank's rows leave for the expert ranks; all_to_all counts the rows of the ep-rank group
        out.append(ops.all_to_all("dispatch", local * ffn.top_k * pc.ep, hidden, pc.act_dtype, pc.ep))
    out.append(experts)
    if a2a:
        out.append(ops.all_to_all("combine", local * ffn.top_k * pc.ep, hidden, pc.act_dtype, pc.ep))
    if ffn.num_shared_experts:
        width = _split(ffn.num_shared_experts * ffn.shared_intermediate_size, dense_tp)
        out += _swiglu("shared", local, hidden, width, ffn.bias, pc, g)
    return out


def dp_rank_batch(batch, pc: PassContext):
    """Sequences on the busiest rank under data-parallel attention: ceil(B / tp)."""
    return ceil(num(batch) / pc.tp)


def _swiglu(prefix: str, tokens, hidden: int, width: int, bias: bool, pc: PassContext, g: dict) -> list[OpCost]:
    return [
        ops.gemm(f"{prefix}.gate_up", tokens, hidden, 2 * width, bias=bias, **g),
        ops.elementwise(f"{prefix}.act", tokens, width, reads=2, writes=1, act_dtype=pc.act_dtype,
                        flops_per_element=5),
        ops.gemm(f"{prefix}.down", tokens, width, hidden, bias=bias, **g),
    ]


def layer_ops(layer: Layer, hidden: int, batch, q, context, pc: PassContext, *,
              kv_budget: Optional[int] = None, qkv_in: Optional[int] = None) -> list[OpCost]:
    """One decoder layer: norms (with residual adds), attention block, FFN block, TP all-reduces."""
    tokens = num(batch) * num(q)
    if pc.dp_attention:   # own sequences, all heads, no attention all-reduce
        attn_batch, attn_pc = dp_rank_batch(batch, pc), replace(pc, tp=1)
    else:
        attn_batch, attn_pc = batch, pc
    rows = num(attn_batch) * num(q)
    norm = ops.elementwise("norm+residual", rows, hidden, reads=2, writes=2, act_dtype=pc.act_dtype,
                           flops_per_element=4)
    out = [norm.renamed("input_")]
    out += [o.renamed("attn.") for o in attention_ops(layer.attention, hidden, attn_batch, q, context, attn_pc,
                                                      kv_budget, qkv_in)]
    if pc.tp > 1 and not pc.dp_attention:
        out.append(ops.all_reduce("attn.all_reduce", tokens, hidden, pc.act_dtype, pc.tp))
    out += [norm.renamed("post_attn_" if i == 0 else f"extra{i}_") for i in range(max(0, layer.norms - 1))]
    out += [o.renamed("ffn.") for o in ffn_ops(layer.ffn, hidden, batch, q, pc)]
    tp_reduce = not pc.dp_attention or (layer.ffn.kind is FFNKind.moe and pc.ep == 1)
    if pc.tp > 1 and tp_reduce:
        out.append(ops.all_reduce("ffn.all_reduce", tokens, hidden, pc.act_dtype, pc.tp))
    return out


def head_ops(hidden: int, vocab: int, rows, pc: PassContext, sampling_passes, prefix: str = "") -> list[OpCost]:
    """Final norm, vocab-parallel lm_head (logits in the activation dtype, as vLLM computes them), the logits
    gather under TP, and sampling, which upcasts to fp32 and sweeps N x V x 4 bytes per pass."""
    a = pc.act_dtype.bytes_per_element
    out = [
        ops.elementwise(f"{prefix}final_norm", rows, hidden, reads=2, writes=1, act_dtype=pc.act_dtype,
                        flops_per_element=4),
        ops.gemm(f"{prefix}lm_head", rows, hidden, _split(vocab, pc.tp), w_dtype=pc.w_dtype, act_dtype=pc.act_dtype,
                 tile_m=pc.tile_m),
    ]
    if pc.tp > 1:
        out.append(ops.gather(f"{prefix}logits_gather", rows, vocab, a, pc.tp))
    out.append(ops.sampling(f"{prefix}sampling", rows, vocab, sampling_passes))
    return out


def pass_ops(model: ModelSpec, pc: PassContext, batch, q, context, *, head_rows=None, sampling_passes=1.0,
             kv_budget: Optional[int] = None) -> list[OpCost]:
    """A full forward pass of `model` over q tokens for each of `batch` sequences at `context` cached tokens.

    head_rows: rows that go through the lm_head (verify: all B*q; a draft pass: B).
    """
    tokens = num(batch) * num(q)
    rows = tokens if head_rows is None else head_rows
    out = [ops.embedding("embed", tokens, model.hidden_size, pc.w_dtype, pc.act_dtype)]
    for layer, count, tag in layer_groups(model):
        out += [o.renamed(tag, count) for o in layer_ops(layer, model.hidden_size, batch, q, context, pc,
                                                         kv_budget=kv_budget)]
    out += head_ops(model.hidden_size, model.vocab_size, rows, pc, sampling_passes)
    return out


def _group_label(layer: Layer) -> str:
    a = layer.attention
    attn = a.kind.value + (f"{a.window}" if a.window else "")
    return f"{attn},{layer.ffn.kind.value}"
