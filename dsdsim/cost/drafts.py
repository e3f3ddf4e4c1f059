"""Draft-step operators for every drafter kind, through the registry: each kind's passes in ``dsdsim.cost.drafters``.

A chain drafter runs K sequential passes per step: the first over the q = K + 1 tokens the target just verified
(their hidden states / tokens are the draft's new input), the other K - 1 over one token per sequence. Each pass
ends in the drafter's lm_head and a sampling kernel for B rows. A parallel drafter (Medusa, DFlash, PARD) runs one
pass for all K. These fixed per-pass costs (launches, sampling, the draft/verify hand-off) dominate at small batch
and are modelled explicitly.
"""
from __future__ import annotations

from dsdsim.cost.drafters import drafter_cost
from dsdsim.cost.drafters.base import DraftPlan, DraftSetup
from dsdsim.cost.layers import PassContext
from dsdsim.cost.memo import by_value
from dsdsim.cost.ops import OpCost
from dsdsim.cost.plan import dp_ranks, records
from dsdsim.specs.drafter import DrafterSpec, DraftHead
from dsdsim.specs.model import Attention, ModelSpec


@by_value
def draft_head(target: ModelSpec, drafter: DrafterSpec) -> DraftHead | None:
    """The weights and shapes of an EAGLE, EAGLE-3 or Medusa head on ``target``; None for other drafters."""
    return _cost(drafter).head(target, drafter)


def _cost(drafter: DrafterSpec):
    return drafter_cost(drafter.kind)


def draft_plan(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, draft_model: ModelSpec | None = None,
               draft_pc: PassContext | None = None) -> DraftPlan:
    """All operators of the draft phase of one step, as plans (zero times when K = 0)."""
    tree = drafter.tree
    steps = tree.steps if tree is not None and drafter.info.trees else None
    width = float(tree.topk) if tree is not None else 1.0     # tokens per sequence in passes 2..
    ds = DraftSetup(target, drafter, pc, draft_model, draft_pc, steps, width, dp_ranks(pc.dp_attention, pc.tp))
    return _cost(drafter).plan(ds)


def draft_ops(target: ModelSpec, drafter: DrafterSpec, pc: PassContext, batch, k, context,
              draft_model: ModelSpec | None = None, draft_pc: PassContext | None = None) -> list[OpCost]:
    """The operator records of the draft phase at batch B, K draft tokens, context c (zero-count when K = 0)."""
    plan = draft_plan(target, drafter, pc, draft_model, draft_pc)
    out = []
    for dp, (p, times) in zip(plan.passes, plan.points(batch, k, context)):
        out += records(dp.ops, p, times)
    return out


@by_value
def drafter_weight_params(target: ModelSpec, drafter: DrafterSpec, draft_model: ModelSpec | None) -> int:
    """Extra weights the drafter keeps in memory (elements): head weights, a draft model, nothing for n-gram."""
    return _cost(drafter).weight_params(target, drafter, draft_model)


def drafter_whole_params(target: ModelSpec, drafter: DrafterSpec) -> int:
    """Drafter weights every rank holds whole under data-parallel attention (the rest is split tp ways): the draft
    layer's attention, norms, dense FFN and shared experts run on the rank's own sequences (``layer_ops``); the
    routed experts, fc/eh_proj and heads stay split. A draft model runs tensor-parallel: nothing whole."""
    return _cost(drafter).whole_params(target, drafter)


def draft_kv_layers(target: ModelSpec, drafter: DrafterSpec) -> tuple[tuple[Attention, int], ...]:
    """The draft layers that keep a KV cache beside the target's, as (attention, layers) — a draft model's own
    cache is laid out from its spec (``DrafterInfo.loads_model``) and is not listed here."""
    return _cost(drafter).kv_layers(target, drafter)
