"""Fit an engine spec's figures to measurement cases, the kernel model held fixed.

The residual of a case is log(predicted / measured) of its measured quantity, computed exactly as ``dsdsim
accuracy`` computes it (acceptance fitted per fit group where the source gives none). Bounded least squares
(scipy ``least_squares``, trust-region reflective) with a Cauchy loss, so one confounded case cannot drag the
figures; the start point and the bounds are fixed, so the fit is deterministic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

import numpy as np

from dsdsim.corpus.evaluate import CaseSteps, score, steps_or_error
from dsdsim.corpus.schema import Case, CorpusFile, Split
from dsdsim.cost.engine import EngineParams
from dsdsim.errors import DsdsimError
from dsdsim.specs.engine import EngineSpec, FitProvenance

# Physical bounds of each figure (seconds): no negative times; at most a few ms of host or speculative time per
# step, a fraction of a ms per draft pass, tens of us per sequence or verified token.
BOUNDS = {
    "host_step_s": (0.0, 5e-3),
    "host_per_sequence_s": (0.0, 100e-6),
    "spec_fixed_s": (0.0, 5e-3),
    "draft_pass_s": (0.0, 2e-3),
    "rejection_per_token_s": (0.0, 20e-6),
}
START_FRACTION = 0.1    # every fit starts at 10% of each figure's range
LOSS_SCALE = 0.1     # residuals (log ratio) well beyond ~10% weigh less and less (Cauchy loss)


@dataclass(frozen=True)
class EngineFit:
    spec: EngineSpec                 # the engine with its fitted figures and provenance
    values: dict[str, float]
    cases: tuple[str, ...]
    residuals: dict[str, float]      # case id -> predicted / measured - 1 after the fit
    before: dict[str, float]         # the same with the start values


def _round(seconds: float) -> float:
    """Three significant digits; below 10 ns a figure is zero (the fit sits on its lower bound)."""
    return 0.0 if seconds < 1e-8 else float(f"{seconds:.3g}")


def engine_train_cases(corpus: list[tuple[CorpusFile, Case]], engine_name: str) -> list[tuple[CorpusFile, Case]]:
    """The train cases predicted with ``engine_name`` by default (measured on that engine), evaluated ones only."""
    from dsdsim.corpus.evaluate import case_engine

    return [(cf, c) for cf, c in corpus if c.split is Split.train and c.not_evaluated is None
            and case_engine(c) == engine_name]


def _rel_errors(cases, steps: dict[str, CaseSteps], params: EngineParams) -> dict[str, float]:
    times = {cid: s.times(params) for cid, s in steps.items()}
    results, _ = score(cases, times)
    return {r.id: r.rel_error for r in results if r.rel_error is not None}


def fit_engine(spec: EngineSpec, cases: list[tuple[CorpusFile, Case]], keys: tuple[str, ...], date: str,
               method: str = "scripts/fit_engines.py") -> EngineFit:
    """Fit ``keys`` of ``spec`` on ``cases`` (each predicted with ``spec``); other figures stay as they are."""
    from scipy.optimize import least_squares

    if not cases:
        raise DsdsimError(f"no train case to fit engine {spec.name} on")
    if len(keys) >= len(cases):
        raise DsdsimError(f"{len(keys)} figures from {len(cases)} cases: fit fewer figures than cases")
    steps = {c.id: steps_or_error(c, spec) for _, c in cases}
    base = EngineParams.of(spec)
    lo = np.array([BOUNDS[k][0] for k in keys])
    hi = np.array([BOUNDS[k][1] for k in keys])
    x0 = lo + START_FRACTION * (hi - lo)      # a fixed start: the result does not depend on the file's old values
    scale = hi - lo

    def params(x) -> EngineParams:
        return EngineParams(**{**base.__dict__, **{k: float(v) for k, v in zip(keys, x)}})

    ids = [c.id for _, c in cases]

    def resid(x) -> np.ndarray:
        err = _rel_errors(cases, steps, params(x))
        return np.array([math.log1p(err[i]) for i in ids])

    res = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale, loss="cauchy", f_scale=LOSS_SCALE,
                        diff_step=1e-3, method="trf")
    values = {k: _round(v) for k, v in zip(keys, res.x)}
    after = _rel_errors(cases, steps, params([values[k] for k in keys]))
    before = _rel_errors(cases, steps, base)
    residuals = {i: round(after[i], 4) for i in ids}
    abs_res = [abs(v) for v in residuals.values()]
    fit = FitProvenance(method=f"{method}: bounded least squares (scipy least_squares, Cauchy loss scale "
                               f"{LOSS_SCALE} on log(predicted/measured)), kernel model fixed",
                        date=date, cases=tuple(ids), residuals=residuals,
                        median_abs_residual=round(median(abs_res), 4), max_abs_residual=round(max(abs_res), 4))
    source = f"fitted by {method} on {len(ids)} train cases of the measurement corpus (see fit)"
    fitted = spec.with_values(values, source, cases=tuple(ids), bounds={k: BOUNDS[k] for k in keys}, fit=fit)
    return EngineFit(fitted, values, tuple(ids), residuals, {i: round(before[i], 4) for i in ids})
