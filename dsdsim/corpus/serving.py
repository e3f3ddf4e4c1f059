"""End-to-end corpus cases predicted through the serving simulation.

A case with ``conditions.serving`` measured a whole benchmark run (mean request latency at a max concurrency,
output throughput at a QPS, TPOT or TTFT p50): its prediction is the same quantity from ``dsdsim.serve.simulate``
run with the case's model, hardware, deployment and engine version, its benchmark's workload, requests and lengths
(or the run's own requests, a trace shipped in ``measurements/traces/``), plain decoding (policy ``none``) at K = 0
and a static chain (``fixed:K``) otherwise. The simulation is seeded (seed 0): the same case always gets the same
prediction.

Acceptance as for step cases: reported (AL -> the constant alpha with that tau(K); or alpha), none at K = 0, or one
constant alpha fitted over the case's fit group through the simulation (``fit_serving_alpha``: two runs per case
give a surrogate of its quantity in tau; the alpha that minimises the squared log error of the surrogates). These
cases enter no engine fit (their engine terms are the shipped ones).
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Callable, Optional

from dsdsim.corpus.cases import case_deployment, case_engine, source_text, tau_of_alpha
from dsdsim.corpus.results import CaseResult, FittedAcceptance
from dsdsim.corpus.schema import AcceptanceHandling, Case, CorpusFile, Quantity
from dsdsim.errors import DsdsimError

ALPHA_BOUNDS = (0.01, 0.99)


def is_serving(case: Case) -> bool:
    return case.conditions.serving is not None and case.not_evaluated is None


def serving_setup(case: Case, engine=None):
    """The Setup a serving case runs: the case's model, hardware, deployment and drafter at its engine version."""
    return serving_setup_of(case.conditions, engine)


def serving_setup_of(c, engine=None):
    """``serving_setup`` of a case's conditions."""
    from dsdsim.specs.drafter import parse_drafter
    from dsdsim.specs.setup import resolve

    drafter = parse_drafter(c.drafter) if c.drafter else None
    return resolve(c.model, c.hardware, case_deployment(c), drafter, engine=case_engine(c, engine),
                   async_scheduling=c.async_scheduling, engine_method=c.engine_method, model_runner=c.model_runner)


def predict_serving(case: Case, alpha: Optional[float], engine=None) -> tuple[float, float]:
    """(the case's quantity, the mean accepted length of the run) simulated at constant ``alpha`` (None: K = 0 or
    the case's reported acceptance). The run is remembered per conditions, acceptance, engine and trace file (the
    run's own requests, a file of the folder the case was loaded from): the cases that measured several figures of
    one run share it."""
    workload = case.conditions.serving.workload
    if workload.startswith("trace:"):
        from dsdsim.corpus.schema import case_file

        workload = f"trace:{case_file(case, workload.split(':', 1)[1])}"
    return _predict_serving(case, alpha, engine, workload)


def _predict_serving(case: Case, alpha: Optional[float], engine, workload: str) -> tuple[float, float]:
    c = case.conditions
    if c.k == 0:
        acceptance = None
    elif alpha is not None:
        acceptance = ("alpha", alpha)
    elif case.acceptance.al is not None:
        acceptance = ("al", case.acceptance.al)
    elif case.acceptance.alpha is not None:
        acceptance = ("alpha", case.acceptance.alpha)
    else:
        raise DsdsimError(f"measurement case {case.id}: K = {c.k} needs an acceptance (reported or fitted)")
    try:
        run = _serving_run(c, acceptance, engine, workload)
    except DsdsimError as exc:
        raise type(exc)(f"measurement case {case.id}: {exc}") from None
    q = case.measured.quantity
    if q.value not in run:
        raise DsdsimError(f"measurement case {case.id}: {q.value} is not an end-to-end figure")
    return run[q.value], run["mean_acceptance_length"]


@functools.lru_cache(maxsize=4096)
def _serving_run(c, acceptance: Optional[tuple[str, float]], engine, workload: str) -> dict[str, float]:
    """The end-to-end figures of one simulated benchmark run: the run of ``c``'s conditions (one run for the cases
    that measured several figures of it, such as TPOT and TTFT p50), at ``acceptance`` (None at K = 0; ("alpha", a)
    or ("al", tau))."""
    from dsdsim.policy.acceptance import constant, from_mean_acceptance_length
    from dsdsim.serve.scheduler import SchedulerConfig
    from dsdsim.serve.simulate import simulate

    sv = c.serving
    policy = "none" if c.k == 0 else f"fixed:{c.k}"
    if acceptance is None:
        acc = None
    elif acceptance[0] == "al":
        acc = from_mean_acceptance_length(acceptance[1], c.k)
    else:
        acc = constant(acceptance[1])
    sched = SchedulerConfig()
    limits = {k: v for k, v in (("max_num_seqs", sv.max_num_seqs),
                                ("max_num_batched_tokens", sv.max_num_batched_tokens),
                                ("kv_cache_tokens", sv.kv_cache_tokens)) if v is not None}
    if limits:
        sched = replace(sched, **limits)
    lengths = {} if workload.startswith("trace:") else {"input_len": sv.input_len, "output_len": sv.output_len}
    run = simulate(serving_setup_of(c, engine), workload, policy, requests=sv.requests, acceptance=acc,
                   scheduler=sched, seed=0, max_concurrency=sv.max_concurrency, **lengths).policies[0]
    return {Quantity.e2e_latency_ms.value: float(run.e2e_ms.mean),
            Quantity.run_tokens_per_s.value: float(run.output_tokens_per_s),
            Quantity.tpot_p50_ms.value: float(run.tpot_ms.p50),
            Quantity.ttft_p50_ms.value: float(run.ttft_ms.p50),
            "mean_acceptance_length": float(run.mean_acceptance_length)}


