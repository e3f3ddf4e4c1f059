"""Draft-step operators for every drafter kind.

A model-based drafter runs K sequential passes per step: the first over the q = K + 1 tokens the target just
verified (their hidden states / tokens are the draft's new input), the other K - 1 over one token per
sequence. Each pass ends in the drafter's lm_head and a sampling kernel for B rows. These fixed per-pass
costs (launches, sampling, the draft/verify hand-off) dominate at small batch and are modelled explicitly.
"""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.layers import PassContext, head_ops, layer_ops, pass_ops
from dsdsim.cost.memo import by_identity
from dsdsim.cost.num import maximum, minimum, num, where
from dsdsim.cost.ops import OpCost
from dsdsim.errors import DsdsimError
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, DraftHead, eagle3_head, eagle_head, medusa_heads
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, ModelSpec


@by_identity
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


@by_identity
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


def _passes(first: list[OpCost], rest: list[OpCost], k) -> list[OpCost]:
    """First pass once when K >= 1, the single-token pass K - 1 times."""
    k = num(k)
    once, again = minimum(k, 1.0), maximum(k - 1.0, 0.0)
    return [o.renamed("pass1.", once) for o in first] + [o.renamed("passN.", again) for o in rest]


def draft_ops(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, batch, k, context,
              draft_model: ModelSpec | None = None, draft_pc: PassContext | None = None) -> list[OpCost]:
    """All operators of the draft phase of one step (zero-count when K = 0). With a draft tree, K >= 1 means the
    tree: the first pass over the steps + 1 tokens verified last step, then steps - 1 passes over topk candidates
    per sequence."""
    b = num(batch)
    k = num(k)
    tree = drafter.tree
    if tree is not None and drafter.kind in (DrafterKind.eagle, DrafterKind.eagle3, DrafterKind.mtp,
                                             DrafterKind.draft_model):
        k = where(k > 0, float(tree.steps), 0.0)
    q_first = k + 1.0
    h = target.hidden_size
    kind = drafter.kind
    width = float(tree.topk) if tree is not None else 1.0     # tokens per sequence in passes 2..
    if kind is DrafterKind.ngram:
        seconds = (drafter.host_s_per_step + drafter.host_s_per_sequence * b) * (k > 0)
        return [ops.host("ngram_lookup", seconds)]
    if kind is DrafterKind.medusa:
        # K heads on the target's last hidden state, one pass: ResBlock (h->h, bias) + own lm_head (h->V) each
        g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
        head = draft_head(target, drafter)
        res, lm = head.resblock, head.lm_head
        return [ops.gemm("medusa.resblock", b, res.inputs, res.outputs, bias=res.bias, **g).times(k),
                ops.elementwise("medusa.act", b, h, reads=2, writes=1, act_dtype=pc.act_dtype).times(k),
                ops.gemm("medusa.lm_head", b, lm.inputs, -(-lm.outputs // pc.tp), **g).times(k),
                ops.sampling("medusa.sampling", b, lm.outputs, 1.0).times(k)]
    if kind is DrafterKind.draft_model:
        if draft_model is None:
            raise DsdsimError("draft-model drafter needs its model spec (draft-model:MODEL)")
        dpc = draft_pc or pc
        first = pass_ops(draft_model, dpc, b, q_first, context, head_rows=b)
        rest = pass_ops(draft_model, dpc, b, width, context + q_first, head_rows=b * width)
        return _passes(first, rest, k)
    if kind is DrafterKind.self_spec:
        first = pass_ops(target, pc, b, q_first, context, head_rows=b, kv_budget=drafter.kv_budget)
        rest = pass_ops(target, pc, b, 1.0, context + q_first, head_rows=b, kv_budget=drafter.kv_budget)
        return _passes(first, rest, k)
    if kind is DrafterKind.mtp:
        if not target.mtp_layers:
            raise DsdsimError(f"{target.name} has no MTP module (num_nextn_predict_layers = 0); "
                              "choose eagle3, eagle or draft-model:MODEL")
        return _passes(_mtp_pass(target, pc, b, q_first, context), _mtp_pass(target, pc, b, width, context + q_first, first=False), k)
    if kind in (DrafterKind.eagle, DrafterKind.eagle3):
        return _passes(_eagle_pass(target, drafter, pc, b, q_first, context, first=True),
                       _eagle_pass(target, drafter, pc, b, width, context + q_first, first=False), k)
    raise DsdsimError(f"drafter kind {kind.value} has no cost model")


def _mtp_pass(target: ModelSpec, pc: PassContext, b, q, context, first: bool = True) -> list[OpCost]:
    """DeepSeek MTP: enorm/hnorm, eh_proj (2h -> h), one full layer (MLA + MoE), shared head (full vocab).
    The head reads the last token of the first pass (B rows) and every candidate of later passes (B*q rows)."""
    h = target.hidden_size
    tokens = b * num(q)
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    out = [ops.embedding("mtp.embed", tokens, h, pc.w_dtype, pc.act_dtype),
           ops.elementwise("mtp.enorm_hnorm", tokens, 2 * h, reads=1, writes=1, act_dtype=pc.act_dtype),
           ops.gemm("mtp.eh_proj", tokens, target.mtp_eh_proj.inputs, target.mtp_eh_proj.outputs, **g)]
    out += [o.renamed("mtp.") for o in layer_ops(target.mtp_layer, h, b, q, context, pc)]
    out += head_ops(h, target.vocab_size, b if first else tokens, pc, 1.0, prefix="mtp.")
    return out


def _eagle_pass(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, b, q, context, first: bool):
    """EAGLE: fc(2h->h, bias) then the layer, target lm_head (full V).
    EAGLE-3: fc(3h->h) on fused low/mid/high features in the first pass only, a layer whose q/k/v read 2h
    (embedding ++ hidden), an own lm_head over draft_vocab_size. Shapes from ``draft_head``."""
    h = target.hidden_size
    tokens = b * num(q)
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    head = draft_head(target, drafter)
    prefix = f"{drafter.kind.value}."
    out = [ops.embedding("eagle.embed", tokens, h, pc.w_dtype, pc.act_dtype)]
    if first or drafter.kind is DrafterKind.eagle:
        out.append(ops.gemm(prefix + "fc", tokens, head.fc.inputs, head.fc.outputs, bias=head.fc.bias, **g))
    out += [o.renamed(prefix) for o in layer_ops(head.layer, h, b, q, context, pc, qkv_in=head.layer_input)]
    vocab = target.vocab_size if head.lm_head is None else head.lm_head.outputs
    out += head_ops(h, vocab, b if first else tokens, pc, 1.0, prefix=prefix)
    return out


@by_identity
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
