"""Speed of the serving simulator, each figure printed beside its target; printed, never asserted.

  simulate     2,000 requests at closed:64 (input 512, output 256 tokens) with three policies (none, fixed:3, dsd)
               on llama-3.1-8b / h100-sxm / EAGLE-3, in one process: wall seconds     target < 10 s
               and simulated engine steps per second of wall time (every policy's steps together)
  engine step  the same simulation run again in the same process (specs read, step tables built): wall
               microseconds per simulated engine step, scheduling and pricing, at 64 running requests  target <= 30 us
  the CLI      `python -m dsdsim simulate --requests 2000` (the same run, the table printed), wall seconds

    python benchmarks/bench_serve.py
    python benchmarks/bench_serve.py --requests 500 --rounds 3
    python benchmarks/bench_serve.py --against /path/to/other/checkout

``--against`` runs the same measurements on another checkout (the previous release), alternating with this one, and
prints its figures beside.

The in-process figure is the best of ``--rounds`` runs, each in a fresh process (the first run of a process also
reads the specs and builds the step pricer's tables: that is part of what a user waits for).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
TARGET_STEP_US = 30.0
POLICIES = "none,fixed:3,dsd"
WORKLOAD = "closed:64"


def measure(requests: int, executor: str = "local") -> dict:
    """One run in this process (``executor`` local: one simulate call; processes: one job per policy on this
    machine's cores): wall seconds, imports and spec reading included, and the steps each policy simulated."""
    start = time.perf_counter()
    from dsdsim.serve.sweep import Simulation, simulate_many
    from dsdsim.specs.setup import resolve

    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")
    sim = Simulation(setup, WORKLOAD, POLICIES, requests=requests)
    result = simulate_many(sim, [WORKLOAD], executor=executor)[0]
    wall = time.perf_counter() - start
    out = {"wall_s": wall, "steps": {p.name: int(p.steps) for p in result.policies},
           "tokens_per_s": {p.name: float(p.output_tokens_per_s) for p in result.policies}}
    if executor == "local":        # again, warm: the engine steps alone
        start = time.perf_counter()
        again = simulate_many(sim, [WORKLOAD], executor=executor)[0]
        out["step_us"] = 1e6 * (time.perf_counter() - start) / sum(int(p.steps) for p in again.policies)
    return out


def measure_fresh(requests: int, executor: str = "local", root: Path = ROOT) -> dict:
    """``measure`` in a fresh process, on the checkout at ``root`` (this script's own code, that checkout's
    package)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    code = (f"import sys, json; sys.path.insert(1, {str(ROOT / 'benchmarks')!r}); import bench_serve; "
            f"print(json.dumps(bench_serve.measure({requests}, {executor!r})))")
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cli_wall(requests: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dsdsim", "simulate", "--requests", str(requests), "--workload", WORKLOAD,
                    "--policies", POLICIES], env=env, cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=1, help="fresh-process runs; the fastest is printed")
    p.add_argument("--against", type=Path, help="another checkout (the previous release), measured alternately")
    args = p.parse_args()
    runs, other = [], []
    for _ in range(args.rounds):
        runs.append(measure_fresh(args.requests))
        if args.against is not None:
            other.append(measure_fresh(args.requests, root=args.against.resolve()))
    best = min(runs, key=lambda r: r["wall_s"])
    pooled = min((measure_fresh(args.requests, "processes") for _ in range(args.rounds)), key=lambda r: r["wall_s"])
    steps = sum(best["steps"].values())
    cli = cli_wall(args.requests)
    print(f"llama-3.1-8b on h100-sxm, EAGLE-3; {args.requests} requests at {WORKLOAD}, input 512, output 256; "
          f"policies {POLICIES}; {os.cpu_count()} cores; best of {args.rounds} round(s)")
    met = "met" if best["wall_s"] < TARGET_S else "NOT MET"
    print(f"{'simulate, one process (wall)':<40} {best['wall_s']:>10.2f} s   target < {TARGET_S:g} s   {met}")
    print(f"{'simulated engine steps per second':<40} {steps / best['wall_s']:>10,.0f}     ({steps:,} steps: "
          + ", ".join(f"{k} {v:,}" for k, v in best["steps"].items()) + ")")
    step_us = min(r["step_us"] for r in runs)
    met = "met" if step_us <= TARGET_STEP_US else "NOT MET"
    print(f"{'engine step, warm (wall per step)':<40} {step_us:>10.1f} us  target <= {TARGET_STEP_US:g} us  {met}")
    if other:
        o = min(other, key=lambda r: r["wall_s"])
        print(f"{'  --against: simulate, one process':<40} {o['wall_s']:>10.2f} s")
        print(f"{'  --against: engine step, warm':<40} {min(r['step_us'] for r in other):>10.1f} us")
    print(f"{'  one job per policy, processes (wall)':<40} {pooled['wall_s']:>10.2f} s")
    print(f"{'dsdsim simulate (CLI, wall)':<40} {cli:>10.2f} s")
    print("output tokens/s simulated: " + ", ".join(f"{k} {v:,.0f}" for k, v in best["tokens_per_s"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
