"""DFlash block diffusion (z-lab/dflash ``dflash/model.py``, ``DFlashDraftModel``): one pass for all K drafts.

Per step with K >= 1, for B sequences, q = K + 1 (tokens verified last step, whose target features are the new
context, and block positions: the last token + K masks), h the target's hidden size, TAPS target layers tapped:
  embed        the block's tokens through the target's embedding                    B*q rows
  fc           TAPS*h -> h on the concatenated target features, then hidden_norm    B*q context rows
  ctx_kv       per layer, k_proj / v_proj of the context features (cached)          B*q context rows, x LAYERS
  layer        per layer, the decoder layer over the block (q/k/v, attention over the cached context c + q and the
               block, o, SwiGLU), x LAYERS
  head         final norm, the target's lm_head and sampling over the K outputs      B*K rows
The layer's shapes are the target's (``eagle_layer``: heads, head size, dense FFN width or, for MoE targets, the
active width — z-lab's Qwen3.5-122B-A10B drafter has intermediate 9216 = 8 x 1024 + 1024). Its K/V per layer are cached
for the context tokens like EAGLE's.
"""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import (DraftPass, DraftPlan, DraftRole, DraftSetup, DrafterCost, eagle_layer,
                                       gemm_dtypes)
from dsdsim.cost.layers import head_plan, kv_projection_per_rank, layer_plan
from dsdsim.cost.plan import PlanOp, rank_rows, tokens
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.model import Linear, ModelSpec


def fc(target: ModelSpec, drafter: DrafterSpec) -> Linear:
    """fc: the TAPS target layers' hidden states, concatenated, -> h (no bias)."""
    return Linear(drafter.taps * target.hidden_size, target.hidden_size)


def _plan(ds: DraftSetup) -> DraftPlan:
    target, d, pc = ds.target, ds.drafter, ds.pc
    h = target.hidden_size
    g = gemm_dtypes(pc)
    layer = eagle_layer(target, d)
    attn = layer.attention
    proj = fc(target, d)
    kv_width = kv_projection_per_rank(attn, pc.tp)
    norm = ops.Elementwise(h, reads=1, writes=1, act_dtype=pc.act_dtype, flops_per_element=4)
    out = [PlanOp("dflash.embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens),
           PlanOp("dflash.fc", ops.Gemm(proj.inputs, proj.outputs, **g), tokens),
           PlanOp("dflash.hidden_norm", norm, tokens),
           PlanOp("dflash.ctx_kv", ops.Gemm(h, kv_width, **g), rank_rows, d.layers)]
    out += [o.renamed("dflash.", d.layers) for o in layer_plan(layer, h, pc)]
    out += head_plan(h, target.vocab_size, pc, prefix="dflash.")
    return DraftPlan((DraftPass(DraftRole.block, out),), dp_ranks=ds.dp, block_q=(1.0, 1.0),
                     block_context_grows=True)


def _weights(target: ModelSpec, drafter: DrafterSpec, draft_model) -> int:
    """fc, LAYERS decoder layers, hidden_norm and the final norm (h each); embedding and lm_head are the target's."""
    h = target.hidden_size
    return fc(target, drafter).params + drafter.layers * eagle_layer(target, drafter).params(h) + 2 * h


def _whole(target: ModelSpec, drafter: DrafterSpec) -> int:
    return drafter.layers * eagle_layer(target, drafter).params(target.hidden_size)


DFLASH = DrafterCost(plan=_plan, weights=_weights, whole=_whole,
                     kv_layers=lambda t, d: ((eagle_layer(t, d).attention, d.layers),))
