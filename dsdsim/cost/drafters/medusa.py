"""Medusa: K heads (ResBlock h -> h with bias, SiLU, own lm_head h -> V) on the target's last hidden state, one pass."""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DrafterCost, gemm_dtypes
from dsdsim.cost.drafts import DraftPass, DraftPlan, DraftRole, DraftSetup, draft_head
from dsdsim.cost.plan import PassPoint, PlanOp
from dsdsim.specs.drafter import medusa_heads


def _batch(p: PassPoint) -> tuple:
    return (p.batch,)


def _one_sweep(p: PassPoint) -> tuple:
    return p.batch, 1.0


def _plan(ds: DraftSetup) -> DraftPlan:
    pc, h = ds.pc, ds.target.hidden_size
    g = gemm_dtypes(pc)
    head = draft_head(ds.target, ds.drafter)
    res, lm = head.resblock, head.lm_head
    heads = [PlanOp("medusa.resblock", ops.Gemm(res.inputs, res.outputs, bias=res.bias, **g), _batch),
             PlanOp("medusa.act", ops.Elementwise(h, reads=2, writes=1, act_dtype=pc.act_dtype), _batch),
             PlanOp("medusa.lm_head", ops.Gemm(lm.inputs, -(-lm.outputs // pc.tp), **g), _batch),
             PlanOp("medusa.sampling", ops.Sampling(lm.outputs), _one_sweep)]
    return DraftPlan((DraftPass(DraftRole.each, heads),))


MEDUSA = DrafterCost(plan=_plan, head=lambda t, d: medusa_heads(t.hidden_size, t.vocab_size, d.max_k))
