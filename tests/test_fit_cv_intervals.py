"""The generalization error and the intervals built from it.

Ground truth: split conformal prediction (Lei et al. 2018, "Distribution-free predictive inference for regression",
Sec. 2.2) keeps, of n sorted residuals, the floor((n + 1) a / 2)-th and ceil((n + 1)(1 - a / 2))-th for coverage
1 - a; leave-one-source-out means a source's cases are in no fit that predicts them. Both are checked by hand on
synthetic residuals and on the shipped corpus; the printed intervals are checked against measurements/intervals.json.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import median
from types import SimpleNamespace

import pytest

from dsdsim.fit.intervals import StepTimeIntervals
from dsdsim.policy.intervals import IntervalTable, batch_regime, engine_family

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = json.loads((ROOT / "measurements" / "intervals.json").read_text())


def _result(rel_error, engine="vllm", arch="dense", batch=4, quantity="itl_ms"):
    return SimpleNamespace(rel_error=rel_error, engine=engine, architecture=arch, batch_size=batch, quantity=quantity)


def test_split_conformal_ranks_by_hand():
    # 21 residuals log(measured / predicted) = -0.10, -0.09, ..., +0.10: coverage 0.8 keeps the 2nd and the 20th
    logs = [round(-0.10 + 0.01 * i, 2) for i in range(21)]
    results = [_result(math.exp(-r) - 1.0) for r in logs]     # rel_error = predicted / measured - 1
    iv = StepTimeIntervals(coverage=0.8).fit(results).interval("vllm", "dense", 4)
    assert iv.n == 21 and iv.stratum == "vllm/dense/1-8"
    assert iv.low == pytest.approx(math.exp(-0.09)) and iv.high == pytest.approx(math.exp(0.09))
    lo, hi = iv.of(10.0)
    assert lo == pytest.approx(10 * math.exp(-0.09)) and hi == pytest.approx(10 * math.exp(0.09))


def test_tokens_per_s_residuals_enter_with_the_opposite_sign():
    # a tokens/s prediction 10% too high is a step time 1/1.1 too short: the same residual as an ITL 1/1.1 too low
    a = StepTimeIntervals(min_cases=2).fit([_result(0.10, quantity="tokens_per_s")] * 3)
    b = StepTimeIntervals(min_cases=2).fit([_result(1 / 1.10 - 1, quantity="itl_ms")] * 3)
    assert a.interval("vllm", "dense", 4).low == pytest.approx(b.interval("vllm", "dense", 4).low)


def test_small_strata_fall_back_to_family_then_architecture_and_ratios_never_enter():
    results = ([_result(0.05, batch=4)] * 3 + [_result(-0.05, batch=32)] * 6
               + [_result(0.2, engine="sglang", arch="moe", batch=2)] * 9
               + [_result(5.0, quantity="speedup_vs_no_sd")] * 50)          # a ratio: never a residual
    iv = StepTimeIntervals(min_cases=8).fit(results)
    assert iv.interval("vllm", "dense", 4).stratum == "vllm/dense"          # 3 < 8 in the regime, 9 in the family
    assert iv.interval("vllm", "dense", 4).n == 9
    assert iv.interval("trtllm", "dense", 4).stratum == "dense"             # no trtllm cases: the architecture
    assert iv.interval("sglang", "moe", 2).stratum == "sglang/moe/1-8"
    assert iv.strata_["all"][2] == 18


def test_regimes_and_families():
    assert [batch_regime(b) for b in (1, 8, 9, 64, 65, 4096)] == ["1-8", "1-8", "9-64", "9-64", "65+", "65+"]
    assert [engine_family(n) for n in ("vllm", "vllm-mrv2", "sglang", "trtllm", "ideal", None, "my-vllm")] == \
        ["vllm", "vllm", "sglang", "trtllm", "ideal", "ideal", "ideal"]


def test_shipped_intervals_round_trip_and_have_enough_cases():
    iv = IntervalTable.from_dict(SHIPPED)
    assert iv.to_dict()["strata"] == SHIPPED["strata"]
    assert SHIPPED["coverage"] == 0.8 and SHIPPED["min_cases"] == 8
    for name, s in SHIPPED["strata"].items():
        assert s["low"] <= s["high"], name


# --- the printed intervals are the shipped factors times the prediction -------------------------------------


def _factors(stratum_label: str) -> tuple[float, float]:
    s = SHIPPED["strata"][stratum_label.split(" (n ")[0]]
    return s["low"], s["high"]


def test_predict_rows_carry_the_interval_of_their_stratum(cli):
    code, out, err = cli("predict", "-b", "1,16,128", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["intervals"]["coverage"] == 0.8
    for row in d["rows"]:
        label = {"1-8": "vllm/dense/1-8", "9-64": "vllm/dense/9-64", "65+": "vllm/dense/65+"}[
            batch_regime(row["batch_size"])]
        if label not in SHIPPED["strata"] or SHIPPED["strata"][label]["n"] < 8:
            label = "vllm/dense"
        lo, hi = _factors(label)
        assert row["step_ms_low"] == pytest.approx(row["step_ms"] * lo)
        assert row["step_ms_high"] == pytest.approx(row["step_ms"] * hi)
        assert row["itl_ms_low"] == pytest.approx(row["itl_ms"] * lo)
        # tokens/s is the inverse of the step time: its low end comes from the step's high end
        assert row["tokens_per_s_low"] == pytest.approx(row["tokens_per_s"] / hi)
        assert row["tokens_per_s_high"] == pytest.approx(row["tokens_per_s"] / lo)


def test_explain_and_plan_carry_intervals(cli):
    code, out, err = cli("explain", "-m", "qwen3-30b-a3b", "-g", "h200-sxm", "--batch", "16", "--k", "2",
                         "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    lo, hi = _factors(d["interval"].split(", ", 1)[1])
    assert d["interval"].startswith("80%, ")
    assert d["step_time_low_s"] == pytest.approx(d["step_time_s"] * lo)
    assert d["step_time_high_s"] == pytest.approx(d["step_time_s"] * hi)
    code, out, err = cli("plan", "-m", "llama-3.1-70b", "-g", "h100-sxm:tp4", "--itl-slo-ms", "30", "--format", "json")
    assert code == 0, err
    c = json.loads(out)["candidates"][0]
    assert c["itl_ms_dsd_low"] <= c["itl_ms_dsd_high"]
    assert c["tokens_per_s_per_gpu_dsd_low"] <= c["tokens_per_s_per_gpu_dsd_high"]
    code, out, _ = cli("predict", "-b", "1,16")
    assert "(80%: low-high)" in out and "held-out errors" in out


# --- leave one source out -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluation():
    from dsdsim.corpus.evaluate import evaluation as run

    return run()


def test_a_held_out_source_is_in_no_fit_that_predicts_it(evaluation):
    from dsdsim.fit.cv import source_of
    from dsdsim.fit.engine import EngineFit, fit_cases

    train = fit_cases(evaluation.cases, evaluation.steps)
    source = {c.id: source_of(cf) for cf, c in train}
    full = EngineFit().fit(evaluation.cases, evaluation.steps)
    used_full = {cid for ids in full.cases_.values() for cid in ids}
    fitted_sources = sorted({source[cid] for cid in used_full})
    assert len(fitted_sources) >= 5
    for held in fitted_sources[:2]:
        own = {cid for cid, src in source.items() if src == held}
        fit = EngineFit().fit(evaluation.cases, evaluation.steps, exclude_sources=(held,))
        used = {cid for ids in fit.cases_.values() for cid in ids}
        assert own & used_full and not (own & used)
        assert used == used_full - own


def test_accuracy_cv_json_contract(cli):
    code, out, err = cli("accuracy", "--cv", "source", "--format", "json")
    assert code == 0, err
    cv = json.loads(out)["cv"]
    sources = cv["sources"]
    assert len(sources) >= 10
    meds = [s["median_abs_rel_error"] for s in sources.values() if s["median_abs_rel_error"] is not None]
    assert cv["median_of_source_medians"] == pytest.approx(median(meds))
    for name, s in sources.items():
        errs = [abs(e) for e in s["cases"].values()]
        assert s["n"] == len(errs) and s["median_abs_rel_error"] == pytest.approx(median(errs), abs=1e-4), name
    # a test source is never fitted: holding it out changes nothing, its error is the in-sample one
    code, out, _ = cli("accuracy", "--format", "json")
    in_sample = {c["id"]: c["rel_error"] for c in json.loads(out)["cases"]}
    for s in sources.values():
        if s["split"] == "test":
            for cid, e in s["cases"].items():
                assert e == pytest.approx(in_sample[cid], abs=1e-4)
    assert cv["train"]["n"] + cv["test"]["n"] == cv["overall"]["n"]


def test_cv_refuses_a_forced_engine(cli):
    code, _, err = cli("accuracy", "--cv", "source", "--engine", "ideal")
    assert code == 2 and "--cv refits" in err and "Traceback" not in err
    code, _, err = cli("accuracy", "--cv", "case")
    assert code == 2 and "--cv source" in err
