"""One point of the MoE expert counts in Python floats, against the numpy grid path and exact arithmetic.

Under expert parallelism with uniform routing the busiest rank's count is E[max of ep Binomial(n, p)] with n = E/ep
experts a rank and p = P(an expert is touched). A grid (numpy arrays for batch or q) sums 1 - F^ep with
scipy.special.bdtr's binomial CDF; one point walks the pmf recurrence in floats (dsdsim.cost.experts). Ground truth
here: the same sum at the float p both paths see, F in exact rational arithmetic (fractions), 1 - F^ep in 50 digits.
"""
from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy.special import bdtr

from dsdsim.cost.experts import (_expected_max_binomial, _p_touched_uniform, experts_touched,
                                 experts_touched_busiest_rank, routed_expert_counts)
from dsdsim.cost.layers import PassContext, routed_experts
from dsdsim.cost.plan import PassPoint
from dsdsim.specs.model import FFN, FFNKind
from dsdsim.units import DType

AGREE = 1e-12      # float path vs grid path, relative
EXACT = 1e-13      # float path vs exact arithmetic, relative

BATCHES = np.arange(1, 2049, dtype=float)
QS = np.arange(1, 18, dtype=float)
CASES = [(E, k, ep, o) for E in (64, 128, 256) for k in (2, 8) for ep in (2, 4, 8) for o in (0.0, 0.5)]


def exact_expected_max(n: int, p: float, ep: int) -> float:
    """sum_{x=0}^{n-1} 1 - F(x)^ep with F the Binomial(n, p) CDF at the float p: F exact (fractions), 1 - F^ep in
    50-digit decimals."""
    p = Fraction(p)
    cdf = Fraction(0)
    with localcontext() as ctx:
        ctx.prec = 50
        total = Decimal(0)
        for x in range(n):
            cdf += comb(n, x) * p ** x * (1 - p) ** (n - x)
            total += 1 - (Decimal(cdf.numerator) / Decimal(cdf.denominator)) ** ep
        return float(total)


def scipy_expected_max(n: int, p: float, ep: int) -> float:
    return float(np.sum(1.0 - bdtr(np.arange(n), n, p) ** ep))


@pytest.mark.parametrize("E,k,ep,overlap", CASES)
def test_one_point_agrees_with_the_grid_for_every_batch_and_q(E, k, ep, overlap):
    grid, share = experts_touched_busiest_rank(E, k, BATCHES[:, None], QS[None, :], ep, overlap)   # (2048, 17)
    points = np.array([[experts_touched_busiest_rank(E, k, b, q, ep, overlap)[0] for q in QS.tolist()]
                       for b in BATCHES.tolist()])
    np.testing.assert_allclose(points, grid, rtol=AGREE, atol=0)
    np.testing.assert_array_equal(share, 1.0 / ep)


@pytest.mark.parametrize("E,k,ep,overlap", CASES)
def test_one_point_agrees_with_0d_and_1d_arrays(E, k, ep, overlap):
    rng = np.random.default_rng(E * 100 + k * 10 + ep)
    picks = [(1.0, 1.0), (2048.0, 17.0)] + [(float(rng.integers(1, 2049)), float(rng.integers(1, 18)))
                                            for _ in range(20)]
    for b, q in picks:
        point, share = experts_touched_busiest_rank(E, k, b, q, ep, overlap)
        zero_d, _ = experts_touched_busiest_rank(E, k, np.array(b), np.array(q), ep, overlap)
        one_d, _ = experts_touched_busiest_rank(E, k, np.array([b]), np.array([q]), ep, overlap)
        assert type(point) is float and type(share) is float
        assert point == pytest.approx(float(zero_d), rel=AGREE, abs=0)
        assert point == pytest.approx(float(one_d[0]), rel=AGREE, abs=0)


@pytest.mark.parametrize("E,k,ep", [(E, k, ep) for E in (64, 128, 256) for k in (2, 8) for ep in (2, 4, 8)])
@pytest.mark.parametrize("b,q", [(1.0, 1.0), (2048.0, 17.0)])
def test_the_extremes_against_exact_arithmetic_and_scipy(E, k, ep, b, q):
    """batch 1, q 1: P(touched) = k/E, as small as it gets; batch 2048, q 17: P(touched) = 1 in floats."""
    n = E // ep
    p = _p_touched_uniform(E, k, b, q, 0.0)
    got = experts_touched_busiest_rank(E, k, b, q, ep)[0]
    assert got == pytest.approx(exact_expected_max(n, p, ep), rel=EXACT, abs=0)
    assert got == pytest.approx(scipy_expected_max(n, p, ep), rel=AGREE, abs=0)


