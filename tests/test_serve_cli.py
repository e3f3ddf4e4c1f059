"""`dsdsim simulate` and `plan --simulate`: the documented JSON contract (docs/simulate.md), CSV columns, `-o -`,
one-line errors that write nothing, sweeps (one row per load and policy), executors that give the numbers an
in-process run gives, the load search, and the plots. Runs are small (tens of requests) so that each takes well
under a second."""
from __future__ import annotations

import csv
import io
import json
import math
import pickle

import pytest

from dsdsim.serve.sweep import (Bracket, Simulation, bracket_load, largest_loads, load_of, map_jobs, parse_loads,
                                simulate_many, sweep)

SMALL = ("--requests", "24", "--workload", "closed:8", "--input-len", "128", "--output-len", "48")
POLICY_KEYS = {"name", "output_tokens_per_s", "requests_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
               "goodput_requests_per_s", "mean_batch", "mean_acceptance_length", "k_histogram", "k_limited_steps",
               "batch_seconds", "preemptions", "duration_s",
               "steps", "kv_cache_tokens", "kv_cache_source", "kv_cache_rule", "kv_cache_memory_share"}
STATS = {"mean", "p50", "p90", "p99"}
CSV_COLUMNS = (["model", "hardware", "tp", "ep", "drafter", "engine", "expert_overlap", "workload", "max_concurrency",
                "requests", "seed",
                "replicas", "router", "policy", "output_tokens_per_s", "requests_per_s"]
               + [f"{lat}_{s}" for lat in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms") for s in ("mean", "p50", "p90",
                                                                                                "p99")]
               + ["goodput_requests_per_s", "mean_batch", "mean_acceptance_length", "k_histogram", "k_limited_steps",
                  "preemptions", "kv_cache_tokens", "duration_s", "steps"])


@pytest.fixture(scope="module")
def setup():
    from dsdsim.specs.setup import resolve

    return resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")


def _base(setup, workload="closed:4", policies="none,fixed:3,dsd", **kw) -> Simulation:
    values = dict(requests=20, input_len="128", output_len="40", seed=1)
    values.update(kw)
    return Simulation(setup, workload, policies, **values)


# --- the JSON contract, CSV, where output goes ------------------------------------------------------------------


