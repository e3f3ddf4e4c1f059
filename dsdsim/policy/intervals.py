"""Intervals on predicted step times, as shipped: the split-conformal factors per stratum of comparable corpus
cases (engine family x dense/MoE x batch regime) that ``dsdsim.fit.intervals.StepTimeIntervals`` fitted on the
leave-one-source-out errors and ``scripts/fit_engines.py`` wrote to ``measurements/intervals.json``.

A prediction at batch B on engine family F for architecture A takes the factors of the stratum F/A/regime(B); one
with too few cases falls back to F/A, then A, then every case, and the interval says which stratum it used and its n.
"""
from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path
from typing import Optional

from dsdsim.records import frozen

BATCH_REGIMES = ((1, 8, "1-8"), (9, 64, "9-64"), (65, 10**9, "65+"))
FAMILY_OF_ENGINE = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}   # corpus engine -> family
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


def strata_keys(family: str, architecture: str, batch: float) -> tuple[str, ...]:
    """The strata a case or a prediction belongs to, the narrowest first."""
    return f"{family}/{architecture}/{batch_regime(batch)}", f"{family}/{architecture}", architecture, "all"


@frozen
class Interval:
    """Factors on a predicted step time from the held-out errors of comparable corpus cases (one stratum)."""

    low: float            # factor on the prediction (measured / predicted at the lower rank)
    high: float
    n: int                # residuals behind it
    stratum: str          # which cases: "vllm/dense/9-64", "vllm/dense", "dense", "all"
    coverage: float

    def of(self, value: float) -> tuple[float, float]:
        return value * self.low, value * self.high


@frozen
class IntervalTable:
    """Fitted factors per stratum: stratum -> (low, high, n)."""

    coverage: float
    min_cases: int
    strata: dict = field(default_factory=dict)
    source: str = ""
    method: str = ""
    # quantiles of (R_measured - 1) / (R_predicted - 1) over held-out T(K)/T(0) pairs: (low, high, n), None where
    # none is shipped (``dsdsim.policy.margin``)
    extra_time: Optional[tuple] = None

    def interval(self, family: str, architecture: str, batch: float) -> Optional[Interval]:
        for key in strata_keys(family, architecture, batch):
            hit = self.strata.get(key)
            if hit is not None and hit[2] >= self.min_cases:
                return Interval(hit[0], hit[1], hit[2], key, self.coverage)
        hit = self.strata.get("all")
        return Interval(hit[0], hit[1], hit[2], "all", self.coverage) if hit else None

    def to_dict(self) -> dict:
        out = {"method": self.method, "coverage": self.coverage, "min_cases": self.min_cases, "source": self.source,
               "strata": {k: {"low": round(lo, 4), "high": round(hi, 4), "n": n}
                          for k, (lo, hi, n) in self.strata.items()}}
        if self.extra_time is not None:
            lo, hi, n = self.extra_time
            out["extra_time"] = {"low": round(lo, 4), "high": round(hi, 4), "n": n,
                                 "method": "split-conformal quantiles of (R_measured - 1) / (R_predicted - 1), R = "
                                           "T(K) / T(0), over the corpus's pairs predicted with their source held "
                                           "out (pairs whose predicted extra time is at least 5%)"}
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "IntervalTable":
        return cls(coverage=float(d["coverage"]), min_cases=int(d["min_cases"]),
                   strata={k: (float(v["low"]), float(v["high"]), int(v["n"])) for k, v in d["strata"].items()},
                   source=d.get("source", ""), method=d.get("method", ""),
                   extra_time=(float(d["extra_time"]["low"]), float(d["extra_time"]["high"]),
                               int(d["extra_time"]["n"])) if "extra_time" in d else None)


def step_interval(table: Optional[IntervalTable], setup, batch: float, memo: dict) -> Optional[Interval]:
    """The interval factors for a step of ``setup`` (a ``dsdsim.specs.setup.Setup``) at ``batch``: its engine's
    family, dense or MoE, the batch regime (None without a table); ``memo`` keeps one lookup per batch regime."""
    if table is None:
        return None
    regime = batch_regime(batch)
    if regime not in memo:
        eng = setup.engine
        arch = "moe" if setup.model.moe_ffn is not None else "dense"
        memo[regime] = table.interval(engine_family(eng.name if eng is not None else None), arch, batch)
    return memo[regime]


def ranged(interval: Optional[Interval], step_ms: float, itl_ms: float, tokens_per_s: float) -> dict:
    """A row's low/high figures under ``interval`` (the step time's factors; tokens/s moves the other way), all
    None without one: the ``*_low`` / ``*_high`` fields of ``predict``'s and the tree family's rows."""
    if interval is None:
        return {}
    lo, hi = interval.low, interval.high
    return {"step_ms_low": step_ms * lo, "step_ms_high": step_ms * hi, "itl_ms_low": itl_ms * lo,
            "itl_ms_high": itl_ms * hi, "tokens_per_s_low": tokens_per_s * (1 / hi),
            "tokens_per_s_high": tokens_per_s * (1 / lo)}


_SHIPPED: dict = {}


def shipped_intervals() -> Optional[IntervalTable]:
    """The intervals beside the corpus (measurements/intervals.json), read once; None where none is shipped."""
    if "v" not in _SHIPPED:
        from dsdsim.specs.catalog import shipped_dir

        path = Path(shipped_dir("measurements")) / INTERVALS_FILE
        _SHIPPED["v"] = IntervalTable.from_dict(json.loads(path.read_text(encoding="utf-8"))) \
            if path.is_file() else None
    return _SHIPPED["v"]
