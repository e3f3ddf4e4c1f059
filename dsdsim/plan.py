"""Capacity planning on top of the K policy: for each candidate (accelerator, parallelism), the operating point
with the most tokens/s whose per-sequence inter-token latency meets an SLO, with and without dynamic
speculation; tokens/s per GPU there, GPUs for a target aggregate rate, and cost per million output tokens at a
user-supplied GPU-hour price. Every figure in a row describes that one (batch, K) point.

Prices are inputs, never shipped as facts.
"""
from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Optional, Sequence, Union

import numpy as np

from dsdsim.cost.memory import PP_DRAFTER_ERROR
from dsdsim.defaults import DEFAULT_DRAFTER, DEFAULT_ENGINE
from dsdsim.errors import DsdsimError
from dsdsim.policy.options import PredictOptions
from dsdsim.policy.predict import Prediction, predict
from dsdsim.records import frozen
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.model import ModelSpec

MAX_GPUS = 1024          # Deployment's own bound on tp and ep
CANDIDATE_FORM = "HARDWARE[:tpN[:epM][:ppK]], e.g. h100-sxm:tp8 or h200-sxm:tp8:ep8"   # every message says this


@frozen
class Candidate:
    hardware: str
    tp: int = 1
    ep: int = 1
    pp: int = 1              # pipeline stages, each on tp GPUs: tp x pp GPUs

    def __post_init__(self) -> None:
        if not str(self.hardware).strip():
            raise DsdsimError(f"empty candidate hardware; write {CANDIDATE_FORM}")
        for what, n in (("tp", self.tp), ("ep", self.ep), ("pp", self.pp)):
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_GPUS:
                raise DsdsimError(f"candidate {self.hardware}: {what} must be a whole number in 1..{MAX_GPUS}, "
                                  f"got {n!r}")

    @classmethod
    def parse(cls, text: str) -> "Candidate":
        """'h100-sxm', 'h100-sxm:tp8', 'h200-sxm:tp8:ep8', 'h100-sxm:tp8:pp2' or 'h200-sxm:8'."""
        parts = text.strip().split(":")
        if not parts[0]:
            raise DsdsimError(f"empty candidate {text!r}; write {CANDIDATE_FORM}")
        tp, ep, pp = 1, 1, 1
        for p in parts[1:]:
            key = p.lower()
            try:
                if key.startswith("ep"):
                    ep = int(key[2:])
                elif key.startswith("pp"):
                    pp = int(key[2:])
                else:
                    tp = int(key[2:] if key.startswith("tp") else key)
            except ValueError:
                raise DsdsimError(f"cannot read candidate {text!r}; write {CANDIDATE_FORM}") from None
        return cls(parts[0], tp, ep, pp)


