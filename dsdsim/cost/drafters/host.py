"""Host-side drafters (n-gram prompt lookup, suffix decoding): no device work, a lookup per step on the host of
``host_s_per_step + host_s_per_sequence * B`` seconds when K >= 1 (the figures and their sources: the kind's spec
module in ``dsdsim.specs.drafters``)."""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DraftPass, DraftPlan, DraftRole, DraftSetup, DrafterCost
from dsdsim.cost.plan import PassPoint, PlanOp


def _plan(ds: DraftSetup) -> DraftPlan:
    d = ds.drafter
    name = "ngram_lookup" if d.kind.value == "ngram" else f"{d.kind.value}_lookup"

    def lookup(p: PassPoint) -> tuple:
        return ((d.host_s_per_step + d.host_s_per_sequence * p.batch) * (p.k > 0),)

    return DraftPlan((DraftPass(DraftRole.step, [PlanOp(name, ops.Host(), lookup)]),))


HOST_LOOKUP = DrafterCost(plan=_plan, weights=lambda t, d, m: 0)
