"""Calibrate the shape of T(B, K) from a few measured points, and say which points to measure.

A step on a deployment is the cost model's kernels plus the engine release's terms. Five figures move it the way
deployments differ, each a whole class of kernels or terms at once (``FIGURES``):

    bandwidth     the fraction of HBM bandwidth weight-streaming GEMMs reach; every memory-bound kernel class
                  (attention, vector kernels, fused MoE) is scaled with it          steps with few tokens
    compute       the fraction of the dense peak large GEMMs reach; grouped MoE GEMMs scaled with it
                                                                                    steps with B*(K+1) large
    launch gap    the gap per kernel replayed from a CUDA graph; eager launches scaled with it         small B
    engine/step   one factor on the release's engine terms paid per step, per draft pass or per layer
    engine/token  one factor on the release's engine terms paid per sequence or per token

Fit (``ShapeCalibration``): maximum a posteriori over x_j = log(figure_j / prior_j). The prior of each figure is
its shipped value (the hardware spec's, the release's terms) with a log-normal width ``sigma`` (its spread across
the sources the shipped figures cite); each measured point adds a robust (soft-L1) residual on
log(T_pred / T_meas) / ``SIGMA_MEASURED``. Bounded by physics (a fraction of peak stays within [low, 1]), so a
figure moves down as well as up, as far as the points ask; one the points do not see stays at its prior, and the
posterior spread (from the fit's Jacobian) says how well each figure is pinned. Leave-one-out: each point is
predicted by the fit without it.

Plan (``plan_points``): the N (B, K) points that pin the figures best, by a stated rule: greedy D-optimal design.
Each next point is the candidate that most increases log det(J_S^T J_S / SIGMA_MEASURED^2 + P), J the sensitivities
d log T / d x_j at the priors, P the prior precision; over at most three servers (K = 0 and two speculative K, each
pair tried, the best kept), since each K is a server to launch. Candidates are the feasible points of a (B, K)
grid (powers of two from batch 1, K from 0 to the drafter's limit), or the points a source measured.
"""
from __future__ import annotations

import math
from itertools import combinations
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.fit.points import MeasuredPoint
from dsdsim.records import frozen
from dsdsim.units import median_abs

SIGMA_MEASURED = 0.05    # the spread of a measured step time: run to run, and what a benchmark's mean TPOT hides
                         # (mixed prefills, stragglers); points within 5% of the fit count in full, beyond it
                         # less (soft-L1)
PRIOR_STEP = 0.05        # log step of the sensitivities the plan reads (5%)


@frozen
class FigureKind:
    """One calibrated figure: what it is, its unit, its prior's width (log space) and why, its physical bounds."""

    name: str
    label: str
    unit: str                  # fraction | s | x
    sigma: float               # prior width in log space
    low: float                 # absolute bounds of the figure (fractions, seconds) or of the factor (x)
    high: float
    why: str


FIGURES = (
    FigureKind("bandwidth", "HBM bandwidth fraction (weight-streaming GEMMs)", "fraction", 0.10, 0.30, 1.0,
               "the spread of achieved-bandwidth sources the hardware specs cite: 0.74-0.92 of spec on Hopper "
               "(docs/reference/hardware.md 3b)"),
    FigureKind("compute", "compute fraction (large GEMMs, of the dense peak)", "fraction", 0.30, 0.15, 1.0,
               "MAMF 0.51-0.87 of the dense peak across parts, and below it for TP-split widths "
               "(docs/reference/hardware.md 3a)"),
    FigureKind("launch", "launch gap per kernel (graph replay)", "s", 0.70, 0.3e-6, 30e-6,
               "1.1-6 us per small kernel under CUDA graphs (pytorch/pytorch issue #161104; hardware.md 3d)"),
    FigureKind("engine_step", "engine terms paid per step / draft pass / layer", "x", 0.70, 0.05, 5.0,
               "the release's fitted terms span a sourced range of about 10x (engine_specs/)"),
    FigureKind("engine_token", "engine terms paid per sequence / token", "x", 0.70, 0.05, 5.0,
               "the release's fitted terms span a sourced range of about 10x (engine_specs/)"),
)
FIGURE_NAMES = tuple(f.name for f in FIGURES)


