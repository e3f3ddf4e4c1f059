"""Fit the engine terms marked ``fit: true`` in the shipped engine specs on the train split of the corpus.

The kernel model is held fixed. A case's residual is log(predicted / measured) of its measured quantity, computed
exactly as ``dsdsim accuracy`` computes it. Cases whose acceptance would be fitted (``handling: fitted``) are left
out: acceptance is not fitted jointly with engine figures. A term shared by several version ranges (defined once,
inherited through ``extends``) is one parameter, fitted on the cases of all of them.

Every fitted term starts at, and is pulled towards, its sourced ``prior`` and stays inside its sourced ``range``
(a maximum a posteriori fit): the prior adds one residual log(value / prior) / log(high / low) x 2 x ``LOSS_SCALE``,
so a term moved from its prior to the end of its sourced range costs as much as one case predicted 10% off. A term
the cases cannot determine keeps its physical value instead of wandering to a bound; a term the cases push to a
bound is reported as on its bound. Bounded least squares (scipy
``least_squares``, trust-region reflective) with a Cauchy loss, so one confounded case cannot drag the figures;
the start point is fixed, so the fit is deterministic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from dsdsim.corpus.evaluate import CaseSteps, score
from dsdsim.corpus.schema import AcceptanceHandling, Case, CorpusFile, Split
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.specs.engine import EngineParams, EngineSpec

LOSS_SCALE = 0.1      # residuals (log ratio) well beyond ~10% weigh less and less (Cauchy loss)
PRIOR_WEIGHT = 2 * LOSS_SCALE   # per log-range: a term at the end of its range costs one case 10% off
LOG_FLOOR = 1e-3      # a range starting at 0 is taken from high x 1e-3 for the log prior


@frozen
class Parameter:
    """One fitted term: the spec file that defines it and its name there."""

    origin: str            # engine spec file name (stem) that defines the term
    term: str

    @property
    def label(self) -> str:
        return f"{self.origin}:{self.term}"


def round_value(v: float) -> float:
    """Three significant digits; below 1e-8 a figure is zero (seconds: 10 ns)."""
    return 0.0 if abs(v) < 1e-8 else float(f"{v:.3g}")


def term_origins(stem: str) -> dict[str, str]:
    """term name -> the spec file (stem) in ``stem``'s ``extends`` chain that defines it (the nearest one)."""
    from dsdsim.specs.catalog import _engine_path, engine_chain
    from dsdsim.specs.io import read_structured

    out: dict[str, str] = {}
    for path in engine_chain(_engine_path(stem)):
        data = read_structured(path)
        for t in data.get("terms", []) or []:
            out.setdefault(t["name"], path.stem)
    return out


def fit_cases(corpus: list[tuple[CorpusFile, Case]], steps: dict[str, CaseSteps],
              exclude_sources: tuple[str, ...] = ()) -> list[tuple[CorpusFile, Case]]:
    """The train cases an engine fit reads: evaluated, acceptance not fitted, predicted with an engine spec, and
    not from an excluded source (``CorpusFile.source.url``)."""
    out = []
    for cf, c in corpus:
        if c.split is not Split.train or c.not_evaluated is not None or c.id not in steps:
            continue
        if (c.acceptance.handling in (AcceptanceHandling.fitted, AcceptanceHandling.assumed)
                or cf.source.url in exclude_sources):
            continue
        if steps[c.id].engines:
            out.append((cf, c))
    return out


def _stem_of(spec: EngineSpec) -> Optional[str]:
    """The shipped (or catalog) file name a loaded spec came from (read as ``ENGINE@VERSION``, the range's file)."""
    from dsdsim.specs.catalog import engine_names, load_engine

    base = spec if spec.release is None else spec.model_copy(update={"release": None})
    for stem in engine_names():
        candidate = load_engine(stem)
        if candidate is spec or (base is not spec and candidate == base):
            return stem
    return None


