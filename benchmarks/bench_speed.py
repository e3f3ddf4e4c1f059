"""Speed of the API and the CLI, each figure printed beside its target; printed, never asserted.

  by names       simulate_step("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", ...), the README's form: a new
                 Deployment and the names on every call                                  target <= 60 us
  from a Setup   the same with ``setup=resolve(...)`` once                               target <= 10 us
  MoE points     qwen3-30b-a3b (tp 2, ep 2, EAGLE-3) and DeepSeek-V3 (tp 8, MTP) by names  target <= 80 us
                 (the points vary from call to call: nothing per point is cached; medians over 300 random points)
  grid           step_time_grid over B = 1..1024 x K = 0..8 x 1 context, points per second  target > 5e6 /s
                 judged in a fresh process; also printed after one large array has been freed, when glibc's
                 malloc has raised its trim threshold and stops returning the grid's temporaries to the OS
  predict        `python -m dsdsim predict` (defaults), wall-clock median of 5 runs    target <= 0.3 s
                 as every run after a machine's first reads its specs (this release reads the shipped YAML
                 pre-parsed, dsdsim.specs.io.PARSED, and keeps no cache; for an older checkout with a parsed-YAML
                 cache, the bench keeps its own, warmed by one run that is not timed). Beside it, without a target:
                 the same predict with no cache (a first run: there PyYAML parses every spec; here the same); the
                 floor, starting Python, importing the libraries that path loads (numpy, pydantic) and
                 defining one pydantic model (which loads pydantic's schema machinery, as the first spec does),
                 with predict's settings (one OpenBLAS thread, no pydantic plugin search);
                 what is left to dsdsim (predict - floor); and predict writing JSON (--format json: every row of
                 1,024 batch sizes)
  --help         `python -m dsdsim --help`, wall-clock median of 5 runs                target <= 0.2 s

    python benchmarks/bench_speed.py
    python benchmarks/bench_speed.py --against /path/to/other/checkout --rounds 3
    python benchmarks/bench_speed.py --against /path/to/other/checkout --instructions

``--against`` measures another checkout of dsdsim in the same run (each in its own processes, the two alternating
``--rounds`` times), and prints both side by side with the best of the rounds: on a shared, noisy machine only
figures taken in the same minute compare.

``--instructions`` counts instead the machine instructions of the command-line figures (predict, with and without
the YAML cache, its floor, predict --format json), of one point by names and of one grid, under valgrind's
callgrind, which a busy or throttled machine does not move: the same count run after run, on any load, where
wall-clock figures here swing by 2x within minutes. It needs valgrind on the PATH and takes some 30 s a command
(valgrind runs the interpreter some 50x slower).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CACHE = ""            # the bench's own folder for parsed YAML, made by main(); "" (none) until then

# (label, key, unit, target, better): figures in seconds, except the grid's points per second
FIGURES = (
    ("simulate_step by names (median)", "point_names_s", "us", 60e-6, "lower"),
    ("  from a resolved Setup", "point_setup_s", "us", 10e-6, "lower"),
    ("  qwen3-30b-a3b tp2 ep2, by names", "moe_qwen_s", "us", 80e-6, "lower"),
    ("  deepseek-v3 tp8 mtp, by names", "moe_dsv3_s", "us", 80e-6, "lower"),
    ("step_time_grid, 9,216 points", "grid_pps", "pts/s", 5e6, "higher"),
    ("  malloc thresholds raised", "grid_warm_pps", "pts/s", None, "higher"),
    ("dsdsim predict (wall, median of 5)", "predict_s", "s", 0.3, "lower"),
    ("  no YAML cache (a first run)", "predict_cold_s", "s", None, "lower"),
    ("  floor: python + its libraries", "floor_s", "s", None, "lower"),
    ("  dsdsim's own (predict - floor)", "own_s", "s", None, "lower"),
    ("  --format json (wall, median of 5)", "predict_json_s", "s", None, "lower"),
    ("dsdsim --help (wall, median of 5)", "help_s", "s", 0.2, "lower"),
)


# the command lines timed (after the interpreter)
PREDICT = ["-m", "dsdsim", "predict"]
PREDICT_JSON = [*PREDICT, "--format", "json"]

# what `dsdsim predict` loads besides dsdsim itself (the CLI, the specs, the table), and the first pydantic model,
# with the settings its command line makes before numpy loads (one OpenBLAS thread, no pydantic plugin search)
LIBRARIES = ("import os\nos.environ.setdefault('OPENBLAS_NUM_THREADS', '1')\n"
             "os.environ.setdefault('PYDANTIC_DISABLE_PLUGINS', '__all__')\n"
             "import numpy\nfrom pydantic import BaseModel\nclass Spec(BaseModel):\n    x: int = 0")


def _env(root: Path, cache: str | None = None, **extra: str) -> dict:
    """The environment of a timed run: dsdsim from ``root``; parsed YAML kept in the bench's own cache folder
    (``cache=""``: none), never the user's."""
    return dict(os.environ, PYTHONPATH=str(root), DSDSIM_CACHE_DIR=_CACHE if cache is None else cache, **extra)