def priors(setup) -> np.ndarray:
    """The shipped value of each figure for ``setup``: the weight-streaming bandwidth fraction and the GEMM compute
    fraction of the model's weight format (the part's fitted GEMM figures where it has them), the graphed launch gap,
    factors 1 on the release's terms."""
    from dsdsim.units import DType

    hw, w = setup.hardware, setup.deployment.weight_dtype(setup.model)
    gemm = hw.kernels.gemm_figures(w) if hw.kernels is not None else None
    if gemm is not None:
        return np.array([gemm.bandwidth_fraction.value, gemm.compute_fraction.value, hw.launch_overhead_s.value,
                         1.0, 1.0])
    eff = hw.efficiency
    fp8 = w is DType.fp8
    memory = eff.memory_fp8 if fp8 and eff.memory_fp8 is not None else eff.memory
    compute = eff.compute_fp8 if fp8 and eff.compute_fp8 is not None else eff.compute
    return np.array([memory.value, compute.value, hw.launch_overhead_s.value, 1.0, 1.0])


def bounds(prior: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of each figure, widened to hold its prior (a spec calibrated before may sit outside)."""
    lo = np.array([f.low for f in FIGURES])
    hi = np.array([f.high for f in FIGURES])
    return np.minimum(lo, prior), np.maximum(hi, prior)


class StepModel:
    """log step time of measured points on one deployment, under figure factors s = figure / prior.

    The points' setups (a speculative one; K = 0 points on a server without speculation) are rebuilt with the
    hardware spec scaled (``HardwareSpec.scaled``) and the release's terms scaled per step / per token
    (``EngineParams.of``); the step times come from the cost model (``simulate_step``)."""

    def __init__(self, setup, async_scheduling: Optional[bool] = None, engine_method: Optional[str] = None):
        from dsdsim.policy.predict import plain_setup

        self.setup = setup
        self.plain = plain_setup(setup)
        self.async_scheduling = async_scheduling
        self.engine_method = engine_method

    def _at(self, setup, factors: np.ndarray):
        from dsdsim.specs.engine import EngineParams, TOKEN_PERS

        bw, comp, launch, step_f, token_f = (float(v) for v in factors)
        hw = setup.hardware.scaled(bw, comp, launch)
        eng = setup.engine
        if eng is None:
            return replace(setup, hardware=hw)
        values = {t.name: t.value * (token_f if t.per.value in TOKEN_PERS else step_f) for t in eng.terms}
        d = setup.drafter
        kind = self.engine_method or (d.kind.value if d is not None else None)
        params = EngineParams.of(eng, values, async_scheduling=self.async_scheduling,
                                 drafter_kind=kind if d is not None else None, tree=d is not None and d.tree is not None)
        return replace(setup, hardware=hw, engine_params=params)

    def step_s(self, factors: np.ndarray, batch, k, context, tau=None, input_len=None, output_len=None
               ) -> np.ndarray:
        """Mean step seconds at arrays of (batch, K, context) under ``factors`` (one per figure). Where a point
        gives its benchmark's mean prompt and output (``input_len``, ``output_len``, with ``tau`` tokens a step), its
        steps also run the prefills of the requests that replace finished ones: B * tau / output prefills a step in
        a closed loop, each adding what a step of B - 1 decodes and one prompt costs beyond B decodes
        (``MixedPricer``, the serving simulation's step)."""
        from dsdsim.cost.step import simulate_step

        batch, k, context = (np.atleast_1d(np.asarray(a, dtype=float)) for a in (batch, k, context))
        out = np.empty(batch.shape)
        spec, plain = k > 0, k == 0
        setups = {True: self._at(self.setup, factors) if spec.any() else None,
                  False: self._at(self.plain, factors) if plain.any() else None}
        for on, where in ((True, spec), (False, plain)):
            if where.any():
                s = simulate_step(None, None, batch=batch[where], k=k[where], context=context[where],
                                  setup=setups[on])
                out[where] = np.asarray(s.step_time_s, dtype=float)
        if input_len is None or output_len is None:
            return out
        inp = np.atleast_1d(np.asarray(input_len, dtype=float))
        outl = np.atleast_1d(np.asarray(output_len, dtype=float))
        taus = np.atleast_1d(np.asarray(tau, dtype=float))
        pricers: dict = {}
        for i in np.flatnonzero(np.isfinite(inp) & np.isfinite(outl) & (outl > 0)):
            on = bool(k[i] > 0)
            if on not in pricers:
                from dsdsim.cost.mixed import MixedPricer

                pricers[on] = MixedPricer(setups[on])
            out[i] += batch[i] * taus[i] / outl[i] * _prefill_extra_s(pricers[on], int(batch[i]), int(k[i]),
                                                                       context[i], inp[i])
        return out

    def feasible(self, batch, k, context) -> np.ndarray:
        from dsdsim.cost.step import simulate_step

        s = simulate_step(None, None, batch=np.asarray(batch, dtype=float), k=np.asarray(k, dtype=float),
                          context=np.asarray(context, dtype=float), setup=self.setup)
        return np.asarray(s.feasible, dtype=bool)

    def sensitivities(self, *arrays) -> np.ndarray:
        """(points, figures): d log T / d log figure at the priors (one-sided differences of ``PRIOR_STEP``);
        ``arrays`` as ``step_s`` takes them after the factors."""
        base = np.log(self.step_s(np.ones(len(FIGURES)), *arrays))
        out = np.empty((base.size, len(FIGURES)))
        for j in range(len(FIGURES)):
            f = np.ones(len(FIGURES))
            f[j] = math.exp(PRIOR_STEP)
            out[:, j] = (np.log(self.step_s(f, *arrays)) - base) / PRIOR_STEP
        return out


def point_arrays(points: Sequence[MeasuredPoint]) -> tuple[np.ndarray, ...]:
    """(batch, K, context, tau, input_len, output_len) of points, NaN lengths where a point gives none: what
    ``StepModel.step_s`` takes after the factors."""
    def col(f):
        return np.array([np.nan if f(p) is None else f(p) for p in points], dtype=float)
    return (col(lambda p: p.batch), col(lambda p: p.k), col(lambda p: p.context), col(lambda p: p.acceptance_length),
            col(lambda p: p.input_len), col(lambda p: p.output_len))


def _prefill_extra_s(pricer, batch: int, k: int, context: float, prompt: float) -> float:
    """What a step of ``batch`` - 1 decodes and one prompt of ``prompt`` tokens costs beyond ``batch`` decodes."""
    from dsdsim.serve.step import ScheduledStep

    def step(decodes: int, prompts: list) -> float:
        return pricer.seconds(ScheduledStep(k=k, decode_contexts=np.full(decodes, float(context)),
                                            prefill_tokens=np.array(prompts, dtype=float),
                                            prefill_contexts=np.zeros(len(prompts))))

    return max(step(max(batch - 1, 0), [float(round(prompt))]) - step(batch, []), 0.0)


def _soft_l1(r: np.ndarray) -> np.ndarray:
    """Residuals whose squares are the soft-L1 loss 2 (sqrt(1 + r^2) - 1): quadratic within 1, linear beyond."""
    return np.sign(r) * np.sqrt(2.0 * (np.sqrt(1.0 + r * r) - 1.0))


def map_fit(model: StepModel, points: Sequence[MeasuredPoint], prior: np.ndarray, start: Optional[np.ndarray] = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """(x, Jacobian) of the MAP fit: x_j = log(figure_j / prior_j) (module docstring)."""
    from scipy.optimize import least_squares

    sig = np.array([f.sigma for f in FIGURES])
    lo, hi = bounds(prior)
    lo_x, hi_x = np.log(lo / prior), np.log(hi / prior)
    arrays = point_arrays(points)
    measured = np.log(np.array([p.step_ms * 1e-3 for p in points]))

    def resid(x):
        r = (np.log(model.step_s(np.exp(x), *arrays)) - measured) / SIGMA_MEASURED
        return np.concatenate([_soft_l1(r), x / sig])

    x0 = np.zeros(len(FIGURES)) if start is None else np.clip(start, lo_x, hi_x)
    res = least_squares(resid, x0, bounds=(lo_x - 1e-12, hi_x + 1e-12), method="trf", x_scale=sig,
                        diff_step=1e-4)
    return np.clip(res.x, lo_x, hi_x), res.jac


@frozen
class FittedFigure:
    """One figure after the fit, beside its prior and bounds (``ShapeCalibration.figures_``)."""

    kind: FigureKind
    prior: float
    value: float
    low: float
    high: float
    posterior_sigma: float          # log space: how well the points pin it (the prior's is kind.sigma)
    seen: bool                      # whether any point's time depends on it (else it stays at its prior)

    @property
    def on_bound(self) -> Optional[str]:
        lo, hi = math.log(self.low), math.log(self.high)
        v = math.log(max(self.value, 1e-300))
        if hi > lo and v <= lo + 1e-3 * (hi - lo):
            return "low"
        if hi > lo and v >= hi - 1e-3 * (hi - lo):
            return "high"
        return None

    @property
    def factor(self) -> float:
        return self.value / self.prior if self.prior > 0 else 1.0


@dataclass
class ShapeCalibration:
    """The five figures fitted to one deployment's measured points; estimator conventions (``fit -> self``, learned
    values end in ``_``). ``setup``: the deployment as resolved (model, hardware, tp, drafter, base engine)."""

    setup: object
    async_scheduling: Optional[bool] = None
    engine_method: Optional[str] = None
    figures_: list[FittedFigure] = field(default_factory=list, init=False)
    factors_: np.ndarray = field(default=None, init=False)
    points_: list[MeasuredPoint] = field(default_factory=list, init=False)
    fitted_ms_: list[float] = field(default_factory=list, init=False)     # ITL per point, fitted
    prior_ms_: list[float] = field(default_factory=list, init=False)      # ITL per point, shipped figures
    loo_error_: list[Optional[float]] = field(default_factory=list, init=False)

    def fit(self, points: Sequence[MeasuredPoint], leave_one_out: bool = True) -> "ShapeCalibration":
        if not points:
            raise DsdsimError("calibrate needs measured points")
        self.points_ = list(points)
        model = StepModel(self.setup, self.async_scheduling, self.engine_method)
        prior = priors(self.setup)
        x, jac = map_fit(model, self.points_, prior)
        self.factors_ = np.exp(x)
        self.figures_ = _figures(prior, x, jac, model, self.points_)
        arrays = point_arrays(self.points_)
        al = arrays[3]
        self.fitted_ms_ = list(1e3 * model.step_s(self.factors_, *arrays) / al)
        self.prior_ms_ = list(1e3 * model.step_s(np.ones(len(FIGURES)), *arrays) / al)
        self.loo_error_ = []
        if leave_one_out:
            for i in range(len(self.points_)):
                rest = self.points_[:i] + self.points_[i + 1:]
                xi, _ = map_fit(model, rest, prior, start=x)
                t = float(model.step_s(np.exp(xi), *(a[i:i + 1] for a in arrays))[0])
                self.loo_error_.append(t / (self.points_[i].step_ms * 1e-3) - 1.0)
        self._model = model
        return self

    def fitted_setups(self) -> tuple:
        """(the speculative setup, the plain one) with the fitted figures applied: the servers K > 0 and K = 0
        points were measured on, as ``StepModel`` prices them."""
        m = self._model
        return m._at(m.setup, self.factors_), m._at(m.plain, self.factors_)

    def predict_ms(self, points: Sequence[MeasuredPoint], factors: Optional[np.ndarray] = None) -> np.ndarray:
        """ITL (ms) at ``points`` under the fitted figures (``factors``: others, e.g. ones for the shipped ones)."""
        arrays = point_arrays(points)
        f = self.factors_ if factors is None else factors
        return 1e3 * self._model.step_s(f, *arrays) / arrays[3]

    @property
    def errors_(self) -> list[float]:
        return [f / p.itl_ms - 1.0 for f, p in zip(self.fitted_ms_, self.points_)]

    def engine_spec(self, name: str, source_files: Sequence[str], date: str, replayed: bool = False,
                    request_overhead_ms: Optional[float] = None):
        """The base engine spec with this calibration (``EngineCalibration``: the hardware and term factors resolve
        applies, each figure with its prior and bounds), named ``name``; provenance naming the points. ``replayed``:
        the points' targets were corrected by replaying their runs (``dsdsim.fit.replay``), and the provenance says
        so (the residuals are against those targets). ``request_overhead_ms``: the runs' TTFT outside the steps
        (``dsdsim.fit.replay.fit_request_overhead``), which the serving simulation then prices."""
        from dsdsim.specs.engine import CalibratedFigure, EngineCalibration, FitProvenance

        s = self.setup
        if s.engine is None:
            raise DsdsimError("calibrate --measurements writes an engine spec: give the engine the points were "
                              "measured on (--engine vllm, vllm@VERSION, sglang, ...), not kernels only")
        ids = tuple(point_id(p) for p in self.points_)
        res = {i: round(e, 4) for i, e in zip(ids, self.errors_)}
        loo = [abs(e) for e in self.loo_error_ if e is not None]
        source = f"dsdsim calibrate --measurements{' --replay' if replayed else ''} ({', '.join(source_files)})"
        figs = tuple(CalibratedFigure(name=f.kind.name, label=f.kind.label, unit=f.kind.unit,
                                      value=_round(f.value), prior=_round(f.prior), range=(f.low, f.high),
                                      prior_sigma=f.kind.sigma, posterior_sigma=round(f.posterior_sigma, 4),
                                      on_bound=f.on_bound) for f in self.figures_)
        fa = [round(float(v), 4) for v in self.factors_]
        cal = EngineCalibration(model=s.model.name, hardware=s.hardware.name, tp=s.deployment.tp, ep=s.deployment.ep,
                                drafter=s.drafter.label if s.drafter is not None else None, base_engine=s.engine.name,
                                bandwidth_scale=fa[0], compute_scale=fa[1], launch_scale=fa[2],
                                engine_step_scale=fa[3], engine_token_scale=fa[4], figures=figs, points=ids,
                                loo_median_abs_error=round(float(np.median(loo)), 4) if loo else None,
                                loo_max_abs_error=round(float(max(loo)), 4) if loo else None,
                                request_overhead_ms=request_overhead_ms, source=source, date=date)
        method = ("dsdsim calibrate --measurements: maximum a posteriori (each figure's shipped value its prior, "
                  "log-normal, bounded), soft-L1 on log step time")
        if replayed:
            method += ("; each run saved with its requests replayed through the serving simulation and its target "
                       "corrected by measured / replayed mean TPOT (dsdsim.fit.replay), residuals against the targets")
        fit = FitProvenance(method=method, date=date,
                            cases=ids, residuals=res,
                            median_abs_residual=round(median_abs(res.values()), 4),
                            max_abs_residual=round(float(np.max(np.abs(list(res.values())))), 4),
                            note="measured points: " + ", ".join(source_files))
        return s.engine.model_copy(update={"name": name, "calibration": cal, "fit": fit})


def _round(v: float) -> float:
    return float(f"{v:.5g}")


def point_id(p: MeasuredPoint) -> str:
    return f"b{p.batch}-k{p.k}-c{p.context}"


def _figures(prior: np.ndarray, x: np.ndarray, jac: np.ndarray, model: StepModel,
             points: Sequence[MeasuredPoint]) -> list[FittedFigure]:
    """Each figure after the fit: its value, bounds and posterior spread (the inverse of J^T J at the solution,
    the prior rows included), and whether any point's time depends on it."""
    lo, hi = bounds(prior)
    try:
        cov = np.linalg.inv(jac.T @ jac)
        post = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        post = np.array([f.sigma for f in FIGURES])
    sens = np.abs(jac[:len(points)]).max(axis=0) if len(points) else np.zeros(len(FIGURES))
    return [FittedFigure(kind, float(p), float(p * math.exp(v)), float(a), float(b), float(s), bool(seen > 1e-3))
            for kind, p, v, a, b, s, seen in zip(FIGURES, prior, x, lo, hi, post, sens)]


# --- which points to measure -----------------------------------------------------------------------------------


@frozen
class PlannedPoint:
    batch: int
    k: int
    context: int
    step_ms: float                  # predicted with the shipped figures
    informs: str                    # the figure this point pins most (largest share of its information gain)


@frozen
class PointPlan:
    """The N points ``plan_points`` picked, and how well they would pin each figure."""

    points: list[PlannedPoint]
    prior_sigma: dict[str, float]           # figure -> log-space width before measuring
    posterior_sigma: dict[str, float]       # ... after measuring the planned points (sensitivities at the priors)
    candidates: int
    rule: str


MAX_SERVERS = 3        # distinct K a plan measures (K = 0 and two speculative K): each K is a server to launch
RULE = ("greedy D-optimal design: each next point the candidate that most increases log det of the posterior "
        "information (J^T J / 0.05^2 + the priors' precision; J: d log T / d log figure at the shipped figures), "
        f"over at most {MAX_SERVERS} servers (K = 0 and the two speculative K whose points give the largest log det)")


def candidate_grid(model: StepModel, max_k: int, context: int, max_batch: Optional[int] = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch, K, context) of the feasible points of the default grid: batch sizes 1, 2, 4, ... up to ``max_batch``
    (default 512), K from 0 to ``max_k``."""
    top = max_batch or 512
    batches = [b for b in (2 ** i for i in range(0, 17)) if b <= top]
    if batches[-1] != top:
        batches.append(top)
    b, k = np.meshgrid(np.array(batches, dtype=float), np.arange(0, max_k + 1, dtype=float), indexing="ij")
    b, k = b.ravel(), k.ravel()
    c = np.full(b.shape, float(context))
    ok = model.feasible(b, k, c)
    return b[ok], k[ok], c[ok]


def plan_points(model: StepModel, n: int, batch: np.ndarray, k: np.ndarray, context: np.ndarray,
                servers: int = MAX_SERVERS, tau: Optional[np.ndarray] = None, input_len: Optional[np.ndarray] = None,
                output_len: Optional[np.ndarray] = None) -> PointPlan:
    """Pick ``n`` of the candidate points by ``RULE``: at most ``servers`` distinct K (each K is a server to launch;
    K = 0 always among them), the set of K and the points in it that give the largest log det."""
    if n < 1:
        raise DsdsimError(f"--plan needs at least 1 point, got {n}")
    if len(batch) == 0:
        raise DsdsimError("no (batch, K) point fits in memory at this context; lower the context or the batch")
    arrays = (batch, k, context, tau, input_len, output_len)
    J = model.sensitivities(*arrays) / SIGMA_MEASURED
    prior_prec = np.diag([1.0 / f.sigma ** 2 for f in FIGURES])
    spec_ks = sorted({int(v) for v in k if v > 0})
    sets = [tuple(c) for c in combinations(spec_ks, min(servers - 1, len(spec_ks)))] or [()]
    best = None
    for ks in sets:
        allowed = [i for i in range(len(batch)) if k[i] == 0 or int(k[i]) in ks]
        chosen, info, informs = _greedy(J, prior_prec, allowed, n)
        logdet = np.linalg.slogdet(info)[1]
        if best is None or logdet > best[0] + 1e-9:
            best = (logdet, chosen, info, informs)
    _, chosen, info, informs = best
    post = np.sqrt(np.diag(np.linalg.inv(info)))
    base_t = model.step_s(np.ones(len(FIGURES)), *arrays)
    picked = sorted(chosen, key=lambda i: (k[i], batch[i]))
    return PointPlan([PlannedPoint(int(batch[i]), int(k[i]), int(context[i]), float(base_t[i] * 1e3), informs[i])
                      for i in picked],
                     {f.name: f.sigma for f in FIGURES}, {f.name: float(s) for f, s in zip(FIGURES, post)},
                     len(batch), RULE)


def _greedy(J: np.ndarray, prior_prec: np.ndarray, allowed: list[int], n: int):
    """(chosen indices, information, the figure each chosen point pins most): greedy log-det over ``allowed``."""
    info = prior_prec.copy()
    chosen: list[int] = []
    informs: dict[int, str] = {}
    while len(chosen) < min(n, len(allowed)):
        logdet0 = np.linalg.slogdet(info)[1]
        pick, gain = None, -math.inf
        for i in allowed:
            if i in chosen:
                continue
            g = np.linalg.slogdet(info + np.outer(J[i], J[i]))[1] - logdet0
            if g > gain + 1e-12:
                pick, gain = i, g
        share = (J[pick] @ np.linalg.inv(info)) * J[pick]     # each figure's part of the point's information gain
        informs[pick] = FIGURES[int(np.argmax(share))].name
        info = info + np.outer(J[pick], J[pick])
        chosen.append(pick)
    return chosen, info, informs


def choose_points(model: StepModel, points: Sequence[MeasuredPoint], n: int) -> list[int]:
    """Indices of the ``n`` of ``points`` the plan rule picks (cross-validation: calibrate on them)."""
    b, k, c, tau, inp, out = point_arrays(points)
    plan = plan_points(model, n, b, k, c, tau=tau, input_len=inp, output_len=out)
    picked = {(p.batch, p.k, p.context) for p in plan.points}
    return [i for i, p in enumerate(points) if (p.batch, p.k, p.context) in picked]

