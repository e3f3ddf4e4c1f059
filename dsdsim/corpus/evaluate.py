"""Predict every corpus case with the shipped defaults (no calibration) and measure the error.

A case is one or two *runs*: the configuration it measured and, for a ratio, the configuration it divides by
(``relative_to``). For one run: T = the step time at the run's K (or tree, or the K = 0 tier of a speculative
server), T0 = the plain-decoding step time of a server without speculation at the same batch and context, tau =
the tokens one step emits (the acceptance the source reports, one constant alpha fitted over the case's fit
group, or nothing where it cancels). The quantity follows ``dsdsim.corpus.schema`` (itl_ms = T/tau, tokens_per_s
= B*tau/T, speedup_vs_no_sd = tau*T0/T, ...); relative error = predicted / measured - 1.

Each run is predicted with the engine spec of the engine version it was measured on (``case_engine``): vLLM,
SGLang and TensorRT-LLM by version range (``engine_specs/``), compiled decode loops (gpt-fast, MagicDec) with the
kernels-only ``ideal`` spec.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Callable, Iterable, Optional

from dsdsim.corpus.checks import Checks, checks
from dsdsim.corpus.cases import case_deployment, case_engine, source_text, tau_of_alpha
from dsdsim.corpus.results import CaseResult, FittedAcceptance
from dsdsim.corpus.schema import (AcceptanceHandling, Case, Conditions, CorpusFile, Quantity, Split, load_corpus)
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

ALPHA_BOUNDS = (0.01, 0.99)     # a fitted constant alpha stays inside (0, 1)
GROUP_AXES = ("architecture", "engine", "drafter")


@frozen
class CaseTimes:
    """Predicted physics of one case: its run, and for a ratio the run it divides by (``ref_*``)."""

    step_s: float          # T at the case's K (tree: STEPS draft passes + a verify of draft_tokens per sequence)
    plain_step_s: float    # T0: plain decoding on a server without speculation, same batch and context
    fits_in_memory: bool
    architecture: str      # "dense" | "moe"
    drafter_kind: str      # DrafterKind value, or "none"
    ref_step_s: Optional[float] = None
    ref_plain_step_s: Optional[float] = None


@frozen
class ErrorSummary:
    n: int
    median_abs_rel_error: Optional[float]
    max_abs_rel_error: Optional[float]


@frozen
class GroupSummary:
    split: str
    axis: str        # architecture | engine | drafter
    value: str
    summary: ErrorSummary


@frozen
class AccuracyReport:
    cases: list[CaseResult]                  # the selected cases (split / engine filters applied)
    summary: dict[str, ErrorSummary]         # "train", "test": over the selected cases; where end-to-end cases
                                             # are among them, also "train_step" / "train_e2e" (and test_*) apart
    groups: list[GroupSummary]
    fitted: list[FittedAcceptance]           # acceptance fitted where the source gives none
    cv: Optional[object] = None              # dsdsim.fit.cv.SourceCV when asked for (--cv source)
    checks: Optional[Checks] = None          # T(K)/T(0) pairs and the K choice (dsdsim.corpus.checks)

    def to_dict(self) -> dict:
        """The JSON contract: ``cases`` and ``summary`` (train, test), plus groups, fitted acceptance and, with
        ``--cv source``, ``cv`` (``cv.sources.<source>.median_abs_rel_error``)."""
        out = {"cases": [asdict(c) for c in self.cases],
               "summary": {k: asdict(v) for k, v in self.summary.items()},
               "groups": [{"split": g.split, "axis": g.axis, "value": g.value, **asdict(g.summary)}
                          for g in self.groups],
               "fitted_acceptance": [asdict(f) for f in self.fitted]}
        if self.checks is not None:
            out["checks"] = self.checks.to_dict()
        if self.cv is not None:
            out["cv"] = self.cv.to_dict()
        return out


# --- physics of one case --------------------------------------------------------------------------------

@frozen
class Run:
    """One simulated configuration of a case: the step it measured and plain decoding at the same batch."""

    step: object           # dsdsim.cost.step.StepCost
    plain: object          # a server without speculation, same batch and context
    engine: object         # the EngineSpec it was predicted with (None: kernels only)
    engine_file: Optional[str]
    async_scheduling: Optional[bool]
    engine_method: Optional[str]
    batch: int
    architecture: str
    drafter_kind: str

    def times(self, params=None) -> tuple[float, float]:
        """(T, T0) with the steps' own engine figures, or with ``params(spec, async_scheduling, drafter)`` giving
        the EngineParams of each spec (fitting)."""
        if params is None or self.engine is None:
            return float(self.step.step_time_s), float(self.plain.step_time_s)
        step = float(self.step.step_time_with(params(self.engine, self.async_scheduling, self.step.drafter,
                                                     self.engine_method)))
        plain = float(self.plain.step_time_with(params(self.engine, self.async_scheduling, None, None)))
        return step, plain


@frozen
class CaseSteps:
    """The run of a case and, for a ratio, its reference run."""

    run: Run
    ref: Optional[Run] = None

    @property
    def engines(self) -> tuple:
        return tuple(r.engine for r in (self.run, self.ref) if r is not None and r.engine is not None)

    @property
    def drafter_kinds(self) -> tuple:
        """The drafter kind (or the engine's method) of each run; None for plain decoding."""
        return tuple(r.engine_method or (None if r.drafter_kind == "none" else r.drafter_kind)
                     for r in (self.run, self.ref) if r is not None)

    def times(self, params=None) -> CaseTimes:
        """CaseTimes with the steps' own engine figures, or with ``params`` giving each engine spec's EngineParams
        (fitting; ``Run.times``)."""
        t, t0 = self.run.times(params)
        rt = self.ref.times(params) if self.ref is not None else (None, None)
        return CaseTimes(t, t0, bool(self.run.step.feasible), self.run.architecture, self.run.drafter_kind, *rt)


def _run(c: Conditions, engine=None) -> Run:
    """Simulate one configuration through the public cost model. A tree draft runs as the cost layer models trees:
    STEPS draft passes over TOPK candidates, a verify of draft_tokens per sequence."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.specs.drafter import DraftTree, parse_drafter
    from dsdsim.specs.setup import resolve

    dep = case_deployment(c)
    drafter = parse_drafter(c.drafter) if c.drafter else None
    k = c.k
    if drafter is not None and c.tree is not None:
        tree = DraftTree(steps=c.tree.steps, topk=c.tree.topk, tokens=c.tree.draft_tokens - 1)
        drafter = drafter.model_copy(update={"max_k": 64, "tree": tree})
        k = c.tree.steps
    eng = case_engine(c, engine)
    setup = resolve(c.model, c.hardware, dep, drafter, engine=eng, async_scheduling=c.async_scheduling,
                    engine_method=c.engine_method, model_runner=c.model_runner)
    plain_setup = setup if drafter is None else resolve(c.model, c.hardware, dep, None, engine=eng,
                                                         async_scheduling=c.async_scheduling,
                                                         model_runner=c.model_runner)
    plain = simulate_step(None, None, batch=c.batch_size, k=0, context=c.context_tokens, setup=plain_setup)
    if drafter is None:
        step = plain
    else:
        step = simulate_step(None, None, batch=c.batch_size, k=k, context=c.context_tokens, setup=setup,
                             dynamic=c.dynamic_k)
    arch = "moe" if setup.model.moe_ffn is not None else "dense"
    kind = drafter.kind.value if drafter is not None else "none"
    return Run(step, plain, setup.engine, setup.engine_source, c.async_scheduling, c.engine_method, c.batch_size,
               arch, kind)


def case_steps(case: Case, engine=None) -> CaseSteps:
    """Simulate an evaluated case: its run and, for a ratio, the run it divides by."""
    c = case.conditions
    ref = case.measured.relative_to
    return CaseSteps(_run(c, engine), _run(ref.applied_to(c), engine) if ref is not None else None)


# --- quantities and acceptance ----------------------------------------------------------------------------


def predict_quantity(quantity: Quantity, batch: int, tau: Optional[float], step_s: float,
                     plain_step_s: float) -> float:
    """The measured quantity from T, T0 and tau (module docstring)."""
    if quantity is Quantity.step_ms:
        return step_s * 1e3
    if quantity is Quantity.step_time_ratio:
        return step_s / plain_step_s
    if tau is None:
        raise DsdsimError(f"{quantity.value} needs the tokens per step (tau)")
    if quantity is Quantity.itl_ms:
        return step_s / tau * 1e3
    if quantity is Quantity.tokens_per_s:
        return batch * tau / step_s
    if quantity is Quantity.speedup_vs_no_sd:
        return tau * plain_step_s / step_s
    raise DsdsimError(f"{quantity.value} is not a step-level quantity")


def predict_case(case: Case, t: CaseTimes, tau: Optional[float], tau_ref: Optional[float] = None) -> float:
    """The case's measured quantity from its predicted times: one run, or a ratio of two."""
    c, m = case.conditions, case.measured
    if m.quantity is not Quantity.ratio:
        return predict_quantity(m.quantity, c.batch_size, tau, t.step_s, t.plain_step_s)
    ref = m.relative_to.applied_to(c)
    num = predict_quantity(m.ratio_of, c.batch_size, tau, t.step_s, t.plain_step_s)
    den = predict_quantity(m.ratio_of, ref.batch_size, tau_ref, t.ref_step_s, t.ref_plain_step_s)
    return num / den


def _draft_length(c: Conditions) -> int:
    """K for tau: the chain length, or a tree's depth (the most tokens a tree step can accept)."""
    return c.tree.steps if c.tree is not None else c.k


def reported_tau(case: Case) -> tuple[Optional[float], Optional[float], str]:
    """(tau, tau of the reference run, description) for reported / not-needed / cancelling acceptance."""
    a, c = case.acceptance, case.conditions
    k = _draft_length(c)
    if a.handling is AcceptanceHandling.cancels:
        return 1.0, 1.0, "cancels (same drafter, K and data in both runs)"
    if a.handling is AcceptanceHandling.not_needed:
        if k == 0:
            return 1.0, 1.0, "none (plain decoding)"
        return None, None, "not needed (ratio of step times)"
    said = a.handling.value          # reported, or assumed (from another source, named in the case's note)
    if case.measured.quantity is Quantity.ratio:
        return a.al, a.al_reference, f"AL {a.al:g} / {a.al_reference:g} {said}"
    if a.al is not None:
        return a.al, None, f"AL {a.al:g} {said}"
    return tau_of_alpha(a.alpha, k), None, f"alpha {a.alpha:g} {said} (tau {tau_of_alpha(a.alpha, k):.2f} at K={k})"


def fit_alpha(cases: list[tuple[Case, CaseTimes]]) -> float:
    """One constant alpha minimising the squared log error over the cases (bounded scalar search)."""
    from scipy.optimize import minimize_scalar

    def loss(alpha: float) -> float:
        total = 0.0
        for case, t in cases:
            tau = tau_of_alpha(alpha, _draft_length(case.conditions))
            pred = predict_case(case, t, tau)
            total += math.log(pred / case.measured.value) ** 2
        return total

    res = minimize_scalar(loss, bounds=ALPHA_BOUNDS, method="bounded", options={"xatol": 1e-6})
    return float(res.x)


# --- the whole corpus ---------------------------------------------------------------------------------------


def summarize(results: Iterable[CaseResult]) -> ErrorSummary:
    errs = [abs(r.rel_error) for r in results if r.rel_error is not None]
    if not errs:
        return ErrorSummary(0, None, None)
    return ErrorSummary(len(errs), float(median(errs)), float(max(errs)))


def _skipped(cf: CorpusFile, case: Case) -> CaseResult:
    c = case.conditions
    return CaseResult(case.id, source_text(cf, case), case.split.value, case.measured.quantity.value,
                      case.measured.value, None, None, case.tag.value, c.engine, "unknown",
                      "unknown", f"{case.acceptance.handling.value}", None, None, case.not_evaluated,
                      c.engine_version, None, c.batch_size)


def steps_or_error(case: Case, engine=None) -> CaseSteps:
    try:
        return case_steps(case, engine)
    except DsdsimError as exc:
        raise type(exc)(f"measurement case {case.id}: {exc}") from None


def all_case_steps(corpus: list[tuple[CorpusFile, Case]], engine=None,
                   progress: Optional[Callable[[int, int], None]] = None) -> dict[str, CaseSteps]:
    """The simulated steps of every evaluated step-level case (progress(done, total)); the end-to-end cases are
    simulated as serving runs instead (``dsdsim.corpus.serving``)."""
    todo = [c for _, c in corpus if c.not_evaluated is None and c.conditions.serving is None]
    out = {}
    for i, case in enumerate(todo):
        out[case.id] = steps_or_error(case, engine)
        if progress is not None:
            progress(i + 1, len(todo))
    return out


def evaluate(corpus: list[tuple[CorpusFile, Case]], progress: Optional[Callable[[int, int], None]] = None,
             engine=None) -> tuple[list[CaseResult], list[FittedAcceptance]]:
    """Every case of the corpus, in corpus order; fitted acceptance per fit group. progress(done, total).
    ``engine``: one engine spec for every case; None: each case's own engine and version (``case_engine``)."""
    steps = all_case_steps(corpus, engine, progress)
    results, fitted = score(corpus, {cid: s.times() for cid, s in steps.items()}, steps)
    return with_serving(corpus, results, fitted, engine)


def with_serving(corpus: list[tuple[CorpusFile, Case]], results: list[CaseResult], fitted: list[FittedAcceptance],
                 engine=None) -> tuple[list[CaseResult], list[FittedAcceptance]]:
    """The step-level results with the end-to-end cases predicted through the serving simulation, in corpus
    order (``dsdsim.corpus.serving``)."""
    from dsdsim.corpus.serving import serving_results

    rows, serving_fitted = serving_results(corpus, engine)
    by_id = {r.id: r for r in results}
    by_id.update({r.id: r for r in rows})
    ordered = [by_id[c.id] for _, c in corpus if c.id in by_id]
    return ordered, fitted + serving_fitted


def score(corpus: list[tuple[CorpusFile, Case]], times: dict[str, CaseTimes],
          steps: Optional[dict[str, CaseSteps]] = None) -> tuple[list[CaseResult], list[FittedAcceptance]]:
    """Results from predicted times: acceptance fitted per fit group over the cases present, then each quantity."""
    todo = [(cf, c) for cf, c in corpus if c.not_evaluated is None and c.id in times]
    groups: dict[str, list[tuple[Case, CaseTimes]]] = {}
    for _, case in todo:
        if case.acceptance.handling is AcceptanceHandling.fitted:
            groups.setdefault(case.acceptance.fit_group, []).append((case, times[case.id]))
    fitted = [FittedAcceptance(g, members[0][0].split.value, fit_alpha(members), len(members))
              for g, members in sorted(groups.items())]
    alpha_of = {f.group: f for f in fitted}
    results = []
    for cf, case in corpus:
        if case.not_evaluated is not None:
            results.append(_skipped(cf, case))
            continue
        if case.id not in times:
            continue
        t = times[case.id]
        if case.acceptance.handling is AcceptanceHandling.fitted:
            f = alpha_of[case.acceptance.fit_group]
            tau, tau_ref = tau_of_alpha(f.alpha, _draft_length(case.conditions)), None
            how = f"alpha {f.alpha:.3f} fitted over {f.group} (n={f.n})"
        else:
            tau, tau_ref, how = reported_tau(case)
        c = case.conditions
        pred = predict_case(case, t, tau, tau_ref)
        run = steps[case.id].run if steps is not None else None
        results.append(CaseResult(case.id, source_text(cf, case), case.split.value, case.measured.quantity.value,
                                  case.measured.value, pred, pred / case.measured.value - 1.0, case.tag.value,
                                  c.engine, t.architecture, t.drafter_kind, how, tau, t.fits_in_memory, None,
                                  c.engine_version, run.engine_file if run is not None else None, c.batch_size))
    return results, fitted


def group_summaries(results: list[CaseResult]) -> list[GroupSummary]:
    out = []
    for split in (Split.train.value, Split.test.value):
        rows = [r for r in results if r.split == split and r.rel_error is not None]
        for axis in GROUP_AXES:
            key = {"architecture": "architecture", "engine": "engine", "drafter": "drafter_kind"}[axis]
            for value in sorted({getattr(r, key) for r in rows}):
                out.append(GroupSummary(split, axis, value, summarize(r for r in rows if getattr(r, key) == value)))
    return out


SPLITS = ("train", "test", "all")


def accuracy(split: str = "all", measured_on: Optional[str] = None, corpus: Optional[Path | str] = None,
             progress: Optional[Callable[[int, int], None]] = None, engine=None) -> AccuracyReport:
    """Evaluate the measurement corpus with shipped defaults; keep the cases of ``split`` (train | test | all) and,
    when given, those ``measured_on`` one engine (the case's conditions.engine, e.g. vllm, sglang).

    ``engine``: an engine spec (name, path or spec) used for every case, e.g. ``ideal`` for kernels only; None:
    each case is predicted with the engine and version it was measured on (``case_engine``). The error with each
    source held out of the fit is ``dsdsim.fit.cv.accuracy_with_source_cv``."""
    return evaluation(split, measured_on, corpus, progress, engine).report


@frozen
class Evaluation:
    """What one evaluation of the corpus computed: the cases, each case's steps, every result, and the report."""

    cases: list
    steps: dict
    results: list
    report: AccuracyReport


def evaluation(split: str = "all", measured_on: Optional[str] = None, corpus: Optional[Path | str] = None,
               progress: Optional[Callable[[int, int], None]] = None, engine=None) -> Evaluation:
    """``accuracy`` with the steps and the unfiltered results it computed (for refits: ``dsdsim.fit.cv``)."""
    if split not in SPLITS:
        raise DsdsimError(f"unknown split {split!r}; use one of: {', '.join(SPLITS)}")
    cases = load_corpus(corpus)
    if measured_on is not None:
        engines = sorted({c.conditions.engine for _, c in cases})
        if measured_on not in engines:
            raise DsdsimError(f"no measurement case was measured on {measured_on!r}; engines in the corpus: "
                              f"{', '.join(engines)}")
    if engine is not None:
        from dsdsim.specs.catalog import load_engine

        engine = load_engine(engine)
    steps = all_case_steps(cases, engine, progress)
    results, fitted = score(cases, {cid: s.times() for cid, s in steps.items()}, steps)
    results, fitted = with_serving(cases, results, fitted, engine)
    keep = [r for r in results if (split == "all" or r.split == split)
            and (measured_on is None or r.engine == measured_on)]
    summary = {s: summarize(r for r in keep if r.split == s) for s in (Split.train.value, Split.test.value)}
    e2e = {c.id for _, c in cases if c.conditions.serving is not None}
    for s in (Split.train.value, Split.test.value):     # step-level and end-to-end cases apart, where both occur
        if any(r.split == s and r.id in e2e and r.rel_error is not None for r in keep):
            summary[f"{s}_step"] = summarize(r for r in keep if r.split == s and r.id not in e2e)
            summary[f"{s}_e2e"] = summarize(r for r in keep if r.split == s and r.id in e2e)
    kept = {r.id for r in keep}
    found = checks([(cf, c) for cf, c in cases if c.id in kept], [r for r in keep if r.id in steps or r.id in e2e],
                   modern_engine_files(steps))
    report = AccuracyReport(keep, summary, group_summaries(keep), fitted, None, found)
    return Evaluation(cases, steps, results, report)


def modern_engine_files(steps: dict[str, CaseSteps]) -> frozenset:
    """The engine spec files among the runs whose speculative steps overlap the host (async scheduling)."""
    out = set()
    for s in steps.values():
        run = s.run
        if run.engine is not None and run.engine.overlap.speculative.value and run.engine_file:
            out.add(run.engine_file)
    return frozenset(out)
