"""EAGLE-1/2 and EAGLE-3 heads: K sequential passes of fc + one decoder layer + an lm_head."""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DraftSetup, DrafterCost, eagle_layer, gemm_dtypes
from dsdsim.cost.memo import by_value
from dsdsim.cost.layers import PassContext, head_plan, layer_plan
from dsdsim.cost.plan import PlanOp, tokens
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, eagle3_head, eagle_head
from dsdsim.specs.model import ModelSpec


def _eagle_plan(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, first: bool) -> list[PlanOp]:
    """EAGLE: fc(2h->h, bias) then the layer, target lm_head (full V).
    EAGLE-3: fc(3h->h) on fused low/mid/high features in the first pass only, a layer whose q/k/v read 2h
    (embedding ++ hidden), an own lm_head over draft_vocab_size. Shapes from ``_head``."""
    h = target.hidden_size
    g = gemm_dtypes(pc)
    head = _head(target, drafter)
    prefix = f"{drafter.kind.value}."
    out = [PlanOp("eagle.embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens)]
    if first or drafter.kind is DrafterKind.eagle:
        out.append(PlanOp(prefix + "fc", ops.Gemm(head.fc.inputs, head.fc.outputs, bias=head.fc.bias, **g), tokens))
    out += [o.renamed(prefix) for o in layer_plan(head.layer, h, pc, qkv_in=head.layer_input)]
    vocab = target.vocab_size if head.lm_head is None else head.lm_head.outputs
    return out + head_plan(h, vocab, pc, prefix=prefix)


@by_value
def _head(target: ModelSpec, drafter: DrafterSpec):
    """The head's weights and shapes: the target's first attending layer, EAGLE-3's reduced draft vocabulary."""
    layer = eagle_layer(target, drafter)
    if drafter.kind is DrafterKind.eagle3:
        return eagle3_head(target.hidden_size, layer, drafter.draft_vocab_size)
    return eagle_head(target.hidden_size, layer)


def _plan(ds: DraftSetup):
    return ds.chain(_eagle_plan(ds.target, ds.drafter, ds.pc, first=True),
                    _eagle_plan(ds.target, ds.drafter, ds.pc, first=False))


def _layer_cache(target: ModelSpec, drafter: DrafterSpec):
    return ((eagle_layer(target, drafter).attention, 1),)


EAGLE = DrafterCost(plan=_plan, head=_head, kv_layers=_layer_cache)
EAGLE3 = DrafterCost(plan=_plan, head=_head, kv_layers=_layer_cache)
