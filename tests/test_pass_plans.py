"""Planned passes (dsdsim.cost.plan): a step at a point is evaluated from each operator's static shape and the sizes
it reads, without building operator records. These tests hold that path to the records it stands for: the demand
of every operator kind is its record's, every operator's planned time is the time of its record, and a plan is
built once per set of spec objects."""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.cost import ops, step as step_module
from dsdsim.cost.ops import KernelClass
from dsdsim.cost.step import simulate_step, step_plan
from dsdsim.cost.timing import op_time
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import parse_drafter
from dsdsim.units import DType
from tests.step_reference_cases import CASES, k_values, setup_of

STATIC_OPS = [
    (ops.Gemm(4096, 6144, DType.bf16, DType.bf16, tile_m=64, bias=True), 1),
    (ops.Gemm(512, 128, DType.fp8, DType.bf16, tile_m=64, weight_sets=16), 1),
    (ops.Gemm(2880, 201088, DType.mxfp4, DType.bf16, out_bytes_per_element=4.0), 1),
    (ops.Attention(32, 128, 128, 2 * 8 * 128, DType.fp8, DType.bf16), 3),
    (ops.Attention(16, 576, 512, 576, DType.bf16, DType.bf16, KernelClass.mla_decode), 3),
    (ops.MoEExperts(8, 2880, 360, DType.mxfp4, DType.bf16, tile_m=64, bias=True), 4),
    (ops.Elementwise(4096, reads=2, writes=1, act_dtype=DType.bf16, flops_per_element=5, weight_elements=4096), 1),
    (ops.Embedding(7168, DType.fp8, DType.bf16), 1),
    (ops.Sampling(128256), 2),
    (ops.AllReduce(8192, DType.bf16, 4), 1),
    (ops.AllToAll(7168, DType.bf16, 8), 1),
    (ops.Gather(129280, 2.0, 8), 1),
    (ops.Host(), 1),
]


def _sizes(n_args: int, rng, grid: bool):
    """Positive sizes (rows, q, context, experts touched, share, passes) as floats or as a small grid."""
    def one(scale):
        if grid:
            return rng.integers(1, scale, size=(5, 1)).astype(float) * rng.uniform(0.5, 1.5, size=(1, 3))
        return float(rng.integers(1, scale)) * float(rng.uniform(0.5, 1.5))
    return [one(s) for s in (4096, 9, 40000, 33)[:n_args]] if n_args > 1 or grid else [one(4096)]


@pytest.mark.parametrize("op,n_args", STATIC_OPS, ids=[type(o).__name__ + str(i) for i, (o, _) in enumerate(STATIC_OPS)])
@pytest.mark.parametrize("grid", [False, True], ids=["point", "grid"])
def test_demand_is_the_demand_of_the_record(op, n_args, grid):
    rng = np.random.default_rng(7)
    for _ in range(20):
        size = _sizes(n_args, rng, grid)
        if isinstance(op, ops.MoEExperts):
            size[2] = np.minimum(size[2] / 33.0, 1.0)          # a rank's share of the rows: a fraction
        if isinstance(op, ops.Sampling):
            size[1] = np.round(size[1]) if grid else float(round(size[1]))   # passes over the logits
        planned = op.demand(*size)
        record = op.record("op", *size)
        assert (record.kind, record.kernel, record.dtype) == (op.kind, op.kernel, op.dtype)
        for name, got, want in zip(planned._fields, planned, record.demand):
            assert np.array_equal(np.broadcast_to(got, np.shape(want)), want), (type(op).__name__, name)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_operator_takes_the_time_of_its_record(case):
    """The lazily built records (explain, the benches) time exactly as the plan did, point by point and on a grid."""
    s = setup_of(case)
    ks = k_values(case[4])
    points = [(b, k, c) for b in (1, 37, 512) for k in ks for c in (0.0, 5000.0)]
    grid = (np.array([1.0, 37.0, 512.0])[:, None, None], np.array(ks, dtype=float)[None, :, None],
            np.array([0.0, 5000.0])[None, None, :])
    for b, k, c in points + [grid]:
        st = simulate_step(None, None, setup=s, batch=b, k=k, context=c)
        for phase in (st.verify, st.draft):
            for t in phase.op_times:
                want = op_time(t.op, s.hardware, t.cuda_graphs).time_s
                np.testing.assert_allclose(t.time_s, want, rtol=1e-12, atol=0, err_msg=f"{case[0]} {t.op.name}")
            total = sum((np.asarray(t.time_s) for t in phase.op_times), np.zeros(()))
            np.testing.assert_allclose(phase.time_s, total, rtol=1e-12, atol=0, err_msg=case[0])


def test_a_draft_pass_that_does_not_run_takes_no_time():
    s = setup_of(CASES[0])
    st = simulate_step(None, None, setup=s, batch=8, k=1, context=1024)   # K = 1: the first pass only
    later = [t for t in st.draft.op_times if t.op.name.startswith("passN.")]
    assert later and all(t.time_s == 0.0 and t.op.count == 0.0 for t in later)
    assert all(t.time_s > 0 for t in st.draft.op_times if t.op.name.startswith("pass1."))


def test_the_plan_is_built_once_per_set_of_spec_objects(monkeypatch):
    """Passing spec objects resolves a new Setup on every call (a draft model's deployment is derived anew each
    time); the plan must still be found, not rebuilt."""
    model, hw, draft = load_model("llama-3.1-70b"), load_hardware("h100-sxm"), parse_drafter("draft-model:llama-3.2-1b")
    dep = Deployment(tp=4)
    builds = []
    real = step_module.pass_plan
    monkeypatch.setattr(step_module, "pass_plan", lambda *a, **kw: builds.append(1) or real(*a, **kw))
    step_plan.cache_clear()
    first = simulate_step(model, hw, dep, draft, batch=8, k=3, context=1024).step_time_s
    again = simulate_step(model, hw, dep, draft, batch=8, k=3, context=1024).step_time_s
    assert len(builds) == 1 and first == again
