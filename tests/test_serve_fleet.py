"""Many replicas behind a router (simulate --replicas N --router): closed-form checks against one server."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.serve.fleet import ROUTERS, register_router
from dsdsim.serve.simulate import simulate
from test_serve_core import FakePricer


def run(workload, policies="none,fixed:3,oracle", replicas=1, router="round-robin", **kw):
    kw.setdefault("acceptance", 0.8)
    kw.setdefault("requests", 120)
    kw.setdefault("output_len", "64")
    kw.setdefault("input_len", "128")
    return simulate(None, workload, policies, pricer=FakePricer(), replicas=replicas, router=router, **kw)


class _First:
    def pick(self, loads, request):
        return 0


@pytest.fixture
def first_router():
    register_router("first", _First)
    yield "first"
    ROUTERS.pop("first")


@pytest.mark.parametrize("workload", ["poisson:40", "closed:8", "rollout"])
def test_a_fleet_whose_router_sends_everything_to_one_replica_is_that_server(first_router, workload):
    """The fleet's co-simulation with every request on replica 0 gives the one server's run exactly, and the other
    replica never steps: the fleet loop adds nothing of its own."""
    one = run(workload)
    two = run(workload, replicas=2, router=first_router)
    for a, b in zip(one.policies, two.policies):
        fleet = b.to_dict()
        reps = fleet.pop("replicas")
        assert fleet == a.to_dict()
        assert reps[0] == a.to_dict() and reps[1]["steps"] == 0


def test_n_replicas_of_n_closed_loops_are_n_servers():
    """A closed loop of 2C clients on 2 round-robin replicas against C clients on one: each replica holds C requests
    at a time, so its throughput is one server's and the fleet's twice it, at the same TPOT. Every draft accepted
    (α = 1) makes each request's run the same whichever draws it has: the two are equal, not only alike."""
    one = run("closed:8", requests=240, acceptance=1.0)
    two = run("closed:16", requests=480, replicas=2, acceptance=1.0)
    for a, b in zip(one.policies, two.policies):
        assert b.output_tokens_per_s == pytest.approx(2 * a.output_tokens_per_s, rel=1e-9)
        assert b.tpot_ms.p50 == pytest.approx(a.tpot_ms.p50, rel=1e-9)
        assert [int(np.sum(r.e2e_s > 0)) for r in b.replicas] == [240, 240]


def _trace(path, gap_s, n, lengths):
    rows = ["arrival_s,input_len,output_len"] + [f"{i * gap_s:.6f},{128},{lengths(i)}" for i in range(n)]
    path.write_text("\n".join(rows) + "\n")
    return f"trace:{path}"


def test_n_replicas_at_n_times_the_rate_are_one_server_at_the_rate(tmp_path):
    """Evenly spaced arrivals: round-robin hands each of N replicas every N-th request, so each sees one server's
    arrivals at 1/N of the rate: the same TTFT and TPOT (α = 1, as above), N times the request rate (to within the
    first two replicas' head start in the fleet's duration)."""
    one = run(_trace(tmp_path / "one.csv", 0.05, 100, lambda i: 64), requests=None, acceptance=1.0)
    three = run(_trace(tmp_path / "three.csv", 0.05 / 3, 300, lambda i: 64), requests=None, replicas=3,
                acceptance=1.0)
    for a, b in zip(one.policies, three.policies):
        assert b.requests_per_s == pytest.approx(3 * a.requests_per_s, rel=0.01)
        assert b.ttft_ms.p50 == pytest.approx(a.ttft_ms.p50, rel=1e-9)
        assert b.tpot_ms.p50 == pytest.approx(a.tpot_ms.p50, rel=1e-9)


