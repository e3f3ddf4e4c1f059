"""The step program's shape decisions, one place for the three ways a step is priced.

A point (``dsdsim.cost.step._one_step``), a grid (``_grid_step``) and a serving engine step (``dsdsim.cost.mixed``)
price the same step equation:

    T = verify(B, q_verify, c) + draft passes + overhead + engine(B, K, passes, q, graphs)

and before any kernel is timed the same questions are answered for each: how many tokens the verify pass checks
(q), how many it runs for once CUDA-graph padding is applied (q_verify), whether it replays a graph, a PIECEWISE
one, whether the draft passes do, how many draft passes run, and what the step pays besides its kernels. Those
answers are here (``step_shape``), from the figures a Setup fixes (``setup_figures``, worked out once per Setup),
for floats at one point and for numpy arrays over a grid alike. The kernels of each pass and the engine terms are
then timed by each path from its own tables (``dsdsim.cost.step.RowTables``, ``dsdsim.cost.mixed``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from dsdsim.cost.engine import EngineTime, engine_time, graphs_of, graphs_on, padded_by_k, padded_tokens, \
    piecewise_steps
from dsdsim.cost.num import as_float, num, where
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.drafters import DraftPasses, drafter_info
from dsdsim.specs.engine import EngineParams, EngineSpec
from dsdsim.specs.setup import Setup
from dsdsim.cost.memo import by_value


class SetupFigures(NamedTuple):
    """What pricing a step reads of its Setup besides the pass plans, looked up once per Setup (``setup_figures``)."""

    graphs: Optional[object]          # the engine's CudaGraphs on this part and model (None: every shape, or no engine)
    graphs_on: bool                   # the deployment runs CUDA graphs
    draft_on: bool                    # ... and the draft passes replay them too
    tree_q: Optional[float]           # a draft tree's verified tokens + 1 (None: a chain, q = K + 1)
    off_tier_drafts: bool             # the engine's K = 0 tier of a dynamic server still runs the first draft pass
    overhead_s: float                 # the hardware's step_overhead_s
    handoff_s: float                  # the drafter's hand-off, where charged (``handoff_s``)
    params: Optional[EngineParams]    # the engine's figures (None: kernels only)
    layers: int                       # the engine's per-layer units (``ModelSpec.graph_split_ops``)
    drafter: Optional[DrafterSpec]
    has_draft: bool                   # the step program has draft passes (a drafter with GPU passes)
    first_by_tokens: bool             # the first draft pass graphs by its token count (``CudaGraphs``)
    first_on: bool                    # ... replays a graph at all (False: SGLang's eager draft extend before 0.4.7)
    first_q_tree: Optional[float]     # a draft tree's first-pass tokens per sequence, its steps + 1 (None: K + 1)


def setup_figures(s: Setup, plan) -> SetupFigures:
    """``s``'s figures (``SetupFigures``) beside its step plan ``plan`` (``dsdsim.cost.step.setup_plan``), kept on the
    Setup as the plan is."""
    f = s.__dict__.get("_setup_figures")
    if f is None:
        eng, dep = s.engine, s.deployment
        graphs = graphs_on(eng.cuda_graphs, s.hardware, s.model.architecture) if eng is not None else None
        tree = s.drafter.tree if s.drafter is not None else None
        f = SetupFigures(graphs, bool(dep.cuda_graphs), draft_graphs_on(s),
                         float(tree.tokens + 1) if tree is not None else None, off_tier_drafts(s),
                         float(s.hardware.step_overhead_s.value), float(handoff_s(s)),
                         (s.engine_params or engine_params(eng, s.drafter)) if eng is not None else None,
                         s.model.graph_split_ops, s.drafter, plan.draft is not None,
                         bool(graphs is not None and graphs.draft_first_pass_by_tokens),
                         bool(graphs is None or graphs.draft_extend_graphs),
                         float(tree.steps + 1) if tree is not None else None)
        object.__setattr__(s, "_setup_figures", f)      # a frozen dataclass: not a field, outside eq and hash
    return f


class StepShape(NamedTuple):
    """A step's shape before its kernels are timed (floats at one point, arrays over a grid)."""

    q: object                 # tokens per sequence the verify pass checks (K + 1; a tree's tokens + 1; 1 at K = 0)
    q_verify: object          # tokens per sequence its kernels run for (q, padded to a CUDA-graph capture)
    graphed: object           # the verify pass replays a CUDA graph
    piecewise: object         # ... a PIECEWISE one (attention launched eagerly per split op)
    draft_graphed: object     # the draft passes replay graphs (padded by batch, not by tokens)
    first_draft_graphed: object   # ... the first one (by its tokens where the engine graphs it so)
    passes: object            # sequential draft passes
    overhead_s: object        # the step's overhead besides kernels and engine terms
    off_tier: bool            # a dynamic server whose K = 0 tier runs the first draft pass


