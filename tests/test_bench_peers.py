"""benchmarks/bench_peers.py: dsdsim beside BLIS on one workload (the figures it reads, the command it runs)."""
from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def peers():
    spec = importlib.util.spec_from_file_location("bench_peers", ROOT / "benchmarks" / "bench_peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _metrics(ttfts, itls, e2e_mean=1000.0, rate=2.5):
    return {"e2e_mean_ms": e2e_mean, "responses_per_sec": rate,
            "requests": [{"ttft_ms": t, "itl_ms": i} for t, i in zip(ttfts, itls)]}


def test_blis_figures_are_per_request_percentiles(peers):
    # 5 requests: the median of TPOT 10, 12, 11, 30, 9 is 11; TTFT sorted 20, 30, 40, 50, 90: p50 40, p99 the last
    got = peers.blis_figures(_metrics([40, 20, 90, 30, 50], [10, 12, 11, 30, 9]))
    assert got == {"tpot_p50_ms": 11, "ttft_p50_ms": 40, "ttft_p99_ms": 90, "e2e_mean_ms": 1000.0,
                   "requests_per_s": 2.5}


FAKE_BLIS = """#!{python}
import json, sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
spec = open(value("--workload-spec")).read()
json.dump({{"argv": args, "spec": spec}}, open("{log}", "a"))
open("{log}", "a").write("\\n")
json.dump({{"e2e_mean_ms": 2000.0, "responses_per_sec": 4.0,
           "requests": [{{"ttft_ms": 30.0, "itl_ms": 8.0}}, {{"ttft_ms": 50.0, "itl_ms": 12.0}}]}},
          open(value("--metrics-path"), "w"))
"""


def test_blis_row_runs_the_workload_and_reads_its_metrics(peers, tmp_path):
    log = tmp_path / "calls.jsonl"
    binary = tmp_path / "blis"
    binary.write_text(FAKE_BLIS.format(python=sys.executable, log=log))
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    row = peers.blis_row(binary, "roofline", 4.0, 1000)
    assert row["tpot_p50_ms"] == 10.0 and row["ttft_p50_ms"] == 40.0 and row["requests_per_s"] == 4.0
    call = json.loads(log.read_text().splitlines()[0])
    argv = call["argv"]
    assert argv[0] == "run"
    for flag, want in (("--model", "meta-llama/llama-3.1-8b-instruct"), ("--hardware", "A100-80"),
                       ("--latency-model", "roofline"), ("--max-num-seqs", "128"),
                       ("--max-num-batched-tokens", "2048"), ("--tp", "1")):
        assert argv[argv.index(flag) + 1] == want
    spec = call["spec"]
    assert "aggregate_rate: 4.0\n" in spec and "num_requests: 1000\n" in spec and "process: poisson" in spec
    assert spec.count("type: constant") == 2 and "value: 512" in spec and "value: 256" in spec


def test_a_failed_blis_run_says_why(peers, tmp_path):
    binary = tmp_path / "blis"
    binary.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('unknown hardware A100-80')\nsys.exit(1)\n")
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(RuntimeError, match="blis trained-physics at QPS 8 failed: unknown hardware A100-80"):
        peers.blis_row(binary, "trained-physics", 8.0, 100)


def test_without_blis_it_runs_dsdsim_alone(peers, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))          # no blis on PATH
    out = tmp_path / "peers.json"
    assert peers.main(["--requests", "40", "--qps", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "BLIS: not installed" in printed and "dsdsim" in printed
    rows = json.loads(out.read_text())
    assert list(rows) == ["dsdsim"] and list(rows["dsdsim"]) == ["4", "100"]
    light, saturated = rows["dsdsim"]["4"], rows["dsdsim"]["100"]
    # 40 requests at 100 QPS queue behind each other: the saturated TTFT is far above the light one's
    assert saturated["ttft_p50_ms"] > 5 * light["ttft_p50_ms"]
    assert saturated["requests_per_s"] > light["requests_per_s"]


def test_the_readme_table_quotes_dsdsims_rows_as_this_checkout_simulates_them(peers):
    """The README's side-by-side table ("Beside BLIS on one workload") holds dsdsim's rows at QPS 4, 8 and 100 as
    ``bench_peers.dsdsim_row`` gives them now (QPS 1, 11 s of simulation here, is left to the script)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    rows = {q: peers.dsdsim_row(q, 1000) for q in (4.0, 8.0, 100.0)}
    four, eight = rows[4.0], rows[8.0]
    assert f"{four['tpot_p50_ms']:.1f} / {eight['tpot_p50_ms']:.1f} ms" in readme
    assert f"{four['ttft_p50_ms']:.0f} / {four['ttft_p99_ms']:.0f}, {eight['ttft_p50_ms']:.0f} / " \
           f"{eight['ttft_p99_ms']:.0f} ms" in readme
    sat = rows[100.0]
    assert (f"| dsdsim | 100 | {sat['tpot_p50_ms']:.1f} ms | {sat['ttft_p50_ms'] / 1e3:.1f} / "
            f"{sat['ttft_p99_ms'] / 1e3:.1f} s | {sat['e2e_mean_ms'] / 1e3:.1f} s | {sat['requests_per_s']:.2f} |") \
        in readme
