"""Draft-step operators for every drafter kind.

A model-based drafter runs K sequential passes per step: the first over the q = K + 1 tokens the target just
verified (their hidden states / tokens are the draft's new input), the other K - 1 over one token per
sequence. Each pass ends in the drafter's lm_head and a sampling kernel for B rows. These fixed per-pass
costs (launches, sampling, the draft/verify hand-off) dominate at small batch and are modelled explicitly.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple, Optional

import numpy as np

from dsdsim.cost import ops
from dsdsim.cost.layers import PassContext, head_plan, layer_plan, pass_plan
from dsdsim.cost.memo import by_value
from dsdsim.cost.num import maximum, minimum, num, where
from dsdsim.cost.ops import OpCost
from dsdsim.cost.plan import PassPoint, PlanOp, dp_ranks, records, tokens
from dsdsim.errors import DsdsimError
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, DraftHead, eagle3_head, eagle_head, medusa_heads
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, ModelSpec


@by_value
def eagle_layer(target: ModelSpec, drafter: DrafterSpec) -> Layer:
    """The EAGLE head's decoder layer: full attention with the target's heads, a dense SwiGLU.

    FFN width: the override, else the target's dense width, else (MoE-only targets) its active FFN width
    top_k*I_e + shared — an assumption for heads whose configs are not published.
    """
    first = target.layers[0].attention
    heads = first.num_heads
    kv = first.num_kv_heads if first.kind is not AttentionKind.mla else heads
    head_dim = first.v_head_dim if first.kind is AttentionKind.mla else first.head_dim
    width = drafter.intermediate_size
    if width is None:
        dense = [layer.ffn for layer in target.layers if layer.ffn.kind is FFNKind.dense]
        if dense:
            width = dense[0].intermediate_size
        else:
            moe = target.moe_ffn
            width = moe.top_k * moe.expert_intermediate_size + moe.num_shared_experts * moe.shared_intermediate_size
    attn = Attention(kind=AttentionKind.full, num_heads=heads, num_kv_heads=kv, head_dim=head_dim)
    return Layer(attention=attn, ffn=FFN(kind=FFNKind.dense, intermediate_size=width))


@by_value
def draft_head(target: ModelSpec, drafter: DrafterSpec) -> DraftHead | None:
    """The weights and shapes of an EAGLE, EAGLE-3 or Medusa head on ``target``; None for other drafters."""
    h = target.hidden_size
    if drafter.kind is DrafterKind.eagle:
        return eagle_head(h, eagle_layer(target, drafter))
    if drafter.kind is DrafterKind.eagle3:
        return eagle3_head(h, eagle_layer(target, drafter), drafter.draft_vocab_size)
    if drafter.kind is DrafterKind.medusa:
        return medusa_heads(h, target.vocab_size, drafter.max_k)
    return None


class DraftRole(str, Enum):
    """When a draft pass runs in a step."""

    first = "first"      # once when K >= 1, over the tokens verified last step
    again = "again"      # K - 1 times, over the candidates per sequence (a tree's topk, else 1)
    each = "each"        # Medusa: one pass over B rows whose operators occur K times
    step = "step"        # once per step: the n-gram host lookup


class DraftPass(NamedTuple):
    """One kind of draft pass: its operators and when it runs."""

    role: DraftRole
    ops: list[PlanOp]


@dataclass(frozen=True)
class DraftPlan:
    """The draft phase of a step as plans (``dsdsim.cost.plan``), fixed per setup; ``points`` gives each pass's sizes
    and how often it runs at a point. With a draft tree (EAGLE, EAGLE-3, MTP, draft model), K >= 1 means the tree:
    the first pass over the steps + 1 tokens verified last step, then steps - 1 passes over topk candidates per
    sequence."""

    passes: tuple[DraftPass, ...]
    tree_steps: Optional[int] = None       # a draft tree's sequential steps (K >= 1 means the whole tree)
    again_q: float = 1.0                   # tokens per sequence the later passes run (a tree's topk, else 1;
                                           # self-speculation: 1)
    again_head_rows_per_sequence: float = 1.0   # rows per sequence through the lm_head in later passes
    dp_ranks: int = 1                      # ranks the batch is split over (data-parallel attention)

    def points(self, batch, k, context, first_at_zero: bool = False
               ) -> list[tuple[PassPoint, Optional[np.ndarray | float]]]:
        """(sizes, times it runs; None: once, not counted) for each pass at batch B, K draft tokens, context c.
        ``first_at_zero``: the first pass runs at K = 0 too (a dynamic-K server's K = 0 tier keeping the drafter's
        KV cache in step, vLLM ``llm_base_proposer.py``)."""
        b, k, c = num(batch), num(k), num(context)
        kk = where(k > 0, float(self.tree_steps), 0.0) if self.tree_steps is not None else k
        q_first = kk + 1.0
        out = []
        for dp in self.passes:
            if dp.role is DraftRole.first:
                runs = 1.0 if first_at_zero else minimum(kk, 1.0)
                out.append((PassPoint(b, q_first, c, dp_ranks=self.dp_ranks, head_rows=b, k=k), runs))
            elif dp.role is DraftRole.again:
                rows = b * self.again_head_rows_per_sequence
                out.append((PassPoint(b, self.again_q, c + q_first, dp_ranks=self.dp_ranks, head_rows=rows, k=k),
                            maximum(kk - 1.0, 0.0)))
            elif dp.role is DraftRole.each:
                out.append((PassPoint(b, 1.0, c, head_rows=b, k=k), k))
            else:
                out.append((PassPoint(b, 1.0, c, head_rows=b, k=k), None))
        return out


def _batch(p: PassPoint) -> tuple:
    return (p.batch,)


def _one_sweep(p: PassPoint) -> tuple:
    return p.batch, 1.0


def draft_plan(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, draft_model: ModelSpec | None = None,
               draft_pc: PassContext | None = None) -> DraftPlan:
    """All operators of the draft phase of one step, as plans (zero times when K = 0)."""
    h = target.hidden_size
    kind = drafter.kind
    tree = drafter.tree
    steps = tree.steps if tree is not None and kind in (DrafterKind.eagle, DrafterKind.eagle3, DrafterKind.mtp,
                                                        DrafterKind.draft_model) else None
    width = float(tree.topk) if tree is not None else 1.0     # tokens per sequence in passes 2..
    dp = dp_ranks(pc.dp_attention, pc.tp)

    def two(first: list[PlanOp], again: list[PlanOp], *, again_q=width, rows=width, ranks=dp) -> DraftPlan:
        return DraftPlan((DraftPass(DraftRole.first, [o.renamed("pass1.") for o in first]),
                          DraftPass(DraftRole.again, [o.renamed("passN.") for o in again])), steps, again_q, rows,
                         ranks)

    if kind is DrafterKind.ngram:
        def lookup(p: PassPoint) -> tuple:
            return ((drafter.host_s_per_step + drafter.host_s_per_sequence * p.batch) * (p.k > 0),)

        return DraftPlan((DraftPass(DraftRole.step, [PlanOp("ngram_lookup", ops.Host(), lookup)]),))
    if kind is DrafterKind.medusa:
        # K heads on the target's last hidden state, one pass: ResBlock (h->h, bias) + own lm_head (h->V) each
        g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
        head = draft_head(target, drafter)
        res, lm = head.resblock, head.lm_head
        heads = [PlanOp("medusa.resblock", ops.Gemm(res.inputs, res.outputs, bias=res.bias, **g), _batch),
                 PlanOp("medusa.act", ops.Elementwise(h, reads=2, writes=1, act_dtype=pc.act_dtype), _batch),
                 PlanOp("medusa.lm_head", ops.Gemm(lm.inputs, -(-lm.outputs // pc.tp), **g), _batch),
                 PlanOp("medusa.sampling", ops.Sampling(lm.outputs), _one_sweep)]
        return DraftPlan((DraftPass(DraftRole.each, heads),))
    if kind is DrafterKind.draft_model:
        if draft_model is None:
            raise DsdsimError("draft-model drafter needs its model spec (draft-model:MODEL)")
        dpc = draft_pc or pc
        one = pass_plan(draft_model, dpc)
        return two(one, one, ranks=dp_ranks(dpc.dp_attention, dpc.tp))
    if kind is DrafterKind.self_spec:
        one = pass_plan(target, pc, kv_budget=drafter.kv_budget)
        return two(one, one, again_q=1.0, rows=1.0)
    if kind is DrafterKind.mtp:
        if not target.mtp_layers:
            raise DsdsimError(f"{target.name} has no MTP module (num_nextn_predict_layers = 0); "
                              "choose eagle3, eagle or draft-model:MODEL")
        one = _mtp_plan(target, pc)
        return two(one, one)
    if kind in (DrafterKind.eagle, DrafterKind.eagle3):
        return two(_eagle_plan(target, drafter, pc, first=True), _eagle_plan(target, drafter, pc, first=False))
    raise DsdsimError(f"drafter kind {kind.value} has no cost model")


def draft_ops(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, batch, k, context,
              draft_model: ModelSpec | None = None, draft_pc: PassContext | None = None) -> list[OpCost]:
    """The operator records of the draft phase at batch B, K draft tokens, context c (zero-count when K = 0)."""
    plan = draft_plan(target, drafter, pc, draft_model, draft_pc)
    out = []
    for dp, (p, times) in zip(plan.passes, plan.points(batch, k, context)):
        out += records(dp.ops, p, times)
    return out


def _mtp_plan(target: ModelSpec, pc: PassContext) -> list[PlanOp]:
    """DeepSeek MTP: enorm/hnorm, eh_proj (2h -> h), one full layer (MLA + MoE), shared head (full vocab).
    The head reads the last token of the first pass (B rows) and every candidate of later passes (B*q rows)."""
    h = target.hidden_size
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    out = [PlanOp("mtp.embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens),
           PlanOp("mtp.enorm_hnorm", ops.Elementwise(2 * h, reads=1, writes=1, act_dtype=pc.act_dtype), tokens),
           PlanOp("mtp.eh_proj", ops.Gemm(target.mtp_eh_proj.inputs, target.mtp_eh_proj.outputs, **g), tokens)]
    out += [o.renamed("mtp.") for o in layer_plan(target.mtp_layer, h, pc)]
    return out + head_plan(h, target.vocab_size, pc, prefix="mtp.")


def _eagle_plan(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, first: bool) -> list[PlanOp]:
    """EAGLE: fc(2h->h, bias) then the layer, target lm_head (full V).
    EAGLE-3: fc(3h->h) on fused low/mid/high features in the first pass only, a layer whose q/k/v read 2h
    (embedding ++ hidden), an own lm_head over draft_vocab_size. Shapes from ``draft_head``."""
    h = target.hidden_size
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    head = draft_head(target, drafter)
    prefix = f"{drafter.kind.value}."
    out = [PlanOp("eagle.embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens)]
    if first or drafter.kind is DrafterKind.eagle:
        out.append(PlanOp(prefix + "fc", ops.Gemm(head.fc.inputs, head.fc.outputs, bias=head.fc.bias, **g), tokens))
    out += [o.renamed(prefix) for o in layer_plan(head.layer, h, pc, qkv_in=head.layer_input)]
    vocab = target.vocab_size if head.lm_head is None else head.lm_head.outputs
    return out + head_plan(h, vocab, pc, prefix=prefix)


@by_value
def drafter_weight_params(target: ModelSpec, drafter: DrafterSpec, draft_model: ModelSpec | None) -> int:
    """Extra weights the drafter keeps in memory (elements): head weights, a draft model, nothing for MTP/ngram."""
    head = draft_head(target, drafter)
    if head is not None:
        return head.params
    if drafter.kind is DrafterKind.draft_model and draft_model is not None:
        return draft_model.params_total
    if drafter.kind is DrafterKind.mtp:
        return target.params_mtp
    return 0


def drafter_whole_params(target: ModelSpec, drafter: DrafterSpec) -> int:
    """Drafter weights every rank holds whole under data-parallel attention (the rest is split tp ways): the draft
    layer's attention, norms, dense FFN and shared experts run on the rank's own sequences (``layer_ops``); the
    routed experts, fc/eh_proj and heads stay split. A draft model runs tensor-parallel: nothing whole."""
    head = draft_head(target, drafter)
    if head is not None:
        return head.layer_params
    if drafter.kind is DrafterKind.mtp and target.mtp_layers:
        h = target.hidden_size
        layer = target.mtp_layer
        return target.mtp_layers * (layer.params(h) - layer.ffn.routed_params(h))
    return 0
