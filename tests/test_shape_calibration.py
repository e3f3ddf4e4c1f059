"""The large-batch calibration (dsdsim.fit.shape), the plan of points to measure, the readers of measured points, the
margins of a K table and the robust pick (dsdsim.policy.margin): each held against numbers worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path
import math

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.fit import shape
from dsdsim.fit.points import MeasuredPoint, point_from_result, read_measurements
from dsdsim.specs.catalog import load_hardware, load_engine
from dsdsim.specs.setup import resolve


# --- the hardware and engine factors --------------------------------------------------------------------------


def test_scaled_hardware_multiplies_each_class_and_stops_fractions_at_one():
    hw = load_hardware("h100-sxm")
    s = hw.scaled(bandwidth=1.1, compute=0.5, launch=2.0)
    # 0.837 (the fitted bf16 GEMM bandwidth) x 1.1 = 0.9207; decode attention 0.892 x 1.1 = 0.981, x 1.2 = 1.07
    # stops at 1
    assert s.kernels.gemm["bf16"].bandwidth_fraction.value == pytest.approx(
        hw.kernels.gemm["bf16"].bandwidth_fraction.value * 1.1)
    assert s.kernels.decode_attention_bandwidth_fraction.value == pytest.approx(
        hw.kernels.decode_attention_bandwidth_fraction.value * 1.1)
    assert hw.scaled(bandwidth=1.2).kernels.decode_attention_bandwidth_fraction.value == 1.0
    assert s.efficiency.memory.value == pytest.approx(0.88 * 1.1)
    assert s.efficiency.compute.value == pytest.approx(0.803 * 0.5)
    assert s.kernels.gemm["fp8"].compute_fraction.value == pytest.approx(
        hw.kernels.gemm["fp8"].compute_fraction.value * 0.5)
    assert s.launch_overhead_s.value == pytest.approx(4e-6) and s.eager_launch_overhead_s.value == pytest.approx(2e-5)
    assert hw.scaled() is not hw and hw.scaled() == hw


def test_engine_term_factors_multiply_the_terms_by_what_they_are_paid_per():
    from dsdsim.specs.engine import EngineCalibration, EngineParams

    base = load_engine("vllm@0.10.1")
    cal = EngineCalibration(model="m", hardware="h", base_engine=base.name, engine_step_scale=2.0,
                            engine_token_scale=0.5, source="test", date="2026-12-01")
    a = EngineParams.of(base, drafter_kind="eagle3")
    b = EngineParams.of(base.model_copy(update={"calibration": cal}), drafter_kind="eagle3")
    # coefficients per (step, sequence, token, draft_pass, layer): step-like x2, sequence and token x0.5
    sa, sb = a.speculative.host_s, b.speculative.host_s
    assert sb[0] == pytest.approx(2 * sa[0]) and sb[3] == pytest.approx(2 * sa[3])
    assert sb[1] == pytest.approx(0.5 * sa[1]) and sb[2] == pytest.approx(0.5 * sa[2])


def test_an_engine_spec_with_a_calibration_scales_the_hardware_where_it_is_used():
    from dsdsim.specs.engine import EngineCalibration

    base = load_engine("vllm")
    cal = EngineCalibration(model="llama-3.1-8b", hardware="h100-sxm", base_engine="vllm", compute_scale=0.5,
                            source="test", date="2026-12-01")
    s = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", base.model_copy(update={"calibration": cal}))
    shipped = load_hardware("h100-sxm")
    assert s.hardware.kernels.gemm["bf16"].compute_fraction.value == pytest.approx(
        0.5 * shipped.kernels.gemm["bf16"].compute_fraction.value)
    assert "calibrated engine spec" in s.hardware.kernels.gemm["bf16"].compute_fraction.source


# --- the MAP fit, against closed forms -----------------------------------------------------------------------


class _PowerModel:
    """log T_i = log T0_i + sum_j J_ij log f_j: the sensitivities are J exactly (a stand-in for the cost model)."""

    def __init__(self, t0, J):
        self.t0, self.J = np.asarray(t0, dtype=float), np.asarray(J, dtype=float)

    def step_s(self, factors, *arrays):
        idx = np.asarray(arrays[0], dtype=int)
        return self.t0[idx] * np.exp(self.J[idx] @ np.log(np.asarray(factors, dtype=float)))

    def sensitivities(self, *arrays):
        return self.J[np.asarray(arrays[0], dtype=int)]


def _points(model, factors, idx):
    t = model.step_s(np.asarray(factors), np.asarray(idx))
    return [MeasuredPoint(int(i), 0, 0, float(1e3 * ti), 1.0) for i, ti in zip(idx, t)]


def test_map_shrinks_a_small_offset_towards_the_prior_by_the_precisions():
    """Six points that all see only the bandwidth (T ~ 1 / bandwidth), measured 1% slower than the prior: in the
    quadratic regime of the soft-L1 loss, log f = d n/s_m^2 / (n/s_m^2 + 1/s_p^2) with d = -log(1.01), n = 6,
    s_m = 0.05, s_p = 0.10: the weights 2400 and 100 give log f = 0.96 d."""
    J = np.zeros((6, 5))
    J[:, 0] = -1.0
    model = _PowerModel(np.full(6, 0.01), J)
    pts = _points(model, [1 / 1.01, 1, 1, 1, 1], range(6))
    prior = np.array([0.5, 0.5, 2e-6, 1.0, 1.0])
    x, _ = shape.map_fit(model, pts, prior)
    d = math.log(1 / 1.01)
    assert x[0] == pytest.approx(d * 2400 / 2500, rel=2e-3)
    assert np.allclose(x[1:], 0.0, atol=1e-6)          # figures no point sees stay at their priors


def test_a_figure_the_points_push_past_its_bound_stops_on_the_bound_and_says_so():
    """Points 40% faster than the shipped bandwidth allows: the fraction (prior 0.837) would need 1.17 of the peak,
    so it stops at 1.0 and is reported on its high bound (table and warning)."""
    J = np.zeros((6, 5))
    J[:, 0] = -1.0
    model = _PowerModel(np.full(6, 0.01), J)
    prior = np.array([0.837, 0.5, 2e-6, 1.0, 1.0])
    pts = _points(model, [1.4, 1, 1, 1, 1], range(6))
    x, jac = shape.map_fit(model, pts, prior)
    figs = shape._figures(prior, x, jac, model, pts)
    assert figs[0].value == pytest.approx(1.0) and figs[0].on_bound == "high"
    assert all(f.on_bound is None for f in figs[1:])


def test_the_plan_picks_the_points_that_inform_the_unknown_figures():
    """Three candidates: A sees only the bandwidth, B only the compute, C both at a tenth. The first pick maximises
    log(1 + J_i S J_i^T / s_m^2) with S the prior covariance: A gives log(1 + 0.1^2 / 0.05^2) = log 5, B (compute,
    prior 0.3) log(1 + 36) = log 37, C log(1 + (0.01 + 0.09) ... ) smaller: B first, then A."""
    J = np.zeros((3, 5))
    J[0, 0] = -1.0
    J[1, 1] = -1.0
    J[2, :2] = -0.1
    model = _PowerModel(np.full(3, 0.01), J)
    plan = shape.plan_points(model, 2, np.arange(3.0), np.zeros(3), np.zeros(3))
    assert [p.batch for p in plan.points] == [0, 1]
    assert plan.points[1].informs == "compute" and plan.points[0].informs == "bandwidth"
    # the posterior width of the bandwidth: 1 / sqrt(1/0.1^2 + 1/0.05^2) = 0.0447
    assert plan.posterior_sigma["bandwidth"] == pytest.approx(1 / math.sqrt(100 + 400), rel=1e-9)


def test_the_plan_uses_at_most_three_servers():
    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")
    model = shape.StepModel(setup)
    plan = shape.plan_points(model, 8, *shape.candidate_grid(model, 8, 1024))
    ks = {p.k for p in plan.points}
    assert len(plan.points) == 8 and len(ks) <= 3 and 0 in ks


# --- measured points: three kinds of file --------------------------------------------------------------------


def test_readers_take_vllm_json_sglang_jsonl_and_csv_with_their_lengths(tmp_path):
    vllm = tmp_path / "dsdsim-b64-k3.json"
    vllm.write_text(json.dumps({"max_concurrency": 64, "mean_tpot_ms": 9.0, "completed": 100,
                                "total_input_tokens": 89600, "total_output_tokens": 25600,
                                "spec_decode_acceptance_length": 2.5,
                                "num_speculative_tokens": 3}))
    sglang = tmp_path / "dsdsim-b16-k2.jsonl"      # bench_serving records no K: the file name carries it
    sglang.write_text(json.dumps({"max_concurrency": 16, "mean_tpot_ms": 6.0, "accept_length": 2.1, "completed": 50,
                                  "total_input_tokens": 50 * 500, "total_output_tokens": 50 * 100}) + "\n")
    csv = tmp_path / "points.csv"
    csv.write_text("batch_size,k,context,itl_ms,acceptance_length,input_len,output_len\n1,0,900,7.0,1,800,200\n")
    pts = {(p.batch, p.k): p for p in read_measurements([vllm, sglang, csv], 1024)}
    # 896 prompt tokens + half of 256 output tokens: context 1024
    assert pts[64, 3].context == 1024 and pts[64, 3].input_len == 896 and pts[64, 3].output_len == 256
    assert pts[64, 3].step_ms == pytest.approx(22.5)
    assert pts[16, 2].k == 2 and pts[16, 2].context == 550 and pts[16, 2].acceptance_length == 2.1
    assert pts[1, 0].input_len == 800 and pts[1, 0].context == 900
    # TensorRT-LLM's benchmark_serving: its acceptance length, and K from the file name
    trt = tmp_path / "dsdsim-b8-k3.json"
    p = point_from_result(trt, {"max_concurrency": 8, "mean_tpot_ms": 4.0, "mean_avg_decoded_tokens_per_iter": 2.6},
                          1024)
    assert (p.k, p.acceptance_length) == (3, 2.6) and p.step_ms == pytest.approx(10.4)
    # a speculative run without one is refused, where it had been read as 1 token a step
    with pytest.raises(DsdsimError, match="at K = 3 reports no acceptance length"):
        point_from_result(trt, {"max_concurrency": 8, "mean_tpot_ms": 4.0}, 1024)


def test_a_benchmark_point_pays_the_prefills_of_the_requests_that_replace_finished_ones():
    """A closed loop of B clients with outputs of O tokens emits B tau / O new requests per step: the mean step is
    the decode step plus that many times what one prompt adds to a step (the serving simulation's mixed step)."""
    from dsdsim.cost.mixed import MixedPricer

    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")
    model = shape.StepModel(setup)
    ones = np.ones(5)
    decode = model.step_s(ones, [64], [3], [1024])[0]
    mean = model.step_s(ones, [64], [3], [1024], [2.5], [896], [256])[0]
    extra = shape._prefill_extra_s(MixedPricer(setup), 64, 3, 1024, 896)
    assert extra > 0
    assert mean == pytest.approx(decode + 64 * 2.5 / 256 * extra, rel=1e-12)


# --- the margins and the robust pick --------------------------------------------------------------------------


def test_ratio_bounds_and_gains_by_hand():
    """T0 = 10 ms, T_K = 13 ms (extra time x = 0.3), f in [0.5, 2]: the step lies in 10 (1 + 0.3 [0.5, 2]) =
    [11.5, 16] ms; with tau 2 the gain 20 / 13 = 1.54 lies in [20 / 16, 20 / 11.5] = [1.25, 1.74]."""
    from dsdsim.policy.margin import ratio_bounds

    lo, hi = ratio_bounds(np.array([[13.0]]), np.array([10.0]), 0.5, 2.0)
    assert lo[0, 0] == pytest.approx(11.5) and hi[0, 0] == pytest.approx(16.0)


def test_robust_prefers_the_k_whose_low_end_is_higher():
    """K = 1: tau 1.6, T 11 (x 0.1) -> point gain 1.455, low end 16 / 12 = 1.333; K = 3: tau 2.2, T 13.5 (x 0.35)
    -> point 1.630 (the point estimate's pick), low end 22 / 17 = 1.294: the robust rule picks K = 1."""
    from dsdsim.policy.goodput import goodput
    from dsdsim.policy.margin import ratio_bounds

    step = np.array([[10.0], [11.0], [13.5]])
    tau = np.array([1.0, 1.6, 2.2])
    _, hi = ratio_bounds(step, np.array([10.0]), 0.5, 2.0)
    point = goodput(np.array([[1.0]]), tau[:, None], step, np.ones_like(step, dtype=bool))
    low = goodput(np.array([[1.0]]), tau[:, None], hi, np.ones_like(step, dtype=bool))
    assert int(np.argmax(point[:, 0])) == 2 and int(np.argmax(low[:, 0])) == 1
    assert low[1, 0] * 10 == pytest.approx(16 / 12) and low[2, 0] * 10 == pytest.approx(22 / 17)


def test_predict_says_which_rule_chose_each_range():
    import dsdsim

    p = dsdsim.predict(robust=True, batch_sizes="1-256")
    if p.intervals is None or p.intervals.extra_time is None:
        pytest.skip("no extra-time intervals shipped")
    m = p.margins()
    assert m and all("robust" in x.chosen_by for x in m)
    assert any("robust" in n for n in p.notes)
    q = dsdsim.predict(batch_sizes="1-256")
    assert all(x.chosen_by.startswith("the point estimate") for x in q.margins())
    for x in q.margins():
        if x.gain is not None:
            assert x.gain_low <= x.gain <= x.gain_high


# --- which model runner a vLLM release prices ---------------------------------------------------------------


@pytest.mark.parametrize("engine,model,spec", [
    ("vllm", "llama-3.1-8b", "vllm-0.29"),           # 0.29 on: model runner V2 for every model (PR #53183)
    ("vllm", "qwen3-30b-a3b", "vllm-0.29"),
    ("vllm@0.26", "llama-3.1-8b", "vllm-mrv2"),      # 0.25-0.28: V2 for dense models (PR #44443)
    ("vllm@0.26", "qwen3-30b-a3b", "vllm-0.24"),     # ... MoE stays on V1
    ("vllm@0.26", "deepseek-v2-lite", "vllm-mrv2"),  # ... unless its architecture is listed (DeepseekV2ForCausalLM)
    ("vllm@0.27", "nemotron-h-8b", "vllm-0.24"),     # ... hybrid stays on V1
    ("vllm@0.24", "llama-3.1-8b", "vllm-0.24"),      # 0.24: a K table is not supported on V2
    ("vllm@0.14", "llama-3.1-8b", "vllm-0.14-0.23"),
])
def test_vllm_prices_the_runner_the_release_uses_by_default(engine, model, spec):
    """docs/engine_graphs.md section 1.4, read in vllm/config/vllm.py of v0.24.0, v0.25.0, v0.28.0 and v0.29.0."""
    s = resolve(model, "h100-sxm", None, "eagle3", engine)
    assert s.engine_source == f"engine_specs/{spec}.yaml"


def test_a_stated_runner_overrides_the_default_and_ngram_stays_on_v1():
    s = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm@0.26", model_runner="v1")
    assert s.engine.runner == "v1"
    s = resolve("llama-3.1-8b", "h100-sxm", None, "ngram", "vllm@0.26")
    assert s.engine.runner == "v1"                  # n-gram drafting is unsupported on model runner V2


def test_predict_names_the_runner(cli):
    code, out, err = cli("predict", "-b", "1,8", "--max-k", "3")
    assert code == 0, err
    assert "(model runner V2)" in out.splitlines()[0]


def test_accuracy_cv_points_json_contract(cli):
    code, out, err = cli("accuracy", "--cv", "points:6", "--format", "json")
    assert code == 0, err
    cv = json.loads(out)["cv"]
    assert cv["points"], "the corpus holds source grids of >= 8 points"
    for grid in cv["points"].values():
        assert {"median_abs_rel_error", "regret_mean", "regret_max"} <= set(grid)
        assert len(grid["calibrated_on"]) == 6 and grid["n_points"] >= 8
    # the README's table of these grids quotes them as printed (a stale row fails here): a row's "vLLM 0.23" names
    # the grid whose setup runs vllm@0.23
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in readme.splitlines()
            if ln.startswith(("| batch axis, vLLM", "| context K sweep, vLLM"))]
    assert len(rows) == len(cv["points"])
    pct = lambda x: f"{100 * x:.1f}%"                                          # noqa: E731
    for label, held, calibrated, shipped, regret, regret_shipped in rows:
        version = label.split("vLLM ")[1].split()[0].rstrip(",")
        (grid,) = [g for g in cv["points"].values() if f"vllm@{version}" in g["setup"]]
        assert held == f"{grid['n_points'] - 6} of {grid['n_points']}"
        assert calibrated == f"{pct(grid['median_abs_rel_error'])} / {pct(grid['max_abs_rel_error'])}"
        assert shipped == pct(grid["uncalibrated_median_abs_rel_error"])
        assert regret == f"{pct(grid['regret_mean'])} / {pct(grid['regret_max'])}"
        assert regret_shipped == f"{pct(grid['uncalibrated_regret_mean'])} / {pct(grid['uncalibrated_regret_max'])}"
    code, out, err = cli("accuracy", "--cv", "points:x")
    assert code == 2 and "--cv points:N" in err


