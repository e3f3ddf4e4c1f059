"""Checks across the cases of one source: how a speculative step compares with plain decoding, and the K choice.

Both read pairs or groups of cases that one source measured under the same conditions except K:

    step-time ratio   T(K) / T(0) at one batch and context, from ITL x AL (a benchmark's TPOT p50 x AL, B x AL /
                      tokens/s, or the step time) of the K case over the K = 0 case's; measured and predicted, so
                      the ratio of the two is its error; pairs of one quantity only
    K choice          among the K one source measured at one batch and context, the K dsdsim predicts best and
                      the goodput it gives up against the measured best: regret = 1 - G(K_predicted) / G(K_best),
                      G the goodput per sequence (1 / ITL, tokens/s / B or the speedup, which are proportional)

A case counts as a modern engine's where the engine spec it was predicted with overlaps speculative steps with
the host (async scheduling with speculation: vLLM from 0.14, SGLang spec v2), what today's engines do.
"""
from __future__ import annotations

from dataclasses import asdict
from statistics import mean, median
from typing import Optional

from dsdsim.corpus.results import CaseResult
from dsdsim.corpus.schema import Case, CorpusFile, Quantity
from dsdsim.records import frozen

MODERN_BATCH = (8, 256)      # the batch range where dynamic K matters (issue targets)
LARGE_BATCH = 32             # from here the verify step is compute-bound on most setups: the large-batch targets


@frozen
class StepRatio:
    source: str
    case: str                 # the K > 0 case
    plain_case: str           # the K = 0 case it is compared with
    split: str
    batch: int
    k: int
    measured: float           # T(K) / T(0)
    predicted: float
    rel_error: float
    modern: bool


@frozen
class KChoice:
    source: str
    cases: tuple[str, ...]
    split: str
    batch: int
    k_values: tuple[int, ...]
    k_measured_best: int
    k_predicted_best: int
    regret: float             # measured goodput given up by the predicted K


@frozen
class Checks:
    step_ratios: list[StepRatio]
    k_choices: list[KChoice]

    def step_ratio_summary(self, modern_only: bool = True, split: Optional[str] = None) -> dict:
        lo, hi = MODERN_BATCH
        rows = [r for r in self.step_ratios if (not modern_only or (r.modern and lo <= r.batch <= hi))
                and (split is None or r.split == split)]
        errs = [abs(r.rel_error) for r in rows]
        return {"n": len(rows), "median_abs_rel_error": median(errs) if errs else None,
                "max_abs_rel_error": max(errs) if errs else None}

    def large_batch_summary(self) -> dict:
        """T(K)/T(0) over every pair at batch >= LARGE_BATCH (any engine)."""
        errs = [abs(r.rel_error) for r in self.step_ratios if r.batch >= LARGE_BATCH]
        return {"n": len(errs), "median_abs_rel_error": median(errs) if errs else None,
                "max_abs_rel_error": max(errs) if errs else None}

    def regret_by_source(self) -> dict[str, dict]:
        """Mean and max goodput given up per source (the K choice where it measured several K)."""
        out: dict[str, list] = {}
        for c in self.k_choices:
            out.setdefault(c.source, []).append(c.regret)
        return {s: {"n": len(r), "mean_regret": mean(r), "max_regret": max(r)} for s, r in sorted(out.items())}

    def regret_summary(self, split: Optional[str] = None) -> dict:
        rows = [c for c in self.k_choices if split is None or c.split == split]
        reg = [c.regret for c in rows]
        return {"n": len(rows), "mean_regret": mean(reg) if reg else None, "max_regret": max(reg) if reg else None,
                "best_k_matches": sum(1 for c in rows if c.k_predicted_best == c.k_measured_best)}

    def to_dict(self) -> dict:
        return {"step_time_ratio": {"modern_b8_256": self.step_ratio_summary(), "all": self.step_ratio_summary(False),
                                    "large_batch": self.large_batch_summary(),
                                    "pairs": [asdict(r) for r in self.step_ratios]},
                "k_choice": {"all": self.regret_summary(), "train": self.regret_summary("train"),
                             "test": self.regret_summary("test"), "by_source": self.regret_by_source(),
                             "groups": [asdict(c) for c in self.k_choices]}}


def _key(cf: CorpusFile, case: Case) -> tuple:
    """The conditions that must agree between cases compared within a source (everything but the drafter and K)."""
    c = case.conditions
    return (cf.source.url, c.model, c.hardware, c.tp, c.ep, c.dtype, c.kv_dtype, c.batch_size, c.context_tokens,
            c.engine, c.engine_version, c.dataset, c.dp_attention, c.async_scheduling, c.model_runner)


