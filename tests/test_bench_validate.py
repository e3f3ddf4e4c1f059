"""Probe the CPU, then validate the cost model against torch timings on it (the whole loop, --quick)."""
import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from dsdsim.specs.catalog import load_hardware  # noqa: E402


@pytest.fixture(scope="module")
def cpu_chain(cpu_measuring_chain):
    """The README's chain, run once a session: ``dsdsim probe --device cpu`` wrote my-cpu.yaml and
    ``dsdsim validate -m llama-3.1-8b -g my-cpu.yaml --device cpu --quick`` wrote out/."""
    folder, ran = cpu_measuring_chain
    assert len(ran) >= 2 and all(code == 0 for _, code, _ in ran[:2]), ran
    return folder


@pytest.fixture(scope="module")
def cpu_spec(cpu_chain):
    return cpu_chain / "my-cpu.yaml"


@pytest.mark.slow
def test_probe_spec_loads_and_simulates(cpu_spec):
    from dsdsim.cost.step import simulate_step

    hw = load_hardware(cpu_spec)
    assert hw.measured is not None and hw.measured.torch_version
    assert hw.memory_bandwidth_bytes_per_s.verified.value == "measured"
    assert hw.peak_flops_per_s  # at least fp32
    assert hw.link_bandwidth_bytes_per_s.verified.value == "unverified"   # one device: stated placeholder
    assert "dsdsim probe" in hw.memory_bandwidth_bytes_per_s.source
    step = simulate_step("llama-3.2-1b", hw, drafter="eagle3", batch=4, k=3, context=512)
    assert float(step.step_time_s) > 0


@pytest.mark.slow
def test_validate_quick_writes_a_complete_report(cpu_chain, cpu_spec, tmp_path):
    from dsdsim.fit.calibrate import run_calibrate

    paths = {key: cpu_chain / "out" / name for key, name in (("report", "report.json"), ("summary", "summary.md"),
             ("plot", "predicted_vs_measured.png"), ("calibrated_spec", "calibrated.yaml"))}
    for key in ("report", "summary", "plot", "calibrated_spec"):
        assert paths[key].exists() and paths[key].stat().st_size > 0
    data = json.loads(paths["report"].read_text())
    for key in ("model", "hardware", "device", "date", "torch_version", "reduced", "points", "summary", "calibration",
                "table_check"):
        assert key in data
    assert len(data["points"]) >= 20
    kinds = {p["kind"] for p in data["points"]}
    assert {"gemm", "attention", "elementwise", "logits", "step"} <= kinds
    for p in data["points"]:
        assert p["measured_s"] > 0 and p["predicted_s"] > 0 and p["calibrated_s"] > 0
        assert p["split"] in ("train", "test")
    s = data["summary"]
    for block in ("uncalibrated", "calibrated"):
        assert set(s[block]) >= {"n", "median_abs_pct_error", "mape", "max_abs_pct_error"}
    # Held-out error after calibration (fitted on the train half, scored on the other): the acceptance bar is
    # 25%. Attention KV reads and vector kernels (norms, sampling) reach a lower share of bandwidth than GEMM
    # weight streaming, and calibration fits a memory efficiency per class; with one shared efficiency this
    # CPU landed at 27-34%, with the three it lands near 20%.
    assert s["calibrated"]["median_abs_pct_error"] <= 25.0
    assert s["calibrated"]["median_abs_pct_error"] < s["uncalibrated"]["median_abs_pct_error"]
    tc = data["table_check"]
    assert 0.0 <= tc["mean_regret"] <= tc["max_regret"] <= 1.0
    for row in tc["per_batch"]:
        assert 0.0 <= row["regret_uncalibrated"] <= 1.0
    md = paths["summary"].read_text()          # regret is a percentage there, as every figure beside it
    assert f"Mean regret {100 * tc['mean_regret']:.2f}% of goodput (max {100 * tc['max_regret']:.2f}%)" in md
    # the report can be recalibrated from disk (the CLI path), giving the same fit
    spec, summary = run_calibrate(paths["report"], cpu_spec, tmp_path / "cal.yaml")
    assert load_hardware(tmp_path / "cal.yaml") == spec
    assert math.isclose(summary.calibrated.median_abs_pct_error, s["calibrated"]["median_abs_pct_error"],
                        rel_tol=1e-6)
