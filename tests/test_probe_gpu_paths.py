"""`dsdsim probe` sweeps on a CPU (quick): the sidecar JSON, sane physics, and the CUDA-only paths failing soft.

The sweeps feed a one-shot GPU run, so every CUDA-only measurement must record its error and let the probe go on;
here those paths are forced on a CPU (time_graph, the profiler, a raising timer) and must not raise."""
import dataclasses
import json
import math

import pytest

torch = pytest.importorskip("torch")

from dsdsim.bench import probe  # noqa: E402

NAME = "h200-sxm@measured"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick CPU probe through `dsdsim probe`: (spec path, sidecar dict)."""
    from dsdsim.cli import main

    out = tmp_path_factory.mktemp("probe") / "cpu.yaml"
    try:
        main(["probe", "--device", "cpu", "--quick", "-o", str(out), "--name", NAME])
    except SystemExit as exc:
        assert exc.code in (0, None), exc
    side = probe.sweeps_path(out)
    assert side.name == "cpu.sweeps.json" and side.exists()
    return out, json.loads(side.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_spec_named_with_at_sign_loads_back(quick):
    from dsdsim.specs.catalog import load_hardware

    path, side = quick
    hw = load_hardware(str(path))
    assert hw.name == NAME == side["name"]
    assert hw.measured is not None and ".sweeps.json" in hw.measured.method
    assert side["spec_file"] == path.name and side["format"] == "dsdsim-probe-sweeps/1"


def test_quick_cpu_probe_is_fast_and_complete(quick):
    _, side = quick
    assert side["quick"] is True and side["wall_s"] < 30          # ~5 s on one EPYC core
    assert set(side["sweeps"]) == {"kernel_floor", "gemm_m", "decode_attention", "copy"}
    for name, sweep in side["sweeps"].items():
        assert sweep["points"], name
        assert sweep["errors"] == [] and sweep["skipped"] == [], (name, sweep["errors"], sweep["skipped"])
        assert sweep["wall_s"] > 0
        assert sweep["sm_clock_mhz_before"] is None               # no NVML on a CPU: not logged, not faked


def _by(points, *keys):
    out = {}
    for p in points:
        out.setdefault(tuple(p[k] for k in keys), []).append(p)
    return out


def test_gemm_m_sweep_physics(quick):
    _, side = quick
    sweep = side["sweeps"]["gemm_m"]
    assert sweep["notes"]["model"] == "llama-3.1-8b"
    shapes = {p["layer"]: (p["k"], p["n"]) for p in sweep["points"]}
    assert shapes == {"qkv": (4096, 6144), "o": (4096, 4096)}     # the quick plan's layers, real shapes
    for (layer,), pts in _by(sweep["points"], "layer").items():
        pts.sort(key=lambda p: p["m"])
        assert all(p["seconds"] > 0 and p["flops_per_s"] > 0 and p["bytes_per_s"] > 0 for p in pts)
        assert all(p["mode"] == "eager" for p in pts)             # no CUDA graphs on a CPU
        small, large = pts[0], pts[-1]
        assert small["m"] == 1 and large["m"] >= 256
        assert large["seconds"] >= small["seconds"]                # more rows never take less time
        assert large["flops_per_s"] > 2 * small["flops_per_s"]     # M=1 is weight-bound, M=256 near compute
        assert small["flops"] == 2.0 * small["k"] * small["n"]
        assert 1e8 < small["bytes_per_s"] < 1e12                  # weights from DRAM: a plausible bandwidth


def test_decode_attention_sweep_physics(quick):
    _, side = quick
    sweep = side["sweeps"]["decode_attention"]
    assert sweep["notes"]["gqa"]["heads"] == 32 and sweep["notes"]["gqa"]["kv_heads"] == 8
    assert sweep["notes"]["mla"]["qk_dim"] == 576 and sweep["notes"]["mla"]["v_dim"] == 512
    series = _by(sweep["points"], "variant", "q_len")
    assert set(series) == {("gqa_attend", 1), ("gqa_packed", 1), ("gqa_attend", 4), ("gqa_packed", 4),
                           ("mla_matmul", 1), ("mla_sdpa", 1)}
    for key, pts in series.items():
        pts.sort(key=lambda p: p["context"])
        assert all(p["seconds"] > 0 and p["kv_bytes_per_s"] > 0 for p in pts), key
        short, long = pts[0], pts[-1]
        assert long["context"] == 4 * short["context"]
        assert long["seconds"] >= 1.5 * short["seconds"], key      # 4x the KV cache: clearly slower
        assert long["kv_bytes"] == 4 * short["kv_bytes"]


def test_kernel_floor_and_copy(quick):
    _, side = quick
    floor = side["sweeps"]["kernel_floor"]["points"]
    assert {(p["kernel"], p["mode"]) for p in floor} == {("add 1 element", "eager"), ("gemm 1x128x128", "eager")}
    assert all(0 < p["seconds"] < 1e-2 for p in floor)
    copies = side["sweeps"]["copy"]["points"]
    assert all(1e8 < p["bytes_per_s"] < 1e12 and p["bytes_moved"] == 2 * p["bytes"] for p in copies)


def test_sweeps_path():
    assert probe.sweeps_path("out/h200.yaml").as_posix() == "out/h200.sweeps.json"
    assert probe.sweeps_path("spec").as_posix() == "spec.sweeps.json"


def test_layer_shapes_come_from_the_cost_model():
    assert probe.layer_gemm_shapes("llama-3.1-8b") == {"qkv": (4096, 6144), "o": (4096, 4096),
                                                       "gate_up": (4096, 28672), "down": (14336, 4096)}
    mla = probe.attention_shape("deepseek-v3")
    assert mla["mla"] and mla["heads"] == 128 and mla["qk_dim"] == 576 and mla["v_dim"] == 512
    with pytest.raises(ValueError, match="no GEMM named"):
        probe.layer_gemm_shapes("llama-3.1-8b", ("nope",))


def test_cuda_plan_covers_the_issue_grid():
    plan = probe.sweep_plan("cuda", quick=False)
    assert plan.gemm_m == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    assert plan.attention_contexts == (1024, 2048, 4096, 8192, 16384, 32768)
    assert plan.dtype.value == "bf16" and plan.attention_q_lens == (1, 4)
    assert 4 * plan.sweep_budget_s <= 60                           # four sweeps inside the probe's minute


# --- CUDA-only paths forced on a CPU: recorded, never raised ------------------------------------------------


def _tiny_plan():
    return probe.SweepPlan(gemm_m=(1, 4), gemm_layers=("o",), dtype=probe.DType.fp32, attention_contexts=(64,),
                           attention_batch=1, attention_q_lens=(1,), copy_bytes=(1 << 20,), point_budget_s=0.01,
                           sweep_budget_s=5.0, max_rotation_bytes=64e6, profile_kernels=True)


def test_graph_points_fail_soft_on_cpu():
    sweep = probe.sweep_kernel_floor("cpu", _tiny_plan(), graphs=True)
    assert {p["mode"] for p in sweep.points} == {"eager"}         # the eager points still ran
    assert len(sweep.errors) == 2 and all("CUDA graphs need a CUDA device" in e for e in sweep.errors)
    assert sweep.errors[0].startswith("add graph: RuntimeError")
    with pytest.raises(RuntimeError):
        probe.measure_graph_launch("cpu")


def test_a_raising_timer_fails_every_point_soft(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    monkeypatch.setattr(probe, "time_kernels", boom)
    lines = []
    sweeps = probe.run_sweeps("cpu", _tiny_plan(), lines.append)
    by = {s.name: s for s in sweeps}
    assert by["gemm_m"].points == [] and len(by["gemm_m"].errors) == 2
    assert by["gemm_m"].errors[0] == "o m=1: RuntimeError: CUDA error: an illegal memory access was encountered more"
    assert by["decode_attention"].points == [] and len(by["decode_attention"].errors) == 4
    assert by["copy"].points == [] and len(by["copy"].errors) == 1
    assert by["kernel_floor"].points                              # it does not use time_kernels
    assert any("gemm_m: 0 points, 2 errors" in line for line in lines)
    json.dumps([s.to_json() for s in sweeps], allow_nan=False)


def test_a_sweep_that_cannot_start_fails_soft(monkeypatch):
    monkeypatch.setattr(probe, "layer_gemm_shapes", lambda *a: (_ for _ in ()).throw(KeyError("no model")))
    sweep = probe.sweep_gemm_m("cpu", _tiny_plan())
    assert sweep.points == [] and sweep.errors == ["gemm_m: KeyError: 'no model'"] and sweep.wall_s >= 0


def test_budget_skips_instead_of_overrunning():
    plan = dataclasses.replace(_tiny_plan(), sweep_budget_s=0.0)
    sweep = probe.sweep_gemm_m("cpu", plan)
    assert sweep.points == [] and sweep.skipped == ["o m=1", "o m=4"] and sweep.errors == []


def test_profiler_forced_on_cpu_records_its_error(monkeypatch):
    monkeypatch.setattr(probe, "_is_cuda", lambda device: True)
    point = probe._with_kernels({"seconds": 1.0}, _tiny_plan(), True, torch.add,
                                (torch.ones(2), torch.ones(2)), "cpu")
    assert "kernels" not in point and point["kernels_error"].startswith("kernels: ")


def test_soft_spec_measurements_and_a_gpu_spec_without_graphs():
    errors = []
    assert probe._soft(errors, "all-reduce", lambda dev: 1 / 0, "cpu") is None
    assert errors == ["all-reduce: ZeroDivisionError: division by zero"]
    r = probe.ProbeResult(
        device="cuda:0", device_name="NVIDIA H200", date="2025-01-01", torch_version="2.11.0", memory_bytes=141e9,
        cache_bytes=60e6, bandwidth_bytes_per_s=4.2e12,
        bandwidth_timing=probe.Timing(1e-3, 1e-3, 1e-3, 10, 1), peaks_flops_per_s={probe.DType.bf16: 7e14},
        gemm_sizes={probe.DType.bf16: 8192}, eager_launch_s=5e-6, graph_launch_s=None, gpus=1, threads=1,
        link_bytes_per_s=None, link_latency_s=None, errors=("graph launch: RuntimeError: capture failed",))
    spec = probe.spec_from_probe(r, NAME)
    assert spec.name == NAME
    assert spec.launch_overhead_s.verified.value == "unverified" and "failed" in spec.launch_overhead_s.note
    assert spec.gemm_tile_m.value in (16.0, 64.0)                  # a GPU tile even without graphs
    assert spec.measured is not None and "sweeps" not in spec.measured.method
    side = probe.sweeps_json(r, "h200.yaml", NAME)
    assert side["spec_measurements"]["errors"] == ["graph launch: RuntimeError: capture failed"]
    assert side["sweeps"] == {} and not any(isinstance(v, float) and math.isnan(v) for v in side.values())


def test_a_sweep_that_raises_outside_its_scope_is_caught(monkeypatch):
    monkeypatch.setattr(probe, "sweep_decode_attention", lambda *a: 1 / 0)
    sweeps = probe.run_sweeps("cpu", _tiny_plan())
    by = {s.name: s for s in sweeps}
    assert list(by) == ["kernel_floor", "gemm_m", "decode_attention", "copy"]
    assert by["decode_attention"].errors == ["decode_attention: ZeroDivisionError: division by zero"]
    assert by["gemm_m"].points and by["copy"].points               # the other sweeps still ran


def test_attention_variants_compute_the_same_attention():
    """The timed kernels are real attention: packed GQA == shapes.attend; MLA via SDPA == the two GEMMs."""
    from dsdsim.bench.shapes import attend

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g) for s in ((2, 8, 1, 64), (2, 2, 32, 64), (2, 2, 32, 64)))
    assert torch.allclose(probe._gqa_packed("cpu", 1)(q, k, v), attend(q, k, v, 1, False), atol=1e-5)
    qm, lat = torch.randn(2, 16, 576, generator=g), torch.randn(2, 32, 576, generator=g)
    assert torch.allclose(probe._mla_sdpa("cpu", 512)(qm, lat).squeeze(1),
                          probe._mla_matmul(512, 576 ** -0.5)(qm, lat), atol=1e-5)


def test_the_gemm_peaks_skip_a_size_whose_call_would_outlast_the_budget(monkeypatch):
    """A CPU without bf16 / fp16 instructions runs those GEMMs at ~1 GFLOP/s: after n = 1024 (2.1 GFLOP, ~2 s a call)
    the probe does not time n = 2048 (17 GFLOP, ~18 s a call, five calls at least); fp32 at 80 GFLOP/s times both."""
    rates = {torch.float32: 80e9, torch.bfloat16: 0.9e9, torch.float16: 0.9e9}
    timed = []

    def fake_rate(device, dtype, n, tf32=False):
        timed.append((dtype, n))
        return rates[dtype]

    monkeypatch.setattr(probe, "_gemm_rate", fake_rate)
    peaks, sizes = probe.measure_gemm_peaks("cpu")
    assert timed == [(torch.float32, 1024), (torch.float32, 2048), (torch.bfloat16, 1024), (torch.float16, 1024)]
    assert sizes == {probe.DType.fp32: 1024, probe.DType.bf16: 1024, probe.DType.fp16: 1024}
    rates[torch.bfloat16] = 500e9                       # AVX512-BF16 / AMX: n = 2048 takes 34 ms, timed
    timed.clear()
    probe.measure_gemm_peaks("cpu")
    assert (torch.bfloat16, 2048) in timed


@pytest.mark.parametrize("name, link, peer", [("AMD Instinct MI300X", 7 * 48e9, 48e9), ("NVIDIA H200", 48e9, None)])
def test_a_probed_full_mesh_prices_a_group_on_its_peer_links(name, link, peer):
    """Two GPUs of an AMD Instinct platform measure one link of its full mesh: the probed spec keeps that figure as
    the peer bandwidth and gives the fabric 7 of them (TP 8 on all, TP 4 on 3); an NVSwitch part's two GPUs measure
    the whole link, which every group gets."""
    from dsdsim.cost.timing import link_bytes_per_s

    r = probe.ProbeResult(
        device="cuda:0", device_name=name, date="2025-01-01", torch_version="2.11.0", memory_bytes=141e9,
        cache_bytes=60e6, bandwidth_bytes_per_s=4.2e12,
        bandwidth_timing=probe.Timing(1e-3, 1e-3, 1e-3, 10, 1), peaks_flops_per_s={probe.DType.bf16: 7e14},
        gemm_sizes={probe.DType.bf16: 8192}, eager_launch_s=5e-6, graph_launch_s=2e-6, gpus=8, threads=1,
        link_bytes_per_s=48e9, link_latency_s=9e-6, errors=())
    spec = probe.spec_from_probe(r, NAME)
    assert spec.link_bandwidth_bytes_per_s.value == pytest.approx(link)
    got = spec.link_peer_bandwidth_bytes_per_s
    assert (got.value if got is not None else None) == (pytest.approx(peer) if peer else None)
    assert link_bytes_per_s(spec, 4) == pytest.approx(3 * 48e9 if peer else 48e9)
