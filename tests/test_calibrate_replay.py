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
from dsdsim.fit.replay import fit_through_replay, replayable_runs, simulated_itl_ms
from dsdsim.fit.shape import ShapeCalibration, StepModel
from dsdsim.serve.simulate import simulate
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.setup import resolve

ENGINE = "vllm@0.10"
TRUE = np.array([0.8, 0.9, 1.3, 1.2, 1.0])
RUNS = [(1, 0), (8, 3), (32, 0), (32, 3), (64, 1), (96, 2)]


def _setup():
    return resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", ENGINE)


def _write_run(path, setup, b: int, k: int) -> None:
    """One closed-loop run of the 'real' server (TRUE figures), saved as vllm bench serve saves it."""
    model = StepModel(setup)
    server = model._at(setup if k else model.plain, TRUE)
    n = max(2 * b, 24)
    res = simulate(server, f"closed:{b}", "none" if k == 0 else f"fixed:{k}", requests=n,
                   input_len="uniform:200:1000", output_len="uniform:60:200", acceptance=0.7, seed=b * 10 + k)
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    setup = _setup()
    files = []
    for b, k in RUNS:
        f = d / f"run-b{b}-k{k}.json"
        _write_run(f, setup, b, k)
        files.append(f)
    return files


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
