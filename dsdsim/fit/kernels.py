"""The kernel-shape figures of a hardware spec (``kernels`` block), measured: fitted to the probe's sweeps.

Each fit inverts the cost model's own equation (dsdsim.cost.timing) on the sweep it measures:

    kernel floor      a 1x128x128 GEMM: t = launch + floor (the GEMM's work is nanoseconds)
    GEMM transition   GEMM over M on real layer shapes: t = launch + max(floor, (t_c^p + t_m^p)^(1/p)),
                      t_c = 2mkn / peak, t_m = bytes / bandwidth; p by least squares on log time
    decode attention  t = launch + (B c + B ramp) * kv_bytes_per_token / (bandwidth * eta_max): a line in the
                      context c per variant, slope -> eta_max, intercept -> ramp tokens
The MLA figures need an MLA decode kernel (FlashMLA) and the fused-MoE figures a fused-MoE kernel, which the
probe does not run (its MLA-like points are plain matmuls): they are taken from a reference spec and marked
unverified; ``dsdsim calibrate`` on a validation fits the MoE ones.

Fused-MoE kernel families are fitted to published timings instead (``MoEFamilyFit``, scripts/fit_kernels.py over
measurements/kernels/fused_moe.csv): a family's latency and bandwidth fraction on one part, by the same equation
(dsdsim.cost.timing.moe_family_rates). Pure numpy/scipy: no torch here.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Optional, Sequence

import numpy as np

from dsdsim.cost.experts import experts_touched
from dsdsim.cost.ops import Demand, MoEExperts
from dsdsim.cost.timing import MoECall, launch_overhead, moe_family_rates, seconds
from dsdsim.records import frozen
from dsdsim.specs.hardware import GROUPED_GEMM_LAUNCHES, Figure, HardwareSpec, MoEFamilyFigures, Verified
from dsdsim.units import DType, median_abs

NOT_PROBED = ("mla_attention_bandwidth_fraction", "mla_attention_ramp_tokens", "moe_call_latency_s",
              "moe_bandwidth_fraction", "moe_compute_fraction")


def kernel_floor_s(tiny_gemm_s: float, launch_s: float, lowest_s: float = 1e-8) -> float:
    """Kernel floor from a tiny GEMM timed the way the launch was (both graph-replayed, or both eager)."""
    return float(max(tiny_gemm_s - launch_s, lowest_s))


def gemm_transition_p(points: Sequence[dict], peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                      launch_s: float, floor_s: float) -> Optional[float]:
    """The p-norm exponent that best reproduces the GEMM M-sweep (points: flops, bytes, seconds), in [1, 16]."""
    from scipy.optimize import minimize_scalar

    pts = [p for p in points if p.get("seconds") and p.get("flops") and p.get("bytes")]
    if len(pts) < 3 or peak_flops_per_s <= 0 or bandwidth_bytes_per_s <= 0:
        return None
    tc = np.array([p["flops"] for p in pts]) / peak_flops_per_s
    tm = np.array([p["bytes"] for p in pts]) / bandwidth_bytes_per_s
    meas = np.log([p["seconds"] for p in pts])

    def loss(p: float) -> float:
        hi, lo = np.maximum(tc, tm), np.minimum(tc, tm)
        work = hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)
        return float(np.sum((np.log(launch_s + np.maximum(work, floor_s)) - meas) ** 2))

    return float(minimize_scalar(loss, bounds=(1.0, 16.0), method="bounded").x)


def attention_ramp(points: Sequence[dict], bandwidth_bytes_per_s: float, launch_s: float
                   ) -> Optional[tuple[float, float]]:
    """(eta_max, ramp tokens) from decode-attention points of one variant and batch over context (points: batch,
    context, kv_bytes, seconds): t - launch = (B c + B ramp) kv_bytes_per_token / (BW eta_max)."""
    pts = sorted((p for p in points if p.get("seconds") and p.get("kv_bytes")), key=lambda p: p["context"])
    if len({p["context"] for p in pts}) < 2:
        return None
    c = np.array([p["context"] for p in pts], dtype=float)
    t = np.array([p["seconds"] for p in pts]) - launch_s
    per_token = np.array([p["kv_bytes"] / (p["batch"] * p["context"]) for p in pts])       # bytes per token
    batch = np.array([p["batch"] for p in pts], dtype=float)
    x = batch * per_token / bandwidth_bytes_per_s                # seconds per token per unit of 1/eta
    slope, intercept = np.polyfit(c * x, t, 1)                    # t = (1/eta) c x + (ramp/eta) x
    if slope <= 0:
        return None
    eta = float(np.clip(1.0 / slope, 0.01, 1.2))
    ramp = float(np.clip(intercept / (slope * float(np.mean(x))), 1.0, 1e6))
    return eta, ramp


@dataclass
class KernelFigureFit:
    """The kernel-shape figures a probe's sweeps determine (kernel floor, GEMM transition, decode-attention curve);
    estimator conventions: parameters in ``__init__``, ``fit(sweeps) -> self``, ``figures_`` {name: (value, how it
    was measured)}. ``launch_s``: the launch cost of the same timing mode (graph replay or eager)."""

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    launch_s: float
    graphs: bool
    figures_: dict = field(default_factory=dict, init=False)

    def fit(self, sweeps: dict) -> "KernelFigureFit":
        """``sweeps``: name -> list of point dicts, as the probe writes them."""
        self.figures_ = fit_kernel_figures(sweeps, self.peak_flops_per_s, self.bandwidth_bytes_per_s, self.launch_s,
                                           self.graphs)
        return self


def fit_kernel_figures(sweeps: dict, peak_flops_per_s: float, bandwidth_bytes_per_s: float, launch_s: float,
                       graphs: bool) -> dict[str, tuple[float, str]]:
    """{figure name: (value, how it was measured)} for what the sweeps determine. ``sweeps``: name -> list of
    point dicts (as the probe writes them); ``launch_s``: the launch cost of the same timing mode."""
    mode = "graph" if graphs else "eager"
    out: dict[str, tuple[float, str]] = {}
    floor = None
    for p in sweeps.get("kernel_floor", []):
        if p.get("kernel", "").startswith("gemm") and p.get("mode") == mode and p.get("seconds"):
            floor = kernel_floor_s(p["seconds"], launch_s)
            out["kernel_floor_s"] = (floor, f"1x128x128 GEMM ({mode}) {p['seconds'] * 1e6:.2f} us less the "
                                            f"{launch_s * 1e6:.2f} us launch")
    p_fit = gemm_transition_p(sweeps.get("gemm_m", []), peak_flops_per_s, bandwidth_bytes_per_s, launch_s,
                              floor or 0.0)
    if p_fit is not None:
        out["gemm_transition_p"] = (p_fit, f"least squares on log time over {len(sweeps.get('gemm_m', []))} GEMM "
                                           "M-sweep points (llama-3.1-8b layer shapes)")
    pts = fastest_per_context(sweeps.get("decode_attention", []), variants=("gqa_attend", "gqa_packed"))
    fit = attention_ramp(pts, bandwidth_bytes_per_s, launch_s)
    if fit is not None:
        how = (f"line in context over {len(pts)} contexts (q = 1, batch {pts[0]['batch']}, the faster of SDPA's GQA "
               "path and the packed call at each)")
        out["decode_attention_bandwidth_fraction"] = (fit[0], how)
        out["decode_attention_ramp_tokens"] = (fit[1], how)
    return out


def fastest_per_context(points: Sequence[dict], variants: Sequence[str], q_len: int = 1) -> list[dict]:
    """At each context, the fastest of the given kernel variants (an engine runs its best decode kernel)."""
    best: dict[int, dict] = {}
    for p in points:
        if p.get("variant") in variants and p.get("q_len") == q_len and p.get("seconds"):
            c = p["context"]
            if c not in best or p["seconds"] < best[c]["seconds"]:
                best[c] = p
    return [best[c] for c in sorted(best)]


# --- fused-MoE kernel families, from published timings ------------------------------------------------------------
#
# A published fused-MoE timing is one call of a kernel family (Triton fused_moe, FlashInfer TRT-LLM-gen, Marlin, aiter,
# ...) on one part at one shape and token count. ``MoEFamilyFit`` fits the family's latency and bandwidth fraction
# (and, where chosen, a shape term) on one part by least squares on log time, timing every row with the cost model's
# own equation (dsdsim.cost.timing.moe_family_rates and seconds, the functions predictions use).


class Coverage(str, Enum):
    """What a published fused-MoE timing includes."""

    call = "call"                                        # the whole call: routing, align, GEMMs, activation, combine
    call_without_topk = "call_without_topk"              # the top-k kernel ran outside the timed region
    call_without_act_quant = "call_without_act_quant"    # activation quantisation left out (FlashInfer's benchmark)
    gemms = "gemms"                                      # the two grouped GEMMs only
    gemm1 = "gemm1"                                      # one GEMM of the two: not a call (not fitted)
    one_gemm = "one_gemm"                                # one grouped or dense GEMM: not a call (not fitted)
    call_with_ep_comm = "call_with_ep_comm"              # includes expert-parallel communication (not fitted)


FITTABLE = (Coverage.call, Coverage.call_without_topk, Coverage.call_without_act_quant, Coverage.gemms)
# How a benchmark routes tokens to experts. ``uniform``: random (the top-k of random logits; E(1-(1-k/E)^T) experts
# touched). ``balanced``: spread over the experts on purpose, min(T k, E) touched (ai-dynamo/aiconfigurator
# collector/helper.py balanced_logits: token t picks experts t + j ceil(E/k) mod E, j < k).
ROUTINGS = ("uniform", "balanced")
TOPK_LAUNCHES = 1     # the routing top-k of a call is one kernel (vLLM topk_softmax; FlashInfer's routing kernel)
ACT_DTYPE = DType.bf16    # the activations the published benchmarks feed (quantised formats quantise inside the call)


@frozen
class MoERow:
    """One published fused-MoE timing (a row of measurements/kernels/fused_moe.csv)."""

    source: str
    part: str                    # the dsdsim name of the part it was measured on (or a part the catalog lacks)
    family: str
    model: str
    experts: int                 # routed experts on the measured rank
    experts_global: int          # routed experts of the model (top_k of them per token)
    top_k: int
    hidden: int
    expert_width: int            # one expert's intermediate width on the rank
    weight: DType
    tokens: float
    time_s: float
    covers: Coverage
    launch_gaps: bool            # False: a sum of kernels' device times (no launch gaps between them)
    excluded: str = ""           # why the row is not fitted ("" when it is)
    routing: str = "uniform"     # how the benchmark routed tokens (``ROUTINGS``)

    @property
    def shape(self) -> str:
        """The row's shape without its token count (rows of one shape form one leave-one-out fold)."""
        return (f"{self.model} {self.weight.value} E={self.experts}/{self.experts_global} k={self.top_k} "
                f"h={self.hidden} I={self.expert_width}")

    @property
    def experts_touched(self) -> float:
        """Distinct experts the measured rank reads: its share of E(1-(1-k/E)^T) under uniform routing, of
        min(T k, E) under ``balanced`` routing."""
        if self.routing == "balanced":
            touched = min(self.tokens * self.top_k, float(self.experts_global))
        else:
            touched = experts_touched(self.experts_global, self.top_k, self.tokens, 1.0)
        return touched * self.experts / self.experts_global


