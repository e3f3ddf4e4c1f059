"""Predict every corpus case with the shipped defaults (no calibration) and measure the error.

For one case: T = the step time at the case's K (or tree), T0 = the plain-decoding step time at the same
batch and context, tau = the tokens one step emits (from the acceptance the source reports, or from one
constant alpha fitted jointly over the case's fit group). The predicted quantity follows
``dsdsim.corpus.schema`` (itl_ms = T/tau, tokens_per_s = B*tau/T, speedup_vs_no_sd = tau*T0/T, ...).
relative error = predicted / measured - 1.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Callable, Iterable, Optional

from dsdsim.corpus.schema import (AcceptanceHandling, Case, CorpusFile, Quantity, Split, load_corpus)
from dsdsim.errors import DsdsimError

ALPHA_BOUNDS = (0.01, 0.99)     # a fitted constant alpha stays inside (0, 1)
GROUP_AXES = ("architecture", "engine", "drafter")


@dataclass(frozen=True)
class CaseTimes:
    """Predicted physics of one case."""

    step_s: float          # T at the case's K (tree: STEPS draft passes + a verify of draft_tokens per sequence)
    plain_step_s: float    # T0: plain decoding, same batch and context
    fits_in_memory: bool
    architecture: str      # "dense" | "moe"
    drafter_kind: str      # DrafterKind value, or "none"


@dataclass(frozen=True)
class CaseResult:
    id: str
    source: str            # URL or repository path, and where in it
    split: str
    quantity: str
    measured: Optional[float]        # None where the source states a direction, not a figure
    predicted: Optional[float]       # None when not evaluated
    rel_error: Optional[float]       # predicted / measured - 1
    tag: str
    engine: str
    architecture: str                # dense | moe | unknown (not evaluated)
    drafter_kind: str
    acceptance: str                  # how acceptance entered the prediction, in words
    tau: Optional[float]             # tokens per step used (None where the quantity does not need it)
    fits_in_memory: Optional[bool]
    not_evaluated: Optional[str]


@dataclass(frozen=True)
class ErrorSummary:
    n: int
    median_abs_rel_error: Optional[float]
    max_abs_rel_error: Optional[float]


@dataclass(frozen=True)
class GroupSummary:
    split: str
    axis: str        # architecture | engine | drafter
    value: str
    summary: ErrorSummary


@dataclass(frozen=True)
class FittedAcceptance:
    group: str
    split: str
    alpha: float
    n: int


@dataclass(frozen=True)
class AccuracyReport:
    cases: list[CaseResult]                  # the selected cases (split / engine filters applied)
    summary: dict[str, ErrorSummary]         # "train", "test": over the selected cases
    groups: list[GroupSummary]
    fitted: list[FittedAcceptance]           # acceptance fitted where the source gives none

    def to_dict(self) -> dict:
        """The JSON contract: ``cases`` and ``summary`` (train, test), plus groups and fitted acceptance."""
        return {"cases": [asdict(c) for c in self.cases],
                "summary": {k: asdict(v) for k, v in self.summary.items()},
                "groups": [{"split": g.split, "axis": g.axis, "value": g.value, **asdict(g.summary)}
                           for g in self.groups],
                "fitted_acceptance": [asdict(f) for f in self.fitted]}


# --- physics of one case --------------------------------------------------------------------------------

# The engine spec a case is predicted with when none is forced: the engine it was measured on. gpt-fast and
# MagicDec run whole compiled decode loops without a serving scheduler: kernels only.
ENGINE_OF_CASE = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
NO_ENGINE = "ideal"


def case_engine(case: Case, engine=None):
    """The engine spec (name, path or spec) for a case: ``engine`` when given, else the one it was measured on."""
    if engine is not None:
        return engine
    return ENGINE_OF_CASE.get(case.conditions.engine, NO_ENGINE)


@dataclass(frozen=True)
class CaseSteps:
    """The two simulated steps of a case (plain decoding and the case's own), kernels and engine terms."""

    plain: object          # dsdsim.cost.step.StepCost
    step: object
    architecture: str
    drafter_kind: str

    def times(self, params=None) -> CaseTimes:
        """CaseTimes with the steps' own engine figures, or with ``params`` (EngineParams) in their place."""
        if params is None:
            t, t0 = float(self.step.step_time_s), float(self.plain.step_time_s)
        else:
            t, t0 = float(self.step.step_time_with(params)), float(self.plain.step_time_with(params))
        return CaseTimes(t, t0, bool(self.step.feasible), self.architecture, self.drafter_kind)


def case_steps(case: Case, engine=None) -> CaseSteps:
    """Simulate an evaluated case through the public cost model (dsdsim.simulate_step). A tree draft runs as the
    cost layer models trees: STEPS draft passes over TOPK candidates, a verify of draft_tokens per sequence."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.specs.setup import resolve
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.drafter import DraftTree, parse_drafter
    from dsdsim.units import parse_dtype

    c = case.conditions
    dep = Deployment(tp=c.tp, ep=c.ep, dtype=parse_dtype(c.dtype) if c.dtype else None)
    drafter = parse_drafter(c.drafter) if c.drafter else None
    k = c.k
    if drafter is not None and c.tree is not None:
        tree = DraftTree(steps=c.tree.steps, topk=c.tree.topk, tokens=c.tree.draft_tokens - 1)
        drafter = drafter.model_copy(update={"max_k": 64, "tree": tree})
        k = c.tree.steps
    setup = resolve(c.model, c.hardware, dep, drafter, engine=case_engine(case, engine))
    plain = simulate_step(None, None, batch=c.batch_size, k=0, context=c.context_tokens, setup=setup)
    step = plain if drafter is None or k == 0 else simulate_step(None, None, batch=c.batch_size, k=k,
                                                                   context=c.context_tokens, setup=setup)
    arch = "moe" if setup.model.moe_ffn is not None else "dense"
    kind = drafter.kind.value if drafter is not None else "none"
    return CaseSteps(plain, step, arch, kind)


def case_times(case: Case, engine=None) -> CaseTimes:
    """T and T0 for an evaluated case."""
    return case_steps(case, engine).times()


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


def tau_of_alpha(alpha: float, k: int) -> float:
    """Tokens per step for a constant conditional acceptance: (1 - alpha^(K+1)) / (1 - alpha)."""
    from dsdsim.policy.acceptance import constant

    return float(constant(alpha).tau(k))


def _draft_length(case: Case) -> int:
    """K for tau: the chain length, or a tree's depth (the most tokens a tree step can accept)."""
    c = case.conditions
    return c.tree.steps if c.tree is not None else c.k


def reported_tau(case: Case) -> tuple[Optional[float], str]:
    """tau and its description for reported / not-needed acceptance."""
    a, k = case.acceptance, _draft_length(case)
    if a.handling is AcceptanceHandling.not_needed:
        return (1.0 if k == 0 else None), ("none (plain decoding)" if k == 0 else "not needed (ratio of step times)")
    if a.al is not None:
        return a.al, f"AL {a.al:g} reported"
    return tau_of_alpha(a.alpha, k), f"alpha {a.alpha:g} reported (tau {tau_of_alpha(a.alpha, k):.2f} at K={k})"


def fit_alpha(cases: list[tuple[Case, CaseTimes]]) -> float:
    """One constant alpha minimising the squared log error over the cases (bounded scalar search)."""
    from scipy.optimize import minimize_scalar

    def loss(alpha: float) -> float:
        total = 0.0
        for case, t in cases:
            tau = tau_of_alpha(alpha, _draft_length(case))
            pred = predict_quantity(case.measured.quantity, case.conditions.batch_size, tau, t.step_s, t.plain_step_s)
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


def _source_text(cf: CorpusFile, case: Case) -> str:
    return f"{cf.source.url} ({case.where})"


def _skipped(cf: CorpusFile, case: Case) -> CaseResult:
    return CaseResult(case.id, _source_text(cf, case), case.split.value, case.measured.quantity.value,
                      case.measured.value, None, None, case.tag.value, case.conditions.engine, "unknown",
                      "unknown", f"{case.acceptance.handling.value}", None, None, case.not_evaluated)


def steps_or_error(case: Case, engine=None) -> CaseSteps:
    try:
        return case_steps(case, engine)
    except DsdsimError as exc:
        raise type(exc)(f"measurement case {case.id}: {exc}") from None


def evaluate(corpus: list[tuple[CorpusFile, Case]], progress: Optional[Callable[[int, int], None]] = None,
             engine=None) -> tuple[list[CaseResult], list[FittedAcceptance]]:
    """Every case of the corpus, in corpus order; fitted acceptance per fit group. progress(done, total).
    ``engine``: one engine spec for every case; None: each case's own engine (``case_engine``)."""
    times: dict[str, CaseTimes] = {}
    todo = [(cf, c) for cf, c in corpus if c.not_evaluated is None]
    for i, (_, case) in enumerate(todo):
        times[case.id] = steps_or_error(case, engine).times()
        if progress is not None:
            progress(i + 1, len(todo))
    return score(corpus, times)


def score(corpus: list[tuple[CorpusFile, Case]], times: dict[str, CaseTimes]
          ) -> tuple[list[CaseResult], list[FittedAcceptance]]:
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
            tau = tau_of_alpha(f.alpha, _draft_length(case))
            how = f"alpha {f.alpha:.3f} fitted over {f.group} (n={f.n})"
        else:
            tau, how = reported_tau(case)
        c = case.conditions
        pred = predict_quantity(case.measured.quantity, c.batch_size, tau, t.step_s, t.plain_step_s)
        results.append(CaseResult(case.id, _source_text(cf, case), case.split.value, case.measured.quantity.value,
                                  case.measured.value, pred, pred / case.measured.value - 1.0, case.tag.value,
                                  c.engine, t.architecture, t.drafter_kind, how, tau, t.fits_in_memory, None))
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
    each case is predicted with the engine it was measured on (``ENGINE_OF_CASE``; kernels only for the rest)."""
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
    results, fitted = evaluate(cases, progress, engine)
    keep = [r for r in results if (split == "all" or r.split == split)
            and (measured_on is None or r.engine == measured_on)]
    summary = {s: summarize(r for r in keep if r.split == s) for s in (Split.train.value, Split.test.value)}
    return AccuracyReport(keep, summary, group_summaries(keep), fitted)