def test_json_carries_the_documented_keys(cli):
    code, out, err = cli("simulate", *SMALL, "--executor", "local", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert set(d) == {"setup", "workload", "requests", "seed", "policies", "servers"}
    assert d["setup"] == {"model": "llama-3.1-8b", "hardware": "h100-sxm", "tp": 1, "ep": 1, "drafter": "eagle3",
                          "engine": "vllm >=0.29 (model runner V2)", "expert_overlap": 0.0}
    assert (d["workload"], d["requests"], d["seed"]) == ("closed:8", 24, 0)
    assert [p["name"] for p in d["policies"]] == ["none", "fixed:3", "dsd"]
    for p in d["policies"]:
        assert set(p) == POLICY_KEYS, set(p) ^ POLICY_KEYS
        for lat in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(p[lat]) == STATS and p[lat]["p50"] <= p[lat]["p99"]
        assert p["goodput_requests_per_s"] is None           # no SLO given
        assert sum(p["k_histogram"].values()) <= p["steps"] and p["output_tokens_per_s"] > 0
    assert set(d["policies"][0]["k_histogram"]) == {"0"}    # none never drafts
    assert err == ""                                          # JSON on stdout: no progress bar, no notes


def test_an_slo_gives_goodput_in_json_and_table(cli):
    code, out, _ = cli("simulate", *SMALL, "--executor", "local", "--format", "json", "--slo", "ttft=1e6,tpot=1e6")
    assert code == 0
    d = json.loads(out)
    for p in d["policies"]:                                   # every request meets a target nothing misses
        assert p["goodput_requests_per_s"] == pytest.approx(p["requests_per_s"])
    code, out, _ = cli("simulate", *SMALL, "--executor", "local", "--slo", "ttft=1e6,tpot=1e6")
    assert code == 0 and "goodput" in out and "SLO: ttft=1e6,tpot=1e6" in out


def test_csv_has_one_row_per_policy_and_flat_columns(cli):
    code, out, _ = cli("simulate", *SMALL, "--executor", "local", "--format", "csv", "--policies", "none,fixed:2")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == CSV_COLUMNS
    assert [r["policy"] for r in rows] == ["none", "fixed:2"]
    assert (rows[0]["ep"], rows[0]["replicas"], rows[0]["router"]) == ("1", "1", "")     # one server: no router
    assert rows[1]["k_histogram"].startswith(("0:", "2:")) and rows[0]["goodput_requests_per_s"] == ""
    assert float(rows[0]["ttft_ms_p50"]) <= float(rows[0]["ttft_ms_p99"])


def test_the_table_names_setup_workload_and_each_policy(cli):
    code, out, _ = cli("simulate", *SMALL, "--executor", "local")
    assert code == 0
    head = out.splitlines()[0]
    assert "llama-3.1-8b on h100-sxm" in head and "eagle3" in head and "closed:8" in head
    for name in ("none", "fixed:3", "dsd"):
        assert f" {name} " in out
    assert "0:100%" in out                                    # none's K histogram, compact


def test_output_dash_is_standard_output_and_a_file_is_written_whole(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("simulate", *SMALL, "--executor", "local", "--format", "json", "-o", "-")
    assert code == 0 and json.loads(out)["requests"] == 24
    assert not (tmp_path / "-").exists()
    code, out, err = cli("simulate", *SMALL, "--executor", "local", "-o", "run.csv")
    assert code == 0 and out == "" and "wrote run.csv" in err
    assert (tmp_path / "run.csv").read_text().startswith("model,hardware,tp,")   # the suffix picks the format


def test_the_kv_cache_is_sized_from_memory_or_given(cli):
    """By default the cache is what the memory share leaves (the plain server holds no drafter: a larger cache);
    --kv-cache-tokens and --num-gpu-blocks (x 16) give it, and a cache too small for the clients preempts."""
    code, out, err = cli("simulate", *SMALL, "--format", "json")
    sized = {p["name"]: (p["kv_cache_tokens"], p["kv_cache_source"]) for p in json.loads(out)["policies"]}
    assert sized["none"][0] > sized["fixed:3"][0] == sized["dsd"][0] > 100_000
    assert {source for _, source in sized.values()} == {"memory"}
    # 8 clients x (128 + 48 + drafts) tokens need some 100 blocks: 40 blocks preempt
    code, out, err = cli("simulate", *SMALL, "--num-gpu-blocks", "40", "--format", "json")
    small = json.loads(out)["policies"]
    assert code == 0 and {(p["kv_cache_tokens"], p["kv_cache_source"]) for p in small} == {(640, "given")}
    assert all(p["preemptions"] > 0 for p in small)
    code, out, err = cli("simulate", *SMALL, "--kv-cache-tokens", "647")
    assert code == 0 and "KV cache: none, fixed:3, dsd 640 tokens (as given)" in " ".join(out.split())



def test_vllms_flag_name_sets_the_memory_share(cli):
    """--gpu-memory-utilization (vLLM's own name) is --memory-utilization: the same cache, larger than the default
    share's; out of (0, 1] it is refused in one line naming both."""
    def tokens(*flags):
        code, out, _ = cli("simulate", *SMALL, *flags, "--format", "json")
        assert code == 0
        return {p["name"]: p["kv_cache_tokens"] for p in json.loads(out)["policies"]}

    theirs = tokens("--gpu-memory-utilization", "0.95")
    assert theirs == tokens("--memory-utilization", "0.95")
    assert all(theirs[name] > given for name, given in tokens().items())
    code, out, err = cli("simulate", *SMALL, "--gpu-memory-utilization", "1.5")
    assert code == 2 and out == "" and "--gpu-memory-utilization" in err and len(err.strip().splitlines()) == 1
def test_an_sglang_server_sizes_its_cache_by_mem_fraction_static(cli):
    """SGLang's share is its own default for the release unless --mem-fraction-static gives it; the JSON and the
    footer say which share and rule sized each server's cache."""
    code, out, err = cli("simulate", *SMALL, "-e", "sglang@0.5.4", "--format", "json")
    assert code == 0, err
    by_name = {p["name"]: p for p in json.loads(out)["policies"]}
    # (81,091 - 13,440) / 81,091 MiB: the spec's driver total of an H100 (SGLang reads nvidia-smi's 81,559: 0.835)
    assert by_name["none"]["kv_cache_memory_share"] == 0.834
    assert by_name["fixed:3"]["kv_cache_memory_share"] == 0.809     # + 2 GiB for the EAGLE drafter
    assert "SGLang 0.5.4" in by_name["none"]["kv_cache_rule"] and "default" in by_name["none"]["kv_cache_rule"]
    code, out, err = cli("simulate", *SMALL, "-e", "sglang@0.5.4", "--mem-fraction-static", "0.7")
    text = " ".join(out.split())
    assert code == 0 and " at 0.7 (SGLang 0.5.4: that share (mem_fraction_static, given)" in text, text
    code, out, err = cli("simulate", *SMALL, "--format", "json")
    vllm = json.loads(out)["policies"][0]
    assert vllm["kv_cache_memory_share"] == 0.9 and vllm["kv_cache_rule"].startswith("vLLM")


@pytest.mark.parametrize("argv", [
    ["--kv-cache-tokens", "100", "--num-gpu-blocks", "10"], ["--kv-cache-tokens", "0"], ["--kv-cache-tokens", "100"],
    ["--workload", "poison:3"], ["--workload", "closed:x"], ["--workload", "rollout:3"],
    ["--sweep", "rollout:1,2"], ["--sweep", "poisson:1,x"], ["--policies", "none,fixd:3"], ["--slo", "ttft=x"],
    ["--input-len", "abc"], ["--executor", "ssh://host"], ["--requests", "0"],
    ["--workload", "closed:4", "--sweep", "closed:1,2"], ["--mem-fraction-static", "0.8"],
    ["-e", "sglang", "--mem-fraction-static", "1.2"],
], ids=" ".join)
def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path, argv):
    target = tmp_path / "out.json"
    code, out, err = cli("simulate", "--requests", "10", *argv, "-o", str(target))
    assert code != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsdsim: error: "), err
    assert "Traceback" not in err
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_a_dask_executor_without_dask_names_the_extra(cli, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name.startswith("dask"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    code, _, err = cli("simulate", "--requests", "10", "--executor", "dask://127.0.0.1:8786")
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "pip install 'dsdsim[cluster]'" in err


def test_help_teaches_every_workload_with_an_example(cli):
    code, out, _ = cli("simulate", "--help")
    assert code == 0
    for form in ("closed:C", "poisson:QPS", "gamma:QPS:CV", "rollout", "trace:FILE"):
        assert form in out
    assert "dsdsim simulate --workload poisson:8" in " ".join(out.split())
    assert "dsdsim simulate --sweep" in " ".join(out.split())


# --- sweeps and executors ---------------------------------------------------------------------------------------


def test_a_sweep_of_two_loads_gives_two_rows_per_policy(cli):
    code, out, _ = cli("simulate", "--requests", "16", "--input-len", "128", "--output-len", "32", "--executor",
                       "local", "--sweep", "closed:2,4", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 2 * 3
    assert [(r["load"], r["workload"], r["policy"]) for r in rows] == [
        (str(c), f"closed:{c}", p) for c in (2, 4) for p in ("none", "fixed:3", "dsd")]
    code, out, _ = cli("simulate", "--requests", "16", "--input-len", "128", "--output-len", "32", "--executor",
                       "local", "--sweep", "poisson:20,5", "--format", "json", "--policies", "none")
    d = json.loads(out)
    assert d["sweep"] == {"kind": "poisson", "unit": "QPS", "values": [5.0, 20.0]}
    assert [x["workload"] for x in d["loads"]] == ["poisson:5", "poisson:20"]
    assert set(d["loads"][0]) == {"load", "workload", "requests", "seed", "policies"} and "setup" in d


def test_a_max_concurrency_holds_an_open_loop_and_its_sweep(cli, tmp_path):
    """--max-concurrency C with poisson (vllm bench serve --request-rate QPS --max-concurrency C): in the JSON, the
    CSV and the table's header, at every load of a sweep; refused in one line, nothing written, where the workload
    or the sweep is a closed loop."""
    small = ("--requests", "16", "--input-len", "128", "--output-len", "32", "--executor", "local", "--policies",
             "none")
    code, out, err = cli("simulate", *small, "--workload", "poisson:20", "--max-concurrency", "2", "-f", "json")
    assert code == 0, err
    assert (json.loads(out)["workload"], json.loads(out)["max_concurrency"]) == ("poisson:20", 2)
    code, out, _ = cli("simulate", *small, "--sweep", "poisson:5,20", "--max-concurrency", "2", "-f", "csv")
    assert code == 0
    assert [(r["workload"], r["max_concurrency"]) for r in csv.DictReader(io.StringIO(out))] == [
        ("poisson:5", "2"), ("poisson:20", "2")]
    code, out, _ = cli("simulate", *small, "--workload", "poisson:20", "--max-concurrency", "2")
    assert "Poisson arrivals at 20 requests/s, at most 2 in flight" in " ".join(out.split())
    code, out, _ = cli("simulate", *small, "--sweep", "poisson:5,20", "--max-concurrency", "2")
    assert "workloads poisson:5, poisson:20 (at most 2 in flight)" in " ".join(out.split())
    for args in (("--workload", "closed:8"), ("--sweep", "closed:2,4")):
        target = tmp_path / "never.json"
        code, _, err = cli("simulate", *small, *args, "--max-concurrency", "2", "-o", str(target))
        assert code == 2 and "a closed loop is its own limit" in err and len(err.strip().splitlines()) == 1
        assert not target.exists()


def test_the_sweep_table_has_a_row_per_load_and_policy(cli):
    code, out, _ = cli("simulate", "--requests", "16", "--input-len", "128", "--output-len", "32", "--executor",
                       "local", "--sweep", "closed:2,4", "--policies", "none,dsd")
    assert code == 0
    body = [line for line in out.splitlines() if line.startswith("│")]
    assert len(body) == 4 and body[0].split("│")[1].strip() == "2" and body[2].split("│")[1].strip() == "4"


def test_policies_simulated_apart_give_the_numbers_they_give_together(setup):
    """simulate draws every policy's requests and acceptance from the same seeded streams: one job per policy (what
    the executors run) reproduces one call with every policy."""
    from dsdsim.serve.simulate import simulate

    base = _base(setup, workload="poisson:6", policies="none,fixed:3,dsd,adaptive", slo="ttft=50,tpot=6")
    together = simulate(setup, "poisson:6", base.policies, requests=20, input_len="128", output_len="40", seed=1,
                        slo="ttft=50,tpot=6")
    apart = simulate_many(base, ["poisson:6"], executor="local")[0]
    assert apart.to_dict() == together.to_dict()


def test_the_process_executor_gives_the_in_process_numbers(setup):
    base = _base(setup)
    local = sweep(base, "closed:2,6", executor="local")
    pooled = sweep(base, "closed:2,6", executor="processes")
    assert pooled.to_dict() == local.to_dict()
    assert [p.load for p in pooled.points] == [2, 6]
    other_seed = sweep(_base(setup, seed=2), "closed:2,6", executor="local")
    assert other_seed.to_dict() != local.to_dict()            # the comparison can fail


def test_jobs_carry_their_setup_by_value(setup):
    """Spec objects pickle by value: a worker (a process, a dask worker) needs none of the spec files."""
    job = _base(setup)
    back = pickle.loads(pickle.dumps(job))
    assert back == job and back.setup.model.name == "llama-3.1-8b" and back.setup.drafter.label == "eagle3"


def test_a_failing_job_raises_its_error_here():
    from dsdsim.errors import DsdsimError

    with pytest.raises(DsdsimError, match="job 2"):
        map_jobs(_fails_on_two, [1, 2, 3], executor="processes")


def _fails_on_two(x, progress=None):
    from dsdsim.errors import DsdsimError

    if x == 2:
        raise DsdsimError("job 2 failed")
    return x


def test_local_jobs_report_progress_up_to_the_total():
    seen = []
    assert map_jobs(_fails_on_two, [1, 3], executor="local", progress=lambda d, t: seen.append((d, t))) == [1, 3]
    assert seen[-1] == (2, 2) and all(t == 2 for _, t in seen)


def test_a_dask_cluster_gives_the_in_process_numbers(setup):
    distributed = pytest.importorskip("dask.distributed")
    base = _base(setup, policies="none,dsd")
    with distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2, protocol="tcp",
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address.split("://", 1)[1]
        remote = sweep(base, "closed:2,6", executor=f"dask://{address}")
    assert remote.to_dict() == sweep(base, "closed:2,6", executor="local").to_dict()


# --- loads and the load search ------------------------------------------------------------------------------------


def test_sweep_texts_read_as_loads():
    g = parse_loads("gamma:4,1,2:2")
    assert (g.kind, g.values, g.cv, g.unit) == ("gamma", (1.0, 2.0, 4.0), 2.0, "QPS")
    assert g.workloads == ("gamma:1:2", "gamma:2:2", "gamma:4:2")
    assert parse_loads("closed:1,8").workloads == ("closed:1", "closed:8")
    assert (g.text, parse_loads("closed:8,1").text, parse_loads("poisson:0.5,2").text) == (
        "gamma:1,2,4:2", "closed:1,8", "poisson:0.5,2")          # the sweep as given, gamma's CV kept
    assert load_of("poisson:2.5")[1] == 2.5
    from dsdsim.errors import DsdsimError

    for bad in ("closed:1.5", "poisson:", "poisson:1,1", "poisson:-1", "gamma:1,2", "trace:x"):
        with pytest.raises(DsdsimError):
            parse_loads(bad)


@pytest.mark.parametrize("limit", [1, 7, 37, 64, 1000])
def test_the_search_finds_the_largest_whole_concurrency(limit):
    calls = []

    def ok(x):
        calls.append(x)
        return x <= limit

    b = bracket_load(ok, 8, whole=True, cap=500)
    if limit >= 500:
        assert b == Bracket(500, None, len(calls))
    else:
        assert (b.passing, b.failing) == (limit, limit + 1)
    assert len(calls) == b.simulations <= 2 * math.ceil(math.log2(500)) + 2
    assert all(c == int(c) and 1 <= c <= 500 for c in calls)


@pytest.mark.parametrize("limit", [0.3, 3.7, 41.0])
def test_the_search_brackets_a_rate_within_its_tolerance(limit):
    b = bracket_load(lambda x: x <= limit, 4.0, whole=False, rel_tol=0.05)
    assert b.passing <= limit < b.failing and b.failing / b.passing <= 1.05 + 1e-12
    assert b.simulations <= 12


def test_a_load_nothing_meets_is_none():
    b = bracket_load(lambda x: False, 8, whole=True)
    assert b.passing is None and b.failing == 1


def test_largest_loads_per_candidate_and_policy(setup):
    from dsdsim.specs.setup import resolve

    h200 = resolve("llama-3.1-8b", "h200-sxm", None, "eagle3", "vllm")
    base = _base(setup, workload="closed:2", slo="ttft=60,tpot=8")
    found = largest_loads([("h100", setup), ("h200", h200)], base, ["none", "fixed:3"], executor="local")
    assert [(x.candidate, x.policy) for x in found] == [("h100", "none"), ("h100", "fixed:3"), ("h200", "none"),
                                                        ("h200", "fixed:3")]
    for x in found:
        assert x.unit == "concurrency" and x.simulations >= 2
        assert x.load is None or isinstance(x.load, int)
        if x.load is not None and x.failing is not None:
            assert x.failing == x.load + 1


# --- plan --simulate ----------------------------------------------------------------------------------------------

PLAN = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30")
PLAN_SIM = ("--simulate", "--workload", "closed:4", "--requests", "16", "--input-len", "128", "--output-len", "32",
            "--policies", "none,dsd", "--slo", "ttft=100,tpot=8", "--executor", "local")


def test_plan_simulate_adds_a_column_per_policy(cli):
    code, out, _ = cli(*PLAN, "--format", "json")
    assert code == 0
    plain = json.loads(out)
    code, out, err = cli(*PLAN, *PLAN_SIM, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    cand = d["candidates"][0]
    added = set(cand) - set(plain["candidates"][0])
    assert added == {"max_concurrency_none", "max_concurrency_dsd"}
    assert {k: v for k, v in cand.items() if k not in added} == plain["candidates"][0]
    assert d["simulation"]["slo"] == "ttft=100,tpot=8" and len(d["simulation"]["searches"]) == 2
    code, out, _ = cli(*PLAN, *PLAN_SIM, "--format", "csv")
    header = out.splitlines()[0].split(",")
    assert header[-2:] == ["max_concurrency_none", "max_concurrency_dsd"]
    code, out, _ = cli(*PLAN, *PLAN_SIM)
    assert code == 0 and "Largest concurrency meeting the SLO" in out and "simulations" in out


def test_plan_without_simulate_is_unchanged_and_refuses_serving_options(cli):
    code, out, _ = cli(*PLAN, "--format", "csv")
    assert code == 0 and "max_" not in out
    code, out, err = cli(*PLAN, "--workload", "closed:4")
    assert code != 0 and "--workload is for plan --simulate" in err and out == ""


def test_plan_simulate_needs_a_load_to_search(cli):
    code, _, err = cli(*PLAN, "--simulate", "--workload", "rollout", "--requests", "8")
    assert code != 0 and "has no load to vary" in err
    # a client limit caps the load the search raises: every rate would pass (the search ran to 3.3e4 requests/s)
    code, out, err = cli(*PLAN, "--simulate", "--workload", "poisson:8", "--max-concurrency", "16", "--requests", "8")
    assert code == 2 and "--max-concurrency caps the load" in err and out == ""


# --- plots ----------------------------------------------------------------------------------------------------------


def test_plot_writes_a_titled_png_of_batch_and_k_over_time(cli, tmp_path, setup):
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    code, _, err = cli("simulate", *SMALL, "--executor", "local", "--plot", str(png), "--format", "json")
    assert code == 0 and f"wrote {png}" in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from dsdsim.export.serve import setup_line
    from dsdsim.export.serve_plots import TimelineDisplay, plot_title

    result = simulate_many(_base(setup), ["closed:4"], executor="local")[0]
    d = TimelineDisplay.from_result(result, plot_title(setup_line(setup), "closed:4")).plot()
    title = d.figure_._suptitle.get_text()
    for word in ("llama-3.1-8b", "h100-sxm", "eagle3", "closed:4"):
        assert word in title
    axes, twins = d.axes_
    assert len(axes) == 3 and all(a.get_ylabel() for a in axes) and axes[-1].get_xlabel()
    assert all(t.get_ylabel() == "K" for t in twins) and d.figure_.legends
    d.close()


def test_sweep_plot_draws_tpot_and_throughput_against_load(cli, tmp_path, setup):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    code, _, err = cli("simulate", "--requests", "16", "--input-len", "128", "--output-len", "32", "--executor",
                       "local", "--sweep", "poisson:4,16", "--plot", str(png), "--format", "csv")
    assert code == 0 and png.read_bytes()[:4] == b"\x89PNG"
    from dsdsim.export.serve_plots import SweepDisplay

    d = SweepDisplay.from_sweep(sweep(_base(setup, policies="none,dsd"), "poisson:4,16", executor="local"),
                                "title").plot()
    ax_t, ax_g = d.axes_
    assert "TPOT" in ax_t.get_ylabel() and "tokens/s" in ax_g.get_ylabel() and "requests/s" in ax_t.get_xlabel()
    labels = [t.get_text() for t in ax_t.get_legend().get_texts()]
    assert labels == ["none p50", "none p99", "dsd p50", "dsd p99"]
    assert ax_t.get_legend().get_bbox_to_anchor().x0 > ax_t.get_window_extent().x1 - 1   # beside the data
    d.close()


def test_a_gamma_sweep_plot_title_keeps_its_cv(cli, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import dsdsim.cli.simulate as sim

    seen = []
    monkeypatch.setattr(sim, "_save_plot", lambda display, plot: seen.append(display.title))
    code, _, err = cli("simulate", "--requests", "16", "--input-len", "128", "--output-len", "32", "--executor",
                       "local", "--sweep", "gamma:2,4:3", "--plot", str(tmp_path / "g.png"), "--format", "csv")
    assert code == 0, err
    assert len(seen) == 1 and "gamma:2,4:3 (one run per load)" in seen[0]


def test_a_plot_and_the_output_cannot_both_go_to_stdout(cli):
    code, _, err = cli("simulate", "--requests", "8", "--plot", "-")
    assert code != 0 and "both go to standard output" in err


def test_simulate_and_plan_help_load_neither_numpy_nor_the_simulator():
    from conftest import run_subprocess

    code = ("import sys\nfrom dsdsim.cli import main\nfor argv in (['simulate', '--help'], ['plan', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('LOADED', sorted(m for m in sys.modules if m == 'numpy' or m.startswith('dsdsim.serve.')))")
    r = run_subprocess("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "LOADED []"


def test_without_a_drafter_the_default_policy_is_none(cli):
    code, out, err = cli("simulate", *SMALL, "-d", "none", "--format", "json")
    assert code == 0, err
    assert [p["name"] for p in json.loads(out)["policies"]] == ["none"]
    code, _, err = cli("simulate", *SMALL, "-d", "none", "--policies", "fixed:3")
    assert code != 0 and "needs a drafter" in err


def test_the_k_histogram_prints_compact_shares():
    from dsdsim.export.serve import k_histogram_text

    assert k_histogram_text({"3": 48, "0": 12, "2": 40}) == "0:12% 2:40% 3:48%"
    assert k_histogram_text({0: 1, 3: 999}) == "0:<1% 3:>99%"
    assert k_histogram_text({0: 5}) == "0:100%" and k_histogram_text({}) == "-"


def test_the_table_never_cuts_a_figure_short(cli):
    """Eleven columns with goodput are wider than 140: the table widens instead of ending cells in an ellipsis."""
    code, out, err = cli("simulate", "--requests", "60", "--policies", "none,fixed:2,dsd,oracle,adaptive",
                         "--slo", "ttft=300,tpot=30")
    assert code == 0, err
    assert "…" not in out and "preempt" in out and "goodput" in out
