"""Engine specs: shipped files, the engine terms in a step, the reproducible corpus fit, and fitting an engine to a
user's few measured points (calibrate --measurements), with a synthetic engine of known figures as ground truth."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
from dsdsim.cost.engine import EngineParams
from dsdsim.cost.step import simulate_step
from dsdsim.specs.catalog import engine_names, load_engine
from dsdsim.specs.hardware import Verified

SHIPPED = ("ideal", "sglang", "trtllm", "vllm")


def test_shipped_engines_load_and_fitted_figures_name_their_train_cases():
    from dsdsim.corpus.schema import load_corpus

    assert set(SHIPPED) <= set(engine_names())
    train = {c.id for _, c in load_corpus() if c.split.value == "train"}
    for name in SHIPPED:
        spec = load_engine(name)
        fitted = [k for k in ("host_step_s", "host_per_sequence_s", "spec_fixed_s", "draft_pass_s",
                              "rejection_per_token_s") if spec.figure(k).verified is Verified.fitted]
        if name == "ideal":
            assert not fitted and spec.cuda_graphs.capture_sizes is None
            continue
        assert 2 <= len(fitted) <= 5, name
        for k in fitted:
            f = spec.figure(k)
            assert f.cases and set(f.cases) <= train, f"{name}.{k} is fitted on non-train cases"
            assert f.bounds[0] <= f.value <= f.bounds[1]
        assert spec.fit is not None and set(spec.fit.cases) <= train


def test_ideal_engine_is_the_kernels_and_engines_only_add_time():
    base = dict(model="llama-3.1-8b", hardware="h100-sxm", drafter="eagle3", batch=np.array([1, 8, 64, 200]), k=3)
    ideal = simulate_step(**base, engine="ideal")
    assert np.allclose(ideal.step_time_s, ideal.kernel_time_s)
    for name in ("vllm", "sglang", "trtllm"):
        assert np.all(simulate_step(**base, engine=name).step_time_s >= ideal.step_time_s * (1 - 1e-12))


def test_async_scheduling_hides_host_time_for_plain_steps_only():
    """vLLM PR #23569: plain steps hide host time behind device time; speculative steps pay it."""
    spec = load_engine("vllm")
    p = EngineParams.of(spec)
    plain = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 1, 0, engine=spec)
    spec_step = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 1, 3, engine=spec)
    assert float(plain.engine_time.host_exposed_s) == 0.0          # 0.5 ms host under a ~7 ms device step
    assert float(spec_step.engine_time.host_exposed_s) == pytest.approx(p.host_step_s + p.host_per_sequence_s)


def test_cuda_graph_padding_by_tokens_and_eager_beyond_the_largest_capture():
    spec = load_engine("vllm")            # captures by tokens up to 512
    s = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", np.array([3, 100, 200]), 3, engine=spec)
    assert list(s.verify_padded_tokens) == [16.0, 400.0, 800.0]     # 12 -> 16; 400 captured; 800 eager, unpadded
    assert list(s.verify_graphed) == [True, True, False]


