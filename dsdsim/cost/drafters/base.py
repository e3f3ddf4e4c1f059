"""What every drafter kind's cost module declares: its draft passes, its weights and what keeps a KV cache."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from dsdsim.cost.drafts import DraftPlan, DraftSetup
from dsdsim.specs.drafter import DrafterSpec, DraftHead
from dsdsim.specs.model import Attention, ModelSpec


def no_head(target: ModelSpec, drafter: DrafterSpec) -> Optional[DraftHead]:
    return None


def no_cache(target: ModelSpec, drafter: DrafterSpec) -> tuple[tuple[Attention, int], ...]:
    return ()


@dataclass(frozen=True)
class DrafterCost:
    """One kind's cost. ``plan``: its passes as a DraftPlan. ``head``: the weights it keeps beside the target when they
    are a head (``DraftHead``). ``weights`` / ``whole``: extra weight elements, and those every rank holds whole under
    data-parallel attention (default: from the head, else none). ``kv_layers``: its own cached layers."""

    plan: Callable[[DraftSetup], DraftPlan]
    head: Callable[[ModelSpec, DrafterSpec], Optional[DraftHead]] = no_head
    weights: Optional[Callable[[ModelSpec, DrafterSpec, Optional[ModelSpec]], int]] = None
    whole: Optional[Callable[[ModelSpec, DrafterSpec], int]] = None
    kv_layers: Callable[[ModelSpec, DrafterSpec], tuple[tuple[Attention, int], ...]] = no_cache

    def weight_params(self, target: ModelSpec, drafter: DrafterSpec, draft_model: Optional[ModelSpec]) -> int:
        if self.weights is not None:
            return self.weights(target, drafter, draft_model)
        head = self.head(target, drafter)
        return 0 if head is None else head.params

    def whole_params(self, target: ModelSpec, drafter: DrafterSpec) -> int:
        if self.whole is not None:
            return self.whole(target, drafter)
        head = self.head(target, drafter)
        return 0 if head is None else head.layer_params


def draft_model_weights(target: ModelSpec, drafter: DrafterSpec, draft_model: Optional[ModelSpec]) -> int:
    """A separate draft model keeps all its weights (draft-model, PARD)."""
    return 0 if draft_model is None else draft_model.params_total


def gemm_dtypes(pc) -> dict:
    return dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
