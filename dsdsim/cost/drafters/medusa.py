"""Medusa: K heads (ResBlock h -> h with bias, SiLU, own lm_head h -> V) on the target's last hidden state, one pass."""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DraftPass, DraftPlan, DraftRole, DraftSetup, DrafterCost, gemm_dtypes
from dsdsim.cost.memo import by_value
from dsdsim.cost.plan import PassPoint, PlanOp
from dsdsim.specs.drafter import medusa_heads


def _batch(p: PassPoint) -> tuple:
    return (p.batch,)


def _one_sweep(p: PassPoint) -> tuple:
    return p.batch, 1.0


@by_value
def _head(target, drafter):
    return medusa_heads(target.hidden_size, target.vocab_size, drafter.max_k)


def _plan(ds: DraftSetup) -> DraftPlan:
    pc, h = ds.pc, ds.target.hidden_size
    g = gemm_dtypes(pc)
    head = _head(ds.target, ds.drafter)
    res, lm = head.resblock, head.lm_head
    heads = [PlanOp("medusa.resblock", ops.Gemm(res.inputs, res.outputs, bias=res.bias, **g), _batch),
             PlanOp("medusa.act", ops.Elementwise(h, reads=2, writes=1, act_dtype=pc.act_dtype), _batch),
             PlanOp("medusa.lm_head", ops.Gemm(lm.inputs, -(-lm.outputs // pc.tp), **g), _batch),
             PlanOp("medusa.sampling", ops.Sampling(lm.outputs), _one_sweep)]
    return DraftPlan((DraftPass(DraftRole.each, heads),))


MEDUSA = DrafterCost(plan=_plan, head=_head)
