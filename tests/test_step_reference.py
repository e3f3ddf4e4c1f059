"""Step costs of a fixed set of setups and points stay what they were when the reference was written (within
1e-12 relative): dense, MoE with expert parallelism, MLA with data-parallel attention, MTP, Medusa, n-gram, a draft
model, self-speculation, a draft tree, multi-node, engines vllm/sglang/ideal/trtllm and kernels only. Guards
speed work on the cost layer against changing any figure. Scalar points and the grid path are both checked."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dsdsim.cost.step import simulate_step, step_time_grid
from tests.step_reference_cases import BATCHES, CASES, CONTEXTS, REFERENCE, k_values, point_values, setup_of

REF = json.loads(REFERENCE.read_text())
RTOL = 1e-12


def _close(got, want, where):
    if isinstance(want, bool):
        assert got == want, where
    elif isinstance(want, list):
        assert len(got) == len(want), where
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, err_msg=where)
    else:
        assert got == pytest.approx(want, rel=RTOL, abs=0), where


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scalar_points_match_the_reference(case):
    s = setup_of(case)
    want = REF[case[0]]["points"]
    for b in BATCHES:
        for k in k_values(case[4]):
            for c in CONTEXTS:
                key = f"{b},{k},{c}"
                step = simulate_step(None, None, setup=s, batch=b, k=k, context=c)
                got = point_values(step, with_ops="ops" in want[key])
                assert got.keys() == want[key].keys(), key
                for name, value in want[key].items():
                    _close(got[name], value, f"{case[0]} {key} {name}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_grid_matches_the_reference(case):
    s = setup_of(case)
    t, ok = step_time_grid(None, None, batch_sizes=BATCHES, k_values=k_values(case[4]), contexts=CONTEXTS, setup=s)
    np.testing.assert_allclose(t, REF[case[0]]["grid"], rtol=RTOL, atol=0)
    assert np.array_equal(ok, REF[case[0]]["grid_ok"])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_point_in_floats_equals_the_same_point_in_arrays(case):
    """A single point runs in Python floats (dsdsim.cost.num), a grid in numpy arrays: the same equations, so the
    same figures at random points."""
    s = setup_of(case)
    rng = np.random.default_rng(12)
    ks = k_values(case[4])
    top = min(40000, s.model.max_position_embeddings or 40000)      # within the model's window (simulate_step)
    for _ in range(25):
        b, k, c = int(rng.integers(1, 2048)), int(rng.choice(ks)), float(rng.integers(0, top))
        one = simulate_step(None, None, setup=s, batch=b, k=k, context=c)
        arr = simulate_step(None, None, setup=s, batch=np.array([b]), k=np.array([k]), context=np.array([c]))
        where = f"{case[0]} B={b} K={k} c={c}"
        for got, want in ((one.step_time_s, arr.step_time_s), (one.verify.time_s, arr.verify.time_s),
                          (one.draft.time_s, arr.draft.time_s), (one.memory.used_bytes, arr.memory.used_bytes)):
            assert float(got) == pytest.approx(float(np.ravel(want)[0]), rel=RTOL, abs=0), where
        assert bool(one.feasible) == bool(np.ravel(arr.feasible)[0]), where