def read_moe_rows(path) -> list[MoERow]:
    """The rows of a fused-MoE timing CSV (measurements/kernels/fused_moe.csv), those with a token count."""
    import csv

    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if not r["tokens"]:
                continue
            rows.append(MoERow(r["source"], r["part"], r["family"], r["model"], int(r["experts"]),
                               int(r["experts_global"]), int(r["top_k"]), int(r["hidden"]), int(r["expert_width"]),
                               DType(r["weight_format"]), float(r["tokens"]), float(r["time_us"]) * 1e-6,
                               Coverage(r["covers"]), r["launch_gaps"] == "yes", r["excluded"],
                               r.get("routing") or "uniform"))
    unknown = {r.routing for r in rows} - set(ROUTINGS)
    if unknown:
        raise ValueError(f"{path}: unknown routing {sorted(unknown)}; use one of {', '.join(ROUTINGS)}")
    return rows


def covered_launches(family: MoEFamilyFigures, row: MoERow) -> float:
    """The family's launches that the row's timing includes."""
    if row.covers is Coverage.gemms:
        return float(GROUPED_GEMM_LAUNCHES)
    if row.covers is Coverage.call_without_act_quant:
        return family.kernels.value
    whole = family.launches(row.weight)
    return whole - TOPK_LAUNCHES if row.covers is Coverage.call_without_topk else whole


