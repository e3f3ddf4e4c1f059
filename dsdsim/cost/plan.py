"""A pass as a plan: its operators with their static shapes, fixed once per setup, and the sizes each reads per point.

Every pass of a step (verify, a draft pass) runs the same operators at every point; only the sizes change: batch B,
tokens per sequence q, context c and what follows from them (tokens B*q, the rows a rank holds, the rows that reach
the lm_head, the experts a MoE layer touches). ``dsdsim.cost.layers`` and ``dsdsim.cost.drafts`` write each pass once
as a list of ``PlanOp``: a name, a static operator (``dsdsim.cost.ops``), the function that reads its size from a
``PassPoint``, and how often it occurs. A point is then plain arithmetic over that list (``dsdsim.cost.step``); the
operator records (``OpCost``) are built from the same list only when someone asks for them (explain, the benches).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from dsdsim.cost.num import ceil, num
from dsdsim.cost.ops import OpCost, Operator


class PassPoint:
    """The sizes of one pass at one point: Python floats, or numpy arrays over a grid.

    batch, q, context: sequences, new tokens per sequence, cached tokens per sequence.
    tokens: B*q. rank_batch, rank_rows: the sequences and token rows one rank holds (all of them; ceil(B/tp) and
    ceil(B/tp)*q under data-parallel attention). head_rows: rows through the lm_head (verify: all B*q; a draft pass:
    its candidates). sampling_passes: sweeps over the logits (rejection sampling reads two). k: the step's K.
    """

    __slots__ = ("batch", "q", "context", "tokens", "rank_batch", "rank_rows", "head_rows", "sampling_passes", "k",
                 "memo")

    def __init__(self, batch, q, context, *, dp_ranks: int = 1, head_rows=None, sampling_passes=1.0, k=0.0):
        if type(batch) is not float or type(q) is not float or type(context) is not float:   # one point: floats
            batch, q, context = num(batch), num(q), num(context)
        b = batch
        self.batch, self.q, self.context = b, q, context
        self.tokens = b * q
        if dp_ranks > 1:
            self.rank_batch = ceil(b / dp_ranks)
            self.rank_rows = self.rank_batch * q
        else:
            self.rank_batch, self.rank_rows = b, self.tokens
        self.head_rows = self.tokens if head_rows is None else head_rows if type(head_rows) is float else num(head_rows)
        self.sampling_passes = sampling_passes if type(sampling_passes) is float else num(sampling_passes)
        self.k = k if type(k) is float else num(k)
        self.memo: dict = {}       # sizes several operators read (a MoE layer's experts touched), worked out once


def tokens(p: PassPoint) -> tuple:
    return (p.tokens,)


def rank_rows(p: PassPoint) -> tuple:
    return (p.rank_rows,)


def head_rows(p: PassPoint) -> tuple:
    return (p.head_rows,)


class PlanOp(NamedTuple):
    """One operator of a pass: ``op`` run at ``size(point)``, ``count`` times per pass (a layer group's layers)."""

    name: str
    op: Operator
    size: Callable[[PassPoint], tuple]
    count: float = 1

    def renamed(self, prefix: str, times=1) -> "PlanOp":
        """The operator under ``prefix + name``, occurring ``times`` as often."""
        return self._replace(name=prefix + self.name, count=self.count * times)

    def record(self, p: PassPoint, times=None) -> OpCost:
        """Its OpCost at ``p``; with ``times``, occurring ``times`` as often (a draft pass run K - 1 times)."""
        r = self.op.record(self.name, *self.size(p))             # one occurrence
        count = self.count if times is None else self.count * times
        return r if times is None and count == 1 else r.times(count)


def records(plan: list[PlanOp], p: PassPoint, times=None) -> list[OpCost]:
    return [e.record(p, times) for e in plan]


def dp_ranks(dp_attention: bool, tp: int) -> int:
    """Ranks that split the batch under data-parallel attention (each holds ceil(B/tp) sequences); else 1."""
    return tp if dp_attention else 1


def stage_layer_ranges(num_layers: int, pp: int) -> tuple[tuple[int, int], ...]:
    """[start, end) of the layers each of ``pp`` pipeline stages runs, as vLLM splits them
    (``vllm.distributed.utils.get_pp_indices`` without VLLM_PP_LAYER_PARTITION): num_layers // pp each, and the
    remainder one more each on the stages before the last, from the second-last back (``partitions[-i] += 1`` for
    i = 2 .. remainder + 1), so the last stage, which also runs the lm_head, keeps the fewest."""
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        counts[-i] += 1
    starts = [sum(counts[:s]) for s in range(pp)]
    return tuple((a, a + n) for a, n in zip(starts, counts))
