"""Leave one source out: the error a new user should expect from the shipped defaults.

For every source of the corpus (one measurement file: a paper, a PR, a blog), every fitted engine term is fitted
again on the train cases of all OTHER sources (``dsdsim.fit.engine.EngineFit``), and that source's cases are
predicted with those figures. A test source was never fitted on, so its held-out prediction is its ordinary one.
Acceptance fitted where a source gives none (``handling: fitted``) is fitted within the held-out source, as a user
would measure their own drafter's acceptance; such cases are counted apart (``acceptance_fitted``).
"""
from __future__ import annotations

from dataclasses import asdict, field
from statistics import median
from typing import Callable, Optional

import numpy as np

from dsdsim.corpus.evaluate import CaseResult, CaseSteps, score
from dsdsim.corpus.schema import AcceptanceHandling, Case, CorpusFile
from dsdsim.records import frozen


@frozen
class SourceScore:
    """The held-out error of one source's cases."""

    source: str
    split: str                    # train | test | mixed
    n: int
    median_abs_rel_error: Optional[float]
    max_abs_rel_error: Optional[float]
    acceptance_fitted: int        # cases whose acceptance was fitted within the source
    cases: dict = field(default_factory=dict)    # case id -> held-out predicted / measured - 1


@frozen
class SourceCV:
    sources: dict[str, SourceScore]
    results: list[CaseResult]     # every evaluated case, predicted with its source held out

    @property
    def median_of_source_medians(self) -> Optional[float]:
        meds = [s.median_abs_rel_error for s in self.sources.values() if s.median_abs_rel_error is not None]
        return float(median(meds)) if meds else None

    @property
    def worst_source(self) -> Optional[SourceScore]:
        scored = [s for s in self.sources.values() if s.median_abs_rel_error is not None]
        return max(scored, key=lambda s: s.median_abs_rel_error) if scored else None

    def overall(self, split: Optional[str] = None) -> dict:
        errs = [abs(r.rel_error) for r in self.results if r.rel_error is not None
                and (split is None or r.split == split)]
        return {"n": len(errs), "median_abs_rel_error": float(median(errs)) if errs else None,
                "max_abs_rel_error": max(errs) if errs else None}

    def to_dict(self) -> dict:
        """``cv.sources.<source>.median_abs_rel_error`` and the overall figures (the JSON contract)."""
        return {"method": "leave one source out: every fitted engine term refitted without the source, the source "
                          "predicted",
                "median_of_source_medians": self.median_of_source_medians,
                "overall": self.overall(), "train": self.overall("train"), "test": self.overall("test"),
                "sources": {k: asdict(v) for k, v in self.sources.items()}}


def source_of(cf: CorpusFile) -> str:
    return cf.source.url


def source_cv(corpus: list[tuple[CorpusFile, Case]], steps: dict[str, CaseSteps],
              results: Optional[list[CaseResult]] = None,
              progress: Optional[Callable[[int, int], None]] = None) -> SourceCV:
    """Hold out each source in turn (module docstring). ``results``: the in-sample results, reused for sources no
    fit ever reads (test sources and those without engine-fitted cases)."""
    from dsdsim.fit.engine import EngineFit, fit_cases

    by_source: dict[str, list[tuple[CorpusFile, Case]]] = {}
    for cf, c in corpus:
        if c.not_evaluated is None and c.id in steps:
            by_source.setdefault(source_of(cf), []).append((cf, c))
    fitted_sources = {source_of(cf) for cf, _ in fit_cases(corpus, steps)}
    if results is None:
        results, _ = score(corpus, {cid: s.times() for cid, s in steps.items()}, steps)
    own = {r.id: r for r in results}
    held: list[CaseResult] = []
    scores: dict[str, SourceScore] = {}
    for i, (src, cases) in enumerate(sorted(by_source.items())):
        if src in fitted_sources:
            fit = EngineFit().fit(corpus, steps, exclude_sources=(src,))
            params = fit.params_function(fit.values_)
            times = {c.id: steps[c.id].times(params) for _, c in cases}
            out, _ = score(cases, times, steps)
        else:
            out = [own[c.id] for _, c in cases]
        held += out
        errs = [r.rel_error for r in out if r.rel_error is not None]
        splits = {c.split.value for _, c in cases}
        abs_errs = [abs(e) for e in errs]
        scores[src] = SourceScore(src, splits.pop() if len(splits) == 1 else "mixed", len(errs),
                                  float(median(abs_errs)) if abs_errs else None, max(abs_errs) if abs_errs else None,
                                  sum(1 for _, c in cases if c.acceptance.handling is AcceptanceHandling.fitted),
                                  {r.id: round(r.rel_error, 4) for r in out if r.rel_error is not None})
        if progress is not None:
            progress(i + 1, len(by_source))
    return SourceCV(scores, held)


