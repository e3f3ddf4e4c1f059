"""Intervals on predicted step times: split conformal over the leave-one-source-out residuals.

A prediction's interval comes from the held-out errors (``dsdsim.fit.cv``) of comparable corpus cases: measured on
the same engine family, the same architecture (dense or MoE) and in the same batch regime. Only quantities that
measure a step's absolute time enter (ITL, step time, tokens/s; ratios and speedups cancel most of a step's error
and would make the interval too narrow). With n residuals r = log(measured / predicted) of a stratum, the
``coverage`` interval is [exp(r_(lo)), exp(r_(hi))] times the prediction, r_(k) the k-th smallest residual at the
split-conformal ranks lo = floor((n + 1) a / 2), hi = ceil((n + 1)(1 - a / 2)) (a = 1 - coverage). A stratum with
fewer than ``min_cases`` residuals falls back to the engine family and architecture, then to the architecture,
then to every case; the interval says which stratum it used and its n.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

ABSOLUTE = {"itl_ms": 1.0, "step_ms": 1.0, "tokens_per_s": -1.0}   # sign of log(T_measured / T_predicted)
BATCH_REGIMES = ((1, 8, "1-8"), (9, 64, "9-64"), (65, 10**9, "65+"))
FAMILY_OF_ENGINE = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
INTERVALS_FILE = "intervals.json"


def batch_regime(batch: float) -> str:
    for lo, hi, label in BATCH_REGIMES:
        if lo <= batch <= hi:
            return label
    return BATCH_REGIMES[-1][2]


def engine_family(engine_name: Optional[str]) -> str:
    """The family a prediction's engine belongs to (vllm, sglang, trtllm; anything else kernels-only 'ideal')."""
    if engine_name is None:
        return "ideal"
    name = engine_name.split("-")[0] if engine_name.startswith("vllm") else engine_name
    return {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "tensorrt-llm": "trtllm"}.get(name, "ideal")


@dataclass(frozen=True)
class Interval:
    low: float            # factor on the prediction (measured / predicted at the lower rank)
    high: float
    n: int                # residuals behind it
    stratum: str          # which cases: "vllm/dense/9-64", "vllm/dense", "dense", "all"
    coverage: float

    def of(self, value: float) -> tuple[float, float]:
        return value * self.low, value * self.high


def _quantiles(residuals: Sequence[float], coverage: float) -> tuple[float, float]:
    r = sorted(residuals)
    n = len(r)
    a = 1.0 - coverage
    lo = max(math.floor((n + 1) * a / 2.0), 1)
    hi = min(math.ceil((n + 1) * (1.0 - a / 2.0)), n)
    return math.exp(r[lo - 1]), math.exp(r[hi - 1])


@dataclass
class StepTimeIntervals:
    """Split-conformal factors per stratum (module docstring); estimator conventions."""

    coverage: float = 0.8
    min_cases: int = 8
    strata_: dict = field(default_factory=dict, init=False)     # stratum -> (low, high, n)
    source_: str = field(default="", init=False)

    def fit(self, results) -> "StepTimeIntervals":
        """``results``: held-out CaseResults (``SourceCV.results``)."""
        pools: dict[str, list[float]] = {}
        for r in results:
            sign = ABSOLUTE.get(r.quantity)
            if sign is None or r.rel_error is None or r.rel_error <= -1 or r.batch_size is None:
                continue
            res = -sign * math.log1p(r.rel_error)     # log(T_measured / T_predicted)
            fam, arch = FAMILY_OF_ENGINE.get(r.engine, "ideal"), r.architecture
            for key in (f"{fam}/{arch}/{batch_regime(r.batch_size)}", f"{fam}/{arch}", arch, "all"):
                pools.setdefault(key, []).append(res)
        self.strata_ = {k: (*_quantiles(v, self.coverage), len(v)) for k, v in sorted(pools.items())
                        if len(v) >= min(self.min_cases, 2)}
        return self

    def interval(self, family: str, architecture: str, batch: float) -> Optional[Interval]:
        for key in (f"{family}/{architecture}/{batch_regime(batch)}", f"{family}/{architecture}", architecture, "all"):
            hit = self.strata_.get(key)
            if hit is not None and hit[2] >= self.min_cases:
                return Interval(hit[0], hit[1], hit[2], key, self.coverage)
        hit = self.strata_.get("all")
        return Interval(hit[0], hit[1], hit[2], "all", self.coverage) if hit else None

    def to_dict(self) -> dict:
        return {"method": __doc__.split("\n\n")[0].replace("\n", " "), "coverage": self.coverage,
                "min_cases": self.min_cases, "source": self.source_,
                "strata": {k: {"low": round(lo, 4), "high": round(hi, 4), "n": n}
                           for k, (lo, hi, n) in self.strata_.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "StepTimeIntervals":
        out = cls(coverage=float(d["coverage"]), min_cases=int(d["min_cases"]))
        out.strata_ = {k: (float(v["low"]), float(v["high"]), int(v["n"])) for k, v in d["strata"].items()}
        out.source_ = d.get("source", "")
        return out


_SHIPPED: dict = {}


def shipped_intervals() -> Optional[StepTimeIntervals]:
    """The intervals scripts/fit_engines.py wrote beside the corpus (measurements/intervals.json), read once."""
    if "v" not in _SHIPPED:
        from dsdsim.specs.catalog import shipped_dir

        path = Path(shipped_dir("measurements")) / INTERVALS_FILE
        _SHIPPED["v"] = StepTimeIntervals.from_dict(json.loads(path.read_text(encoding="utf-8"))) \
            if path.is_file() else None
    return _SHIPPED["v"]



