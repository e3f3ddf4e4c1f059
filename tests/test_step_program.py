"""A step program's timers (``dsdsim.cost.timing.timer``) are the general formula written out on floats: each
planned operator's timer gives exactly ``seconds(rates, op.demand(*size), gap)`` at one point, for every operator
kind, with and without kernel figures, graphed and eager, on one node and past it."""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.cost.plan import PassPoint
from dsdsim.cost.step import moe_family_of, step_plan
from dsdsim.cost.timing import launch_overhead, seconds
from dsdsim.specs.setup import resolve
from tests.step_reference_cases import CASES


def _plans(case, flat: bool):
    _, model, hw, dep, drafter, engine = case
    s = resolve(model, hw, dep, drafter, engine)
    hardware = s.hardware.model_copy(update={"kernels": None}) if flat else s.hardware
    plan = step_plan(s.model, hardware, s.deployment, s.drafter, s.draft_model, moe_family_of(s.engine, hardware))
    passes = [(plan.verify, plan.verify_timed, plan.dp_ranks)]
    if plan.draft is not None:
        passes += [(dp.ops, timed, plan.draft.dp_ranks) for dp, timed in zip(plan.draft.passes, plan.draft_timed)]
    return hardware, passes


@pytest.mark.parametrize("flat", [False, True], ids=["kernel-figures", "flat-roofline"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_timer_equals_the_general_formula(case, flat):
    hw, passes = _plans(case, flat)
    rng = np.random.default_rng(3)
    written_out = 0
    for _, timed, ranks in passes:
        written_out += sum(t.timer.__name__ != "general" for t in timed)
        for _ in range(12):
            b, q = float(rng.integers(1, 1500)), float(rng.choice([1.0, 2.0, 4.0, 6.0, 17.0]))
            c = float(rng.choice([0.0, float(rng.integers(1, 60000))]))
            p = PassPoint(b, q, c, dp_ranks=ranks, head_rows=float(rng.choice([b, b * q])),
                          sampling_passes=float(rng.choice([1.0, 2.0])), k=q - 1.0)
            for graphed in (True, False):
                gap = launch_overhead(hw, graphed)
                for t in timed:
                    size = t.size(p)
                    assert t.timer(gap, *size) == seconds(t.rates, t.demand(*size), gap), (case[0], size)
    assert written_out > 0       # the common kinds are written out, not all left to the general formula


def test_a_collective_past_one_node_keeps_the_general_formula():
    hw, passes = _plans(next(c for c in CASES if c[0] == "multinode-moe"), flat=False)
    reduces = [t for t in passes[0][1] if t.demand.__self__.__class__.__name__ == "AllReduce"]
    assert reduces and all(t.timer.__name__ == "general" for t in reduces)


def test_a_grid_reads_row_sized_operators_from_tables_with_the_same_figures():
    """A grid gathers the operators sized by one row count from the step program's tables (``RowTables``): each
    operator's seconds over the grid, gathered when the records are asked for, equal the same operator at one point,
    and the pass time is their sum."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=2), "eagle3")
    b = np.arange(1, 700, dtype=float)[:, None, None]
    k = np.arange(0, 6, dtype=float)[None, :, None]
    grid = simulate_step(None, None, setup=s, batch=b, k=k, context=np.array([[[2048.0]]]))
    assert s and grid.verify.op_times                      # the records built from the gathered tables
    per_op = [np.broadcast_to(t.time_s, (699, 6, 1)) for t in grid.verify.op_times]
    np.testing.assert_allclose(sum(per_op), grid.verify.time_s, rtol=1e-12)
    for bi, ki in ((0, 0), (63, 3), (511, 5), (698, 1)):
        one = simulate_step(None, None, setup=s, batch=bi + 1, k=ki, context=2048)
        got = [float(p[bi, ki, 0]) for p in per_op]
        want = [float(t.time_s) for t in one.verify.op_times]
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert float(grid.step_time_s[bi, ki, 0]) == pytest.approx(float(one.step_time_s), rel=1e-12)


def test_row_counts_that_are_not_whole_are_evaluated_directly():
    from dsdsim.cost.step import _row_index

    assert _row_index(np.array([1.0, 24.000000000000004, 512.0])).tolist() == [1, 24, 512]
    assert _row_index(np.array([1.0, 2.5])) is None
    assert _row_index(np.array([-1.0, 2.0])) is None


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_point_reads_the_row_tables_and_equals_its_operators_timed_one_by_one(case):
    """One point reads its operators sized by one row count from the row tables, summed per size (``_point_seconds``);
    that pass time equals every operator's own ``timer`` at the point times its count (``_op_seconds``), in and past
    the point tables' rows, at whole and padded (not whole) row counts, graphed and eager."""
    from dsdsim.cost import step as step_module

    _, model, hw, dep, drafter, engine = case
    s = resolve(model, hw, dep, drafter, engine)
    plan = step_module.setup_plan(s)
    passes = [(plan.verify, plan.verify_timed, plan.dp_ranks, None)]
    if plan.draft is not None:
        passes += [(dp.ops, timed, plan.draft.dp_ranks, 3.0) for dp, timed in zip(plan.draft.passes, plan.draft_timed)]
    rng = np.random.default_rng(11)
    for index, (ops, timed, ranks, times) in enumerate(passes):
        for b, q in ((1.0, 1.0), (37.0, 4.0), (float(rng.integers(1, 2000)), 3.0), (5.0, 1.6), (70000.0, 2.0)):
            p = PassPoint(b, q, 4096.0, dp_ranks=ranks, head_rows=b, sampling_passes=2.0, k=q - 1.0)
            for graphed in (True, False):
                got = step_module._point_seconds(plan, s.hardware, index, p, times, graphed)
                gap = plan.gaps[0 if graphed else 1]
                want = sum(step_module._op_seconds([(ops, p, times)], [timed], gap))
                assert got == pytest.approx(want, rel=1e-13, abs=0), (case[0], index, b, q, graphed)


def test_a_point_on_a_setup_equals_the_grid_at_that_point():
    """The point path (row tables per size, timers for the rest, the engine terms in floats) and the grid path give
    the same step time at the same point, for every reference case."""
    from dsdsim.cost.step import simulate_step

    for _, model, hw, dep, drafter, engine in CASES:
        s = resolve(model, hw, dep, drafter, engine)
        top = s.drafter.max_k if s.drafter is not None else 0
        b = np.array([1.0, 7.0, 64.0, 300.0])[:, None]
        k = np.array(sorted({0, min(1, top), min(3, top)}), dtype=float)[None, :]
        grid = simulate_step(None, None, setup=s, batch=b, k=k, context=3000.0)
        for i, bi in enumerate(b[:, 0]):
            for j, kj in enumerate(k[0]):
                one = simulate_step(None, None, setup=s, batch=float(bi), k=float(kj), context=3000.0)
                assert type(one.step_time_s) is float
                assert one.step_time_s == pytest.approx(float(grid.step_time_s[i, j]), rel=1e-12, abs=0)
                assert bool(one.feasible) == bool(grid.feasible[i, j])


def test_a_setup_keeps_its_step_program_but_pickles_without_it():
    """A Setup keeps the step program a point built (``setup_plan``), but a sweep's worker processes receive it
    pickled: the program (local functions) stays behind and is rebuilt there, to the same step times."""
    import pickle

    from dsdsim.cost.step import setup_plan, simulate_step

    s = resolve("qwen3-30b-a3b", "h100-sxm", None, "eagle3")
    here = simulate_step(None, None, setup=s, batch=9, k=2, context=700).step_time_s
    assert setup_plan(s) is setup_plan(s)
    there = pickle.loads(pickle.dumps(s))
    assert there == s and "_step_plan" not in there.__dict__
    assert simulate_step(None, None, setup=there, batch=9, k=2, context=700).step_time_s == here