@frozen
class PlanRow:
    hardware: str
    tp: int
    ep: int
    gpus: int
    feasible: bool
    reason: str                         # why infeasible ("" when feasible)
    batch_vanilla: Optional[int]            # K = 0 operating point: the batch with the most tokens/s under the SLO
    tokens_per_s_vanilla: Optional[float]   # one replica at that batch
    batch_dsd: Optional[int]                # speculative operating point (any K, 0 included) ...
    k_dsd: Optional[int]                    # ... and its K
    tokens_per_s_dsd: Optional[float]       # one replica at (batch_dsd, k_dsd)
    tokens_per_s_per_gpu_vanilla: Optional[float]
    tokens_per_s_per_gpu_dsd: Optional[float]
    dsd_gain: Optional[float]               # DSD tokens/s per GPU over vanilla
    gpus_needed_vanilla: Optional[int]
    gpus_needed_dsd: Optional[int]
    cost_per_million_tokens_vanilla: Optional[float]
    cost_per_million_tokens_dsd: Optional[float]
    pp: int = 1                             # pipeline stages (gpus = tp x pp)
    # the DSD operating point's ITL, and the intervals of held-out corpus errors (dsdsim.policy.intervals)
    itl_ms_dsd: Optional[float] = None
    itl_ms_dsd_low: Optional[float] = None
    itl_ms_dsd_high: Optional[float] = None
    tokens_per_s_per_gpu_dsd_low: Optional[float] = None
    tokens_per_s_per_gpu_dsd_high: Optional[float] = None
    tokens_per_s_per_gpu_vanilla_low: Optional[float] = None
    tokens_per_s_per_gpu_vanilla_high: Optional[float] = None
    # the largest batch size evaluated (the end of -b): an operating point there is the range's limit, not the SLO's
    largest_batch: Optional[int] = None

    @property
    def at_range_end(self) -> bool:
        """Whether an operating point sits at the largest batch size evaluated (the SLO may allow more)."""
        return self.largest_batch is not None and self.largest_batch in (self.batch_dsd, self.batch_vanilla)

    @property
    def planned(self) -> Optional[str]:
        """The server the plan sizes: 'dsd' where the K-table server does more tokens/s per GPU than one without
        speculation (gain > 1), else 'plain' (a tie or a loss goes to the simpler server); None when neither meets
        the SLO."""
        dsd, plain = self.tokens_per_s_per_gpu_dsd, self.tokens_per_s_per_gpu_vanilla
        if dsd is not None and (plain is None or dsd > plain):
            return "dsd"
        return "plain" if plain is not None else None

    @property
    def gpus_needed(self) -> Optional[int]:
        """GPUs for the target rate on the planned server."""
        return self.gpus_needed_dsd if self.planned == "dsd" else self.gpus_needed_vanilla

    @property
    def cost_per_million_tokens(self) -> Optional[float]:
        """$ per million output tokens on the planned server."""
        return self.cost_per_million_tokens_dsd if self.planned == "dsd" else self.cost_per_million_tokens_vanilla

    def to_dict(self) -> dict:
        """Every field, and the planned server with its GPUs needed and cost (what ``plan -f json`` writes)."""
        return {**asdict(self), "candidate": self.candidate, "planned": self.planned,
                "gpus_needed": self.gpus_needed, "cost_per_million_tokens": self.cost_per_million_tokens}

    @property
    def candidate(self) -> str:
        """The candidate as it is written on the command line: HARDWARE:tpN[:epM][:ppK]."""
        return (f"{self.hardware}:tp{self.tp}" + (f":ep{self.ep}" if self.ep > 1 else "")
                + (f":pp{self.pp}" if self.pp > 1 else ""))


NO_CANDIDATE_REASONS = 3      # reasons named when no candidate is valid (the rest are counted)


def require_a_valid_candidate(rows: Sequence[PlanRow]) -> Sequence[PlanRow]:
    """``rows`` when at least one candidate is feasible; else a DsdsimError saying that none is, with the first
    candidates' reasons (a plan with no operating point answers nothing)."""
    if any(r.feasible for r in rows):
        return rows
    shown = ", ".join(f"{r.candidate} ({r.reason})" for r in rows[:NO_CANDIDATE_REASONS])
    more = f" and {len(rows) - NO_CANDIDATE_REASONS} more" if len(rows) > NO_CANDIDATE_REASONS else ""
    raise DsdsimError(f"no candidate is valid: {shown}{more}")


def _best_under_slo(p: Prediction, slo_s: float, k_rows: np.ndarray) -> tuple[Optional[int], Optional[int], float]:
    """The operating point (batch, K, goodput) with the most tokens/s among K in k_rows whose ITL meets the SLO.

    Ties go to the larger batch (more headroom for bursts is not claimed: the same goodput is simply reached
    there). One point: the batch, its K and its goodput always belong together.
    """
    itl = p.step_s[k_rows] / p.tau[k_rows, None]                          # (K', B)
    ok = p.feasible[k_rows] & (itl <= slo_s)
    if not ok.any():
        return None, None, float("nan")
    g = np.where(ok, p.goodput[k_rows], -np.inf)
    best = g.max()
    i, j = max(zip(*np.nonzero(g == best)), key=lambda ij: (ij[1], -ij[0]))   # largest batch, then smallest K
    return int(p.batch_sizes[j]), int(p.k_values[k_rows][i]), float(best)


def _best_plain(p: Prediction, slo_s: float) -> tuple[Optional[int], float]:
    """The operating point of the same deployment served without speculation (a plain server, not the K table's
    off tier): the batch with the most tokens/s whose step meets the SLO."""
    step = p.plain_step_s if p.plain_step_s is not None else p.step_s[list(p.k_values).index(0)]
    ok = p.feasible[list(p.k_values).index(0)] & (step <= slo_s)
    if not ok.any():
        return None, float("nan")
    g = np.where(ok, p.batch_sizes / step, -np.inf)
    j = int(np.flatnonzero(g == g.max())[-1])
    return int(p.batch_sizes[j]), float(g[j])


