"""The CUDA paths of the validation, exercised on CPU: decode-style attention, grouped-GEMM MoE, kernel-time
mode with its eager fallback, failure isolation, time budget, partial reports and the GPU script's full path."""
import json
import os
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

import torch.nn.functional as F  # noqa: E402

from dsdsim.bench import shapes, timing  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _reference(q, k, v):
    """Plain attention with the KV heads expanded to the query heads, no mask."""
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))


@pytest.mark.parametrize("q_len", [1, 4])
def test_attend_decode_packs_gqa_heads_correctly(q_len):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, q_len, 16, generator=gen)
    k = torch.randn(3, 2, 40, 16, generator=gen)
    v = torch.randn(3, 2, 40, 16, generator=gen)
    out = shapes.attend_decode(q, k, v)
    assert out.shape == (3, 8, q_len, 16)
    # q_len = 1 is exact; q_len > 1 leaves the new tokens' q x q block unmasked (stated in the docstring)
    assert torch.allclose(out, _reference(q, k, v), atol=1e-5)


def test_attend_decode_would_be_wrong_with_a_wrong_head_grouping():
    """The packing must put query head h with KV head h // g: a grouping by h % g gives other numbers."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 1, 8, generator=gen)
    k = torch.randn(1, 2, 10, 8, generator=gen)
    wrong = F.scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), k.repeat(1, 2, 1, 1))
    assert not torch.allclose(shapes.attend_decode(q, k, k), wrong, atol=1e-4)


def test_exact_attention_takes_a_shared_two_dimensional_mask():
    """The fallback when no fused kernel takes the causal bias: a (q, T) mask shared by every sequence."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(3, 4, 5, 8, generator=gen)
    k = torch.randn(3, 2, 5, 8, generator=gen)
    mask = shapes._lower_right_bool(5, 5, "cpu")
    out = shapes.attend(q, k, k, 5, False, mask)
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), k.repeat_interleave(2, 1), attn_mask=mask)
    assert torch.allclose(out, ref, atol=1e-5)


def test_decode_backend_is_named():
    assert "packed GQA" in shapes.decode_backend("cpu", torch.float32)


def _moe_op(tokens=12, top_k=2, experts=8, hidden=32, width=16):
    from dsdsim.cost.ops import Demand, MoEShape, OpCost, OpKind
    from dsdsim.units import DType

    return OpCost("L.moe", OpKind.moe_experts, Demand(1.0, 0.0, weight_bytes=1.0), dtype=DType.fp32,
                  shape=MoEShape(tokens, top_k, hidden, width, 6.0, 1.0))


def test_grouped_moe_bench_matches_the_expert_loop(monkeypatch):
    pool = shapes.TensorPool("cpu", seed=0)
    from dsdsim.units import DType

    grouped = shapes.build_bench(_moe_op(), pool, DType.fp32, num_experts=8)
    assert grouped.shape["impl"] == "grouped_mm"
    monkeypatch.setattr(shapes, "grouped_mm_available", lambda device, dtype: False)
    loop = shapes.build_bench(_moe_op(), pool, DType.fp32, num_experts=8)
    assert loop.shape["impl"] == "expert_loop"
    args = grouped.make_inputs(0)
    assert torch.allclose(grouped.fn(*args), loop.fn(*args), atol=1e-4)
    # bytes of one input set count the touched experts' weights, not all experts'
    assert grouped.bytes_per_set == pytest.approx(6.0 * 3 * 32 * 16 * 4 + 12 * 32 * 4)


def test_grouped_moe_module_matches_the_loop_module():
    from dsdsim.bench.model import MoE
    from dsdsim.specs.model import FFN, FFNKind

    ffn = FFN(kind=FFNKind.moe, num_experts=8, top_k=2, expert_intermediate_size=16)
    torch.manual_seed(0)
    moe = MoE(ffn, 32, torch.float32, "cpu")
    x = torch.randn(2, 3, 32)
    with torch.inference_mode():
        loop = moe(x)
        moe.grouped = True
        grouped = moe(x)
    assert torch.allclose(loop, grouped, atol=1e-5)