class _Prepared(NamedTuple):
    """What a row's time depends on besides the fitted figures (worked out once per row)."""

    demand: Demand
    call: MoECall
    launches: float
    gap_s: float


def _operator(row: MoERow, family: MoEFamilyFigures) -> MoEExperts:
    if row.covers not in FITTABLE:
        raise ValueError(f"a {row.covers.value} row is not one fused-MoE call: {row.source}")
    return MoEExperts(row.top_k, row.hidden, row.expert_width, row.weight, ACT_DTYPE, int(family.tile_m.value),
                      experts=row.experts)


def _prepare(row: MoERow, hw: HardwareSpec, family: MoEFamilyFigures, tokens=None, touched=None) -> _Prepared:
    """``row``'s demand (at ``tokens`` and ``touched`` where given: arrays for rows of one shape), call and launches."""
    op = _operator(row, family)
    demand = op.demand(row.tokens if tokens is None else tokens, row.experts_touched if touched is None else touched,
                       row.experts / row.experts_global)
    gap = launch_overhead(hw, True) if row.launch_gaps else 0.0
    return _Prepared(demand, MoECall(op.expert_weight_bytes, row.experts), covered_launches(family, row), gap)


class _Group(NamedTuple):
    """Rows that differ only in their token count and routing (one shape, coverage and harness): one operator,
    one call, their demands as arrays, so a fit prices them in one vectorised step."""

    index: np.ndarray                 # the rows' positions in the fitted sequence
    weight: DType
    demand: Demand
    call: MoECall
    launches: float
    gap_s: float


