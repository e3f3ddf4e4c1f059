"""What a frozen dataclass costs with each decorator: building the class, and using its instances; printed.

  class          one class statement of 8 float fields with defaults, under @dataclass(frozen=True) and under
                 dsdsim.records.frozen (which compiles __init__ only at the first instance), median per class
  first instance the class built and instantiated once (frozen's __init__ compiled then)
  construct      Point() with 8 keyword arguments, once the class is built (best of 5)
  eq / hash      two equal instances compared, one hashed (best of 5)

    python benchmarks/bench_records.py            # wall-clock medians (a busy machine moves them)
    python benchmarks/bench_records.py --classes 200

On Python 3.11 the standard decorator compiles six methods per class from source; frozen compiles one, and only
for a class that is instantiated.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import timeit

from dsdsim.records import frozen

FIELDS = "\n".join(f"    f{i}: float = {i}.0" for i in range(8))
SOURCE = f"class Point:\n    '''A point.'''\n{FIELDS}\n"
STANDARD = dataclasses.dataclass(frozen=True)


def _fresh_class():
    namespace: dict = {"__name__": __name__}
    exec(SOURCE, namespace)
    return namespace["Point"]


def _per_class(decorate, n: int, instantiate: bool) -> float:
    """Median seconds to build one class (and make its first instance), over ``n`` classes."""
    times = []
    for _ in range(n):
        bare = _fresh_class()             # the class statement itself is not timed
        start = time.perf_counter()
        cls = decorate(bare)
        if instantiate:
            cls()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _per_call(fn, n: int = 20_000) -> float:
    """Seconds per call, the best of five runs of ``n`` calls."""
    return min(timeit.repeat(fn, number=n, repeat=5)) / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", type=int, default=100, help="classes built per figure (default 100)")
    args = p.parse_args()
    kwargs = {f"f{i}": float(i) for i in range(8)}
    print(f"{'':<34} {'@dataclass(frozen=True)':>24} {'@frozen':>12}")
    rows = []
    for label, instantiate in (("build one class", False), ("  and its first instance", True)):
        rows.append((label, [_per_class(d, args.classes, instantiate) for d in (STANDARD, frozen)]))
    made = [STANDARD(_fresh_class()), frozen(_fresh_class())]
    pairs = [(cls(**kwargs), cls(**kwargs)) for cls in made]
    rows.append(("construct, 8 keyword arguments", [_per_call(lambda c=c: c(**kwargs)) for c in made]))
    rows.append(("== of two equal instances", [_per_call(lambda a=a, b=b: a == b) for a, b in pairs]))
    rows.append(("hash of an instance", [_per_call(lambda a=a: hash(a)) for a, _ in pairs]))
    for label, (standard, ours) in rows:
        print(f"{label:<34} {standard * 1e6:>21,.2f} us {ours * 1e6:>9,.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