def test_fit_script_is_reproducible():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "fit_engines.py"), "--check"],
                       capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_predict_json_names_the_engine(cli):
    code, out, err = cli("predict", "-b", "1,8", "--max-k", "3", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["engine"] == {"name": "vllm", "source": "engine_specs/vllm.yaml"}


def test_list_and_show_engines(cli):
    code, out, err = cli("list", "engines")
    assert code == 0 and all(n in out for n in SHIPPED), err
    code, out, err = cli("show", "engine", "vllm", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["name"] == "vllm" and d["spec_fixed_s"]["verified"] == "fitted"


# --- calibrate --measurements ------------------------------------------------------------------------------


TRUTH = dict(spec_fixed_s=1.2e-3, host_per_sequence_s=30e-6)   # the synthetic engine's figures (vLLM otherwise)


def _synthetic_points(pairs, noise=0.02, seed=0):
    """Step times of vLLM with TRUTH figures, per-token ITL at alpha 0.7, multiplied by up to +/-2% noise."""
    from dsdsim.calibrate_engine import MeasuredPoint
    from dsdsim.cost.step import resolve
    from dsdsim.policy.acceptance import constant

    rng = np.random.default_rng(seed)
    truth = load_engine("vllm").with_values(TRUTH, "synthetic truth", Verified.derived, name="truth")
    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", truth)
    out = []
    for b, k in pairs:
        t = float(simulate_step(None, None, batch=b, k=k, context=1024, setup=setup).step_time_s)
        al = float(constant(0.7).tau(k))
        out.append(MeasuredPoint(b, k, 1024, 1e3 * t / al * (1 + rng.uniform(-noise, noise)), al))
    return out


def test_six_points_predict_twenty_others_within_ten_percent():
    from dsdsim.calibrate_engine import EngineCalibration, merge_points

    train = merge_points([(p, "row") for p in _synthetic_points([(b, k) for b in (1, 16, 64) for k in (0, 3)])])
    cal = EngineCalibration("llama-3.1-8b", "h100-sxm", "vllm", None, "eagle3").fit(train)
    assert len(cal.loo_error_) == 6
    spec = cal.engine_spec("mine", ["synthetic.csv"], "2026-06-01")
    others = [(b, k) for b in (2, 4, 8, 24, 32) for k in (1, 2, 4, 5)]
    assert len(others) == 20
    for p in _synthetic_points(others, noise=0.0, seed=1):
        t = float(simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", p.batch, p.k, 1024, engine=spec)
                  .step_time_s)
        assert t * 1e3 == pytest.approx(p.step_ms, rel=0.10), (p.batch, p.k)


def _csv(tmp_path, rows, header="batch_size,k,context,itl_ms,acceptance_length"):
    path = tmp_path / "points.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


GOOD = ["1,0,1024,7.4,1", "16,0,1024,8.1,1", "64,0,1024,11.2,1", "1,3,1024,4.6,2.3", "16,3,1024,5.4,2.3"]


def test_calibrate_measurements_writes_a_spec_that_predict_picks_up(cli, tmp_path):
    out = tmp_path / "mine.yaml"
    code, stdout, err = cli("calibrate", "--measurements", _csv(tmp_path, GOOD), "--name", "mine", "-o", out,
                            "--date", "2026-06-01")
    assert code == 0, err
    assert "leave-one-out" in stdout and out.is_file()
    assert load_engine(out).name == "mine"
    code, stdout, err = cli("predict", "--engine", out, "-b", "1,8", "--max-k", "3", "--format", "json")
    assert code == 0, err
    assert json.loads(stdout)["engine"]["name"] == "mine"


def test_calibrate_reads_vllm_bench_and_sglang_results(tmp_path):
    from dsdsim.calibrate_engine import read_measurements

    vllm = tmp_path / "vllm.json"
    vllm.write_text(json.dumps({"max_concurrency": 16, "mean_tpot_ms": 5.4, "num_speculative_tokens": 3,
                                "spec_decode_acceptance_length": 2.3}))
    sglang = tmp_path / "sglang.jsonl"
    sglang.write_text("\n".join(json.dumps({"max_concurrency": b, "mean_tpot_ms": t, "accept_length": None})
                                for b, t in ((1, 7.4), (16, 8.1))) + "\n")
    pts = read_measurements([vllm, sglang], 2048)
    assert [(p.batch, p.k, p.context, p.step_ms) for p in pts] == [(1, 0, 2048, 7.4), (16, 0, 2048, 8.1),
                                                                   (16, 3, 2048, pytest.approx(12.42))]


@pytest.mark.parametrize("rows,fragment", [
    (GOOD[:2], "at least 3"),
    (GOOD[3:] + ["64,3,1024,8.9,2.3"], "no K = 0 point"),
    (GOOD + [GOOD[0]], "duplicate row"),
    (GOOD + ["1,0,1024,9.9,1"], "contradictory rows"),
    (GOOD + ["8,0,1024,0,1"], "itl_ms must be > 0"),
    (GOOD + ["8,3,1024,5.0,4.5"], "outside [1, K+1]"),
    (GOOD + ["8,0,1024,fast,1"], "itl_ms must be a number, got 'fast'"),
    (GOOD + ["8,0,1024,nan,1"], "itl_ms must be finite, got 'nan'"),
])
def test_calibrate_bad_input_one_line_exit_2_nothing_written(cli, tmp_path, rows, fragment):
    out = tmp_path / "mine.yaml"
    code, stdout, err = cli("calibrate", "--measurements", _csv(tmp_path, rows), "--name", "mine", "-o", out)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], err
    assert not out.exists()


def test_calibrate_refuses_a_shipped_name(cli, tmp_path):
    out = tmp_path / "vllm.yaml"
    code, _, err = cli("calibrate", "--measurements", _csv(tmp_path, GOOD), "--name", "vllm", "-o", out)
    assert code == 2 and "shipped engine spec" in err and not out.exists()