def _groups(rows: Sequence[MoERow], hw: HardwareSpec, family: MoEFamilyFigures) -> list[_Group]:
    keyed: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        keyed.setdefault((r.shape, r.covers, r.launch_gaps), []).append(i)
    out = []
    for index in keyed.values():
        first = rows[index[0]]
        p = _prepare(first, hw, family, np.array([rows[i].tokens for i in index]),
                     np.array([rows[i].experts_touched for i in index]))
        out.append(_Group(np.array(index), first.weight, p.demand, p.call, p.launches, p.gap_s))
    return out


def _group_seconds(groups: Sequence[_Group], n: int, hw: HardwareSpec, family: MoEFamilyFigures) -> np.ndarray:
    """Seconds of each of ``n`` rows (grouped by ``_groups``) under ``family``'s figures."""
    out = np.empty(n)
    for g in groups:
        out[g.index] = seconds(moe_family_rates(hw, family, g.weight, g.call, g.launches), g.demand, g.gap_s)
    return out


def moe_row_seconds(row: MoERow, hw: HardwareSpec, family: MoEFamilyFigures) -> float:
    """The cost model's time of the published row ``row`` with ``family``'s figures on ``hw``."""
    return _seconds(_prepare(row, hw, family), hw, family, row.weight)


def _seconds(p: _Prepared, hw: HardwareSpec, family: MoEFamilyFigures, weight: DType) -> float:
    return float(seconds(moe_family_rates(hw, family, weight, p.call, p.launches), p.demand, p.gap_s))


SHAPE_TERMS = ("lead_expert_bandwidth_fraction", "align_s_per_expert")
# Rows per touched expert from which a row's grouped GEMMs are compute-bound: the ridge is w * peak * c / (2 BW b)
# rows (w bytes per weight, c and b the compute and bandwidth fractions), about 90 (fp8) to 130 (bf16) on H100 and
# H200 at the figures fitted here; twice that leaves the memory term a small share
COMPUTE_ROWS_PER_EXPERT = 256
COMPUTE_MIN_GAIN = 0.02                      # kept_compute_formats: the median |error| a fitted fraction must save
MAX_SHAPE_FOLDS = 12                         # held_out: above this many shapes, hold out a model at a time
COMPUTE_PREFIX = "compute_fraction."         # a fitted compute fraction's name: compute_fraction.<weight format>
# (low, high) of each fitted figure: the validators' physical ranges, the latency below 0.3 ms
FIT_BOUNDS = {"latency_s": (0.0, 3e-4), "bandwidth_fraction": (0.05, 1.2),
              "lead_expert_bandwidth_fraction": (0.02, 1.2), "align_s_per_expert": (0.0, 1e-6),
              "compute_fraction": (0.05, 1.0)}