def test_kernel_time_mode_falls_back_to_eager_off_gpu():
    with pytest.raises(RuntimeError):
        timing.time_graph(lambda a: a + 1, lambda i: (torch.ones(4),), "cpu")
    t = timing.time_kernels(lambda a: a + 1, lambda i: (torch.ones(4),), "cpu", rotate=2, repeats=3,
                            warmup_s=0.01)
    assert t.mode == "eager" and t.repeats == 3 and t.median_s > 0


def test_warmup_runs_for_at_least_the_given_time():
    import time

    calls = []
    t0 = time.perf_counter()
    timing.time_fn(lambda: calls.append(1), lambda i: (), "cpu", warmup=1, repeats=1, warmup_s=0.05)
    assert time.perf_counter() - t0 >= 0.05 and len(calls) > 2


def test_timing_decoder_matches_the_exact_decoder_at_q1():
    """Timing mode (head-major cache, packed decode kernel, grouped MoE) computes the same pass at q = 1."""
    from dsdsim.bench.loop import loop_specs
    from dsdsim.bench.model import TorchDecoder

    spec, _ = loop_specs(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=100)
    exact = TorchDecoder(spec, seed=3)
    fast = TorchDecoder(spec, seed=3, timing=True)
    tok = torch.randint(0, 100, (2, 1))
    with torch.inference_mode():
        c1, c2 = exact.new_cache(2, 20), fast.new_cache(2, 20)
        assert c2.head_major and c2.k[0].shape == (2, 2, 20, 16)
        for t in range(5):                      # same history in both caches
            exact.hidden(tok + t, c1, uniform=t)
            fast.hidden(tok + t, c2, uniform=t)
        assert torch.allclose(exact.hidden(tok, c1, uniform=5), fast.hidden(tok, c2, uniform=5), atol=1e-4)


def test_kv_cache_fills_on_its_device_deterministically():
    from dsdsim.bench.model import KVCache

    a = KVCache([torch.zeros(2, 8, 1, 4)], [torch.zeros(2, 8, 1, 4)], torch.zeros(2, dtype=torch.long))
    b = KVCache([torch.zeros(2, 8, 1, 4)], [torch.zeros(2, 8, 1, 4)], torch.zeros(2, dtype=torch.long))
    a.fill_random(5, seed=3)
    b.fill_random(5, seed=3)
    assert torch.equal(a.k[0], b.k[0]) and a.k[0][:, :5].abs().sum() > 0 and a.k[0][:, 5:].abs().sum() == 0
    assert a.lengths.tolist() == [5, 5]


def test_preflight_names_what_is_missing():
    from dsdsim.bench import preflight

    assert preflight.check("cpu")[0]
    miss = preflight.missing_packages((("numpy", "numpy"), ("no_such_module_xyz", "no-such-package")))
    assert len(miss) == 1 and miss[0].startswith("no-such-package")
    ok, line = preflight.check("cuda:7") if not torch.cuda.is_available() else (False, "preflight failed: x")
    assert not ok and line.startswith("preflight failed")


def _tiny(tmp_path, **kw):
    from dsdsim.bench.validate import TINY_GRID, validate

    return validate("llama-3.1-8b", "h100-sxm", "cpu", quick=True, output_dir=tmp_path, grid=TINY_GRID,
                    reduce=16, layers=2, **kw)


@pytest.mark.slow
def test_whole_steps_are_measured_and_drive_the_table(tmp_path):
    rep = _tiny(tmp_path)
    how = {p.measured_as for p in rep.points}
    assert how == {"operator", "pass", "spec_step"}
    spec = [p for p in rep.points if p.measured_as == "spec_step"]
    assert {(p.shape["batch"], p.shape["k"]) for p in spec} == {(b, k) for b in (1, 2) for k in (0, 1, 2)}
    tc = rep.table_check
    assert tc.measured_from.startswith("whole speculative steps")
    # the table's measured step times are exactly the whole-step points' measurements
    meas = {(p.shape["batch"], p.shape["k"]): p.measured_s for p in spec}
    assert np.allclose(tc.measured_step_s, [[meas[(b, k)] for k in (0, 1, 2)] for b in (1, 2)])
    assert "spec_step" in rep.summary.by_measurement
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["partial"] is False and data["errors"] == []
    assert all(p["measured_as"] in ("operator", "pass", "spec_step") for p in data["points"])


