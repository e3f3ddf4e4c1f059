"""dsdsim beside other serving simulators on one workload, side by side; printed, never asserted.

The workload: Llama-3-8B on one A100-80GB SXM, no speculation, 1,000 requests of 512 prompt and 256 output tokens
arriving as a Poisson process at QPS 1, 4 and 8, at most 128 running requests and 2,048 tokens a step (vLLM's
``max_num_seqs`` / ``max_num_batched_tokens``), and the same requests at QPS 100 for the throughput a saturated
server completes. Each simulator prints TPOT p50 (per request), TTFT p50 / p99, mean E2E latency, completed
requests/s, and its wall seconds.

Peers, where installed:
  BLIS     inference-sim/inference-sim (Go; ``go build -o blis main.go`` in its checkout): ``--blis PATH`` or
           ``blis`` on PATH. Run from its checkout (its defaults.yaml, hardware_config.json and model_configs/),
           in both latency models (``roofline``, ``trained-physics``), on ``meta-llama/llama-3.1-8b-instruct``
           (Llama-3-8B's shapes; the config ships in its model_configs/) on ``A100-80``, with a v2 workload spec
           of the same requests (Poisson arrivals, constant lengths, seed 42).
  Vidur    microsoft/vidur needs its profiled attention table of the model on the GPU
           (data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/attention.csv); not run by this script.

    python benchmarks/bench_peers.py
    python benchmarks/bench_peers.py --blis ~/inference-sim/blis --json peers.json
    python benchmarks/bench_peers.py --requests 200 --qps 4        # a quick look
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

MODEL, HARDWARE = "llama-3-8b", "a100-sxm-80gb"
BLIS_MODEL, BLIS_HARDWARE = "meta-llama/llama-3.1-8b-instruct", "A100-80"
INPUT_LEN, OUTPUT_LEN, MAX_NUM_SEQS, MAX_NUM_BATCHED_TOKENS = 512, 256, 128, 2048
SATURATED_QPS = 100.0
BLIS_MODES = ("roofline", "trained-physics")

BLIS_WORKLOAD = """version: "2"
seed: 42
category: language
aggregate_rate: {qps}
num_requests: {requests}
clients:
  - id: "fixed-{input_len}-{output_len}"
    rate_fraction: 1.0
    streaming: true
    arrival:
      process: poisson
    input_distribution:
      type: constant
      params:
        value: {input_len}
    output_distribution:
      type: constant
      params:
        value: {output_len}
"""


def dsdsim_row(qps: float, requests: int) -> dict:
    """dsdsim's figures for one arrival rate (``dsdsim.simulate``, the public API)."""
    import dsdsim

    start = time.perf_counter()
    result = dsdsim.simulate(MODEL, HARDWARE, drafter="none", workload=f"poisson:{qps:g}", requests=requests,
                             input_len=str(INPUT_LEN), output_len=str(OUTPUT_LEN), max_num_seqs=MAX_NUM_SEQS,
                             max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS)
    wall = time.perf_counter() - start
    p = result.policies[0]
    return {"tpot_p50_ms": p.tpot_ms.p50, "ttft_p50_ms": p.ttft_ms.p50, "ttft_p99_ms": p.ttft_ms.p99,
            "e2e_mean_ms": p.e2e_ms.mean, "requests_per_s": p.requests_per_s, "wall_s": wall}


def blis_figures(metrics: dict) -> dict:
    """The same figures from a ``blis run --metrics-path`` document: per-request TPOT (its ``itl_ms``, the mean
    inter-token time of the request) and TTFT percentiles over the completed requests."""
    rows = metrics["requests"]
    ttft = sorted(r["ttft_ms"] for r in rows)
    return {"tpot_p50_ms": statistics.median(r["itl_ms"] for r in rows), "ttft_p50_ms": statistics.median(ttft),
            "ttft_p99_ms": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))], "e2e_mean_ms": metrics["e2e_mean_ms"],
            "requests_per_s": metrics["responses_per_sec"]}