def test_least_loaded_balances_what_round_robin_cannot(tmp_path):
    """Requests alternating long (400 tokens) and short (16): round-robin over 2 replicas gives one replica every
    long request; least-loaded sends by requests in flight and splits the work, so the fleet's e2e tail is
    shorter."""
    wl = _trace(tmp_path / "alt.csv", 0.02, 200, lambda i: 400 if i % 2 == 0 else 16)
    rr = run(wl, policies="fixed:3", requests=None, replicas=2).policies[0]
    ll = run(wl, policies="fixed:3", requests=None, replicas=2, router="least-loaded").policies[0]
    assert [int(np.sum(r.e2e_s > 0)) for r in rr.replicas] == [100, 100]   # the same count, not the same work
    assert ll.e2e_ms.p99 < rr.e2e_ms.p99
    assert ll.output_tokens_per_s >= 0.99 * rr.output_tokens_per_s


def test_bad_fleets_are_refused():
    with pytest.raises(DsdsimError, match="replicas must be in 1..1024"):
        run("closed:2", replicas=0)
    with pytest.raises(DsdsimError, match="unknown router 'rr'; use one of"):
        run("closed:2", router="rr")


def test_a_router_without_replicas_is_refused_before_any_work(cli, tmp_path):
    """--router on one server (simulate without --replicas, plan --simulate without --replicas or --fleet-qps) had
    nothing to pick from and was silently ignored; it is refused in one line naming the options that give it
    replicas, and nothing is written."""
    out_file = tmp_path / "run.json"
    code, out, err = cli("simulate", "--router", "least-loaded", "-o", str(out_file))
    assert code == 2 and "add --replicas N (N >= 2), or drop --router" in err and "Traceback" not in err
    assert not out_file.exists()
    code, out, err = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "--simulate",
                         "--router", "least-loaded")
    assert code == 2 and "add --replicas N (N >= 2) or --fleet-qps QPS" in err
    code, out, err = cli("simulate", "--requests", "8", "--workload", "closed:2", "--input-len", "32",
                         "--output-len", "8", "--policies", "none", "--router", "round-robin", "--replicas", "2")
    assert code == 0, err


def test_the_command_names_the_fleet_and_its_replicas(cli):
    argv = ("simulate", "--requests", "40", "--workload", "closed:8", "--input-len", "64", "--output-len", "32",
            "--replicas", "2", "--router", "least-loaded")
    code, out, err = cli(*argv, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert (d["replicas"], d["router"]) == (2, "least-loaded")
    for p in d["policies"]:
        assert len(p["replicas"]) == 2 and sum(r["requests_per_s"] * r["duration_s"] for r in p["replicas"]) > 0
        assert "replicas" not in p["replicas"][0]
    code, out, err = cli(*argv)
    text = " ".join(out.split())
    assert code == 0 and "2 replicas behind a least-loaded router" in text and "fleet: 2 replicas" in text
    code, out, err = cli(*argv, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and {(r["replicas"], r["router"]) for r in rows} == {("2", "least-loaded")}
    code, out, err = cli("simulate", "--requests", "20", "--sweep", "poisson:10,20", "--replicas", "2",
                         "--executor", "local")
    assert code == 0 and "2 replicas behind a round-robin router; workloads" in " ".join(out.split())
    code, out, err = cli("simulate", "--requests", "30", "--replicas", "2", "--router", "prefix-aware",
                         "--shared-prefix", "256:3", "--input-len", "32", "--output-len", "16")
    text = " ".join(out.split())
    assert code == 0, err
    assert "2 replicas behind a prefix-aware router" in text and "(3 shared prefixes of 256 tokens" in text


def test_plan_finds_the_fewest_replicas_for_a_rate(cli):
    """plan --simulate --fleet-qps: per policy, the fewest round-robin replicas meeting the SLO at the rate; the
    answer is checked here by simulating N and N - 1 replicas of the same jobs."""
    from dsdsim.serve.sweep import Simulation, meets, run_simulation
    from dsdsim.serve.scheduler import SchedulerConfig
    from dsdsim.specs.setup import resolve

    argv = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "--simulate", "--workload",
            "poisson:8", "--slo", "ttft=200,tpot=15", "--requests", "60", "--policies", "none,dsd",
            "--fleet-qps", "60", "--executor", "local")
    code, out, err = cli(*argv, "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    cand = d["candidates"][0]
    assert d["simulation"]["fleet_qps"] == 60 and len(d["simulation"]["fleet_searches"]) == 2
    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3")
    for policy in ("none", "dsd"):
        n = cand[f"replicas_for_qps_{policy}"]
        assert n is not None and n >= 1
        job = Simulation(setup, "poisson:60", policy, requests=60 * n, slo="ttft=200,tpot=15",
                         scheduler=SchedulerConfig(), replicas=n)
        assert meets(run_simulation(job).policies[0])
        if n > 1:
            fewer = Simulation(setup, "poisson:60", policy, requests=60 * (n - 1), slo="ttft=200,tpot=15",
                               scheduler=SchedulerConfig(), replicas=n - 1)
            assert not meets(run_simulation(fewer).policies[0])
    assert cand["replicas_for_qps_dsd"] <= cand["replicas_for_qps_none"]
    code, out, err = cli(*argv)
    assert code == 0 and "Replicas for 60 requests/s meeting the SLO" in " ".join(out.split())
    closed = [a if a != "poisson:8" else "closed:8" for a in argv]
    code, out, err = cli(*closed)
    assert code != 0 and "--fleet-qps needs an open-loop workload" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "--fleet-qps", "60")
    assert code != 0 and "--fleet-qps is for plan --simulate" in err


def test_plan_says_when_a_load_search_never_failed(cli):
    """A TPOT-only SLO over 30 requests is met at any rate (they all fit one batch): the note says what that means;
    with a TTFT target the search finds a failing load and the note stays silent."""
    argv = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "--simulate", "--workload",
            "poisson:8", "--policies", "none", "--executor", "local")
    code, out, err = cli(*argv, "--requests", "30")
    assert code == 0 and "a load met up to the largest tried" in " ".join(out.split())
    code, out, err = cli(*argv, "--requests", "60", "--slo", "ttft=200,tpot=15")
    assert code == 0 and "a load met up to the largest tried" not in " ".join(out.split())