def accuracy_with_source_cv(split: str = "all", measured_on: Optional[str] = None, corpus=None,
                            progress: Optional[Callable[[int, int], None]] = None):
    """``dsdsim.corpus.evaluate.accuracy`` with shipped defaults plus ``cv``: every fitted figure refitted without
    each source in turn, that source predicted (``source_cv``; ``dsdsim accuracy --cv source``)."""
    from dataclasses import replace

    from dsdsim.corpus.evaluate import evaluation

    ev = evaluation(split, measured_on, corpus)
    return replace(ev.report, cv=source_cv(ev.cases, ev.steps, ev.results, progress))



# --- calibrated on a few points of a source's own grid -------------------------------------------------------

POINTS_MIN = 8            # a source grid needs this many (batch, K) points to calibrate on some and score the rest
POINTS_DEFAULT = 6        # the points calibrated on: what `dsdsim calibrate --plan 6` would pick
POINT_QUANTITIES = ("itl_ms", "tpot_p50_ms", "step_ms", "tokens_per_s")   # a step time at (batch, K, context)


@frozen
class GridScore:
    """One source grid calibrated on the N points the plan rule picks, the rest scored."""

    source: str
    setup: str                    # model on hardware, tp, drafter, engine spec
    split: str
    n_points: int
    calibrated_on: list[str]      # the points' case ids
    median_abs_rel_error: Optional[float]          # held-out points, calibrated
    max_abs_rel_error: Optional[float]
    uncalibrated_median_abs_rel_error: Optional[float]   # the same held-out points, shipped figures
    regret_mean: Optional[float]  # K chosen by the calibrated model among the K measured at one batch and context
    regret_max: Optional[float]
    uncalibrated_regret_mean: Optional[float]
    uncalibrated_regret_max: Optional[float]
    figures: dict = field(default_factory=dict)    # figure -> fitted / prior
    cases: dict = field(default_factory=dict)      # held-out case id -> calibrated predicted / measured - 1


@frozen
class PointsCV:
    n: int
    grids: dict[str, GridScore]

    def to_dict(self) -> dict:
        """``cv.points.<source>.median_abs_rel_error``, ``.regret_mean``, ``.regret_max`` (the JSON contract); a
        source with several grids (models, engines) is keyed ``<source> [<setup>]``."""
        return {"points_method": f"calibrate (dsdsim calibrate --measurements) on the {self.n} points `dsdsim "
                                 f"calibrate --plan {self.n}` picks among each source grid's measured points "
                                 f"(grids of >= {POINTS_MIN}), score the rest; regret over every batch and context "
                                 "the grid measured several K at",
                "points_n": self.n, "points": {k: asdict(v) for k, v in self.grids.items()}}


def accuracy_with_points_cv(split: str = "all", measured_on: Optional[str] = None, corpus=None, n: int = POINTS_DEFAULT,
                            progress: Optional[Callable[[int, int], None]] = None):
    """``dsdsim.corpus.evaluate.accuracy`` with ``cv`` the points cross-validation (``points_cv``; ``dsdsim
    accuracy --cv points[:N]``)."""
    from dataclasses import replace

    from dsdsim.corpus.evaluate import evaluation

    ev = evaluation(split, measured_on, corpus)
    return replace(ev.report, cv=points_cv(ev.cases, n, progress))


def _point_itl_ms(case: Case, tau: float) -> Optional[float]:
    q, v, b = case.measured.quantity.value, case.measured.value, case.conditions.batch_size
    if q in ("itl_ms", "tpot_p50_ms"):
        return v
    if q == "step_ms":
        return v / tau
    if q == "tokens_per_s":
        return 1e3 * b / v
    return None


def _serving_lengths(cond) -> tuple:
    """(prompt, output) of an end-to-end case whose benchmark used fixed lengths: its TPOT includes the steps that ran
    other requests' prefills (``MeasuredPoint``); (None, None) for a step-level case or other length forms."""
    sv = cond.serving
    if sv is None:
        return None, None
    try:
        return float(sv.input_len), float(sv.output_len)
    except ValueError:
        return None, None