_SCALE = {"latency_s": 1e-5, "bandwidth_fraction": 0.1, "lead_expert_bandwidth_fraction": 0.1,
          "align_s_per_expert": 1e-8, "compute_fraction": 0.1}   # typical magnitudes: least squares' scaling
_START = {"latency_s": 1e-5, "bandwidth_fraction": 0.7, "lead_expert_bandwidth_fraction": 0.3,
          "align_s_per_expert": 1e-8, "compute_fraction": 0.5}   # inside the bounds (the fit is convex in practice)


def _kind(name: str) -> str:
    """The bound / scale / start key of a fitted figure (compute_fraction.fp8 -> compute_fraction)."""
    return "compute_fraction" if name.startswith(COMPUTE_PREFIX) else name


def rows_per_expert(row: MoERow) -> float:
    """Rows each touched expert's grouped GEMMs compute in ``row``: its rank's assignments over its experts."""
    return row.tokens * row.top_k * row.experts / row.experts_global / max(row.experts_touched, 1e-12)


def compute_formats(rows: Sequence[MoERow]) -> tuple[DType, ...]:
    """The weight formats whose compute fraction ``rows`` identify: two shapes or more with a compute-bound row
    (``COMPUTE_ROWS_PER_EXPERT``), so a fraction is not one shape's quirk."""
    shapes: dict[DType, set[str]] = {}
    for r in rows:
        if rows_per_expert(r) >= COMPUTE_ROWS_PER_EXPERT:
            shapes.setdefault(r.weight, set()).add(r.shape)
    return tuple(sorted((w for w, s in shapes.items() if len(s) >= 2), key=lambda w: w.value))


