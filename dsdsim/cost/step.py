"""One speculative step: draft (K tokens) + verify (q = K + 1 tokens per sequence) + the engine's terms.

T(B, K, c) = engine(draft + verify kernels at the CUDA-graph padded size): the engine adds the speculative
machinery and the host time it does not hide (``dsdsim.cost.engine``). K = 0 is plain decoding: no draft, a
q = 1 pass sampled once. Everything broadcasts over numpy arrays of batch, k and context.

Everything the spec objects fix is worked out once into the step's program (``step_plan``, kept on the Setup:
``setup_plan``): the passes as plans (``dsdsim.cost.plan``) with each operator's rates and float ``timer``, the
memory figures, the launch gaps, and the row tables (``dsdsim.cost.rowtable.RowTables``: every operator sized by one
row count, at every count). The shape decisions every path shares (padding, graphs, draft passes, the engine's
terms) are ``dsdsim.cost.program.step_shape``. A grid gathers from those tables and evaluates the rest with numpy
(``_grid_step``: each operator's ``demand`` and ``seconds``); one point reads the same tables summed per size function and times the rest with their
float timers (``_one_step``). Each operator's own seconds, the memory and the records are worked out only when read
(``PassCost.op_times``, ``StepCost.memory``).

Without an engine spec (``Setup.engine`` None, what ``dsdsim.bench`` measures: kernels replayed as a graph) a step
is its kernels plus the drafter's hand-off, as before engine specs existed. A hardware spec that still carries
``step_overhead_s`` has it charged on every step in either case.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import numpy as np

from dsdsim.cost.drafters.base import DraftPlan, DraftRole
from dsdsim.cost.drafts import draft_plan
from dsdsim.cost.engine import EngineTime, engine_time, small_kernel_s
from dsdsim.cost.program import engine_seconds, setup_figures, step_shape
from dsdsim.cost.rowtable import RowTables
from dsdsim.specs.engine import EngineParams
from dsdsim.cost import ops as op_kinds
from dsdsim.cost.layers import PassContext, head_plan, layer_groups, layer_plan, pass_plan
from dsdsim.cost.memo import by_value
from dsdsim.cost.memory import PP_DRAFTER_ERROR, MemoryFigures, MemoryUse, memory_figures, stage_layers
from dsdsim.cost.num import num, where
from dsdsim.cost.ops import OpKind
from dsdsim.cost.plan import PassPoint, PlanOp, dp_ranks, records, stage_layer_ranges, tokens
from dsdsim.cost.timing import OpRates, OpTime, in_place, launch_overhead, rates_of, seconds, sum_by_shape, timer
from dsdsim.errors import DsdsimError
from dsdsim.defaults import DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_MODEL
from dsdsim.records import frozen
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.engine import EngineSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec
from dsdsim.specs.setup import Setup, resolve


class PassCost:
    """One phase of a step (draft or verify): its time, and its operators with their roofline times, whose records
    are built from the pass plans (``dsdsim.cost.plan``) only when asked for."""

    def __init__(self, time_s, parts: list, op_seconds, hardware: HardwareSpec, cuda_graphs=True, timed=(),
                 gap: float = 0.0):
        self.time_s = time_s                  # the sum of the operator times
        self._parts = parts                   # (plan, sizes, times the pass runs or None) per pass
        self._timed = timed                   # the planned operators' rates, per pass (Timed)
        self._op_list = op_seconds            # seconds per step of each operator, in plan order, or a function
                                              # giving them (a grid gathers them from its tables when asked), or
                                              # None: one point's, each operator's timer at launch gap ``gap``
        self._hardware = hardware
        # whether each pass replays a CUDA graph, and its launch gap: one for all, or a list with one per pass
        # (a drafter whose first pass graphs by its tokens, the later ones by batch: ``per_pass``)
        self._cuda_graphs = cuda_graphs
        self._gap = gap

    @functools.cached_property
    def _op_seconds(self) -> list:
        if self._op_list is None:
            return _op_seconds(self._parts, self._timed, self._gap)
        return self._op_list() if callable(self._op_list) else self._op_list

    @functools.cached_property
    def op_times(self) -> list[OpTime]:
        graphs = per_pass(self._cuda_graphs, len(self._parts))
        ops = [(o, g) for (plan, p, times), g in zip(self._parts, graphs) for o in records(plan, p, times)]
        rates = [r.rates for timed in self._timed for r in timed]
        return [OpTime(o, t, self._hardware, g, rate)
                for (o, g), t, rate in zip(ops, self._op_seconds, rates)]

    @property
    def flops(self) -> np.ndarray:
        return sum((np.asarray(t.op.flops) * t.op.count for t in self.op_times), np.zeros(()))

    @property
    def bytes(self) -> np.ndarray:
        return sum((np.asarray(t.op.bytes) * t.op.count for t in self.op_times), np.zeros(()))


@dataclass(eq=False)
class StepCost:
    """The cost of a step (or of a grid of steps): at one point its sizes and times are Python floats, over a grid
    numpy arrays. A result, read and not changed (not a frozen dataclass: setting its fields frozen costs a fifth of
    a point's time)."""

    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    drafter: Optional[DrafterSpec]
    batch: np.ndarray | float
    k: np.ndarray | float
    context: np.ndarray | float
    verify: PassCost
    draft: PassCost
    overhead_s: np.ndarray | float            # hardware step_overhead_s (legacy specs) + hand-off without an engine
    memory_figures: MemoryFigures             # the setup's memory figures; ``memory`` evaluates them at the step
    engine: Optional[EngineSpec] = None
    engine_time: Optional[EngineTime] = None
    verify_padded_tokens: Optional[np.ndarray | float] = None   # tokens the verify kernels ran for (CUDA-graph padding)
    verify_graphed: Optional[np.ndarray | bool] = None      # whether the verify pass replayed a CUDA graph
    draft_passes: Optional[np.ndarray | float] = None       # sequential draft passes per step
    verify_tokens: Optional[np.ndarray | float] = None      # q: tokens per sequence in the verify pass

    dynamic: bool = False                           # a server running a dynamic K table (K = 0: its off tier)
    stage_ops: tuple = ()                           # pipeline parallelism: the verify operators of each stage
    verify_piecewise: np.ndarray | bool = False     # the verify pass replays a PIECEWISE graph (attention eager)

    def __repr__(self) -> str:
        """One line: what was priced and what it costs (the operators are in ``verify`` / ``draft``, or explain)."""
        d = self.deployment
        where = (f"{self.model.name} on {self.hardware.name} (tp {d.tp}" + (f", ep {d.ep}" if d.ep > 1 else "")
                 + (f", pp {d.pp}" if d.pp > 1 else "") + f"), {self.drafter.label if self.drafter else 'no drafter'}")
        t = np.asarray(self.step_time_s, dtype=float)
        if t.ndim == 0:
            fits = "fits" if bool(np.asarray(self.feasible)) else "does not fit"
            return (f"StepCost({where}, B={self.batch:g}, K={self.k:g}, context {self.context:g}: step "
                    f"{1e3 * float(t):.3f} ms = draft {1e3 * float(self.draft.time_s):.3f} + verify "
                    f"{1e3 * float(self.verify.time_s):.3f} + engine and overheads "
                    f"{1e3 * (float(t) - float(self.kernel_time_s)):.3f} ms, {fits})")
        return (f"StepCost({where}, a grid of {t.size} steps {t.shape}: step {1e3 * float(t.min()):.3f}-"
                f"{1e3 * float(t.max()):.3f} ms, {int(np.count_nonzero(self.feasible))} fit in memory)")

    @functools.cached_property
    def memory(self) -> MemoryUse:
        """Memory on one GPU at the step's batch, K and context (weights, KV cache, activations, drafter, state)."""
        return self.memory_figures.use(self.batch, self.k, self.context)

    @property
    def stage_times_s(self) -> list:
        """Pipeline parallelism: each stage's seconds in the step, its send to the next included (their sum plus
        the engine's terms is the step time: one batch goes through the stages in turn); [] with pp = 1."""
        out, start = [], 0
        for n in self.stage_ops:
            out.append(sum_by_shape(self.verify._op_seconds[start:start + n]))
            start += n
        return out

    @property
    def microbatches(self) -> int:
        """Batches of B in flight at once: pp under pipeline parallelism (vLLM keeps pipeline_parallel_size
        batches scheduled, one per stage: virtual engines in V0, ``max_concurrent_batches`` in V1; SGLang its pp
        microbatches), else 1. Every batch steps once per ``step_time_s``: the replica emits microbatches x B x tau
        tokens per step time."""
        return self.deployment.pp

    def step_time_with(self, params: EngineParams) -> np.ndarray:
        """The step time under other engine figures, kernels held fixed (engine fitting and calibration)."""
        device = self.kernel_time_s + self.overhead_s
        return device + engine_time(params, device, self.batch, self.k, self.draft_passes, self.verify_tokens,
                                    *small_kernel_s(self.hardware), self.dynamic, self.graph_split_ops,
                                    self.draft.time_s, self.verify_piecewise).added_s

    @functools.cached_property
    def graph_split_ops(self) -> int:
        """The model's piecewise-graph cuts per forward pass (``ModelSpec.graph_split_ops``), counted once a step:
        an engine fit prices the same step thousands of times."""
        return self.model.graph_split_ops

    @property
    def kernel_time_s(self) -> np.ndarray:
        return self.verify.time_s + self.draft.time_s

    @property
    def step_time_s(self) -> np.ndarray:
        t = self.kernel_time_s + self.overhead_s
        return t if self.engine_time is None else t + self.engine_time.added_s

    @property
    def feasible(self) -> np.ndarray:
        return self.memory.feasible

    @functools.cached_property
    def experts_touched(self) -> Optional[np.ndarray]:
        """Mean distinct routed experts per MoE layer in the verify pass (all ranks); None for a dense model."""
        totals, counts = np.zeros(()), 0.0
        for t in self.verify.op_times:
            o = t.op
            if o.kind is OpKind.moe_experts:
                totals = totals + o.experts_touched_total * o.count
                counts += float(np.max(o.count))
        return totals / counts if counts else None


_NUMBERS = (int, float, np.int64, np.float64)


def _check_grid(batch, k, context, drafter: Optional[DrafterSpec]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if type(batch) in _NUMBERS and type(k) in _NUMBERS and type(context) in _NUMBERS:   # one point: floats
        b, kk, c = float(batch), float(k), float(context)
        if (1 <= b < math.inf and b == round(b) and 0 <= kk < math.inf and kk == round(kk) and 0 <= c < math.inf and (kk == 0 or (drafter is not None and kk <= drafter.max_k))):
            return b, kk, c
    b = np.asarray(batch, dtype=float)
    kk = np.asarray(k, dtype=float)
    c = np.asarray(context, dtype=float)
    if np.any(~np.isfinite(b)) or np.any(b < 1) or np.any(b != np.round(b)):
        raise DsdsimError("batch sizes must be whole numbers >= 1")
    if np.any(~np.isfinite(kk)) or np.any(kk < 0) or np.any(kk != np.round(kk)):
        raise DsdsimError("K (draft tokens) must be whole numbers >= 0")
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise DsdsimError("context length must be >= 0 tokens")
    if np.any(kk > 0) and drafter is None:
        raise DsdsimError("K > 0 needs a drafter (e.g. eagle3)")
    if drafter is not None and np.any(kk > drafter.max_k):
        raise DsdsimError(f"K = {int(kk.max())} is beyond the {drafter.label} drafter's limit of {drafter.max_k}")
    return num(b), num(kk), num(c)     # one point in Python floats (dsdsim.cost.num), a grid in arrays


def simulate_step(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment: Optional[Deployment] = None,
                  drafter=DEFAULT_DRAFTER, batch=1, k=0, context=1024, setup: Optional[Setup] = None,
                  engine=DEFAULT_ENGINE, dynamic: bool = False) -> StepCost:
    """Cost of one speculative step. batch, k, context: scalars or broadcastable numpy arrays. The model, hardware,
    drafter and engine default to the CLI's (``dsdsim explain``); ``drafter=None`` for a server without one (K = 0
    only; pipeline parallelism needs it). ``engine`` is used only when no ``setup`` is given (a Setup carries its
    engine). ``dynamic``: the server runs a dynamic K table
    (vLLM num_speculative_tokens_per_batch_size); its steps pay what the engine version charges such a server, and
    K = 0 is its off tier, not a plain server (where the version says so, the drafter's first pass still runs)."""
    s = setup or resolve(model, hardware, deployment, drafter, engine)
    b, kk, c = _check_grid(batch, k, context, s.drafter)
    plan = setup_plan(s)
    window = s.model.max_position_embeddings
    if type(b) is float and type(kk) is float and type(c) is float:
        if window is not None and c > window:
            _beyond_window(s.model, c)
        return _one_step(s, plan, b, kk, c, dynamic)
    if window is not None and np.size(c) and float(np.max(c)) > window:
        _beyond_window(s.model, float(np.max(c)))
    return _grid_step(s, plan, b, kk, c, dynamic)


def _beyond_window(model: ModelSpec, context: float) -> None:
    """A context the model cannot hold is refused here as predict and explain refuse it (one line)."""
    raise DsdsimError(f"context {context:g} is beyond {model.name}'s window of {model.max_position_embeddings} tokens "
                      f"(max_position_embeddings in its config.json); give a context of at most "
                      f"{model.max_position_embeddings}")


def setup_plan(s: Setup) -> StepPlan:
    """``s``'s step program (``step_plan``), kept on the Setup: its fields never change, so neither does its plan."""
    plan = s.__dict__.get("_step_plan")
    if plan is None:
        plan = step_plan(s.model, s.hardware, s.deployment, s.drafter, s.draft_model,
                         moe_family_of(s.engine, s.hardware))
        object.__setattr__(s, "_step_plan", plan)      # a frozen dataclass: not a field, outside eq and hash
    return plan


def _one_step(s: Setup, plan: StepPlan, b: float, kk: float, c: float, dynamic: bool) -> StepCost:
    """One point in Python floats: each pass's operators sized by one row count read from the step program's row
    tables (``RowTables``, one summed table per size), the others' ``timer``; the engine terms. Each operator's own
    seconds, the memory and the operator records are worked out only when asked for."""
    f = setup_figures(s, plan)
    hw = s.hardware
    sh = step_shape(f, b, kk, dynamic)
    graphed = sh.graphed
    # rejection sampling reads target and draft probabilities: two sweeps over the logits when speculating
    verify_point = PassPoint(b, sh.q_verify, c, dp_ranks=plan.dp_ranks, sampling_passes=2.0 if kk > 0 else 1.0)
    parts = [(plan.verify, verify_point, None)]
    verify = PassCost(_point_seconds(plan, hw, 0, verify_point, None, graphed), parts, None, hw, graphed,
                      [plan.verify_timed], plan.gaps[0 if graphed else 1])
    draft_s = 0.0
    if plan.draft is not None:
        graphs = draft_pass_graphs(plan.draft, sh)
        parts = [(dp.ops, p, times) for dp, (p, times) in zip(plan.draft.passes,
                                                               plan.draft.points(b, kk, c, first_at_zero=sh.off_tier))]
        for i, ((_, p, times), g) in enumerate(zip(parts, per_pass(graphs, len(parts))), start=1):
            if times != 0.0:
                draft_s += _point_seconds(plan, hw, i, p, times, g)
        gaps = [plan.gaps[0 if g else 1] for g in graphs] if type(graphs) is list else plan.gaps[0 if graphs else 1]
        draft = PassCost(draft_s, parts, None, hw, graphs, plan.draft_timed, gaps)
    else:
        draft = PassCost(0.0, [], [], hw)
    et = engine_seconds(f, verify.time_s + draft_s + sh.overhead_s, b, kk, sh, plan.small_kernel_s, dynamic, draft_s)
    return StepCost(s.model, hw, s.deployment, s.drafter, b, kk, c, verify, draft, sh.overhead_s, plan.memory,
                    s.engine, et, b * sh.q_verify, graphed, sh.passes, sh.q, dynamic, plan.stage_ops, sh.piecewise)


def _point_seconds(plan: StepPlan, hw: HardwareSpec, index: int, p: PassPoint, times: Optional[float],
                   graphed: bool) -> float:
    """Seconds of pass ``index`` (0: verify, then the draft passes) at one point, run ``times`` times (None: once):
    its operators sized by one whole row count read from the step program's row tables, summed per size function
    (rows beyond ``_POINT_TABLE_ROWS`` or not whole: their timers), then the others' timers, times their counts."""
    program = plan.point_programs.get(index)
    if program is None:
        program = plan.point_programs[index] = _point_program(
            plan.verify_timed if index == 0 else plan.draft_timed[index - 1], p)
    groups, others = program
    gap = plan.gaps[0 if graphed else 1]
    total = 0.0
    for g in groups:
        rows = g.size(p)[0]
        i = int(rows)
        if i == rows and i <= _POINT_TABLE_ROWS:
            if i >= g.rows:                  # the tables grow to hold this row count
                g.graphed, g.eager = plan.tables.of(g.members, hw).floats(i)
                g.rows = len(g.graphed)
            summed = (g.graphed if graphed else g.eager)[i]
            total += summed if times is None else summed * times
        else:
            for t, count in g.members:
                total += t.timer(gap, rows) * (count if times is None else count * times)
    for t in others:
        total += t.timer(gap, *t.size(p)) * (t.count if times is None else t.count * times)
    return total


class _RowGroup:
    """The operators of a pass sharing one row-count size function, for ``_point_seconds``: their (Timed, count)
    and their summed table's floats once read (graphed, eager: arrays of ``rows`` floats)."""

    __slots__ = ("size", "members", "graphed", "eager", "rows")

    def __init__(self, size: Callable, members: list[tuple[Timed, float]]):
        self.size, self.members = size, members
        self.graphed, self.eager, self.rows = [], [], 0


def _point_program(timed: list[Timed], probe: PassPoint) -> tuple[tuple, tuple]:
    """A pass's operators for ``_point_seconds``: a ``_RowGroup`` per size function giving one row count, in the
    order they first occur; the other operators."""
    groups: dict = {}
    others = []
    for t in timed:
        if len(t.size(probe)) == 1:
            groups.setdefault(t.size, []).append((t, t.count))
        else:
            others.append(t)
    return tuple(_RowGroup(size, members) for size, members in groups.items()), tuple(others)


_POINT_TABLE_ROWS = 1 << 14   # a point reads row tables up to this many rows (larger: timers); the tables grow only
                              # as far as the points asked: 8 bytes a row, graphed and eager, per size function


def draft_pass_graphs(draft: DraftPlan, sh):
    """Whether the draft passes of a step of shape ``sh`` (``step_shape``) replay CUDA graphs: one flag for all,
    or a list with one per pass where the first pass graphs apart (by its tokens) from the later ones."""
    first, rest = sh.first_draft_graphed, sh.draft_graphed
    if first is rest or (type(first) is bool and type(rest) is bool and first == rest):
        return rest
    return [first if dp.role is DraftRole.first else rest for dp in draft.passes]


def per_pass(value, n: int) -> list:
    """A per-pass list (``PassCost``'s flags and gaps) of n passes from one value for all, or the list itself."""
    return value if type(value) is list else [value] * n


def _op_seconds(parts: list, timed: list[list[Timed]], gap) -> list:
    """Each operator's seconds per step at one point (in plan order), from its ``timer`` at launch gap ``gap`` (one,
    or one per pass): what ``PassCost`` gives explain; a pass that runs zero times is not evaluated (its operators
    take 0 s)."""
    op_seconds = []
    for (_, p, times), ops, gap in zip(parts, timed, per_pass(gap, len(parts))):
        if times == 0.0:
            op_seconds += [0.0] * len(ops)
            continue
        for size, _, _, count, time in ops:
            op_seconds.append(time(gap, *size(p)) * (count if times is None else count * times))
    return op_seconds


def _grid_step(s: Setup, plan: StepPlan, b, kk, c, dynamic: bool) -> StepCost:
    """A grid of points in numpy arrays: each planned operator's ``demand`` and ``seconds`` over the grid."""
    f = setup_figures(s, plan)
    hw = s.hardware
    sh = step_shape(f, b, kk, dynamic)
    sampling_passes = where(kk > 0, 2.0, 1.0)   # rejection sampling reads target and draft probabilities
    verify_point = PassPoint(b, sh.q_verify, c, dp_ranks=plan.dp_ranks, sampling_passes=sampling_passes)
    verify = _pass_cost([(plan.verify, verify_point, None)], [plan.verify_timed], hw, sh.graphed, plan.tables)
    draft = PassCost(0.0, [], [], hw)
    if plan.draft is not None:
        points = plan.draft.points(b, kk, c, first_at_zero=sh.off_tier)
        parts = [(dp.ops, p, times) for dp, (p, times) in zip(plan.draft.passes, points)]
        draft = _pass_cost(parts, plan.draft_timed, hw, draft_pass_graphs(plan.draft, sh), plan.tables)
    shape = np.broadcast_shapes(np.shape(b), np.shape(kk), np.shape(c))
    overhead = np.broadcast_to(sh.overhead_s, shape).astype(float)
    et = engine_seconds(f, verify.time_s + draft.time_s + overhead, b, kk, sh, plan.small_kernel_s, dynamic,
                        draft.time_s)
    padded, graphed = np.broadcast_to(b * sh.q_verify, shape), np.broadcast_to(sh.graphed, shape)
    return StepCost(s.model, hw, s.deployment, s.drafter, np.asarray(b), np.asarray(kk), np.asarray(c), verify, draft,
                    overhead, plan.memory, s.engine, et, padded, graphed, sh.passes, np.asarray(sh.q), dynamic,
                    plan.stage_ops, np.broadcast_to(sh.piecewise, shape))


class Timed(NamedTuple):
    """A planned operator ready to time: its size function, its ``demand``, its rates on the hardware, its count, and
    its ``timer`` (``dsdsim.cost.timing.timer``: the seconds of one occurrence at one point, in floats)."""

    size: Callable
    demand: Callable
    rates: OpRates
    count: float
    timer: Callable


@frozen
class StepPlan:
    """A step's program: what the spec objects fix, worked out once (``step_plan``). The passes as plans with each
    operator's rates and timer on the hardware, the memory figures, the launch gaps and small-kernel times; a point
    is arithmetic over it."""

    verify: list[PlanOp]
    verify_timed: list[Timed]
    draft: Optional[DraftPlan]
    draft_timed: list[list[Timed]]       # per draft pass
    dp_ranks: int                        # ranks the verify batch is split over (data-parallel attention)
    memory: MemoryFigures
    gaps: tuple[float, float]            # the launch gap replayed from a CUDA graph, launched eagerly
    small_kernel_s: tuple[float, float]  # one small kernel, graphed and eager (engine kernel-count terms)
    stage_ops: tuple[int, ...] = ()      # pipeline parallelism: the verify operators of each stage, in order
    tables: "RowTables" = field(default_factory=lambda: RowTables(), compare=False, repr=False)   # row tables
    point_programs: dict = field(default_factory=dict, compare=False, repr=False)   # per pass (``_point_program``)


def moe_family_of(engine: Optional[EngineSpec], hw: HardwareSpec) -> Optional[str]:
    """The fused-MoE kernel family ``engine`` runs on ``hw``'s generation (None: the part's default)."""
    if engine is None or engine.moe_kernels is None:
        return None
    return engine.moe_kernels.family(hw.generation_name)


@by_value
def step_plan(model: ModelSpec, hw: HardwareSpec, dep: Deployment, drafter: Optional[DrafterSpec],
              draft_model: Optional[ModelSpec], moe_family: Optional[str] = None) -> StepPlan:
    """Plans of the verify and draft passes of ``model`` with ``drafter`` on ``hw`` under ``dep`` (once per set of
    spec objects and fused-MoE family)."""
    pc = PassContext.build(model, hw, dep, moe_family)
    if dep.pp > 1:
        if drafter is not None:
            raise DsdsimError(PP_DRAFTER_ERROR)
        stages = stage_plans(model, hw, pc, dep.pp)
        verify = [o for stage in stages for o in stage]
        return StepPlan(verify, _timed(verify, hw, moe_family), None, [], 1, memory_figures(model, hw, dep, None),
                        (launch_overhead(hw, True), launch_overhead(hw, False)), small_kernel_s(hw),
                        tuple(len(stage) for stage in stages))
    verify = pass_plan(model, pc)
    draft = None
    if drafter is not None:
        dpc = PassContext.build(draft_model, hw, dep.for_draft_model(), moe_family) if draft_model else None
        draft = draft_plan(model, drafter, pc, draft_model=draft_model, draft_pc=dpc)
    return StepPlan(verify, _timed(verify, hw, moe_family), draft,
                    [_timed(dp.ops, hw, moe_family) for dp in draft.passes] if draft is not None else [],
                    dp_ranks(pc.dp_attention, pc.tp), memory_figures(model, hw, dep, drafter, draft_model),
                    (launch_overhead(hw, True), launch_overhead(hw, False)), small_kernel_s(hw))


def stage_plans(model: ModelSpec, hw: HardwareSpec, pc: PassContext, pp: int) -> list[list[PlanOp]]:
    """``pass_plan`` cut into ``pp`` pipeline stages, each on tp GPUs, names prefixed ``stage{s}.``: the layers of
    ``stage_layer_ranges``; the embedding on the first stage, the head (final norm, lm_head, sampling) on the last;
    every stage but the last ends with its send to the next.

    The send carries hidden_states and residual (vLLM's models return ``IntermediateTensors({"hidden_states",
    "residual"})`` from a non-last rank): 2 x B*q x h activations. Each tp rank sends its 1/tp slice to its peer in the
    next stage, which all-gathers them over its tp group (vLLM ``send_tensor_dict(..., all_gather_group=tp group)``).
    A stage's ranks are consecutive GPUs (stage s: ranks s*tp .. s*tp + tp - 1, gpus_per_node to a node); a send
    between peers on two nodes goes over the scale-out network, else over the scale-up link (``send_time``)."""
    h, tp = model.hidden_size, pc.tp
    g = dict(w_dtype=pc.w_dtype, act_dtype=pc.act_dtype, tile_m=pc.tile_m)
    projections = [PlanOp(name, op_kinds.Gemm(p.inputs, p.outputs, **g), tokens)
                   for name, p in zip(("pre_projection", "post_projection"), model.backbone_projections)]
    tags = layer_groups(model)
    gpn = int(hw.gpus_per_node.value)
    out = []
    for s, (lo, hi) in enumerate(stage_layer_ranges(model.num_layers, pp)):
        plan = []
        if s == 0:
            plan += [PlanOp("embed", op_kinds.Embedding(h, pc.w_dtype, pc.act_dtype), tokens)] + projections[:1]
        for layer, count in stage_layers(model.layers, lo, hi):
            tag = next(t for known, _, t in tags if known == layer)
            plan += [o.renamed(tag, count) for o in layer_plan(layer, h, pc)]
        if s == pp - 1:
            plan += projections[1:] + head_plan(h, model.vocab_size, pc)
        else:
            nodes = 2 if any((s * tp + j) // gpn != ((s + 1) * tp + j) // gpn for j in range(tp)) else 1
            plan.append(PlanOp("send", op_kinds.SendRecv(2 * h, pc.act_dtype, tp, nodes), tokens))
            if tp > 1:
                plan.append(PlanOp("send.all_gather", op_kinds.Gather(2 * h, pc.act_dtype.bytes_per_element, tp), tokens))
        out.append([o.renamed(f"stage{s}.") for o in plan])
    return out


def _timed(plan: list[PlanOp], hw: HardwareSpec, moe_family: Optional[str]) -> list[Timed]:
    out = []
    for e in plan:
        rates = rates_of(e.op, hw, moe_family)
        out.append(Timed(e.size, e.op.demand, rates, e.count, timer(e.op, rates, hw)))
    return out


def _pass_cost(parts: list, timed: list[list[Timed]], hw: HardwareSpec, graphed,
               tables: Optional["RowTables"] = None) -> PassCost:
    """The time of each operator of ``parts`` ((plan, sizes, times the pass runs or None) per pass), replayed under
    a CUDA graph where ``graphed``, eager (per-kernel launches) elsewhere. A pass that runs zero times at a single
    point is not evaluated: its operators take 0 s.

    With ``tables`` (a grid), the operators sized by one whole row count read their seconds from the step program's
    ``RowTables``: those sharing a size are summed as tables (times their counts) and gathered once over the grid;
    each operator's own array over the grid is gathered only when its records are asked for (``PassCost.op_times``).
    ``graphed``: one flag (or array) for every pass, or a list with one per pass (``draft_pass_graphs``)."""
    flags = [_graph_flag(g) for g in graphed] if type(graphed) is list else [_graph_flag(graphed)] * len(parts)
    op_seconds, totals, lazy = [], [], False
    for (plan, p, times), ops, g in zip(parts, timed, flags):
        gap = launch_overhead(hw, g)
        if type(times) is float and times == 0.0:
            op_seconds += [0.0] * len(ops)
            continue
        grouped: dict = {}                  # size function -> (index over the grid, [(position, Timed, count)])
        for t in ops:
            size, demand, rates, count, _ = t
            args = size(p)
            if tables is not None and len(args) == 1 and type(args[0]) is np.ndarray and args[0].size >= _TABLE_FROM:
                group = grouped.get(size)
                if group is None:
                    group = grouped[size] = (_row_index(args[0]), [])
                if group[0] is not None:
                    group[1].append((len(op_seconds), t, count))
                    op_seconds.append(None)            # filled on demand from the tables
                    continue
            per = seconds(rates, demand(*args), gap)
            if times is not None:
                count = count * times
            per = per * count if type(per) is float else in_place(per, count, np.multiply)
            op_seconds.append(per)
            totals.append(per)
        for index, members in grouped.values():
            if index is None or not members:
                continue
            lazy = True
            summed = tables.of([(t, c) for _, t, c in members], hw).gather(index, g)
            totals.append(summed if times is None else summed * times)
            for position, t, count in members:
                op_seconds[position] = (t, index, count, times, g)
    g = flags if type(graphed) is list else _graph_flag(graphed) if not flags else flags[0]
    if lazy:
        def resolve() -> list:
            return [tables.of([(x[0], 1.0)], hw).gather(x[1], x[4]) * x[2] * (1.0 if x[3] is None else x[3])
                    if type(x) is tuple else x for x in op_seconds]
        return PassCost(sum_by_shape(totals), parts, resolve, hw, g, timed)
    return PassCost(sum_by_shape(op_seconds), parts, op_seconds, hw, g, timed)


def _graph_flag(graphed):
    """One pass's CUDA-graph flag: a bool, or over a grid a bool array (True / False where it is all one)."""
    if type(graphed) is bool:
        return graphed
    g = np.asarray(graphed, dtype=bool)
    return True if g.all() else False if not g.any() else g   # mixed: the launch gap chosen per point


_TABLE_FROM = 512          # grids of at least this many rows per operator read its seconds from a table
_TABLE_MAX_ROWS = 1 << 20  # rows beyond this are evaluated directly


def _row_index(rows: np.ndarray) -> Optional[np.ndarray]:
    """Whole row counts of a grid as table indices; None where a count is not whole or beyond the tables."""
    index = rows.astype(np.intp)
    if not (index == rows).all():       # padded counts (S / B x B) may miss a whole number by a rounding
        index = np.rint(rows)
        if not (np.abs(rows - index) <= 1e-9 * np.maximum(index, 1.0)).all():
            return None
        index = index.astype(np.intp)
    if index.min() < 0 or index.max() > _TABLE_MAX_ROWS:
        return None
    return index


def step_time_grid(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment: Optional[Deployment] = None,
                   drafter=DEFAULT_DRAFTER, batch_sizes=(1,),
                   k_values=(0,), contexts=(1024,), setup: Optional[Setup] = None,
                   engine=DEFAULT_ENGINE, dynamic: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(step_time_s, feasible), each shaped (len(batch_sizes), len(k_values), len(contexts)). ``dynamic``: the
    steps of a server running a dynamic K table (``simulate_step``)."""
    b = np.asarray(batch_sizes, dtype=float)[:, None, None]
    kk = np.asarray(k_values, dtype=float)[None, :, None]
    c = np.asarray(contexts, dtype=float)[None, None, :]
    step = simulate_step(model, hardware, deployment, drafter, b, kk, c, setup=setup, engine=engine, dynamic=dynamic)
    shape = (b.shape[0], kk.shape[1], c.shape[2])
    return np.broadcast_to(step.step_time_s, shape), np.broadcast_to(step.feasible, shape)