def source_grids(corpus: list[tuple[CorpusFile, Case]]) -> dict[tuple, list[tuple[Case, object]]]:
    """Each source's per-(batch, K) measured points, grouped by everything but batch, K and context (model, hardware,
    parallelism, formats, drafter, engine version): K = 0 cases join every drafter's grid of the same setup. Points
    are ITL or TPOT, step times or tokens/s at a batch, with the acceptance the source reports (fitted acceptance is
    left out); one point per (batch, K, context), ITL preferred."""
    from dsdsim.corpus.evaluate import reported_tau
    from dsdsim.fit.points import MeasuredPoint

    by_setup: dict[tuple, dict] = {}
    for cf, c in corpus:
        cond = c.conditions
        if (c.not_evaluated is not None or c.measured.quantity.value not in POINT_QUANTITIES or cond.tree is not None
                or cond.dynamic_k or cond.batch_size is None or cond.context_tokens is None
                or c.acceptance.handling in (AcceptanceHandling.fitted, AcceptanceHandling.assumed)):
            continue
        tau = reported_tau(c)[0]
        if tau is None:
            continue
        itl = _point_itl_ms(c, tau)
        lengths = _serving_lengths(cond)
        key = (source_of(cf), cond.model, cond.hardware, cond.tp, cond.ep, cond.dtype, cond.kv_dtype, cond.engine,
               cond.engine_version, cond.dp_attention, cond.async_scheduling, cond.model_runner)
        pt = MeasuredPoint(int(cond.batch_size), int(cond.k), int(cond.context_tokens), float(itl), float(tau),
                           *lengths)
        slot = by_setup.setdefault(key, {})
        prefer = c.measured.quantity.value in ("itl_ms", "tpot_p50_ms")
        at = (cond.drafter, cond.engine_method, pt.batch, pt.k, pt.context)
        if at not in slot or (prefer and not slot[at][2]):
            slot[at] = (c, pt, prefer)
    grids: dict[tuple, list] = {}
    for key, slot in by_setup.items():
        plain = [(c, pt) for (d, _, _, k, _), (c, pt, _) in slot.items() if k == 0]
        for (d, method, *_), (c, pt, _) in slot.items():
            if d is not None:
                grids.setdefault((*key, d, method), []).append((c, pt))
        for gkey in [g for g in grids if g[:len(key)] == key]:
            grids[gkey] += [m for m in plain if m[0].id not in {x[0].id for x in grids[gkey]}]
    return {k: sorted(v, key=lambda m: (m[1].k, m[1].batch, m[1].context))
            for k, v in grids.items() if len(v) >= POINTS_MIN and any(p.k == 0 for _, p in v)
            and any(p.k > 0 for _, p in v)}


def _regret(points, itl_pred) -> list[float]:
    """1 - G(K_pred) / G(K_best) per (batch, context) measured at several K, G = 1 / ITL measured."""
    groups: dict = {}
    for p, f in zip(points, itl_pred):
        groups.setdefault((p.batch, p.context), []).append((p, f))
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        best = min(m[0].itl_ms for m in members)
        chosen = min(members, key=lambda m: m[1])[0]
        out.append(1.0 - best / chosen.itl_ms)
    return out


def points_cv(corpus: list[tuple[CorpusFile, Case]], n: int = POINTS_DEFAULT,
              progress: Optional[Callable[[int, int], None]] = None) -> PointsCV:
    """For every source grid with >= ``POINTS_MIN`` points (``source_grids``): calibrate (``ShapeCalibration``) on the
    ``n`` points the plan rule picks (``choose_points``), score the other points and the K choice."""
    from dsdsim.corpus.cases import case_deployment, case_engine
    from dsdsim.fit.shape import ShapeCalibration, StepModel, choose_points
    from dsdsim.specs.drafter import parse_drafter
    from dsdsim.specs.setup import resolve

    grids = source_grids(corpus)
    out: dict[str, GridScore] = {}
    for i, (key, members) in enumerate(sorted(grids.items(), key=lambda kv: str(kv[0]))):
        cond = next(c.conditions for c, p in members if p.k > 0)
        setup = resolve(cond.model, cond.hardware, case_deployment(cond), parse_drafter(cond.drafter),
                        engine=case_engine(cond), async_scheduling=cond.async_scheduling,
                        engine_method=cond.engine_method, model_runner=cond.model_runner)
        points = [p for _, p in members]
        model = StepModel(setup, cond.async_scheduling, cond.engine_method)
        chosen = choose_points(model, points, min(n, len(points) - 1))
        cal = ShapeCalibration(setup, cond.async_scheduling, cond.engine_method).fit([points[j] for j in chosen],
                                                                                    leave_one_out=False)
        fitted = cal.predict_ms(points)
        shipped = cal.predict_ms(points, np.ones(len(cal.factors_)))
        held = [j for j in range(len(points)) if j not in chosen]
        errs = {members[j][0].id: float(fitted[j] / points[j].itl_ms - 1.0) for j in held}
        errs0 = [abs(shipped[j] / points[j].itl_ms - 1.0) for j in held]
        reg, reg0 = _regret(points, fitted), _regret(points, shipped)
        splits = {m[0].split.value for m in members}
        label = (f"{setup.model.name} on {setup.hardware.name} tp {setup.deployment.tp}, {setup.drafter.label}, "
                 f"{case_engine(cond)}")
        name = key[0] if sum(1 for g in grids if g[0] == key[0]) == 1 else f"{key[0]} [{label}]"
        abs_errs = [abs(e) for e in errs.values()]
        out[name] = GridScore(key[0], label, splits.pop() if len(splits) == 1 else "mixed", len(points),
                              [members[j][0].id for j in chosen],
                              float(median(abs_errs)) if abs_errs else None, max(abs_errs) if abs_errs else None,
                              float(median(errs0)) if errs0 else None,
                              float(np.mean(reg)) if reg else None, max(reg) if reg else None,
                              float(np.mean(reg0)) if reg0 else None, max(reg0) if reg0 else None,
                              {f.kind.name: round(f.factor, 4) for f in cal.figures_},
                              {cid: round(e, 4) for cid, e in errs.items()})
        if progress is not None:
            progress(i + 1, len(grids))
    return PointsCV(n, out)