class MoEFamilyFit:
    """A fused-MoE family's figures on one part, fitted to published rows with the cost model's equation.

    Parameters: ``hardware`` (the part's spec: bandwidth, peaks, kernel floor, launch gap, p-norm exponent),
    ``family`` (the family's counted figures: kernels, quantised_kernels, tile_m, weight formats; its latency and
    bandwidth figures are replaced, and its shape terms left out unless in ``terms``), ``terms`` (the optional shape
    terms to fit, of ``SHAPE_TERMS``), ``compute`` (the weight formats whose compute fraction to fit; None: those
    ``compute_formats`` finds in the rows).
    Least squares on log(predicted / measured), each shape weighted equally (1/sqrt of its rows), bounded by
    ``FIT_BOUNDS``; deterministic. Learned: ``latency_s_``, ``bandwidth_fraction_``, ``lead_expert_bandwidth_fraction_``
    and ``align_s_per_expert_`` (None unless in ``terms``), ``compute_fractions_`` (weight format -> the fraction of
    its peak the grouped GEMMs reach, for the formats ``compute_formats`` finds compute-bound rows of; the others
    keep the part's ``moe_compute_fraction``), ``residuals_`` (predicted / measured - 1 per row), ``n_rows_``,
    ``family_`` (the family with the fitted values).
    """

    def __init__(self, hardware: HardwareSpec, family: MoEFamilyFigures, terms: Sequence[str] = (),
                 compute: Optional[Sequence[DType]] = None):
        self.hardware = hardware
        self.family = family
        self.terms = tuple(terms)
        self.compute = None if compute is None else tuple(compute)

    def fit(self, rows: Sequence[MoERow]) -> "MoEFamilyFit":
        from scipy.optimize import least_squares

        unknown = set(self.terms) - set(SHAPE_TERMS)
        if unknown:
            raise ValueError(f"unknown shape term(s) {sorted(unknown)}; use {', '.join(SHAPE_TERMS)}")
        formats = compute_formats(rows) if self.compute is None else self.compute
        names = ("latency_s", "bandwidth_fraction") + self.terms + tuple(COMPUTE_PREFIX + w.value for w in formats)
        family = self.family.model_copy(update={**{t: None for t in SHAPE_TERMS if t not in self.terms},
                                                "compute_fractions": {}})
        groups = _groups(rows, self.hardware, family)
        measured = np.log([r.time_s for r in rows])
        shapes = [r.shape for r in rows]
        counts = Counter(shapes)
        weights = np.array([1.0 / np.sqrt(counts[s]) for s in shapes])

        def residuals(x: np.ndarray) -> np.ndarray:
            fam = _with_values(family, dict(zip(names, x)))
            return weights * (np.log(_group_seconds(groups, len(rows), self.hardware, fam)) - measured)

        lo, hi = zip(*(FIT_BOUNDS[_kind(n)] for n in names))
        x0 = [_START[_kind(n)] for n in names]
        out = least_squares(residuals, x0, bounds=(lo, hi), x_scale=[_SCALE[_kind(n)] for n in names])
        values = dict(zip(names, (float(v) for v in out.x)))
        self.family_ = _with_values(family, values)
        self.latency_s_ = values["latency_s"]
        self.bandwidth_fraction_ = values["bandwidth_fraction"]
        self.lead_expert_bandwidth_fraction_ = values.get("lead_expert_bandwidth_fraction")
        self.align_s_per_expert_ = values.get("align_s_per_expert")
        self.compute_fractions_ = {DType(n[len(COMPUTE_PREFIX):]): v for n, v in values.items()
                                   if n.startswith(COMPUTE_PREFIX)}
        self.residuals_ = self.predict(rows) / np.array([r.time_s for r in rows]) - 1.0
        self.n_rows_ = len(rows)
        return self

    def predict(self, rows: Sequence[MoERow]) -> np.ndarray:
        """Seconds of each row under the fitted figures."""
        return _group_seconds(_groups(rows, self.hardware, self.family_), len(rows), self.hardware, self.family_)


def _with_values(family: MoEFamilyFigures, values: dict[str, float]) -> MoEFamilyFigures:
    """``family`` with some figures' values replaced (sources kept; a term it lacks gets a placeholder source)."""
    update, computes = {}, dict(family.compute_fractions)
    for name, v in values.items():
        if name.startswith(COMPUTE_PREFIX):
            fmt = DType(name[len(COMPUTE_PREFIX):])
            fig = computes.get(fmt)
            computes[fmt] = (fig.model_copy(update={"value": v}) if fig is not None else
                             Figure(value=v, source="dsdsim.fit.kernels.MoEFamilyFit", verified=Verified.fitted))
            update["compute_fractions"] = computes
            continue
        fig = getattr(family, name)
        update[name] = (fig.model_copy(update={"value": v}) if fig is not None
                        else Figure(value=v, source="dsdsim.fit.kernels.MoEFamilyFit", verified=Verified.fitted))
    return family.model_copy(update=update)


@frozen
class HeldOut:
    """The rows of one shape predicted by a fit on the part's other shapes (or one row, by a fit on the rest)."""

    shape: str
    rows: int
    errors: tuple[float, ...]           # predicted / measured - 1, per held-out row

    @property
    def median_abs_error(self) -> float:
        return median_abs(self.errors)


def held_out(rows: Sequence[MoERow], hardware: HardwareSpec, family: MoEFamilyFigures,
             terms: Sequence[str] = (), compute: Optional[Sequence[DType]] = None) -> list[HeldOut]:
    """Leave-one-shape-out over the rows of one family on one part; over more than ``MAX_SHAPE_FOLDS`` shapes,
    leave-one-model-out (a model's shapes at several TP degrees held out together: the stricter test, and a fold
    count that stays small); with a single shape, leave-one-row-out (a test of interpolation over token counts
    only). Folds whose training rows cannot identify a term are left out."""
    shapes = sorted({r.shape for r in rows})
    if len(shapes) > MAX_SHAPE_FOLDS:
        models = sorted({r.model for r in rows})
        folds = [([r for r in rows if r.model != m], [r for r in rows if r.model == m],
                  f"{m} ({len({r.shape for r in rows if r.model == m})} shapes)") for m in models]
    elif len(shapes) > 1:
        folds = [([r for r in rows if r.shape != s], [r for r in rows if r.shape == s], s) for s in shapes]
    else:
        folds = [(list(rows[:i]) + list(rows[i + 1:]), [rows[i]], f"{rows[i].shape} T={rows[i].tokens:g}")
                 for i in range(len(rows))]
    out = []
    for train, test, label in folds:
        if not identifiable(train, terms):
            continue
        fit = MoEFamilyFit(hardware, family, terms, compute).fit(train)
        errors = fit.predict(test) / np.array([r.time_s for r in test]) - 1.0
        out.append(HeldOut(label, len(test), tuple(float(e) for e in errors)))
    return out