def plan_rows(model, candidates: Sequence[Union[str, Candidate]], itl_slo_ms: float, *, drafter=DEFAULT_DRAFTER,
              engine=DEFAULT_ENGINE, deployment: Optional[Deployment] = None, options: Optional[PredictOptions] = None,
              target_tokens_per_s: Optional[float] = None, price_per_gpu_hour: Optional[Union[float, dict]] = None,
              progress=None, **option_values) -> list[PlanRow]:
    """One PlanRow per candidate (see module doc). price_per_gpu_hour: one price, or {hardware: price}.

    deployment: the number formats and layout every candidate runs (its tp and ep are each candidate's); with
    ``dp_attention`` a candidate that cannot run it is an infeasible row. options: predict's (acceptance, context,
    batch sizes, max K); keyword values replace its fields. With a draft tree on the drafter, k_dsd is the tree's
    steps (the tree) or 0. ``progress(done, total)``, when given, is called after each candidate."""
    if not itl_slo_ms or math.isnan(itl_slo_ms) or itl_slo_ms <= 0:       # inf: no latency limit
        raise DsdsimError(f"the ITL SLO must be > 0 ms, got {itl_slo_ms}")
    if target_tokens_per_s is not None and not (math.isfinite(target_tokens_per_s) and target_tokens_per_s > 0):
        raise DsdsimError(f"the target rate must be a finite number > 0 tokens/s, got {target_tokens_per_s}")
    if not candidates:
        raise DsdsimError(f"no candidates given; write a comma list of {CANDIDATE_FORM}")
    from dsdsim.specs.catalog import load_model

    query = _Query(itl_slo_ms / 1e3, drafter, engine, deployment or Deployment(),
                   (options or PredictOptions()).with_values(option_values), target_tokens_per_s)
    cands = [Candidate.parse(c) if isinstance(c, str) else c for c in candidates]
    seen = set()
    for c in cands:
        key = (c.hardware, c.tp, c.ep, c.pp)
        if key in seen:
            raise DsdsimError(f"candidate {c.hardware}:tp{c.tp}" + (f":ep{c.ep}" if c.ep > 1 else "")
                              + (f":pp{c.pp}" if c.pp > 1 else "") + " is listed twice; list each candidate once")
        seen.add(key)
    spec = load_model(model)
    rows = []
    for i, cand in enumerate(cands):
        rows.append(_plan_one(spec, cand, query, _price(price_per_gpu_hour, cand.hardware)))
        if progress is not None:
            progress(i + 1, len(cands))
    return rows


@frozen
class _Query:
    """What every candidate of one plan is asked: the SLO, the drafter, engine, deployment and predict options."""

    slo_s: float
    drafter: object
    engine: object
    deployment: Deployment
    options: PredictOptions
    target_tokens_per_s: Optional[float]


def _price(price, hardware: str) -> Optional[float]:
    if price is None:
        return None
    if isinstance(price, dict):
        value = price.get(hardware)
    else:
        value = float(price)
    if value is not None and (not math.isfinite(value) or value < 0):
        raise DsdsimError(f"price per GPU-hour must be >= 0, got {value}")
    return value