def _median_wall(argv: list[str], root: Path, runs: int = 5, cache: str | None = None) -> float:
    env = _env(root, cache)
    subprocess.run([sys.executable, *argv], env=env, cwd=root, capture_output=True, check=True)   # fills the cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, cwd=root, capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _points(n: int = 300) -> list[tuple[int, int, int]]:
    import numpy as np

    rng = np.random.default_rng(0)
    return [(int(rng.integers(1, 513)), int(rng.integers(0, 9)), int(rng.integers(128, 32769))) for _ in range(n)]


def _median_call(call, points) -> float:
    call(8, 1, 1024)                         # warm-up: specs read, the plan built
    samples = []
    for batch, k, context in points:
        start = time.perf_counter()
        call(batch, k, context)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure() -> dict:
    """The figures of the dsdsim importable here (this checkout, or PYTHONPATH's)."""
    import numpy as np

    from dsdsim.cost.step import simulate_step, step_time_grid
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    setup = resolve("llama-3.1-8b", "h100-sxm", Deployment(), "eagle3")
    b, ks = np.arange(1, 1025), np.arange(0, 9)

    def grid_seconds() -> float:
        step_time_grid(None, None, batch_sizes=b, k_values=ks, contexts=[1024], setup=setup)
        grid = []
        for _ in range(15):                  # the best of 15: a few milliseconds each, on a machine whose speed moves
            start = time.perf_counter()
            step_time_grid(None, None, batch_sizes=b, k_values=ks, contexts=[1024], setup=setup)
            grid.append(time.perf_counter() - start)
        return min(grid)

    out = {"grid_pps": b.size * ks.size / grid_seconds()}      # first, in a fresh process
    large = np.ones(1 << 20)     # an 8 MB array, mapped and freed: glibc raises its mmap and trim thresholds
    del large
    out["grid_warm_pps"] = b.size * ks.size / grid_seconds()
    points = _points()

    def by_names(model, hardware, tp, ep, drafter, max_k):
        def call(batch, k, context):
            return float(simulate_step(model, hardware, Deployment(tp=tp, ep=ep), drafter, batch=batch,
                                       k=min(k, max_k), context=context).step_time_s)
        return call

    out["point_setup_s"] = _median_call(lambda batch, k, context: float(simulate_step(
        None, None, setup=setup, batch=batch, k=k, context=context).step_time_s), points)
    out["point_names_s"] = _median_call(by_names("llama-3.1-8b", "h100-sxm", 1, 1, "eagle3", 16), points)
    out["moe_qwen_s"] = _median_call(by_names("qwen3-30b-a3b", "h100-sxm", 2, 2, "eagle3", 16), points)
    out["moe_dsv3_s"] = _median_call(by_names("deepseek-v3", "h200-sxm", 8, 1, "mtp", 1), points)
    return out


def _byte_compile(root: Path) -> None:
    """As `pip install` leaves a package: with PYTHONDONTWRITEBYTECODE set, a module edited since its .pyc was
    written would otherwise be compiled again in every timed start-up."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "dsdsim")], check=True, capture_output=True)


def measure_in(root: Path) -> dict:
    """``measure`` in a fresh process importing dsdsim from checkout ``root`` (run there: ``-c`` and ``-m`` put the
    working folder first on the path), and its CLI timings."""
    env = _env(root)
    _byte_compile(root)
    code = f"import sys, json; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_speed; " \
           "print(json.dumps(bench_speed.measure()))"
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["predict_s"] = _median_wall(PREDICT, root)
    out["predict_cold_s"] = _median_wall(PREDICT, root, cache="")
    out["floor_s"] = _median_wall(["-c", LIBRARIES], root)
    out["predict_json_s"] = _median_wall(PREDICT_JSON, root)
    out["help_s"] = _median_wall(["-m", "dsdsim", "--help"], root)
    return out


# the command-line figures --instructions counts: (label, argv after the interpreter)
# (label, argv after the interpreter, the cache: None the bench's warmed one, "" none)
COUNTED = (("dsdsim predict", PREDICT, None), ("  no YAML cache (a first run)", PREDICT, ""),
           ("  floor: python + its libraries", ["-c", LIBRARIES], None), ("  --format json", PREDICT_JSON, None))


def _instructions(argv: list[str], root: Path, cache: str | None = None) -> int:
    """Instructions one run executes, counted by valgrind's callgrind (one thread of OpenBLAS: as the CLI runs),
    after one run outside valgrind that fills the cache."""
    env = _env(root, cache, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    subprocess.run([sys.executable, *argv], env=env, cwd=root, capture_output=True, check=True)
    r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *argv],
                       env=env, cwd=root, capture_output=True, text=True, check=True)
    counted = [line for line in r.stderr.splitlines() if "Collected :" in line]
    if not counted:
        raise SystemExit(f"valgrind printed no instruction count for {argv}: {r.stderr.strip()[-300:]}")
    return int(counted[-1].split(":")[-1])


def count_instructions(trees: list[Path]) -> int:
    """Print the instructions of each command-line figure, one column per checkout."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (Debian/Ubuntu: apt install valgrind)")
    for t in trees:
        _byte_compile(t)
    print("instructions per run (valgrind callgrind; the same count whatever the machine's load)")
    print(f"{'':<36} {'this checkout':>16}" + (f" {'--against':>16}" if len(trees) > 1 else ""))
    for label, argv, cache in COUNTED:
        cols = " ".join(f"{_instructions(argv, t, cache) / 1e6:>14,.0f} M" for t in trees)
        print(f"{label:<36} {cols}", flush=True)
    cols = " ".join(f"{_instructions_each(POINTS, t, 300) / 1e3:>14,.0f} K" for t in trees)
    print(f"{'simulate_step by names, one point':<36} {cols}", flush=True)
    cols = " ".join(f"{_instructions_each(GRID, t, 10) / 1e6:>14,.1f} M" for t in trees)
    print(f"{'step_time_grid, one 9,216-point grid':<36} {cols}", flush=True)
    return 0


