"""Calibrating through the serving simulation (``calibrate --measurements RUN.json ... --replay``, dsdsim.fit.replay).

Ground truth: runs made by the simulator itself on a server whose figures are known (the shipped ones scaled:
bandwidth x0.8, compute x0.9, launch x1.3, per-step terms x1.2), written as ``vllm bench serve --save-result
--save-detailed`` results. Fitted on the steady model alone their replays miss by several percent (a closed loop's
ramp, drain and prefill mix are not a steady step); the replay rounds bring every run to within a few percent.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from dsdsim.fit.points import read_measurements
from dsdsim.fit.replay import fit_request_overhead, fit_through_replay, replayable_runs, simulated_itl_ms
from dsdsim.fit.shape import ShapeCalibration, StepModel
from dsdsim.serve.scheduler import SchedulerConfig
from dsdsim.serve.simulate import simulate
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.setup import resolve

ENGINE = "vllm@0.10"
TRUE = np.array([0.8, 0.9, 1.3, 1.2, 1.0])
RUNS = [(1, 0), (8, 3), (32, 0), (32, 3), (64, 1), (96, 2)]


def _setup():
    return resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", ENGINE)


def _write_run(path, setup, b: int, k: int, overhead_s: float = 0.0) -> None:
    """One closed-loop run of the 'real' server (TRUE figures; each request reaching it ``overhead_s`` after it is
    sent), saved as vllm bench serve saves it."""
    model = StepModel(setup)
    server = model._at(setup if k else model.plain, TRUE)
    n = max(2 * b, 24)
    res = simulate(server, f"closed:{b}", "none" if k == 0 else f"fixed:{k}", requests=n,
                   input_len="uniform:200:1000", output_len="uniform:60:200", acceptance=0.7, seed=b * 10 + k,
                   scheduler=SchedulerConfig(request_overhead_s=overhead_s))
    p = res.policies[0]
    ins = [r.input_len for r in res.requests]
    outs = [r.output_len for r in res.requests]
    obj = {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": b, "completed": n,
           "total_input_tokens": int(sum(ins)), "total_output_tokens": int(sum(outs)),
           "mean_tpot_ms": float(p.tpot_ms.mean), "input_lens": ins, "output_lens": outs,
           "ttfts": [float(t) for t in p.ttft_s],
           "itls": [[float((e - t) / (o - 1))] * (o - 1) for t, e, o in zip(p.ttft_s, p.e2e_s, outs)],
           "errors": [""] * n}
    if k:
        obj["spec_decode_acceptance_length"] = float(p.mean_acceptance_length)
    path.write_text(json.dumps(obj))


def _write_runs(d, points, overhead_s: float = 0.0) -> list:
    setup = _setup()
    files = []
    for b, k in points:
        f = d / f"run-b{b}-k{k}.json"
        _write_run(f, setup, b, k, overhead_s)
        files.append(f)
    return files


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _write_runs(tmp_path_factory.mktemp("runs"), RUNS)


def test_a_run_replayed_at_its_own_figures_gives_its_tpot_back(runs):
    """The closed form: the replay of a run on the server that made it is that run (same requests, seed 0 draws)."""
    setup = _setup()
    model = StepModel(setup)
    run = replayable_runs([runs[2]], 1024)[0]                   # batch 32, K = 0: no acceptance draws
    assert run.point.batch == 32 and run.point.k == 0
    assert simulated_itl_ms(model._at(model.plain, TRUE), run) == pytest.approx(run.point.itl_ms, rel=1e-9)


def test_the_replay_rounds_bring_every_run_to_its_measured_tpot(runs):
    setup = _setup()
    points = read_measurements(runs, 1024)
    cal = ShapeCalibration(setup).fit(points, leave_one_out=False)
    fit = fit_through_replay(cal, points, replayable_runs(runs, 1024))
    first, last = np.abs(fit.errors(0)), np.abs(fit.errors())
    assert len(fit.rounds) == 3 and fit.kept > 0
    assert np.median(first) > 0.03                   # the steady fit, replayed: several percent off
    assert np.median(last) < 0.5 * np.median(first) and last.max() < 0.05   # what is left: the steady fit's own residual
    assert fit.calibration.loo_error_                # the kept fit has its leave-one-out errors
    assert np.allclose(fit.calibration.factors_, fit.final.factors)
    # the README quotes these runs: its ranges are this test's
    text = " ".join((Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"steady fit's replays miss the measured mean TPOT by ([\d.]+)-([\d.]+)% and the replayed "
                       r"fit's by ([\d.]+)-([\d.]+)%", text)
    assert quoted, "the README no longer quotes the replay test's figures"
    got = [f"{100 * v:.1f}" for v in (first.min(), first.max(), last.min(), last.max())]
    assert list(quoted.groups()) == got


def test_calibrate_replay_cli_writes_a_spec_that_says_how_it_was_fitted(cli, runs, tmp_path):
    out = tmp_path / "mine.yaml"
    # one --measurements followed by every file, as a shell glob gives them
    code, stdout, err = cli("calibrate", "--measurements", *runs[1:4], "--replay", "-e", ENGINE, "--name", "mine",
                            "-o", out)
    assert code == 0, err
    assert "replayed through the serving simulation" in stdout and "run-b32-k3.json" in stdout
    spec = yaml.safe_load(out.read_text())
    assert spec["calibration"]["source"].startswith("dsdsim calibrate --measurements --replay (")
    assert "corrected by measured / replayed mean TPOT" in spec["fit"]["method"]


def test_replay_needs_runs_saved_with_their_requests(cli, tmp_path):
    csv = tmp_path / "points.csv"
    csv.write_text("batch_size,k,context,itl_ms,acceptance_length\n1,0,1024,7.5,1\n8,0,1024,8,1\n32,0,1024,10,1\n")
    code, _, err = cli("calibrate", "--measurements", csv, "--replay", "--name", "x", "-o", tmp_path / "x.yaml")
    assert code == 2 and "--save-detailed" in err and "Traceback" not in err
    assert not (tmp_path / "x.yaml").exists()
    code, _, err = cli("calibrate", "--replay", "--plan", "4")
    assert code == 2 and "--replay fits through the simulator the runs given with --measurements" in err


OVERHEAD_S = 0.04
SLOW = [(1, 0), (8, 3), (32, 0)]


@pytest.fixture(scope="module")
def slow_runs(tmp_path_factory):
    """Runs of a server whose requests reach the scheduler 40 ms after they are sent (its API server's time)."""
    return _write_runs(tmp_path_factory.mktemp("slow"), SLOW, OVERHEAD_S)


def test_the_request_overhead_is_fitted_from_the_runs_ttft(slow_runs, runs):
    """At the server's own figures the runs' TTFT p50 give its 40 ms back, and replayed with it each plain run's TTFT
    p50 is the measured one (a speculative run's replay draws its acceptance from another seed: near it); runs
    without one give none (the fit never goes below 0)."""
    setup = _setup()
    model = StepModel(setup)
    true = (model._at(setup, TRUE), model._at(model.plain, TRUE))
    timed = replayable_runs(slow_runs, 1024)
    assert all(r.ttft_p50_ms is not None for r in timed)
    fit = fit_request_overhead(true, timed)
    assert fit.overhead_ms == pytest.approx(1e3 * OVERHEAD_S, abs=1.0)
    text = " ".join((Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert f"at the server's own figures reads {fit.overhead_ms:.1f} ms" in text, "the README quotes this fit"
    for run, without, with_ in zip(fit.runs, fit.without_ms, fit.with_ms):
        assert with_ == pytest.approx(run.ttft_p50_ms, rel=2e-3 if run.point.k == 0 else 0.15)
        assert without < run.ttft_p50_ms - 30            # without it, every replay is the 40 ms short
    plain = fit_request_overhead(true, replayable_runs(runs[:3], 1024))
    assert plain.overhead_ms < 1.0


def test_calibrate_writes_the_request_overhead_and_simulate_prices_it(cli, slow_runs, tmp_path):
    out = tmp_path / "slow.yaml"
    code, stdout, err = cli("calibrate", "--measurements", *slow_runs, "--replay", "-e", ENGINE, "--name", "slow",
                            "-o", out)
    assert code == 0, err
    assert "request overhead" in stdout
    fitted = yaml.safe_load(out.read_text())["calibration"]["request_overhead_ms"]
    assert fitted == pytest.approx(1e3 * OVERHEAD_S, abs=5.0)      # at the calibrated figures, not the true ones
    text = " ".join((Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert f"at the calibrated figures {fitted:.1f} ms" in text, "the README quotes this fit"
    code, stdout, err = cli("simulate", "-e", out, "--workload", "closed:1", "--requests", "8", "--policies", "none",
                            "--format", "json")
    assert code == 0, err
    assert json.loads(stdout)["request_overhead_ms"] == pytest.approx(fitted)