def _plan_one(model: ModelSpec, cand: Candidate, q: _Query, price: Optional[float]) -> PlanRow:
    gpus = cand.tp * cand.pp
    slo_s, target, context = q.slo_s, q.target_tokens_per_s, q.options.context
    empty = dict(batch_vanilla=None, tokens_per_s_vanilla=None, batch_dsd=None, k_dsd=None,
                 tokens_per_s_dsd=None, tokens_per_s_per_gpu_vanilla=None, tokens_per_s_per_gpu_dsd=None,
                 dsd_gain=None, gpus_needed_vanilla=None, gpus_needed_dsd=None, cost_per_million_tokens_vanilla=None,
                 cost_per_million_tokens_dsd=None)
    empty["pp"] = cand.pp
    dep = q.deployment.model_copy(update={"tp": cand.tp, "ep": cand.ep, "pp": cand.pp})
    try:                                  # parallelism this model cannot be split by: a row, not an error
        dep.check(model)
    except DsdsimError as exc:
        return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, False, str(exc), **empty)
    if q.drafter is None or cand.pp > 1:      # no drafter, or none under pp: the plain server's columns only
        return _plain_only_row(model, cand, dep, q, price, empty)
    # Anything else wrong (names, acceptance, drafter, batch sizes, context) is the user's input: raise.
    tree = getattr(q.drafter, "tree", None)
    p = predict(model, cand.hardware, dep, q.drafter, engine=q.engine,
                options=replace(q.options, fixed_k=None if tree is not None else 0))
    if not p.feasible.any():
        return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, False,
                       f"memory: weights and KV do not fit in {gpus} GPU(s) at context {context}"
                       + _fits_from(p.setup, cand, context), **empty)
    all_k = np.arange(len(p.k_values))
    b_v, g_v = _best_plain(p, slo_s)
    b_d, k_d, g_d = _best_under_slo(p, slo_s, all_k)
    itl_d = b_d / g_d * 1e3 if b_d is not None else None   # ms per token of one sequence: B / (tokens/s of one batch)
    # pipeline parallelism: pp batches of B in flight, each stepping once per step time (StepCost.microbatches)
    g_v, g_d = g_v * cand.pp, (g_d * cand.pp if g_d is not None else None)
    if b_d is None:
        fastest = float(np.nanmin(np.where(p.feasible, p.step_s / p.tau[:, None], np.nan))) * 1e3
        return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, False,
                       f"SLO: fastest ITL is {fastest:.2f} ms at batch 1 (> {slo_s * 1e3:g} ms)", **empty)

    def per_gpu(g):
        return None if not math.isfinite(g) else g / gpus

    def needed(g):
        if target is None or not math.isfinite(g):
            return None
        return int(math.ceil(target / g)) * gpus

    def cost(g):
        if price is None or not math.isfinite(g):
            return None
        return price * gpus / (g * 3600.0) * 1e6

    iv_d, iv_v = p.interval(b_d), (p.interval(b_v) if b_v is not None else None)
    return PlanRow(
        cand.hardware, cand.tp, cand.ep, gpus, True, "",
        itl_ms_dsd=itl_d, itl_ms_dsd_low=itl_d * iv_d.low if iv_d else None,
        itl_ms_dsd_high=itl_d * iv_d.high if iv_d else None,
        tokens_per_s_per_gpu_dsd_low=per_gpu(g_d / iv_d.high) if iv_d else None,
        tokens_per_s_per_gpu_dsd_high=per_gpu(g_d / iv_d.low) if iv_d else None,
        tokens_per_s_per_gpu_vanilla_low=per_gpu(g_v / iv_v.high) if iv_v and math.isfinite(g_v) else None,
        tokens_per_s_per_gpu_vanilla_high=per_gpu(g_v / iv_v.low) if iv_v and math.isfinite(g_v) else None,
        batch_vanilla=b_v, tokens_per_s_vanilla=g_v if math.isfinite(g_v) else None,
        batch_dsd=b_d, k_dsd=k_d, tokens_per_s_dsd=g_d,
        tokens_per_s_per_gpu_vanilla=per_gpu(g_v), tokens_per_s_per_gpu_dsd=per_gpu(g_d),
        dsd_gain=(g_d / g_v) if math.isfinite(g_v) and g_v > 0 else None,
        gpus_needed_vanilla=needed(g_v), gpus_needed_dsd=needed(g_d),
        cost_per_million_tokens_vanilla=cost(g_v), cost_per_million_tokens_dsd=cost(g_d), pp=cand.pp,
        largest_batch=int(np.max(p.batch_sizes)),
    )


def _fits_from(setup, cand: Candidate, context: int) -> str:
    """'; fits from rtx-5090:tp2' (the smallest tp of this GPU within a node that holds batch 1), or that none
    does (dsdsim.policy.fits)."""
    from dsdsim.policy.fits import smallest_tp

    tp = smallest_tp(setup, context)
    if tp is None:
        return f"; no {cand.hardware} node holds it as given (dsdsim predict says what would)"
    return f"; fits from {cand.hardware}:tp{tp}" + (f":ep{cand.ep}" if cand.ep > 1 else "")


