"""What every drafter kind's cost module declares (its draft passes, its weights and what keeps a KV cache), the plan
types its passes are written in, and the EAGLE-style decoder layer several kinds share."""
from __future__ import annotations

from enum import Enum
from typing import Callable, NamedTuple, Optional

import numpy as np

from dsdsim.cost.layers import PassContext
from dsdsim.cost.memo import by_value
from dsdsim.cost.num import maximum, minimum, num, where
from dsdsim.cost.plan import PassPoint, PlanOp
from dsdsim.records import frozen
from dsdsim.specs.drafter import DrafterSpec, DraftHead
from dsdsim.specs.model import FFN, Attention, AttentionKind, FFNKind, Layer, ModelSpec


@by_value
def eagle_layer(target: ModelSpec, drafter: DrafterSpec) -> Layer:
    """The EAGLE head's decoder layer: full attention with the target's heads, a dense SwiGLU.

    FFN width: the override, else the target's dense width, else (MoE-only targets) its active FFN width
    top_k*I_e + shared — an assumption for heads whose configs are not published.
    """
    # the target's first attention layer that attends over the context (a hybrid's linear layers have no KV heads
    # of that shape: the head is a full-attention decoder layer)
    first = next((a for a in (layer.attention for layer in target.layers)
                  if a is not None and a.kind is not AttentionKind.linear), target.layers[0].attention)
    heads = first.num_heads
    kv = first.num_kv_heads if first.kind is not AttentionKind.mla else heads
    head_dim = first.v_head_dim if first.kind is AttentionKind.mla else first.head_dim
    width = drafter.intermediate_size
    if width is None:
        dense = [f for f in (layer.ffn for layer in target.layers) if f is not None and f.kind is FFNKind.dense]
        if dense:
            width = dense[0].intermediate_size
        else:
            moe = target.moe_ffn
            width = moe.top_k * moe.expert_intermediate_size + moe.num_shared_experts * moe.shared_intermediate_size
    attn = Attention(kind=AttentionKind.full, num_heads=heads, num_kv_heads=kv, head_dim=head_dim)
    return Layer(attention=attn, ffn=FFN(kind=FFNKind.dense, intermediate_size=width))


class DraftRole(str, Enum):
    """When a draft pass runs in a step."""

    first = "first"      # once when K >= 1, over the tokens verified last step
    again = "again"      # K - 1 times, over the candidates per sequence (a tree's topk, else 1)
    each = "each"        # Medusa: one pass over B rows whose operators occur K times
    block = "block"      # once when K >= 1, all K drafts at once (DFlash, PARD): sizes from DraftPlan.block_*
    step = "step"        # once per step: the n-gram host lookup


class DraftPass(NamedTuple):
    """One kind of draft pass: its operators and when it runs."""

    role: DraftRole
    ops: list[PlanOp]


@frozen
class DraftPlan:
    """The draft phase of a step as plans (``dsdsim.cost.plan``), fixed per setup; ``points`` gives each pass's sizes
    and how often it runs at a point. With a draft tree (EAGLE, EAGLE-3, MTP, draft model), K >= 1 means the tree:
    the first pass over the steps + 1 tokens verified last step, then steps - 1 passes over topk candidates per
    sequence."""

    passes: tuple[DraftPass, ...]
    tree_steps: Optional[int] = None       # a draft tree's sequential steps (K >= 1 means the whole tree)
    again_q: float = 1.0                   # tokens per sequence the later passes run (a tree's topk, else 1;
                                           # self-speculation: 1)
    again_head_rows_per_sequence: float = 1.0   # rows per sequence through the lm_head in later passes
    dp_ranks: int = 1                      # ranks the batch is split over (data-parallel attention)
    # a block pass runs q = block_q[0]*K + block_q[1] tokens per sequence, attends the context plus, when
    # block_context_grows, the K + 1 context positions it caches in the same pass, and sends B*K rows to the lm_head
    block_q: tuple[float, float] = (1.0, 1.0)
    block_context_grows: bool = False

    def points(self, batch, k, context, first_at_zero: bool = False
               ) -> list[tuple[PassPoint, Optional[np.ndarray | float]]]:
        """(sizes, times it runs; None: once, not counted) for each pass at batch B, K draft tokens, context c.
        ``first_at_zero``: the first pass runs at K = 0 too (a dynamic-K server's K = 0 tier keeping the drafter's
        KV cache in step, vLLM ``llm_base_proposer.py``)."""
        if type(batch) is not float or type(k) is not float or type(context) is not float:   # one point: floats
            batch, k, context = num(batch), num(k), num(context)
        b, c = batch, context
        kk = where(k > 0, float(self.tree_steps), 0.0) if self.tree_steps is not None else k
        q_first = kk + 1.0
        out = []
        for dp in self.passes:
            if dp.role is DraftRole.first:
                runs = 1.0 if first_at_zero else minimum(kk, 1.0)
                out.append((PassPoint(b, q_first, c, dp_ranks=self.dp_ranks, head_rows=b, k=k), runs))
            elif dp.role is DraftRole.again:
                rows = b * self.again_head_rows_per_sequence
                out.append((PassPoint(b, self.again_q, c + q_first, dp_ranks=self.dp_ranks, head_rows=rows, k=k),
                            maximum(kk - 1.0, 0.0)))
            elif dp.role is DraftRole.each:
                out.append((PassPoint(b, 1.0, c, head_rows=b, k=k), k))
            elif dp.role is DraftRole.block:
                q = self.block_q[0] * kk + self.block_q[1]
                seen = c + q_first if self.block_context_grows else c
                out.append((PassPoint(b, q, seen, dp_ranks=self.dp_ranks, head_rows=b * kk, k=k),
                            1.0 if first_at_zero else minimum(kk, 1.0)))
            else:
                out.append((PassPoint(b, 1.0, c, head_rows=b, k=k), None))
        return out


@frozen
class DraftSetup:
    """What a kind's ``plan`` reads: the target, the drafter, the pass context, a draft model (and its context), a
    tree's sequential steps (None: a chain), the tokens per sequence of later passes, the data-parallel ranks."""

    target: ModelSpec
    drafter: DrafterSpec
    pc: PassContext
    draft_model: Optional[ModelSpec]
    draft_pc: Optional[PassContext]
    steps: Optional[int]
    width: float
    dp: int

    def chain(self, first: list[PlanOp], again: list[PlanOp], *, again_q=None, rows=None, ranks=None) -> DraftPlan:
        """A first pass and K - 1 later passes (a tree: its steps - 1), named pass1. and passN."""
        width = self.width
        return DraftPlan((DraftPass(DraftRole.first, [o.renamed("pass1.") for o in first]),
                          DraftPass(DraftRole.again, [o.renamed("passN.") for o in again])), self.steps,
                         width if again_q is None else again_q, width if rows is None else rows,
                         self.dp if ranks is None else ranks)


def no_head(target: ModelSpec, drafter: DrafterSpec) -> Optional[DraftHead]:
    return None


def no_cache(target: ModelSpec, drafter: DrafterSpec) -> tuple[tuple[Attention, int], ...]:
    return ()


@frozen
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