@dataclass
class EngineFit:
    """Fit the ``fit: true`` terms of the engine specs the cases are predicted with (module docstring); estimator
    conventions: ``fit(...) -> self``, learned values end in ``_``."""

    loss_scale: float = LOSS_SCALE
    prior_weight: float = PRIOR_WEIGHT
    parameters_: list[Parameter] = field(default_factory=list, init=False)
    values_: dict[Parameter, float] = field(default_factory=dict, init=False)
    cases_: dict[Parameter, tuple[str, ...]] = field(default_factory=dict, init=False)
    residuals_: dict[str, float] = field(default_factory=dict, init=False)    # case id -> predicted/measured - 1
    before_: dict[str, float] = field(default_factory=dict, init=False)       # the same at the priors
    spec_cases_: dict[str, tuple[str, ...]] = field(default_factory=dict, init=False)   # spec stem -> case ids

    def fit(self, corpus: list[tuple[CorpusFile, Case]], steps: dict[str, CaseSteps],
            exclude_sources: tuple[str, ...] = ()) -> "EngineFit":
        from scipy.optimize import least_squares

        cases = fit_cases(corpus, steps, exclude_sources)
        if not cases:
            raise DsdsimError("no train case to fit the engine specs on")
        self._specs: dict[int, tuple[EngineSpec, str, dict[str, str]]] = {}
        used: dict[Parameter, list[str]] = {}
        self.spec_cases_ = {}
        for _, c in cases:
            kinds = steps[c.id].drafter_kinds
            for spec in steps[c.id].engines:
                stem, origins = self._spec_info(spec)
                self.spec_cases_.setdefault(stem, ())
                if c.id not in self.spec_cases_[stem]:
                    self.spec_cases_[stem] += (c.id,)
                for t in spec.terms:
                    if t.fit and any(t.paid_by(k) for k in kinds):
                        p = Parameter(origins.get(t.name, stem), t.name)
                        if c.id not in used.setdefault(p, []):
                            used[p].append(c.id)
        self.parameters_ = sorted(used, key=lambda p: p.label)
        self.cases_ = {p: tuple(used[p]) for p in self.parameters_}
        terms = {p: self._term(p) for p in self.parameters_}
        lo = np.array([terms[p].range[0] for p in self.parameters_])
        hi = np.array([terms[p].range[1] for p in self.parameters_])
        prior = np.array([terms[p].prior for p in self.parameters_])
        scale = np.where(hi > lo, hi - lo, 1.0)
        floor = np.maximum(lo, hi * LOG_FLOOR)
        log_range = np.log(np.maximum(hi, floor * 1.0001) / floor)
        log_prior = np.log(np.maximum(prior, floor))
        ids = [c.id for _, c in cases]
        sub = {i: steps[i] for i in ids}

        def resid(x) -> np.ndarray:
            err = self._errors(cases, sub, dict(zip(self.parameters_, x)))
            r = [math.log1p(err[i]) for i in ids]
            pull = (np.log(np.maximum(x, floor)) - log_prior) / log_range
            return np.concatenate([np.array(r), self.prior_weight * pull])

        if self.parameters_:
            res = least_squares(resid, np.clip(prior, lo, hi), bounds=(lo, np.maximum(hi, lo + 1e-30)), x_scale=scale,
                                loss="cauchy", f_scale=self.loss_scale, diff_step=1e-3, method="trf")
            x = res.x
        else:
            x = prior
        self.values_ = {p: round_value(float(v)) for p, v in zip(self.parameters_, x)}
        after = self._errors(cases, sub, self.values_)
        before = self._errors(cases, sub, dict(zip(self.parameters_, prior)))
        self.residuals_ = {i: round(after[i], 4) for i in ids}
        self.before_ = {i: round(before[i], 4) for i in ids}
        return self

    # --- internals ---

    def _spec_info(self, spec: EngineSpec) -> tuple[str, dict[str, str]]:
        info = self._specs.get(id(spec))
        if info is None:
            stem = _stem_of(spec)
            info = (spec, stem or spec.name, term_origins(stem) if stem else {})
            self._specs[id(spec)] = info
        return info[1], info[2]

    def _term(self, p: Parameter):
        for spec, stem, origins in self._specs.values():
            for t in spec.terms:
                if t.name == p.term and origins.get(t.name, stem) == p.origin:
                    return t
        raise DsdsimError(f"no engine term {p.label}")

    def params_function(self, values: dict[Parameter, float]):
        """``params(spec, async_scheduling, drafter) -> EngineParams`` with ``values`` in place of the fitted
        terms."""
        cache: dict = {}

        def params(spec: EngineSpec, async_scheduling, drafter, method=None):
            kind = method or (drafter.kind.value if drafter is not None else None)
            tree = drafter is not None and drafter.tree is not None
            key = (id(spec), async_scheduling, kind, tree)
            if key not in cache:
                cache[key] = EngineParams.of(spec, self._values_of(spec, values), async_scheduling, kind, tree)
            return cache[key]
        return params

    def _errors(self, cases, steps: dict[str, CaseSteps], values: dict[Parameter, float]) -> dict[str, float]:
        params = self.params_function({p: float(v) for p, v in values.items()})
        times = {cid: s.times(params) for cid, s in steps.items()}
        results, _ = score(cases, times, steps)
        return {r.id: r.rel_error for r in results if r.rel_error is not None}

    def _values_of(self, spec: EngineSpec, values: dict[Parameter, float]) -> dict[str, float]:
        """term name -> value for the terms of ``spec`` that ``values`` holds (by the file defining each)."""
        stem, origins = self._spec_info(spec)
        params = ((t.name, Parameter(origins.get(t.name, stem), t.name)) for t in spec.terms)
        return {name: values[p] for name, p in params if p in values}