def blis_row(binary: Path, mode: str, qps: float, requests: int) -> dict:
    """One ``blis run`` in its checkout (the binary's folder): its figures and wall seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "workload.yaml", Path(tmp) / "metrics.json"
        spec.write_text(BLIS_WORKLOAD.format(qps=qps, requests=requests, input_len=INPUT_LEN, output_len=OUTPUT_LEN))
        cmd = [str(binary), "run", "--model", BLIS_MODEL, "--hardware", BLIS_HARDWARE, "--tp", "1",
               "--latency-model", mode, "--workload-spec", str(spec), "--max-num-seqs", str(MAX_NUM_SEQS),
               "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS), "--metrics-path", str(out)]
        start = time.perf_counter()
        run = subprocess.run(cmd, cwd=binary.parent, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if run.returncode != 0:
            raise RuntimeError(f"blis {mode} at QPS {qps:g} failed: {(run.stderr or run.stdout).strip()[-400:]}")
        return {**blis_figures(json.loads(out.read_text())), "wall_s": wall}


def find_blis(given: str | None) -> Path | None:
    path = given or shutil.which("blis")
    return Path(path).expanduser().resolve() if path else None


def _rates(text: str) -> list[float]:
    """``--qps``: positive numbers, comma-separated."""
    try:
        rates = [float(q) for q in text.split(",")]
    except ValueError:
        rates = []
    if not rates or not all(0 < q < float("inf") for q in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: write positive request rates, comma-separated (1,4,8)")
    return rates


def table(rows: dict[str, dict[float, dict]]) -> str:
    head = (f"{'simulator':<22}{'QPS':>6}{'TPOT p50':>10}{'TTFT p50':>10}{'TTFT p99':>10}{'E2E mean':>10}"
            f"{'req/s':>8}{'wall s':>8}")
    lines = [head, "-" * len(head)]
    for name, by_qps in rows.items():
        for qps, r in by_qps.items():
            lines.append(f"{name:<22}{qps:>6g}{r['tpot_p50_ms']:>8.1f}ms{r['ttft_p50_ms']:>8.1f}ms"
                         f"{r['ttft_p99_ms']:>8.1f}ms{r['e2e_mean_ms'] / 1e3:>9.2f}s{r['requests_per_s']:>8.2f}"
                         f"{r['wall_s']:>8.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--qps", default="1,4,8", type=_rates, help="comma list of arrival rates in requests/s (the "
                    f"saturated run at {SATURATED_QPS:g} is added)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--blis", help="the blis binary, built in its checkout (default: blis on PATH)")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    ladder = args.qps + [SATURATED_QPS]
    blis = find_blis(args.blis)
    if blis is not None and not blis.is_file():
        ap.error(f"--blis {args.blis}: no such file; build it with `go build -o blis main.go` in its checkout")
    print(f"workload: {MODEL} on one {HARDWARE}, {args.requests} Poisson requests of {INPUT_LEN} / {OUTPUT_LEN} "
          f"tokens, max_num_seqs {MAX_NUM_SEQS}, max_num_batched_tokens {MAX_NUM_BATCHED_TOKENS}; QPS "
          f"{SATURATED_QPS:g} measures the saturated server's completed requests/s", flush=True)
    rows: dict[str, dict[float, dict]] = {"dsdsim": {q: dsdsim_row(q, args.requests) for q in ladder}}
    if blis is None:
        print("BLIS: not installed (give --blis PATH or put blis on PATH)")
    else:
        try:
            for mode in BLIS_MODES:
                rows[f"BLIS {mode}"] = {q: blis_row(blis, mode, q, args.requests) for q in ladder}
        except RuntimeError as exc:          # one line, as the run said it, and nothing written
            ap.exit(1, f"bench_peers.py: {exc}\n")
    print("Vidur: not run (it needs its profiled attention table of Llama-3-8B on the A100; see this script's doc)")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({name: {f"{q:g}": r for q, r in by.items()} for name, by in rows.items()},
                                        indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
