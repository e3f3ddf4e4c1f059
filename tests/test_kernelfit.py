"""The probe's kernel-shape fits invert the cost model's equations: synthetic sweeps made with known figures give
them back, and a quick CPU probe writes a kernels block whose unmeasured figures are flagged."""
import numpy as np
import pytest

from dsdsim.fit.kernels import attention_ramp, fastest_per_context, gemm_transition_p, kernel_floor_s


def _gemm_points(p: float, peak=500e12, bw=3e12, launch=1e-6, floor=2e-6):
    pts = []
    for m in (1, 4, 16, 64, 128, 256, 512, 1024):
        k, n = 4096, 14336
        flops, nbytes = 2.0 * m * k * n, 2.0 * (k * n + m * k + m * n)
        tc, tm = flops / peak, nbytes / bw
        work = (tc ** p + tm ** p) ** (1 / p)
        pts.append({"m": m, "flops": flops, "bytes": nbytes, "seconds": launch + max(work, floor)})
    return pts


@pytest.mark.parametrize("p", [1.1, 1.5, 3.0])
def test_gemm_transition_recovers_the_exponent(p):
    got = gemm_transition_p(_gemm_points(p), 500e12, 3e12, 1e-6, 2e-6)
    assert got == pytest.approx(p, rel=0.02)


def test_attention_ramp_recovers_fraction_and_ramp():
    eta, ramp, bw, launch, batch, per_token = 0.8, 300.0, 4e12, 1e-6, 8, 131072.0
    pts = [{"variant": "v", "q_len": 1, "batch": batch, "context": c, "kv_bytes": batch * c * per_token,
            "seconds": launch + batch * (c + ramp) * per_token / (bw * eta)} for c in (1024, 4096, 16384)]
    got = attention_ramp(pts, bw, launch)
    assert got == pytest.approx((eta, ramp), rel=1e-6)


def test_fastest_kernel_is_taken_per_context():
    pts = [{"variant": "a", "q_len": 1, "context": 1, "seconds": 2.0}, {"variant": "b", "q_len": 1, "context": 1,
            "seconds": 1.0}, {"variant": "a", "q_len": 1, "context": 2, "seconds": 3.0},
           {"variant": "b", "q_len": 4, "context": 2, "seconds": 0.1}]
    assert [p["seconds"] for p in fastest_per_context(pts, ("a", "b"))] == [1.0, 3.0]


def test_kernel_floor_is_the_tiny_gemm_less_its_launch():
    assert kernel_floor_s(2.37e-6, 1.13e-6) == pytest.approx(1.24e-6)
    assert kernel_floor_s(1e-6, 2e-6) > 0                     # never negative


def test_quick_cpu_probe_writes_a_measured_kernels_block(tmp_path):
    pytest.importorskip("torch")
    from dsdsim.bench.probe import run_probe
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(run_probe("cpu", tmp_path / "cpu.yaml", quick=True))
    kf = hw.kernels
    assert kf is not None
    for name in ("kernel_floor_s", "gemm_transition_p", "decode_attention_bandwidth_fraction",
                 "decode_attention_ramp_tokens"):
        assert getattr(kf, name).verified.value == "measured"
    for name in ("moe_call_latency_s", "mla_attention_bandwidth_fraction"):
        assert getattr(kf, name).verified.value == "unverified" and "not measured" in getattr(kf, name).note
    assert 1.0 <= kf.gemm_transition_p.value <= 16.0 and np.isfinite(kf.kernel_floor_s.value)
