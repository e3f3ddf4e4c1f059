"""Self-speculation: K sequential passes of the target itself attending a sparse KV budget."""
from __future__ import annotations

from dsdsim.cost.drafters.base import DraftSetup, DrafterCost
from dsdsim.cost.layers import pass_plan


def _plan(ds: DraftSetup):
    one = pass_plan(ds.target, ds.pc, kv_budget=ds.drafter.kv_budget)
    return ds.chain(one, one, again_q=1.0, rows=1.0)


SELF_SPEC = DrafterCost(plan=_plan, weights=lambda t, d, m: 0)
