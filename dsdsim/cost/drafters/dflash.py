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

from typing import Callable

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


def backbone_ops(ds: DraftSetup, prefix: str, context: Callable = tokens, rank_context: Callable = rank_rows
                 ) -> list[PlanOp]:
    """The block pass of a DFlash-style backbone (DFlash, DSpark): the block's tokens embedded, the context rows'
    target features through fc and hidden_norm, each layer's k/v projections of them (cached), the layers over the
    block, the final norm, lm_head and sampling. ``context`` / ``rank_context``: the context rows (all ranks', one
    rank's), the block's own rows where they coincide (DFlash: K + 1 of each)."""
    target, d, pc = ds.target, ds.drafter, ds.pc
    h = target.hidden_size
    g = gemm_dtypes(pc)
    layer = eagle_layer(target, d)
    proj = fc(target, d)
    norm = ops.Elementwise(h, reads=1, writes=1, act_dtype=pc.act_dtype, flops_per_element=4)
    out = [PlanOp(f"{prefix}embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens),
           PlanOp(f"{prefix}fc", ops.Gemm(proj.inputs, proj.outputs, **g), context),
           PlanOp(f"{prefix}hidden_norm", norm, context),
           PlanOp(f"{prefix}ctx_kv", ops.Gemm(h, kv_projection_per_rank(layer.attention, pc.tp), **g), rank_context,
                  d.layers)]
    out += [o.renamed(prefix, d.layers) for o in layer_plan(layer, h, pc)]
    return out + head_plan(h, target.vocab_size, pc, prefix=prefix)


def _plan(ds: DraftSetup) -> DraftPlan:
    return DraftPlan((DraftPass(DraftRole.block, backbone_ops(ds, "dflash.")),), dp_ranks=ds.dp, block_q=(1.0, 1.0),
                     block_context_grows=True)


def backbone_weights(target: ModelSpec, drafter: DrafterSpec, draft_model=None) -> int:
    """fc, LAYERS decoder layers, hidden_norm and the final norm (h each); embedding and lm_head are the target's."""
    h = target.hidden_size
    return fc(target, drafter).params + drafter.layers * eagle_layer(target, drafter).params(h) + 2 * h


def backbone_whole(target: ModelSpec, drafter: DrafterSpec) -> int:
    return drafter.layers * eagle_layer(target, drafter).params(target.hidden_size)


def backbone_kv_layers(target: ModelSpec, drafter: DrafterSpec):
    """The LAYERS draft layers cache K/V for the context tokens, as EAGLE's layer does."""
    return ((eagle_layer(target, drafter).attention, drafter.layers),)


DFLASH = DrafterCost(plan=_plan, weights=backbone_weights, whole=backbone_whole, kv_layers=backbone_kv_layers)
