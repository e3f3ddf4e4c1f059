"""How fast the vectorised cost model sweeps a predict-sized grid.

DeepSeek-V3 on H200 SXM, tp 8, MTP drafter: B = 1..1024 x K = 0..16 x 4 contexts = 69,632 steps in one
``step_time_grid`` call. Prints the best of 5 timed calls after one untimed warm-up, and steps per second.
Target: well under 50 ms per grid.

    python benchmarks/bench_cost_grid.py            # timing
    python benchmarks/bench_cost_grid.py --profile  # plus the top functions under cProfile
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from dsdsim.cost.step import step_time_grid  # noqa: E402
from dsdsim.specs.deployment import Deployment  # noqa: E402

TARGET_S = 0.050


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="deepseek-v3")
    p.add_argument("--hardware", default="h200-sxm")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--drafter", default="mtp")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="print the 15 costliest functions of one call")
    args = p.parse_args()

    batches = np.arange(1, 1025)
    ks = np.arange(0, 17)
    contexts = np.array([512, 2048, 8192, 32768])
    points = batches.size * ks.size * contexts.size
    dep = Deployment(tp=args.tp)

    def run():
        return step_time_grid(args.model, args.hardware, dep, args.drafter, batches, ks, contexts)

    t, feasible = run()  # warm-up: spec files parsed and cached, numpy and scipy imported
    assert t.shape == (batches.size, ks.size, contexts.size) and np.all(np.isfinite(t))
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    best = min(times)
    print(f"{args.model} on {args.hardware}, tp {args.tp}, drafter {args.drafter}: "
          f"{batches.size} B x {ks.size} K x {contexts.size} contexts = {points:,} steps")
    print(f"best of {args.repeats}: {best * 1e3:.1f} ms  (median {np.median(times) * 1e3:.1f} ms)  "
          f"{points / best:,.0f} steps/s  feasible {feasible.mean():.0%}  "
          f"{'within' if best < TARGET_S else 'OVER'} the {TARGET_S * 1e3:.0f} ms target")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
