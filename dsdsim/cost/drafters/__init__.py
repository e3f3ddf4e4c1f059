"""Each drafter kind's cost, one module per kind, in one registry keyed like ``dsdsim.specs.drafters.REGISTRY``."""
from __future__ import annotations

from dsdsim.cost.drafters.base import DrafterCost
from dsdsim.cost.drafters.dflash import DFLASH
from dsdsim.cost.drafters.draft_model import DRAFT_MODEL
from dsdsim.cost.drafters.dspark import DSPARK
from dsdsim.cost.drafters.eagle import EAGLE, EAGLE3
from dsdsim.cost.drafters.host import HOST_LOOKUP
from dsdsim.cost.drafters.medusa import MEDUSA
from dsdsim.cost.drafters.mtp import MTP
from dsdsim.cost.drafters.pard import PARD
from dsdsim.cost.drafters.self_spec import SELF_SPEC
from dsdsim.errors import DsdsimError
from dsdsim.specs.drafter import DrafterKind

COSTS: dict[DrafterKind, DrafterCost] = {
    DrafterKind.eagle: EAGLE, DrafterKind.eagle3: EAGLE3, DrafterKind.mtp: MTP, DrafterKind.medusa: MEDUSA,
    DrafterKind.ngram: HOST_LOOKUP, DrafterKind.suffix: HOST_LOOKUP, DrafterKind.draft_model: DRAFT_MODEL,
    DrafterKind.self_spec: SELF_SPEC, DrafterKind.dflash: DFLASH, DrafterKind.pard: PARD,
    DrafterKind.dspark: DSPARK,
}


def drafter_cost(kind: DrafterKind) -> DrafterCost:
    try:
        return COSTS[kind]
    except KeyError:
        raise DsdsimError(f"drafter kind {kind.value} has no cost model") from None