def _plain_only_row(model: ModelSpec, cand: Candidate, dep: Deployment, q: _Query, price: Optional[float],
                    empty: dict) -> PlanRow:
    """The candidate served without speculation: its K = 0 columns. Without a drafter that is the whole row; a
    pipeline-parallel candidate asked for speculation is not feasible (vLLM runs no speculative decoding under pp)
    but still compares on those columns. Under pp, pp batches of B are in flight: the rate counts them, and every
    stage's KV cache must hold all pp x B sequences (a point fits when the memory of pp x B fits)."""
    from dsdsim.cost.step import step_time_grid
    from dsdsim.policy.predict import check_context, parse_batch_sizes
    from dsdsim.specs.setup import resolve

    gpus = cand.tp * cand.pp
    setup = resolve(model, cand.hardware, dep, None, q.engine)
    b = parse_batch_sizes(q.options.batch_sizes)
    context = check_context(q.options.context, setup)
    step, fits = step_time_grid(None, None, batch_sizes=b, k_values=[0], contexts=[context], setup=setup)
    step, fits = step[:, 0, 0], fits[:, 0, 0]
    if cand.pp > 1:
        fits = step_time_grid(None, None, batch_sizes=b * cand.pp, k_values=[0], contexts=[context],
                              setup=setup)[1][:, 0, 0]
    ok = fits & (step <= q.slo_s)
    row = dict(empty, largest_batch=int(np.max(b)))
    if ok.any():
        g = np.where(ok, b / step, -np.inf) * cand.pp
        j = int(np.flatnonzero(g == g.max())[-1])
        rate = float(g[j])
        row.update(batch_vanilla=int(b[j]), tokens_per_s_vanilla=rate, tokens_per_s_per_gpu_vanilla=rate / gpus,
                   gpus_needed_vanilla=(int(math.ceil(q.target_tokens_per_s / rate)) * gpus
                                        if q.target_tokens_per_s is not None else None),
                   cost_per_million_tokens_vanilla=(price * gpus / (rate * 3600.0) * 1e6
                                                    if price is not None else None))
    if q.drafter is None:
        if not ok.any():
            why = (f"memory: weights and KV do not fit in {gpus} GPU(s) at context {context}"
                   + (_fits_from(setup, cand, context) if cand.pp == 1 else "") if not fits.any()
                   else f"SLO: fastest step is {float(np.nanmin(np.where(fits, step, np.nan))) * 1e3:.2f} ms "
                        f"(> {q.slo_s * 1e3:g} ms)")
            return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, False, why, **row)
        return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, True, "", **row)
    return PlanRow(cand.hardware, cand.tp, cand.ep, gpus, False,
                   PP_DRAFTER_ERROR + " (its K=0 columns: the same GPUs without speculation)", **row)


def plan(model, candidates, itl_slo_ms: float, **kwargs):
    """plan_rows(...) as a pandas DataFrame (one row per candidate)."""
    import pandas as pd

    return pd.DataFrame([r.to_dict() for r in plan_rows(model, candidates, itl_slo_ms, **kwargs)])


def sensitivity(model, hardware, alphas: Sequence[float], contexts: Sequence[int], deployment=None,
                drafter=DEFAULT_DRAFTER, batch_sizes=None, max_k: Optional[int] = None, engine=DEFAULT_ENGINE):
    """How K* and the DSD speedup move with acceptance (constant alpha) and context: a tidy DataFrame with
    one row per (alpha, context, batch size)."""
    import pandas as pd

    from dsdsim.policy.acceptance import constant

    recs = []
    for a in alphas:
        for c in contexts:
            p = predict(model, hardware, deployment, drafter, engine=engine, acceptance=constant(float(a)),
                        context=int(c), batch_sizes=batch_sizes, max_k=max_k,
                        tolerance=0)     # K*, the exact best per batch size (rows' k)
            for r in p.rows:
                recs.append({"alpha": float(a), "context": int(c), "batch_size": r.batch_size, "k": r.k,
                             "speedup_vs_vanilla": r.speedup_vs_vanilla, "tokens_per_s": r.tokens_per_s})
    return pd.DataFrame(recs)