@pytest.mark.parametrize("n", [1, 2, 8, 64, 128])
@pytest.mark.parametrize("ep", [2, 8, 64])
@pytest.mark.parametrize("p", [0.0, 2.0 ** -7, 0.03125, 0.25, 0.5, 0.5 + 2.0 ** -53, 0.75, 0.999, 1 - 1e-9,
                               1 - 2.0 ** -53, 1.0])
def test_expected_maximum_against_exact_arithmetic(n, ep, p):
    """Across P(touched), including where (1-p)^n and p^n underflow a naive walk (n = 128, p = 0.999 or 1e-9)."""
    got = _expected_max_binomial(n, p, ep)
    assert type(got) is float
    assert got == pytest.approx(exact_expected_max(n, p, ep), rel=EXACT, abs=0)
    assert got == pytest.approx(scipy_expected_max(n, p, ep), rel=AGREE, abs=1e-300)


@pytest.mark.parametrize("p", [0.3, 0.5, 0.999, 1 - 1e-12])
def test_the_largest_rank_in_floats(p):
    """n = 1000: the walk starts near 2^-1000 (p = 1/2) and still agrees with scipy."""
    assert _expected_max_binomial(1000, p, 2) == pytest.approx(scipy_expected_max(1000, p, 2), rel=AGREE)


def test_ranks_beyond_the_float_walk_take_the_grid_path():
    busiest, share = experts_touched_busiest_rank(2048, 8, 4.0, 1.0, 2)      # 1024 experts a rank
    ref, _ = experts_touched_busiest_rank(2048, 8, np.array(4.0), np.array(1.0), 2)
    assert float(busiest) == float(ref)


def test_the_grid_path_is_scipys_sum():
    """Arrays keep going through bdtr: bit for bit the sum the module docstring states."""
    E, k, ep, n = 128, 8, 2, 64
    b, q = np.arange(1, 65, dtype=float)[:, None], np.arange(1, 10, dtype=float)[None, :]
    grid, _ = experts_touched_busiest_rank(E, k, b, q, ep)
    pt = 1.0 - ((1.0 - k / E) * (1.0 - k / E) ** (q - 1.0)) ** b     # overlap 0: (1 - k/E)^q a sequence, ^B
    x = np.arange(1, n + 1).reshape(-1, 1, 1)
    np.testing.assert_array_equal(grid, np.sum(1.0 - bdtr(x - 1, n, pt) ** ep, axis=0))


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_floats_in_floats_out(ep):
    for batch, q in [(3.0, 2.0), (3, 2), (np.float64(3.0), np.int64(2))]:
        busiest, share = experts_touched_busiest_rank(128, 8, batch, q, ep)
        assert type(busiest) is float and type(share) is float
        counts = routed_expert_counts(128, 8, batch, q, ep, 0.25)
        assert all(type(c) is float for c in counts)


@pytest.mark.parametrize("ep", [1, 2, 8])
@pytest.mark.parametrize("overlap", [0.0, 0.5])
def test_routed_expert_counts_are_busiest_rank_and_experts_touched(ep, overlap):
    for batch, q in [(1.0, 1.0), (7.0, 3.0), (np.arange(1.0, 9.0)[:, None], np.arange(1.0, 5.0)[None, :])]:
        busiest, share, total = routed_expert_counts(256, 8, batch, q, ep, overlap)
        ref_busiest, ref_share = experts_touched_busiest_rank(256, 8, batch, q, ep, overlap)
        np.testing.assert_array_equal(busiest, ref_busiest)
        np.testing.assert_array_equal(share, ref_share)
        np.testing.assert_array_equal(total, experts_touched(256, 8, batch, q, overlap))


def test_routed_expert_counts_checks_overlap_and_ep():
    with pytest.raises(ValueError, match="expert_overlap"):
        routed_expert_counts(128, 8, 4.0, 2.0, 2, overlap=1.0)
    with pytest.raises(ValueError, match="does not divide"):
        routed_expert_counts(128, 8, 4.0, 2.0, 3)


def test_routed_experts_of_a_float_point_are_floats_worked_out_once():
    ffn = FFN(kind=FFNKind.moe, num_experts=128, top_k=8, expert_intermediate_size=768)
    pc = PassContext(tp=1, ep=2, w_dtype=DType.bf16, expert_dtype=DType.bf16, kv_dtype=DType.bf16,
                     act_dtype=DType.bf16, tile_m=1)
    p = PassPoint(16.0, 4.0, 1024.0)
    rank, share, total = routed_experts(ffn, pc, p)
    assert all(type(x) is float for x in (rank, share, total))
    assert (rank, share, total) == routed_expert_counts(128, 8, 16.0, 4.0, 2)
    assert routed_experts(ffn, pc, p) is routed_experts(ffn, pc, p)        # the point's memo
    assert total / 2 <= rank <= 64
