"""Speed of the API and the CLI beside their targets (issue 12, section 4), printed, never asserted.

  single point   simulate_step for one (B, K, c) with the Setup already resolved      target <= 100 us
                 (the points vary from call to call: nothing per point is cached); and from loaded spec objects,
                 the Setup resolved on each call
  grid           step_time_grid over B = 1..1024 x K = 0..8 x 1 context, points per second  target > 1e6 /s
                 judged in a fresh process; also printed after one large array has been freed, when glibc's
                 malloc has raised its trim threshold (its documented dynamic threshold; any session that has
                 freed a >= 128 KiB array runs like this) and stops returning the grid's temporaries to the OS
  predict        `python -m dsdsim predict` (defaults), wall-clock median of 5 runs    target <= 0.35 s
  --help         `python -m dsdsim --help`, wall-clock median of 5 runs                target <= 0.2 s
  MoE points     one point of two MoE setups, reported without a target

    python benchmarks/bench_speed.py
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from dsdsim.cost.step import simulate_step, step_time_grid  # noqa: E402
from dsdsim.specs.deployment import Deployment  # noqa: E402
from dsdsim.specs.setup import resolve  # noqa: E402


def _median_wall(argv: list[str], runs: int = 5) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    setup = resolve("llama-3.1-8b", "h100-sxm", Deployment(), "eagle3")
    b, ks = np.arange(1, 1025), np.arange(0, 9)

    def grid_seconds() -> float:
        step_time_grid(None, None, batch_sizes=b, k_values=ks, contexts=[1024], setup=setup)
        grid = []
        for _ in range(5):
            start = time.perf_counter()
            step_time_grid(None, None, batch_sizes=b, k_values=ks, contexts=[1024], setup=setup)
            grid.append(time.perf_counter() - start)
        return min(grid)

    grid_s = grid_seconds()      # first, in a fresh process
    large = np.ones(1 << 20)     # an 8 MB array, mapped and freed: glibc raises its mmap and trim thresholds
    del large
    grid_warm_s = grid_seconds()
    simulate_step(None, None, setup=setup, batch=8, k=3, context=1024)           # warm-up
    rng = np.random.default_rng(0)
    points = [(int(rng.integers(1, 513)), int(rng.integers(0, 9)), int(rng.integers(128, 32769)))
              for _ in range(300)]
    samples = []
    for batch, k, context in points:
        start = time.perf_counter()
        float(simulate_step(None, None, setup=setup, batch=batch, k=k, context=context).step_time_s)
        samples.append(time.perf_counter() - start)
    point_s = statistics.median(samples)
    specs = (setup.model, setup.hardware, setup.deployment, setup.drafter)     # loaded specs, no Setup: resolved per call
    samples = []
    for batch, k, context in points:
        start = time.perf_counter()
        float(simulate_step(*specs, batch=batch, k=k, context=context).step_time_s)
        samples.append(time.perf_counter() - start)
    point_specs_s = statistics.median(samples)
    moe = {label: _point_median(resolve(*args), points) for label, args in MOE_SETUPS.items()}

    per_point_grid = grid_s / (b.size * ks.size)

    predict_s = _median_wall(["-m", "dsdsim", "predict"])
    help_s = _median_wall(["-m", "dsdsim", "--help"])

    def line(what, value, target, ok):
        print(f"{what:<34} {value:>14}   target {target:<12} {'met' if ok else 'NOT MET'}")

    print("llama-3.1-8b on h100-sxm, eagle3")
    line("simulate_step, one point (median)", f"{point_s * 1e6:,.0f} us", "<= 100 us", point_s <= 100e-6)
    line("  the same from spec objects", f"{point_specs_s * 1e6:,.0f} us", "<= 100 us", point_specs_s <= 100e-6)
    line("step_time_grid, 9,216 points", f"{b.size * ks.size / grid_s:,.0f} pts/s", "> 1,000,000",
         b.size * ks.size / grid_s > 1e6)
    print(f"{'  the same, malloc thresholds raised':<34} {b.size * ks.size / grid_warm_s:>14,.0f} pts/s")
    print(f"{'  one point / one grid point':<34} {point_s / per_point_grid:>14,.0f}x")
    line("dsdsim predict (wall, median of 5)", f"{predict_s:.3f} s", "<= 0.35 s", predict_s <= 0.35)
    line("dsdsim --help (wall, median of 5)", f"{help_s:.3f} s", "<= 0.2 s", help_s <= 0.2)
    print("one point of MoE setups (more operators, experts touched per point; reported, no target):")
    for label, seconds in moe.items():
        print(f"  {label:<32} {seconds * 1e6:>14,.0f} us")
    return 0


MOE_SETUPS = {
    "qwen3-30b-a3b h100 tp2 ep2 eagle3": ("qwen3-30b-a3b", "h100-sxm", Deployment(tp=2, ep=2), "eagle3"),
    "deepseek-v3 h200 tp8 mtp": ("deepseek-v3", "h200-sxm", Deployment(tp=8), "mtp"),
}


def _point_median(setup, points) -> float:
    """Median seconds of simulate_step over ``points`` (K capped at the drafter's limit), Setup resolved once."""
    simulate_step(None, None, setup=setup, batch=8, k=1, context=1024)           # warm-up: the plan is built
    samples = []
    for batch, k, context in points:
        k = min(k, setup.drafter.max_k)
        start = time.perf_counter()
        float(simulate_step(None, None, setup=setup, batch=batch, k=k, context=context).step_time_s)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


if __name__ == "__main__":
    raise SystemExit(main())
