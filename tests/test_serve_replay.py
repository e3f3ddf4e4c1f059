"""Replaying a measured run (a ``vllm bench serve --save-result --save-detailed`` JSON): its requests, its arrival
times or arrival process, and its own latencies against the simulated ones."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.serve.simulate import simulate
from dsdsim.serve.workload import parse_workload
from test_serve_core import FakePricer


def sim(workload, policies="fixed:3", **kw):
    kw.setdefault("acceptance", 0.8)
    return simulate(None, workload, policies, pricer=FakePricer(), **kw)


def _result_file(path, run, times=True, **extra):
    """A vllm bench serve result written from one of dsdsim's own runs (``run``: a SimulationResult)."""
    p = run.policies[0]
    outs = [r.output_len for r in run.requests]
    obj = {"request_rate": extra.pop("request_rate", "inf"), "burstiness": 1.0, "max_concurrency": None,
           "input_lens": [r.input_len for r in run.requests], "output_lens": outs,
           "ttfts": [float(t) for t in p.ttft_s],
           "itls": [[float((e - t) / (o - 1))] * (o - 1) for t, e, o in zip(p.ttft_s, p.e2e_s, outs)],
           "errors": [""] * len(outs)}
    if times:
        obj["request_submit_times"] = [1e3 + r.arrival_s for r in run.requests]
        obj["request_complete_times"] = [1e3 + r.arrival_s + float(e) for r, e in zip(run.requests, p.e2e_s)]
    obj.update(extra)
    path.write_text(json.dumps(obj))
    return f"trace:{path}"


def test_replaying_a_run_the_simulator_made_gives_it_back(tmp_path):
    """The closed-form check: a run's own submit times, lengths and latencies, replayed on the same server, give
    every percentile and every request's latency back (error 0 to rounding)."""
    run = sim("poisson:30", requests=80, output_len="48", input_len="200")
    replay = sim(_result_file(tmp_path / "run.json", run), requests=None)
    vs = replay.to_dict()["policies"][0]["vs_measured"]
    for q in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert all(abs(e) < 1e-6 for e in vs[q]["rel_error"].values())
        assert vs[q]["per_request_median_abs_rel_error"] < 1e-6


def test_without_submit_times_the_runs_arrival_process_is_drawn_again(tmp_path):
    """vLLM's older results keep no submit times: a finite request_rate is replayed as its gamma process (vLLM's
    get_request: gaps of mean 1 / rate, first request at 0), ttft + sum(itls) as each request's e2e."""
    run = sim("poisson:30", requests=80, output_len="48", input_len="200")
    wl = parse_workload(_result_file(tmp_path / "old.json", run, times=False, request_rate=30.0))
    assert wl.trace.rate == 30.0 and "arrivals drawn at the run's 30 requests/s" in wl.describe()
    np.testing.assert_allclose(wl.trace.measured.e2e_s, run.policies[0].e2e_s, rtol=1e-9)
    replay = sim(wl.text, requests=None)
    gaps = np.diff([r.arrival_s for r in replay.requests])
    assert replay.requests[0].arrival_s == 0 and 1 / 60 < gaps.mean() < 1 / 15
    at_once = parse_workload(_result_file(tmp_path / "inf.json", run, times=False))
    assert at_once.trace.rate is None and not at_once.trace.arrival_s.any()


def test_failed_requests_leave_the_trace_and_its_latencies_together(tmp_path):
    run = sim("closed:4", requests=12, output_len="16", input_len="64")
    errors = [""] * 12
    errors[3] = "timeout"
    wl = parse_workload(_result_file(tmp_path / "err.json", run, errors=errors))
    assert wl.trace.input_len.size == wl.trace.measured.ttft_s.size == 11


@pytest.mark.parametrize("change, message", [
    ({"ttfts": [0.1]}, "ttfts must be a list with one number per request"),
    ({"request_rate": -2}, "request_rate must be a positive number"),
    ({"ttfts": [-0.1] * 12}, "ttft is negative"),
])
def test_a_bad_result_file_is_one_line(tmp_path, change, message):
    run = sim("closed:4", requests=12, output_len="16", input_len="64")
    with pytest.raises(DsdsimError, match=message):
        parse_workload(_result_file(tmp_path / "bad.json", run, times=False, **change))


def test_the_command_prints_simulated_against_measured(cli, tmp_path):
    run = simulate(None, "poisson:20", "fixed:3", pricer=FakePricer(), requests=30, output_len="32",
                   input_len="64", acceptance=0.8)
    wl = _result_file(tmp_path / "run.json", run)
    code, out, err = cli("simulate", "--workload", wl, "--policies", "fixed:3,fixed:1", "--executor", "local")
    assert code == 0, err
    text = " ".join(out.split())
    assert "Simulated against the run the trace measured" in text and "per request e2e |err|" in text
    code, out, err = cli("simulate", "--workload", wl, "--policies", "fixed:3", "-f", "json")
    vs = json.loads(out)["policies"][0]["vs_measured"]
    assert set(vs) == {"ttft_ms", "tpot_ms", "e2e_ms"}
    assert set(vs["e2e_ms"]) == {"measured", "simulated", "rel_error", "per_request_median_abs_rel_error"}


def test_a_replay_names_a_ttft_gap_and_the_request_overhead_that_closes_it(tmp_path):
    """A run whose requests reached its server 30 ms after they were sent (one at a time): replayed without that,
    the report names the TTFT gap and how to price it; replayed with it, the gap is gone and so is the line."""
    from dsdsim.export.serve import ttft_gap_line
    from dsdsim.serve.scheduler import SchedulerConfig

    run = sim("closed:1", requests=20, output_len="24", input_len="64",
              scheduler=SchedulerConfig(request_overhead_s=0.03))
    wl = _result_file(tmp_path / "run.json", run, times=False, max_concurrency=1)     # a closed loop of one
    plain = sim(wl, requests=None).to_dict()["policies"]
    line = ttft_gap_line(plain)
    assert len(line) == 1 and "fixed:3 30 ms" in line[0] and "--request-overhead-ms" in line[0]
    priced = sim(wl, requests=None, scheduler=SchedulerConfig(request_overhead_s=0.03)).to_dict()["policies"]
    assert abs(priced[0]["vs_measured"]["ttft_ms"]["rel_error"]["p50"]) < 1e-6
    assert ttft_gap_line(priced) == []