def test_a_fleets_timeline_plot_draws_one_replica():
    """The fleet's merged steps interleave the replicas' batches; the timeline plot draws its first replica's."""
    from dsdsim.export.serve_plots import policy_timeline

    p = run("closed:8", "fixed:3", replicas=2).policies[0]
    t, b, k = policy_timeline(p)
    np.testing.assert_array_equal(t, p.replicas[0].timeline.t_end_s)
    np.testing.assert_array_equal(b, p.replicas[0].timeline.requests)
    assert p.timeline.t_end_s.size == sum(r.timeline.t_end_s.size for r in p.replicas) > t.size


def test_plan_simulate_takes_the_itl_target_from_the_slos_tpot(cli):
    """With --simulate, a --slo with a tpot is enough: the operating points are chosen under that ITL, the same plan
    as with --itl-slo-ms set to it; without either the command says what to add."""
    argv = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--simulate", "--workload", "poisson:8", "--policies",
            "none", "--executor", "local", "--requests", "30", "--slo", "ttft=200,tpot=15", "-f", "json")
    code, out, err = cli(*argv)
    assert code == 0, err
    code, out_given, err = cli(*argv, "--itl-slo-ms", "15")
    assert code == 0, err
    assert json.loads(out) == json.loads(out_given) and json.loads(out)["itl_slo_ms"] == 15


def test_plan_simulate_prices_and_says_a_request_overhead(cli):
    """plan --simulate --request-overhead-ms: its searches price it (a TTFT target is met at a lower rate, or no
    higher) and the note and the JSON say so; without it the JSON reads 0."""
    argv = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "--simulate", "--workload",
            "poisson:8", "--policies", "none", "--executor", "local", "--requests", "60", "--slo", "ttft=60,tpot=15")
    loads = {}
    for ms in ("0", "40"):
        code, out, err = cli(*argv, "--request-overhead-ms", ms, "-f", "json")
        assert code == 0, err
        sim = json.loads(out)["simulation"]
        assert sim["request_overhead_ms"] == float(ms)
        loads[ms] = sim["searches"][0]["max_load"] or 0.0
    assert loads["40"] < loads["0"]
    code, out, err = cli(*argv, "--request-overhead-ms", "40")
    assert code == 0 and "each reaching the scheduler 40 ms after it is sent" in " ".join(out.split())