SURROGATE_ALPHAS = (0.3, 0.8)   # the two alphas each case is simulated at to fit its surrogate


def fit_serving_alpha(cases: list[Case], engine=None) -> float:
    """One constant alpha minimising the squared log error of the cases' simulated quantities.

    A run's time is its steps times their mean time, and its steps go as 1 / tau: each case is simulated at two
    alphas (``SURROGATE_ALPHAS``) and its quantity written as A + B / tau(alpha) (a latency or TPOT; the reciprocal
    of a throughput), through those two runs; alpha minimises the loss of that surrogate, and the cases are then
    simulated at it (``serving_results``). Two simulations per case instead of one per step of a search."""
    from scipy.optimize import minimize_scalar

    lines = []
    for c in cases:
        k = c.conditions.k
        inv = c.measured.quantity is Quantity.run_tokens_per_s
        (a1, a2) = SURROGATE_ALPHAS
        p1, p2 = (predict_serving(c, a, engine)[0] for a in (a1, a2))
        y1, y2 = (1.0 / p1, 1.0 / p2) if inv else (p1, p2)
        x1, x2 = 1.0 / tau_of_alpha(a1, k), 1.0 / tau_of_alpha(a2, k)
        slope = (y1 - y2) / (x1 - x2)
        lines.append((c, k, inv, y1 - slope * x1, slope))

    def loss(alpha: float) -> float:
        total = 0.0
        for c, k, inv, intercept, slope in lines:
            y = intercept + slope / tau_of_alpha(alpha, k)
            if y <= 0:
                return math.inf
            total += math.log((1.0 / y if inv else y) / c.measured.value) ** 2
        return total

    res = minimize_scalar(loss, bounds=ALPHA_BOUNDS, method="bounded", options={"xatol": 1e-4})
    return round(float(res.x), 4)


def serving_results(corpus: list[tuple[CorpusFile, Case]], engine=None,
                    progress: Optional[Callable[[int, int], None]] = None):
    """(CaseResult per serving case, fitted acceptance per serving fit group); progress(done, total) per case."""
    todo = [(cf, c) for cf, c in corpus if is_serving(c)]
    groups: dict[str, list[Case]] = {}
    for _, c in todo:
        if c.acceptance.handling is AcceptanceHandling.fitted:
            groups.setdefault(c.acceptance.fit_group, []).append(c)
    fitted = {g: FittedAcceptance(g, members[0].split.value, fit_serving_alpha(members, engine), len(members))
              for g, members in sorted(groups.items())}
    out = []
    for i, (cf, case) in enumerate(todo):
        c = case.conditions
        f = fitted.get(case.acceptance.fit_group) if case.acceptance.handling is AcceptanceHandling.fitted else None
        value, al = predict_serving(case, f.alpha if f is not None else None, engine)
        if c.k == 0:
            how = "none (plain decoding)"
        elif f is not None:
            how = f"alpha {f.alpha:.3f} fitted over {f.group} (n={f.n}), through the serving simulation"
        elif case.acceptance.al is not None:
            how = f"AL {case.acceptance.al:g} {case.acceptance.handling.value}"
        else:
            how = f"alpha {case.acceptance.alpha:g} {case.acceptance.handling.value}"
        setup = serving_setup(case, engine)
        arch = "moe" if setup.model.moe_ffn is not None else "dense"
        kind = setup.drafter.kind.value if setup.drafter is not None else "none"
        out.append(CaseResult(case.id, source_text(cf, case), case.split.value, case.measured.quantity.value,
                              case.measured.value, value, value / case.measured.value - 1.0, case.tag.value,
                              c.engine, arch, kind, how, al if c.k > 0 else 1.0, None, None, c.engine_version,
                              setup.engine_source, c.batch_size))
        if progress is not None:
            progress(i + 1, len(todo))
    return out, list(fitted.values())