# 300 of the random points measure() times, by names, after one call that resolves the names and plans the passes
POINTS = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_speed\n"
          "from dsdsim import Deployment, simulate_step\n"
          "simulate_step('llama-3.1-8b', 'h100-sxm', Deployment(tp=1), 'eagle3', batch=4, k=2, context=100)\n"
          "for b, k, c in bench_speed._points()[:{n}]:\n"
          "    simulate_step('llama-3.1-8b', 'h100-sxm', Deployment(tp=1), 'eagle3', batch=b, k=k, context=c)")


# measure()'s grid on a resolved Setup, after one grid that plans the passes and builds the row tables
GRID = ("from dsdsim import Deployment, resolve, step_time_grid\n"
        "setup = resolve('llama-3.1-8b', 'h100-sxm', Deployment(tp=1), 'eagle3')\n"
        "for _ in range(1 + {n}):\n"
        "    step_time_grid(None, None, batch_sizes=range(1, 1025), k_values=range(9), contexts=[1024], setup=setup)")


def _instructions_each(program: str, root: Path, n: int) -> float:
    """Instructions of one repetition in ``program`` (a format string over ``n``, the repetitions after its first
    call): a run of ``n`` less a run of none, over ``n``."""
    return (_instructions(["-c", program.format(n=n)], root) - _instructions(["-c", program.format(n=0)], root)) / n


def _best(runs: list[dict]) -> dict:
    """The best of the rounds per figure; dsdsim's own share is the best predict less the best floor (a round's own
    difference would take one slow floor for a fast dsdsim)."""
    better = {key: b for _, key, _, _, b in FIGURES}
    best = {key: (min if better[key] == "lower" else max)(r[key] for r in runs) for key in runs[0]}
    best["own_s"] = best["predict_s"] - best["floor_s"]
    return best


def _show(value: float, unit: str) -> str:
    if unit == "us":
        return f"{value * 1e6:,.0f} us"
    if unit == "s":
        return f"{value:.3f} s"
    return f"{value:,.0f} pts/s"


def _target(target, unit: str, better: str) -> str:
    if target is None:
        return ""
    return ("<= " if better == "lower" else "> ") + _show(target, unit)


def _met(value: float, target, better: str) -> str:
    if target is None:
        return ""
    return "met" if (value <= target if better == "lower" else value > target) else "NOT MET"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", type=Path, help="another checkout of dsdsim, measured in the same run")
    p.add_argument("--rounds", type=int, default=1, help="measurements of each checkout; the best is printed")
    p.add_argument("--instructions", action="store_true",
                   help="count the command-line figures' instructions under valgrind instead of timing everything")
    args = p.parse_args()
    trees = [ROOT] + ([args.against.resolve()] if args.against else [])
    global _CACHE
    _CACHE = tempfile.mkdtemp(prefix="dsdsim-bench-cache-")
    try:
        return count_instructions(trees) if args.instructions else _time(trees, args.rounds)
    finally:
        shutil.rmtree(_CACHE, ignore_errors=True)


def _time(trees: list[Path], rounds: int) -> int:
    runs: dict[Path, list[dict]] = {t: [] for t in trees}
    for _ in range(rounds):
        for t in trees:                       # alternating: both see the same load on a shared machine
            runs[t].append(measure_in(t))
    best = {t: _best(r) for t, r in runs.items()}
    print(f"llama-3.1-8b on h100-sxm, EAGLE-3 unless named; best of {rounds} round(s)")
    head = f"{'':<36} {'this checkout':>16}" + (f" {'--against':>16}" if len(trees) > 1 else "")
    print(f"{head}   target")
    for label, key, unit, target, better in FIGURES:
        cols = " ".join(f"{_show(best[t][key], unit):>16}" for t in trees)
        print(f"{label:<36} {cols}   {_target(target, unit, better):<16} {_met(best[ROOT][key], target, better)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
