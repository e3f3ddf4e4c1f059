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

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from dsdsim.policy.intervals import FAMILY_OF_ENGINE, Interval, IntervalTable, strata_keys

ABSOLUTE = {"itl_ms": 1.0, "step_ms": 1.0, "tokens_per_s": -1.0}   # sign of log(T_measured / T_predicted)


def _quantiles(residuals: Sequence[float], coverage: float) -> tuple[float, float]:
    r = sorted(residuals)
    n = len(r)
    a = 1.0 - coverage
    lo = max(math.floor((n + 1) * a / 2.0), 1)
    hi = min(math.ceil((n + 1) * (1.0 - a / 2.0)), n)
    return math.exp(r[lo - 1]), math.exp(r[hi - 1])


@dataclass
class StepTimeIntervals:
    """Split-conformal factors per stratum (module docstring); estimator conventions. ``fit`` learns ``table_``, the
    IntervalTable that predictions read (``dsdsim.policy.intervals``)."""

    coverage: float = 0.8
    min_cases: int = 8
    table_: Optional[IntervalTable] = field(default=None, init=False)

    def fit(self, results, source: str = "", pairs=()) -> "StepTimeIntervals":
        """``results``: held-out CaseResults (``SourceCV.results``); ``source``: what they are, for the file;
        ``pairs``: the held-out T(K)/T(0) pairs, for the extra time's quantiles (``extra_time_quantiles``)."""
        pools: dict[str, list[float]] = {}
        for r in results:
            sign = ABSOLUTE.get(r.quantity)
            if sign is None or r.rel_error is None or r.rel_error <= -1 or r.batch_size is None:
                continue
            res = -sign * math.log1p(r.rel_error)     # log(T_measured / T_predicted)
            for key in strata_keys(FAMILY_OF_ENGINE.get(r.engine, "ideal"), r.architecture, r.batch_size):
                pools.setdefault(key, []).append(res)
        strata = {k: (*_quantiles(v, self.coverage), len(v)) for k, v in sorted(pools.items())
                  if len(v) >= min(self.min_cases, 2)}
        self.table_ = IntervalTable(self.coverage, self.min_cases, strata, source,
                                    method=__doc__.split("\n\n")[0].replace("\n", " "),
                                    extra_time=extra_time_quantiles(pairs, self.coverage) if pairs else None)
        return self

    @property
    def strata_(self) -> dict:
        return self.table_.strata

    def interval(self, family: str, architecture: str, batch: float) -> Optional[Interval]:
        return self.table_.interval(family, architecture, batch)


MIN_EXTRA = 0.05       # pairs whose predicted extra time R - 1 is below this say little about its error


def extra_time_quantiles(pairs, coverage: float = 0.8) -> Optional[tuple[float, float, int]]:
    """(low, high, n): split-conformal quantiles of f = (R_measured - 1) / (R_predicted - 1) over T(K)/T(0) pairs
    (``dsdsim.corpus.checks.StepRatio``) whose predicted extra time is at least ``MIN_EXTRA``; f is kept positive
    (a measured ratio below 1 counts as no extra time). None with fewer than 5 pairs. ``dsdsim.policy.margin``
    reads them: the interval of a step-time ratio is 1 + (R_predicted - 1) [low, high]."""
    f = [max(r.measured - 1.0, 0.0) / (r.predicted - 1.0) for r in pairs if r.predicted - 1.0 >= MIN_EXTRA]
    if len(f) < 5:
        return None
    lo, hi = _quantiles([math.log(max(v, 1e-3)) for v in f], coverage)
    return lo, hi, len(f)
