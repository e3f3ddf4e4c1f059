"""A separate draft model, K sequential passes of its full forward (the first over the tokens verified last step)."""
from __future__ import annotations

from dsdsim.cost.drafters.base import DraftSetup, DrafterCost, draft_model_weights
from dsdsim.cost.layers import pass_plan
from dsdsim.cost.plan import dp_ranks
from dsdsim.errors import DsdsimError


def _plan(ds: DraftSetup):
    if ds.draft_model is None:
        raise DsdsimError("draft-model drafter needs its model spec (draft-model:MODEL)")
    dpc = ds.draft_pc or ds.pc
    one = pass_plan(ds.draft_model, dpc)
    return ds.chain(one, one, ranks=dp_ranks(dpc.dp_attention, dpc.tp))


DRAFT_MODEL = DrafterCost(plan=_plan, weights=draft_model_weights, whole=lambda t, d: 0)