@pytest.mark.slow
def test_one_failing_shape_does_not_end_the_run(tmp_path, monkeypatch):
    real = shapes.build_bench

    def flaky(op, *a, **kw):
        if op.kind.value == "attention":
            raise RuntimeError("simulated kernel failure")
        return real(op, *a, **kw)

    monkeypatch.setattr(shapes, "build_bench", flaky)
    rep = _tiny(tmp_path)
    errs = rep.errors
    assert errs and all("simulated kernel failure" in e["error"] for e in errs)
    assert not any(p.kind == "attention" for p in rep.points)
    assert any(p.measured_as == "spec_step" for p in rep.points)          # later stages still ran


@pytest.mark.slow
def test_a_partial_report_survives_a_crash_after_measuring(tmp_path, monkeypatch):
    from dsdsim.fit import validation

    def boom(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(validation, "calibrate_points", boom)
    with pytest.raises(KeyboardInterrupt):
        _tiny(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["partial"] is True and data["stage"] == "whole steps" and len(data["points"]) > 10


@pytest.mark.slow
def test_time_budget_skips_items_and_still_reports(tmp_path):
    rep = _tiny(tmp_path, time_budget_s=0.3)
    skipped = [e for e in rep.errors if "time budget" in e["error"]]
    assert skipped
    assert (tmp_path / "summary.md").exists()


@pytest.mark.slow
def test_gpu_script_full_path_on_cpu_produces_its_archive(tmp_path):
    out = tmp_path / "gpu-run"
    env = dict(os.environ, DSDSIM_DEVICE="cpu", DSDSIM_GPU_GRID="tiny", DSDSIM_GPU_SPEC="h100-sxm",
               DSDSIM_REDUCE="16", DSDSIM_DENSE_LAYERS="2", DSDSIM_MOE_LAYERS="2", DSDSIM_GPU_BUDGET_S="60",
               DSDSIM_PROBE_QUICK="1")
    r = subprocess.run(["bash", str(REPO / "scripts" / "validate_gpu.sh"), str(out)], capture_output=True,
                       text=True, env=env, timeout=600)
    log = (out / "log.txt").read_text()
    assert r.returncode == 0, log[-3000:]
    stages = dict(line.split() for line in (out / "stages.txt").read_text().splitlines())
    assert stages == {k: "0" for k in stages} and len(stages) == 7, log[-3000:]
    archive = Path(str(out) + ".tar.gz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for f in ("log.txt", "llama-3.1-8b/report.json", "llama-3.1-8b/summary.md", "qwen3-30b-a3b/report.json",
              "loop.json", "comm_check.json", "probe/h100-sxm@measured.yaml"):
        assert f"gpu-run/{f}" in names, (f, sorted(names))
    assert "preflight ok" in log and "[" in log


@pytest.mark.slow
def test_reanalyse_reproduces_the_predictions_and_refits(tmp_path):
    """Re-analysing a report with the same code re-predicts every point exactly from its operator records."""
    from dsdsim.bench.validate import reanalyse

    rep = _tiny(tmp_path / "a")
    again = reanalyse(tmp_path / "a" / "report.json", "h100-sxm", tmp_path / "b")
    before = {(p.kind, p.name, json.dumps(p.shape, sort_keys=True, default=str)): p.predicted_s for p in rep.points}
    for p in again.points:
        key = (p.kind, p.name, json.dumps(p.shape, sort_keys=True, default=str))
        assert p.predicted_s == pytest.approx(before[key], rel=1e-9)
    assert again.data["reanalysed"]["from"].endswith("report.json")
    assert (tmp_path / "b" / "summary.md").read_text().count("re-analysed") == 1
    # eager timing: the per-kernel cost stays with the operators (whole steps take the step overhead)
    assert again.data["calibration"]["per_kernel_cost_fitted_on"] == "operators"


def test_reanalyse_refuses_a_report_without_operator_records(tmp_path):
    from dsdsim.bench.validate import reanalyse

    old = REPO / "results" / "gpu-h200" / "run1-flat-roofline" / "llama-3.1-8b" / "report.json"
    with pytest.raises(ValueError, match="no operator records"):
        reanalyse(old, "h200-sxm")