def step_shape(f: SetupFigures, b, kk, dynamic: bool) -> StepShape:
    """The shape of a step of B sequences at draft length K on a fixed-K server, or a dynamic one (``dynamic``):
    one point in floats, or a grid of arrays. The speculative steps replay the speculative server's graphs, K = 0 the
    plain server's (``dsdsim.cost.engine.graphs_of``)."""
    off_tier = dynamic and f.off_tier_drafts
    if type(kk) is float and type(b) is float:          # one point
        spec = kk > 0
        q = (f.tree_q if spec else 1.0) if f.tree_q is not None else kk + 1.0
        graphs = graphs_of(f.graphs, dynamic, spec)
        q_verify, graphed = padded_tokens(graphs, b, q, f.graphs_on)
        piecewise = piecewise_steps(graphs, b, q, f.graphs_on)
        draft_graphed = f.draft_on and padded_tokens(graphs, b, 1.0, True)[1]
        first_graphed = draft_graphed and f.first_on
        if f.first_by_tokens and f.draft_on:
            q_first = (f.first_q_tree if spec else 1.0) if f.first_q_tree is not None else kk + 1.0
            first_graphed = padded_tokens(graphs, b, q_first, True)[1]
        overhead = f.overhead_s + f.handoff_s if spec else f.overhead_s
        passes = 1.0 if off_tier and f.has_draft and kk == 0 else draft_passes(f.drafter, kk)
        return StepShape(q, q_verify, graphed, piecewise, draft_graphed, first_graphed, passes, overhead, off_tier)
    q = verify_tokens(f.drafter, kk)
    q_verify, graphed = padded_by_k(f.graphs, dynamic, b, kk, q, f.graphs_on)
    # K = 0 (q = 1) never replays a PIECEWISE graph: the speculative graphs answer for every K
    spec_graphs = graphs_of(f.graphs, dynamic, True)
    piecewise = piecewise_steps(spec_graphs, b, q, f.graphs_on)
    _, draft_graphed = padded_tokens(spec_graphs, b, 1.0, f.draft_on)      # draft passes run at K > 0 only
    first_graphed = draft_graphed if f.first_on else False
    if f.first_by_tokens and f.draft_on:
        q_first = where(kk > 0, f.first_q_tree, 1.0) if f.first_q_tree is not None else kk + 1.0
        first_graphed = padded_tokens(spec_graphs, b, q_first, True)[1]
    overhead = f.overhead_s + f.handoff_s * (kk > 0)
    passes = draft_passes(f.drafter, kk)
    if off_tier and f.has_draft:
        passes = where(kk > 0, passes, 1.0)
    return StepShape(q, q_verify, graphed, piecewise, draft_graphed, first_graphed, passes, overhead, off_tier)


def engine_seconds(f: SetupFigures, device_s, b, kk, shape: StepShape, small_kernel_s: tuple[float, float],
                   dynamic: bool, draft_device_s, verify_tokens_per_sequence=None) -> Optional[EngineTime]:
    """The engine's terms of a step of that shape whose kernels (and overhead) take ``device_s``, the draft passes'
    ``draft_device_s`` of it; None without an engine spec. ``verify_tokens_per_sequence``: q unless given (a mixed
    step's tokens per request)."""
    if f.params is None:
        return None
    q = shape.q if verify_tokens_per_sequence is None else verify_tokens_per_sequence
    return engine_time(f.params, device_s, b, kk, shape.passes, q, *small_kernel_s, dynamic, f.layers,
                       draft_device_s, shape.piecewise)


# --- what the step's figures are made of ----------------------------------------------------------------------


def verify_tokens(drafter: Optional[DrafterSpec], kk):
    """q: tokens per sequence the verify pass checks (a tree verifies TOKENS + 1 when K > 0; else K + 1)."""
    tree = drafter.tree if drafter is not None else None
    return where(kk > 0, tree.tokens + 1.0, 1.0) if tree is not None else kk + 1.0


def handoff_s(s: Setup) -> float:
    """The drafter's hand-off, charged per speculative step only without an engine spec (an engine's terms hold it)."""
    return s.drafter.handoff_s if (s.engine is None and s.drafter is not None
                                   and not s.drafter.info.host_only) else 0.0


def draft_graphs_on(s: Setup) -> bool:
    """Whether the draft passes replay CUDA graphs: the deployment runs them and the engine graphs its drafter."""
    graphs = s.engine.cuda_graphs if s.engine is not None else None
    return bool(s.deployment.cuda_graphs and (graphs is None or graphs.draft_graphs))


def off_tier_drafts(s: Setup) -> bool:
    """Whether the engine's K = 0 tier of a server running a K table still runs the drafter's first pass."""
    eng = s.engine
    return bool(eng is not None and eng.off_tier_drafts is not None and eng.off_tier_drafts.value)


@by_value
def engine_params(engine: EngineSpec, drafter: Optional[DrafterSpec]) -> EngineParams:
    """An engine spec's own figures for a drafter (once per pair of spec objects: overlap may depend on it)."""
    if drafter is None:
        return EngineParams.of(engine)
    return EngineParams.of(engine, drafter_kind=drafter.kind.value, tree=drafter.tree is not None)


def draft_passes(drafter: Optional[DrafterSpec], k) -> np.ndarray:
    """Sequential draft passes per step: K (a tree: its steps); one for parallel drafters (Medusa, DFlash, PARD);
    none for host lookups (n-gram, suffix) — the kind's ``DrafterInfo.passes``."""
    passes = drafter_info(drafter.kind).passes if drafter is not None else DraftPasses.none
    if passes is DraftPasses.none:
        return 0.0 if type(k) is float else np.zeros(np.shape(k))
    if passes is DraftPasses.one:
        return as_float(k > 0)
    if drafter.tree is not None:
        return where(k > 0, float(drafter.tree.steps), 0.0)
    return num(k)
