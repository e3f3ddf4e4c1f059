"""Benchmark: the whole `dsdsim predict` process on shipped defaults (batch sizes 1..1024), and import time.

Run: python benchmarks/bench_predict.py   (prints wall times; target: predict well under 1 s on 2 cores)
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time


def wall(cmd: list[str], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    repeats = 5
    py = sys.executable
    wall([py, "-m", "dsdsim", "predict"], 1)  # warm the file cache and bytecode
    predict_s = wall([py, "-m", "dsdsim", "predict"], repeats)
    json_s = wall([py, "-m", "dsdsim", "predict", "--format", "json"], repeats)
    import_s = wall([py, "-c", "import dsdsim"], repeats)
    bare_s = wall([py, "-c", "pass"], repeats)
    t0 = time.perf_counter()
    import dsdsim  # noqa: F401
    in_proc = time.perf_counter() - t0
    print(f"dsdsim predict (defaults, B=1..1024, table):  median {statistics.median(predict_s):.3f} s "
          f"(min {min(predict_s):.3f} s over {repeats})")
    print(f"dsdsim predict --format json:                   median {statistics.median(json_s):.3f} s")
    print(f"python -c 'import dsdsim':                      median {statistics.median(import_s):.3f} s "
          f"(bare interpreter {statistics.median(bare_s):.3f} s)")
    print(f"import dsdsim in-process:                       {in_proc * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
