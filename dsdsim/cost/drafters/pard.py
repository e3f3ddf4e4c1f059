"""PARD, a parallel draft model (An et al. 2025, arXiv 2504.18583): ONE forward of the draft model per step.

Per step with K >= 1 the draft model reads, per sequence, the K + 1 tokens verified last step (they enter its KV
cache) followed by K - 1 mask tokens: q = 2K tokens, at the context c; the last verified token and the K - 1 masks
give the K drafts, so B*K rows reach its lm_head. Its weights and KV cache are the draft model's.
"""
from __future__ import annotations

from dsdsim.cost.drafters.base import DraftPass, DraftPlan, DraftRole, DraftSetup, DrafterCost, draft_model_weights
from dsdsim.cost.layers import pass_plan
from dsdsim.cost.plan import dp_ranks
from dsdsim.errors import DsdsimError


def _plan(ds: DraftSetup) -> DraftPlan:
    if ds.draft_model is None:
        raise DsdsimError("pard drafter needs its model spec (pard:MODEL)")
    dpc = ds.draft_pc or ds.pc
    one = [o.renamed("pard.") for o in pass_plan(ds.draft_model, dpc)]
    return DraftPlan((DraftPass(DraftRole.block, one),), dp_ranks=dp_ranks(dpc.dp_attention, dpc.tp),
                     block_q=(2.0, 0.0), block_context_grows=False)


PARD = DrafterCost(plan=_plan, weights=draft_model_weights, whole=lambda t, d: 0)