def compute_gain(fit: MoEFamilyFit, rows: Sequence[MoERow], weight: DType) -> float:
    """How much a fitted compute fraction of ``weight`` lowers the median |error| of ``weight``'s compute-bound rows
    (``COMPUTE_ROWS_PER_EXPERT``) against the part's ``moe_compute_fraction`` with the other figures as fitted."""
    bound = [r for r in rows if r.weight is weight and rows_per_expert(r) >= COMPUTE_ROWS_PER_EXPERT]
    measured = np.array([r.time_s for r in bound])
    prior = fit.family_.model_copy(update={"compute_fractions": {w: f for w, f in fit.family_.compute_fractions.items()
                                                                 if w is not weight}})
    groups = _groups(bound, fit.hardware, prior)

    def error(family: MoEFamilyFigures) -> float:
        return median_abs(_group_seconds(groups, len(bound), fit.hardware, family) / measured - 1.0)

    return error(prior) - error(fit.family_)


def kept_compute_formats(fit: MoEFamilyFit, rows: Sequence[MoERow],
                         min_gain: float = COMPUTE_MIN_GAIN) -> tuple[DType, ...]:
    """The formats whose fitted compute fraction earns its place: it lowers the median |error| of that format's
    compute-bound rows by more than ``min_gain`` against the part's prior (bf16 Triton MoE at large M scatters
    31-36% (median |error|) around any one fraction on H100/H200, so a fitted value there is not kept)."""
    return tuple(w for w in fit.compute_fractions_                      # in the fitted order: by format name
                 if compute_gain(fit, rows, w) > min_gain)


def identifiable(rows: Sequence[MoERow], terms: Sequence[str]) -> bool:
    """Whether ``rows`` can tell the terms apart from the latency: at least two values of what each grows with
    (one expert's weight bytes for the lead-expert term, the rank's experts for the align term), and more rows
    than figures."""
    grows_with = {"lead_expert_bandwidth_fraction": lambda r: r.hidden * r.expert_width * r.weight.bytes_per_element,
                  "align_s_per_expert": lambda r: r.experts}
    return (len(rows) > 2 + len(terms)
            and all(len({grows_with[t](r) for r in rows}) > 1 for t in terms))


def select_terms(rows: Sequence[MoERow], hardware: HardwareSpec, family: MoEFamilyFigures,
                 min_gain: float = 0.01) -> tuple[tuple[str, ...], list[HeldOut]]:
    """The shape terms to fit, and the held-out errors of that choice: each candidate set (none, one term, both)
    is scored by its leave-one-shape-out median |error|; a term is kept only where it lowers that by more than
    ``min_gain`` and the rows hold at least three shapes (two to fit a term on, one to test it)."""
    best: tuple[tuple[str, ...], list[HeldOut]] = ((), held_out(rows, hardware, family))
    best_score = median_abs([e for h in best[1] for e in h.errors])
    if len({r.shape for r in rows}) < 3:
        return best
    candidates = [(t,) for t in SHAPE_TERMS] + [SHAPE_TERMS]
    for terms in candidates:
        if not identifiable(rows, terms):
            continue
        folds = held_out(rows, hardware, family, terms)
        if len(folds) < len(best[1]):            # some folds could not fit the term: not comparable
            continue
        score = median_abs([e for h in folds for e in h.errors])
        if score < best_score - min_gain:
            best, best_score = (terms, folds), score
    return best