def _step_time(case: Case, value: float, tau: Optional[float]) -> Optional[float]:
    """A step's time from one case's quantity (ms): ITL (or a benchmark's TPOT p50) x tau, B x tau / tokens/s, or
    the step time itself."""
    q = case.measured.quantity
    if q is Quantity.step_ms:
        return value
    if tau is None:
        return None
    if q in (Quantity.itl_ms, Quantity.tpot_p50_ms):
        return value * tau
    if q is Quantity.tokens_per_s and case.conditions.batch_size:
        return 1e3 * case.conditions.batch_size * tau / value
    return None


def _goodput(case: Case, value: float) -> Optional[float]:
    """Goodput per sequence up to a factor common to one group (one batch, one source)."""
    q = case.measured.quantity
    if q in (Quantity.itl_ms, Quantity.tpot_p50_ms):
        return 1.0 / value
    if q in (Quantity.tokens_per_s, Quantity.speedup_vs_no_sd):
        return value
    return None


def checks(corpus: list[tuple[CorpusFile, Case]], results: list[CaseResult], modern_engines=frozenset()) -> Checks:
    """Step-time ratios and K choices over the evaluated ``results`` (module docstring). ``modern_engines``: the
    engine spec files (CaseResult.engine_spec) whose speculative steps overlap the host."""
    by_id = {r.id: r for r in results if r.rel_error is not None}
    groups: dict[tuple, list[tuple[CorpusFile, Case, CaseResult]]] = {}
    for cf, case in corpus:
        r = by_id.get(case.id)
        if r is None or case.measured.quantity is Quantity.ratio or case.conditions.dynamic_k:
            continue
        groups.setdefault(_key(cf, case), []).append((cf, case, r))
    ratios, choices = [], []
    for key, members in groups.items():
        plain = [(cf, c, r) for cf, c, r in members if c.conditions.k == 0 and c.conditions.tree is None]
        spec = [(cf, c, r) for cf, c, r in members if c.conditions.k > 0 and c.conditions.tree is None]
        for cf0, c0, r0 in plain:
            t0m, t0p = _step_time(c0, r0.measured, 1.0), _step_time(c0, r0.predicted, 1.0)
            for cf, c, r in spec:
                if c.measured.quantity is not c0.measured.quantity:
                    continue
                tm, tp = _step_time(c, r.measured, r.tau), _step_time(c, r.predicted, r.tau)
                if None in (t0m, t0p, tm, tp):
                    continue
                ratios.append(StepRatio(key[0], c.id, c0.id, c.split.value, c.conditions.batch_size, c.conditions.k,
                                        tm / t0m, tp / t0p, (tp / t0p) / (tm / t0m) - 1.0,
                                        r.engine_spec in modern_engines))
        for cf, c, r in spec:           # a speedup at reported acceptance is tau / (T(K) / T(0)) by itself
            if (c.measured.quantity is Quantity.speedup_vs_no_sd and r.tau is not None
                    and c.acceptance.handling.value == "reported"):
                ratios.append(StepRatio(key[0], c.id, "(the source's plain decoding at the same batch)",
                                        c.split.value, c.conditions.batch_size, c.conditions.k, r.tau / r.measured,
                                        r.tau / r.predicted, r.measured / r.predicted - 1.0,
                                        r.engine_spec in modern_engines))
        by_drafter: dict = {}
        for cf, c, r in members:
            if c.conditions.tree is None:
                by_drafter.setdefault(c.conditions.drafter, []).append((c, r))
        for drafter, rows in by_drafter.items():
            chain = rows + ([(c, r) for _, c, r in plain] if drafter is not None else [])
            ks = {}
            if chain[0][0].measured.quantity is Quantity.speedup_vs_no_sd:
                ks[0] = ("(plain decoding)", 1.0, 1.0)      # a speedup of plain decoding over itself
            for c, r in chain:
                gm, gp = _goodput(c, r.measured), _goodput(c, r.predicted)
                if gm is not None and gp is not None and c.measured.quantity is chain[0][0].measured.quantity:
                    ks[c.conditions.k] = (c.id, gm, gp)
            if len(ks) < 2 or drafter is None:
                continue
            best_m = max(ks, key=lambda k: ks[k][1])
            best_p = max(ks, key=lambda k: ks[k][2])
            cases = [ks[k][0] for k in sorted(ks) if not ks[k][0].startswith("(")]
            split = {c.split.value for c, _ in chain}
            choices.append(KChoice(key[0], tuple(cases), split.pop() if len(split) == 1 else "mixed",
                                   chain[0][0].conditions.batch_size, tuple(sorted(ks)), best_m, best_p,
                                   1.0 - ks[best_p][1] / ks[best_m][1]))
    return Checks(ratios, choices)