def test_calibrate_plan_prints_and_writes_the_command_lines(cli, tmp_path):
    out = tmp_path / "plan.json"
    code, stdout, err = cli("calibrate", "--plan", "6", "-o", out)
    assert code == 0, err
    plan = json.loads(out.read_text())
    assert len(plan["points"]) == 6 and len({p["k"] for p in plan["points"]}) <= 3
    runs = [r for s in plan["servers"] for r in s["runs"]]
    assert len(runs) == 6 and all("--max-concurrency" in r and "--save-result" in r for r in runs)
    assert all(f"num_speculative_tokens={p['k']}" in stdout for p in plan["points"])
    assert "dsdsim calibrate --measurements" in stdout and "greedy D-optimal" in stdout
    code, stdout, err = cli("calibrate", "--plan", "4", "-e", "sglang", "-m", "qwen3-8b", "-g", "h200-sxm")
    assert code == 0, err
    assert "sglang.bench_serving" in stdout and "--speculative-num-steps" in stdout
    code, _, err = cli("calibrate", "--plan", "0")
    assert code == 2 and "at least 1 point" in err


def test_calibrate_plan_writes_tensorrt_llm_servers_and_their_speculative_config(cli, tmp_path):
    """-e trtllm: trtllm-serve with the speculative_config in a YAML file the script writes before the server
    (decoding_type and draft length as TensorRT-LLM's llm_args.py names them), TensorRT-LLM's benchmark_serving as
    the client, the file name carrying K; never vllm serve."""
    out = tmp_path / "plan.json"
    code, stdout, err = cli("calibrate", "--plan", "4", "-e", "trtllm", "-o", out)
    assert code == 0, err
    assert "vllm serve" not in stdout and "trtllm-serve meta-llama/Llama-3.1-8B --backend pytorch" in stdout
    plan = json.loads(out.read_text())
    for srv in plan["servers"]:
        if srv["k"] == 0:
            assert "config_file" not in srv and "--extra_llm_api_options" not in srv["server"]
            continue
        name, text = srv["config_file"]["name"], srv["config_file"]["text"]
        assert srv["server"].endswith(f"--extra_llm_api_options {name}") and name == f"dsdsim-k{srv['k']}.yml"
        assert text == (f"speculative_config:\n  decoding_type: Eagle3\n  max_draft_len: {srv['k']}\n"
                        "  speculative_model: DRAFT_MODEL\n")
        assert f"cat > {name} <<'EOF'" in stdout
        for run in srv["runs"]:
            assert run.startswith("python -m tensorrt_llm.serve.scripts.benchmark_serving")
            assert f"-k{srv['k']}.json" in run and "--ignore-eos" in run
    code, stdout, err = cli("calibrate", "--plan", "3", "-e", "trtllm", "-m", "deepseek-v3", "-g", "h200-sxm",
                            "--tp", "8", "-d", "mtp")
    assert code == 0, err
    assert "decoding_type: MTP" in stdout and "num_nextn_predict_layers:" in stdout and "--tp_size 8" in stdout
