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

