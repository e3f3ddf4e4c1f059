"""Fit the roofline's efficiencies and overheads to measured times (``dsdsim calibrate``).

The model being fitted is the cost model itself: every point keeps the operators it is made of (OpRecord:
FLOPs, bytes, launches, kernel class, ...), and a candidate set of parameters is written into a copy of the
hardware spec and re-evaluated with dsdsim.cost.timing.op_time, the function predictions use. Fitted: compute
efficiency; memory efficiency per kernel class (GEMM weights, attention KV, vector kernels); the launch gap;
the GEMM tile; and, where the spec has a ``kernels`` block, the kernel floor, the GEMM transition exponent, the
decode-attention ramp and the fused-MoE call latency and bandwidth. A whole step adds ``step_overhead_s``;
kernels a torch measurement ran beyond the model's launches (eager torch does not fuse) cost one launch gap and
kernel floor each. Reports written before operator records existed keep the flat roofline they were
predicted with (OpFeatures). Estimator conventions:
parameters in ``__init__``, ``fit(points) -> self``, learned values end in ``_``. The loss is a robust
(soft-L1) least squares on log(predicted / measured), fitted with scipy for each candidate GEMM tile; the tile
with the lowest loss wins.

Two sources of measurements:
- a validation report (``dsdsim.bench.validate``): operator and step points, fitted on the train half and
  scored on the held-out half;
- a vLLM ``batch_stats`` file ``{"batch_stats": {"<bs>": {"<k>": itl_ms}}, "acceptance_rate_per_pos": [...]}``
  (the dynamic-SD profiling format of vLLM PR #32374): measured step time = ITL x tau(K), fitted through
  ``simulate_step``.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from scipy.optimize import least_squares

from dsdsim.fit.summary import CalibrationSummary
from dsdsim.cost.num import num
from dsdsim.cost.ops import Demand, GemmShape, MoEShape, OpCost, OpKind, pad_rows
from dsdsim.records import frozen
from dsdsim.specs.hardware import HardwareSpec, Verified

TILE_CANDIDATES = (1, 8, 16, 32, 64, 128)


# --- what a point is made of ----------------------------------------------------------------------------


@frozen
class OpFeatures:
    """One operator occurrence reduced to what the roofline needs; enough to re-predict it under new
    efficiencies, launch cost and GEMM tile. ``pad`` says how F_padded depends on the tile:
    "gemm" (m rows), "moe" (assignments spread over experts_touched), or "none"."""

    flops: float
    flops_padded: float
    bytes: float
    launches: float
    host_s: float
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    count: float = 1.0
    pad: str = "none"
    rows: float = 0.0          # gemm: m; moe: assignments (tokens * top_k * share)
    groups: float = 1.0        # moe: experts touched
    memory_class: str = "memory"   # which memory efficiency applies: memory | attention_memory | vector_memory

    def padded_flops(self, tile: float) -> float:
        if self.pad == "none" or self.flops <= 0 or self.rows <= 0:
            return self.flops_padded
        if self.pad == "gemm":
            return self.flops * _pad(self.rows, tile) / self.rows
        per = self.rows / self.groups
        return self.flops * self.groups * _pad(per, tile) / self.rows


def _pad(m: float, tile: float) -> float:
    """The cost model's own padding rule (one place: dsdsim.cost.ops.pad_rows), on a scalar."""
    return float(pad_rows(m, int(tile)))


def op_features(op: OpCost, hw: HardwareSpec) -> OpFeatures:
    """Features of one (scalar-shaped) OpCost on ``hw`` (peak of its dtype, the spec's bandwidth)."""
    def f(x) -> float:
        return float(np.asarray(x, dtype=float))

    pad, rows, groups = "none", 0.0, 1.0
    shape = op.shape
    if op.kind is OpKind.gemm and isinstance(shape, GemmShape):
        pad, rows = "gemm", f(shape.m)
    elif op.kind is OpKind.moe_experts and isinstance(shape, MoEShape):
        pad = "moe"
        rows = f(shape.tokens) * float(shape.top_k) * f(shape.token_share)
        groups = max(f(op.experts_touched), 1e-12)
    memory_class = {OpKind.attention: "attention_memory", OpKind.elementwise: "vector_memory",
                    OpKind.logits: "vector_memory"}.get(op.kind, "memory")
    return OpFeatures(flops=f(op.flops), flops_padded=f(op.flops_padded), bytes=f(op.bytes), launches=f(op.launches),
                      host_s=f(op.host_s), peak_flops_per_s=hw.peak(op.dtype), bandwidth_bytes_per_s=hw.bandwidth,
                      count=f(op.count), pad=pad, rows=rows, groups=groups, memory_class=memory_class)


_RECORD_FIELDS = ("flops", "weight_bytes", "act_in_bytes", "act_out_bytes", "kv_read_bytes", "kv_write_bytes",
                  "host_s", "launches", "count", "sequences", "kv_bytes_per_token")


@frozen
class OpRecord:
    """One operator of a point as the cost model sees it (scalars), enough to rebuild its OpCost under new
    hardware figures. ``pad``/``rows``/``groups`` say how the padded FLOPs follow the GEMM tile (as OpFeatures)."""

    kind: str
    dtype: str
    kernel: str
    values: dict
    pad: str = "none"
    rows: float = 0.0
    groups: float = 1.0

    @classmethod
    def from_op(cls, op: OpCost) -> "OpRecord":
        f = op_features(op, _NO_HW)
        vals = {name: float(np.asarray(getattr(op, name), dtype=float)) for name in _RECORD_FIELDS}
        vals["flops_padded"] = float(np.asarray(op.flops_padded, dtype=float))
        return cls(kind=op.kind.value, dtype=op.dtype.value, kernel=op.kernel.value, values=vals, pad=f.pad,
                   rows=f.rows, groups=f.groups)

    def to_json(self) -> dict:
        return asdict(self)


class _NoHardware:
    """op_features needs a spec only for peaks and bandwidth, which an OpRecord does not keep."""

    bandwidth = 0.0

    @staticmethod
    def peak(_dtype) -> float:
        return 0.0


_NO_HW = _NoHardware()


@dataclass
class Point:
    """One measured thing: an operator ("gemm", "attention", ...) or a whole pass ("step")."""

    kind: str
    name: str
    shape: dict
    measured_s: float
    predicted_s: float
    components: list[OpFeatures]
    is_step: bool = False
    calibrated_s: Optional[float] = None
    p10_s: Optional[float] = None
    p90_s: Optional[float] = None
    split: str = "train"
    kernels: Optional[int] = None     # kernels the torch implementation launched per call (None: the model's)
    measured_as: str = "operator"     # "operator" | "pass" (one whole forward pass) | "spec_step" (draft + verify)
    timing_mode: str = "eager"        # "eager" (host dispatch included) | "graph" (CUDA-graph replay)
    ops: list[OpRecord] = field(default_factory=list)   # the cost model's operators (empty in older reports)

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "shape": self.shape, "predicted_s": self.predicted_s,
                "measured_s": self.measured_s, "calibrated_s": self.calibrated_s, "p10_s": self.p10_s,
                "p90_s": self.p90_s, "split": self.split, "is_step": self.is_step, "kernels": self.kernels,
                "measured_as": self.measured_as, "timing_mode": self.timing_mode,
                "components": [asdict(c) for c in self.components], "ops": [r.to_json() for r in self.ops]}

    @classmethod
    def from_json(cls, d: dict) -> "Point":
        return cls(kind=d["kind"], name=d["name"], shape=d.get("shape", {}), measured_s=float(d["measured_s"]),
                   predicted_s=float(d["predicted_s"]), components=[OpFeatures(**c) for c in d["components"]],
                   is_step=bool(d.get("is_step", False)), calibrated_s=d.get("calibrated_s"),
                   p10_s=d.get("p10_s"), p90_s=d.get("p90_s"), split=d.get("split", "train"),
                   kernels=d.get("kernels"), measured_as=d.get("measured_as", "pass" if d.get("is_step") else "operator"),
                   timing_mode=d.get("timing_mode", "eager"), ops=[OpRecord(**r) for r in d.get("ops", [])])


def split_points(points: Sequence[Point]) -> None:
    """Deterministic train / held-out halves, interleaved by shape: within each (kind, name) the points sorted
    by shape alternate train, test, train, ...; the starting half alternates between groups."""
    groups: dict[tuple, list[Point]] = {}
    for p in points:
        groups.setdefault((p.kind, p.name), []).append(p)
    flip = 0
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda p: json.dumps(p.shape, sort_keys=True, default=str))
        for i, p in enumerate(members):
            p.split = "train" if (i + flip) % 2 == 0 else "test"
        if len(members) % 2:
            flip ^= 1


def error_summary(measured: Sequence[float], predicted: Sequence[float]) -> dict:
    """n, median / mean (MAPE) / max absolute percentage error of predicted vs measured."""
    m = np.asarray(measured, dtype=float)
    p = np.asarray(predicted, dtype=float)
    if m.size == 0:
        return {"n": 0, "median_abs_pct_error": None, "mape": None, "max_abs_pct_error": None}
    err = np.abs(p - m) / m * 100.0
    return {"n": int(m.size), "median_abs_pct_error": float(np.median(err)), "mape": float(np.mean(err)),
            "max_abs_pct_error": float(np.max(err)),
            "median_ratio_pred_over_meas": float(np.median(p / m))}


# --- the estimator --------------------------------------------------------------------------------------


@frozen
class Params:
    compute: float
    memory: float
    launch_s: float
    tile: float
    step_overhead_s: float
    attention_memory: Optional[float] = None    # None: same as memory
    vector_memory: Optional[float] = None
    kernels: Optional[dict] = None              # kernel figures (name -> value) where the spec has a kernels block
    step_host_per_kernel_s: float = 0.0         # eager whole steps only: Python around each kernel of the model code

    def memory_for(self, memory_class: str) -> float:
        value = getattr(self, memory_class, None) if memory_class != "memory" else None
        return self.memory if value is None else value


def predict(points: Sequence[Point], p: Params) -> np.ndarray:
    """Seconds per point under parameters ``p`` (the roofline of dsdsim.cost.timing, re-evaluated).

    Launch overhead is charged per kernel the measurement actually ran when the point records it
    (``kernels``), else per the cost model's launch count."""
    out = np.empty(len(points))
    for i, pt in enumerate(points):
        total, launches = 0.0, 0.0
        for c in pt.components:
            compute = c.padded_flops(p.tile) / (c.peak_flops_per_s * p.compute) if c.peak_flops_per_s > 0 else 0.0
            memory = c.bytes / (c.bandwidth_bytes_per_s * p.memory_for(c.memory_class))
            total += c.count * (max(compute, memory) + c.host_s)
            launches += c.count * c.launches
        if pt.kernels is not None:
            launches = float(pt.kernels)
        out[i] = total + launches * p.launch_s + (p.step_overhead_s if pt.is_step else 0.0)
    return out


def step_overhead_fit(measured: np.ndarray, predicted_ops: np.ndarray) -> float:
    """The constant s >= 0 minimising sum (log(predicted_ops + s) - log(measured))^2 (0 if steps are over-predicted)."""
    from scipy.optimize import minimize_scalar

    def loss(s: float) -> float:
        return float(np.sum((np.log(predicted_ops + s) - np.log(measured)) ** 2))

    hi = float(np.max(measured))
    r = minimize_scalar(loss, bounds=(0.0, hi), method="bounded", options={"xatol": hi * 1e-6})
    return float(r.x) if loss(float(r.x)) < loss(0.0) else 0.0


# --- re-prediction through the cost model ----------------------------------------------------------------

# kernel figures calibration fits, with (low, high) bounds: physical ranges, not tuned values
KERNEL_FIT_BOUNDS = {"kernel_floor_s": (1e-8, 5e-5), "gemm_transition_p": (1.0, 16.0),
                     "decode_attention_ramp_tokens": (1.0, 8192.0), "moe_call_latency_s": (1e-8, 5e-4),
                     "moe_bandwidth_fraction": (0.05, 1.2)}


def spec_with(hw: HardwareSpec, p: Params, cuda_graphs: bool, source: str = "fit") -> HardwareSpec:
    """``hw`` with the parameters ``p`` written in: what op_time then evaluates."""
    def frac(v: float) -> float:
        return float(min(max(v, 0.01), 1.2))

    values = {"compute": frac(p.compute), "memory": frac(p.memory), "gemm_tile_m": p.tile,
              "step_overhead_s": max(p.step_overhead_s, 0.0),
              ("launch_overhead_s" if cuda_graphs else "eager_launch_overhead_s"): p.launch_s}
    if not cuda_graphs and hw.launch_overhead_s.value == hw.eager_launch_overhead_s.value:
        values["launch_overhead_s"] = p.launch_s            # a device without graphs: one launch cost
    if p.attention_memory is not None:
        values["attention_memory"] = frac(p.attention_memory)
    if p.vector_memory is not None:
        values["vector_memory"] = frac(p.vector_memory)
    out = hw.with_efficiency(source=source, **values)
    if p.kernels and out.kernels is not None:
        out = out.with_kernels(source=source, **{k: float(np.clip(v, *KERNEL_FIT_BOUNDS[k])) for k, v in p.kernels.items()})
    return out


class Evaluator:
    """Seconds per point under candidate parameters, by the cost model's own op_time: the points' operator
    records are stacked by (kind, dtype, kernel class) into one array-valued OpCost each, so one evaluation
    costs a few vectorised op_time calls whatever the number of points."""

    def __init__(self, points: Sequence[Point], hw: HardwareSpec, cuda_graphs: bool):
        from dsdsim.cost.ops import KernelClass
        from dsdsim.units import DType

        self.hw, self.cuda_graphs, self.n = hw, cuda_graphs, len(points)
        buckets: dict[tuple, list[tuple[int, OpRecord]]] = {}
        model_launches = np.zeros(len(points))
        for i, pt in enumerate(points):
            for r in pt.ops:
                buckets.setdefault((r.kind, r.dtype, r.kernel), []).append((i, r))
                model_launches[i] += r.values["launches"] * r.values["count"]
        self.groups = []
        for (kind, dtype, kernel), items in buckets.items():
            idx = np.array([i for i, _ in items])
            cols = {name: np.array([r.values[name] for _, r in items]) for name in (*_RECORD_FIELDS, "flops_padded")}
            pad = np.array([r.pad for _, r in items])
            rows = np.array([r.rows for _, r in items])
            groups = np.array([max(r.groups, 1e-12) for _, r in items])
            self.groups.append((OpKind(kind), DType(dtype), KernelClass(kernel), idx, cols, pad, rows, groups))
        measured_kernels = np.array([np.nan if pt.kernels is None else float(pt.kernels) for pt in points])
        self.extra_kernels = np.where(np.isfinite(measured_kernels), np.maximum(measured_kernels - model_launches, 0.0), 0.0)
        self.is_step = np.array([pt.is_step for pt in points], dtype=float)
        self.step_kernels = self.is_step * np.where(np.isfinite(measured_kernels), measured_kernels, model_launches)

    def times(self, p: Params, extra_kernels: bool = True) -> np.ndarray:
        """Seconds per point; ``extra_kernels=False`` leaves out the kernels torch ran beyond the model's (the
        prediction as ``dsdsim predict`` makes it)."""
        from dsdsim.cost.timing import launch_overhead, op_time

        spec = spec_with(self.hw, p, self.cuda_graphs)
        out = np.zeros(self.n)
        for kind, dtype, kernel, idx, cols, pad, rows, groups in self.groups:
            padded = _padded_flops(cols["flops"], cols["flops_padded"], pad, rows, groups, p.tile)
            collective = cols["act_in_bytes"] if kind is OpKind.all_reduce else 0.0   # an all-reduce: its payload
            demand = Demand(num(cols["flops"]), num(padded), num(cols["weight_bytes"]), num(cols["act_in_bytes"]),
                            num(cols["act_out_bytes"]), num(cols["kv_read_bytes"]), num(cols["kv_write_bytes"]),
                            collective_bytes=num(collective), launches=num(cols["launches"]),
                            sequences=num(cols["sequences"]), host_s=num(cols["host_s"]))
            op = OpCost("calibration", kind, demand, dtype, kernel, count=cols["count"],
                        kv_bytes_per_token=cols["kv_bytes_per_token"])
            np.add.at(out, idx, np.broadcast_to(np.asarray(op_time(op, spec, self.cuda_graphs).time_s, dtype=float),
                                                idx.shape))
        per_extra = launch_overhead(spec, self.cuda_graphs) + (spec.kernels.kernel_floor_s.value if spec.kernels else 0.0)
        return (out + (self.extra_kernels * per_extra if extra_kernels else 0.0) + self.is_step * spec.step_overhead_s.value
                + self.step_kernels * p.step_host_per_kernel_s)


def _padded_flops(flops, flops_padded, pad, rows, groups, tile: float) -> np.ndarray:
    """The cost model's padding rule (dsdsim.cost.ops.pad_rows) at another tile, per record."""
    out = np.array(flops_padded, dtype=float)
    gemm = (pad == "gemm") & (rows > 0) & (flops > 0)
    out[gemm] = flops[gemm] * pad_rows(rows[gemm], int(tile)) / rows[gemm]
    moe = (pad == "moe") & (rows > 0) & (flops > 0)
    per = rows[moe] / groups[moe]
    out[moe] = flops[moe] * groups[moe] * pad_rows(per, int(tile)) / rows[moe]
    return out


@dataclass
class Calibrator:
    """Fits compute / memory efficiency, per-kernel launch cost, GEMM tile, the spec's kernel figures and (with
    step points) step overhead.

    tiles: candidate GEMM M tiles (None: keep ``start.tile``). bounds follow the spec's validators
    (efficiencies in [0.01, 1.2]; kernel figures in KERNEL_FIT_BOUNDS). ``start`` seeds the fit (usually the
    spec's current values). ``hardware`` and ``cuda_graphs`` are what the points are re-predicted on.
    """

    start: Params
    tiles: Optional[Sequence[int]] = TILE_CANDIDATES
    loss: str = "soft_l1"
    f_scale: float = 0.1         # log-error scale beyond which a point counts as an outlier (~10%)
    balance_kinds: bool = False  # weight points 1/n_kind (no operator kind outvotes the others by number)
    hardware: Optional[HardwareSpec] = None
    cuda_graphs: bool = False
    compute_efficiency_: float = field(default=float("nan"), init=False)
    memory_efficiency_: float = field(default=float("nan"), init=False)
    attention_memory_efficiency_: Optional[float] = field(default=None, init=False)
    vector_memory_efficiency_: Optional[float] = field(default=None, init=False)
    launch_overhead_s_: float = field(default=float("nan"), init=False)
    gemm_tile_m_: int = field(default=1, init=False)
    step_overhead_s_: Optional[float] = field(default=None, init=False)
    kernels_: Optional[dict] = field(default=None, init=False)
    per_kernel_from_: str = field(default="operators", init=False)   # what fixed the launch gap / kernel floor
    step_host_per_kernel_s_: float = field(default=0.0, init=False)
    cost_: float = field(default=float("nan"), init=False)
    n_train_: int = field(default=0, init=False)

    @classmethod
    def for_spec(cls, hw: HardwareSpec, cuda_graphs: bool = False, **kw) -> "Calibrator":
        launch = hw.launch_overhead_s.value if cuda_graphs else hw.eager_launch_overhead_s.value
        eff = hw.efficiency
        kernels = None
        if hw.kernels is not None:
            kernels = {name: getattr(hw.kernels, name).value for name in KERNEL_FIT_BOUNDS}
            if eff.attention_memory is None:          # with kernel figures, the attention ceiling starts at the
                eff = eff.model_copy(update={"attention_memory": hw.kernels.decode_attention_bandwidth_fraction})
        return cls(start=Params(eff.compute.value, eff.memory.value, max(launch, 1e-7), hw.gemm_tile_m.value,
                                hw.step_overhead_s.value, eff.attention_memory_value, eff.vector_memory_value,
                                kernels=kernels), hardware=hw, cuda_graphs=cuda_graphs, **kw)

    def _uses_records(self, pts: Sequence[Point]) -> bool:
        return self.hardware is not None and all(p.ops for p in pts)

    def _predict_with(self, pts: Sequence[Point], p: Params, evaluator: Optional[Evaluator] = None) -> np.ndarray:
        if self._uses_records(pts):
            return (evaluator or Evaluator(pts, self.hardware, self.cuda_graphs)).times(p)
        return predict(pts, p)

    def fit(self, points: Sequence[Point]) -> "Calibrator":
        """Operator points fix the efficiencies (compute; memory per kernel class: GEMM weight streaming,
        attention KV reads, vector kernels — each only where the points contain that class), launch cost, tile
        and kernel figures; step points then give the step overhead. Without operator points everything is
        fitted together."""
        pts = [p for p in points if p.measured_s > 0 and (p.components or p.ops)]
        if len(pts) < 3:
            raise ValueError(f"calibration needs at least 3 measured points, got {len(pts)}")
        ops_only = [p for p in pts if not p.is_step]
        steps = [p for p in pts if p.is_step]
        core = ops_only if len(ops_only) >= 3 else pts
        joint_step = any(p.is_step for p in core)
        classes = sorted(self._memory_classes(core) - {"memory"})
        cost, tile, params = self._fit_core(core, joint_step, classes)
        self.compute_efficiency_ = params.compute
        self.memory_efficiency_ = params.memory
        self.attention_memory_efficiency_ = params.attention_memory if "attention_memory" in classes else None
        self.vector_memory_efficiency_ = params.vector_memory if "vector_memory" in classes else None
        self.launch_overhead_s_ = params.launch_s
        self.gemm_tile_m_ = int(tile)
        self.kernels_ = params.kernels
        if joint_step:
            self.step_overhead_s_ = params.step_overhead_s
        elif len(steps) >= 3 and self.cuda_graphs and self._uses_records(steps):
            self._fit_per_kernel_on_steps(steps)
        elif len(steps) >= 3 and self._uses_records(steps):
            self._fit_eager_step_host(steps)
        elif steps:
            base = self._predict_with(steps, replace(params, step_overhead_s=0.0))
            self.step_overhead_s_ = step_overhead_fit(np.array([p.measured_s for p in steps]), base)
        else:
            self.step_overhead_s_ = None
        self.cost_ = float(cost)
        self.n_train_ = len(pts)
        return self

    def _fit_per_kernel_on_steps(self, steps: Sequence[Point]) -> None:
        """Whole steps set what each kernel costs beyond its work (launch gap, kernel floor) and the step
        overhead; the efficiencies stay as the operators fixed them. In a step, a kernel's launch overlaps the
        previous kernel's execution, which an operator timed alone cannot show: fitted on operators, the
        per-kernel cost over-predicts whole steps (by about 20% on an H200, 1,900 kernels per llama-3.1-8b step).
        Under CUDA graphs only: eagerly, a step's extra host time is Python around the kernels, not the kernels'
        launches, and the step overhead takes it."""
        base = self.params_
        ev = Evaluator(steps, self.hardware, self.cuda_graphs)
        meas = np.log([p.measured_s for p in steps])
        has_floor = bool(base.kernels) and "kernel_floor_s" in base.kernels
        lo_f, hi_f = KERNEL_FIT_BOUNDS["kernel_floor_s"]

        def params(x) -> Params:
            kern = dict(base.kernels or {})
            if has_floor:
                kern["kernel_floor_s"] = float(np.exp(x[2]))
            return replace(base, launch_s=float(np.exp(x[0])), step_overhead_s=float(x[1]), kernels=kern or None)

        x0 = [np.log(np.clip(base.launch_s, 1.1e-8, 0.9e-2)), 0.0]
        lo, hi = [np.log(1e-8), 0.0], [np.log(1e-2), 10.0]
        if has_floor:
            x0.append(np.log(np.clip(base.kernels["kernel_floor_s"], lo_f * 1.01, hi_f * 0.99)))
            lo.append(np.log(lo_f))
            hi.append(np.log(hi_f))
        r = least_squares(lambda x: np.log(np.maximum(ev.times(params(x)), 1e-15)) - meas, x0, bounds=(lo, hi),
                          loss=self.loss, f_scale=self.f_scale)
        fitted = params(r.x)
        self.launch_overhead_s_ = fitted.launch_s
        self.step_overhead_s_ = fitted.step_overhead_s
        self.kernels_ = fitted.kernels
        self.per_kernel_from_ = "whole steps"

    def _fit_eager_step_host(self, steps: Sequence[Point]) -> None:
        """Eager whole steps: the model code's Python around each kernel (module calls, views, control flow) costs
        host time an operator timed alone does not show, so it grows with the step's kernel count (more draft
        passes, more kernels). Fitted on the steps as a per-kernel host time plus a constant step overhead, both
        >= 0; the efficiencies stay as the operators fixed them. It describes eager torch, not a deployment
        (CUDA graphs remove it), so it is reported but not written into the calibrated spec."""
        base = replace(self.params_, step_overhead_s=0.0)
        ev = Evaluator(steps, self.hardware, self.cuda_graphs)
        meas = np.log([p.measured_s for p in steps])

        def params(x) -> Params:
            return replace(base, step_overhead_s=float(x[0]), step_host_per_kernel_s=float(x[1]))

        r = least_squares(lambda x: np.log(np.maximum(ev.times(params(x)), 1e-15)) - meas, [0.0, 0.0],
                          bounds=([0.0, 0.0], [10.0, 1e-3]), loss=self.loss, f_scale=self.f_scale)
        fitted = params(r.x)
        self.step_overhead_s_ = fitted.step_overhead_s
        self.step_host_per_kernel_s_ = fitted.step_host_per_kernel_s

    def _memory_classes(self, pts: Sequence[Point]) -> set[str]:
        if self._uses_records(pts):
            names = {"attention": "attention_memory", "elementwise": "vector_memory", "logits": "vector_memory"}
            return {names.get(r.kind, "memory") for p in pts for r in p.ops}
        return {c.memory_class for p in pts for c in p.components}

    def _fit_core(self, pts: Sequence[Point], has_step: bool, classes: Sequence[str]):
        """Least squares on log time over x = [log eta_c, log eta_m, log t_launch, log eta_m,class...,
        log kernel figure..., step_s]."""
        records = self._uses_records(pts)
        evaluator = Evaluator(pts, self.hardware, self.cuda_graphs) if records else None
        if records:
            uses_tile = any(r.pad != "none" for p in pts for r in p.ops)
            kinds = {r.kind for p in pts for r in p.ops}
            kernel_names = [k for k in (self.start.kernels or {})
                            if not (k.startswith("moe_") and "moe_experts" not in kinds)
                            and not (k == "decode_attention_ramp_tokens" and "attention" not in kinds)]
        else:
            uses_tile = any(c.pad != "none" for p in pts for c in p.components)
            kernel_names = []
        tiles = list(self.tiles) if (self.tiles and uses_tile) else [self.start.tile]
        log_meas = np.log([p.measured_s for p in pts])
        counts: dict[str, int] = {}
        for p in pts:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        w = np.sqrt([len(pts) / (len(counts) * counts[p.kind]) for p in pts]) if self.balance_kinds else 1.0
        n_cls, n_k = len(classes), len(kernel_names)
        lo = ([np.log(0.01), np.log(0.01), np.log(1e-8)] + [np.log(0.01)] * n_cls
              + [np.log(KERNEL_FIT_BOUNDS[k][0]) for k in kernel_names] + ([0.0] if has_step else []))
        hi = ([np.log(1.2), np.log(1.2), np.log(1e-2)] + [np.log(1.2)] * n_cls
              + [np.log(KERNEL_FIT_BOUNDS[k][1]) for k in kernel_names] + ([10.0] if has_step else []))

        def params(x, tile) -> Params:
            extra = dict(zip(classes, np.exp(x[3:3 + n_cls])))
            kern = dict(self.start.kernels or {})
            kern.update(zip(kernel_names, np.exp(x[3 + n_cls:3 + n_cls + n_k])))
            so = float(x[3 + n_cls + n_k]) if has_step else self.start.step_overhead_s
            return Params(float(np.exp(x[0])), float(np.exp(x[1])), float(np.exp(x[2])), tile, so,
                          attention_memory=extra.get("attention_memory"), vector_memory=extra.get("vector_memory"),
                          kernels=kern or None)

        best = None
        for tile in tiles:
            def resid(x, tile=tile):
                pr = self._predict_with(pts, params(x, tile), evaluator)
                return (np.log(np.maximum(pr, 1e-15)) - log_meas) * w

            start_cls = [self.start.memory_for(c) for c in classes]
            start_k = [(self.start.kernels or {})[k] for k in kernel_names]
            for seed in ((self.start.compute, self.start.memory, self.start.launch_s, *start_cls),
                         (0.5, 0.5, 1e-5, *[0.5] * n_cls)):
                x0 = [np.log(np.clip(seed[0], 0.011, 1.19)), np.log(np.clip(seed[1], 0.011, 1.19)),
                      np.log(np.clip(seed[2], 1.1e-8, 0.9e-2))] + [np.log(np.clip(v, 0.011, 1.19)) for v in seed[3:]]
                x0 += [np.log(np.clip(v, KERNEL_FIT_BOUNDS[k][0] * 1.01, KERNEL_FIT_BOUNDS[k][1] * 0.99))
                       for k, v in zip(kernel_names, start_k)]
                x0 += [max(self.start.step_overhead_s, 0.0)] if has_step else []
                r = least_squares(resid, x0, bounds=(lo, hi), loss=self.loss, f_scale=self.f_scale)
                if best is None or r.cost < best[0] - 1e-12:
                    best = (r.cost, tile, params(r.x, tile))
        return best

    @property
    def params_(self) -> Params:
        so = self.step_overhead_s_ if self.step_overhead_s_ is not None else self.start.step_overhead_s
        return Params(self.compute_efficiency_, self.memory_efficiency_, self.launch_overhead_s_, self.gemm_tile_m_, so,
                      attention_memory=self.attention_memory_efficiency_, vector_memory=self.vector_memory_efficiency_,
                      kernels=self.kernels_, step_host_per_kernel_s=self.step_host_per_kernel_s_)

    def predict(self, points: Sequence[Point]) -> np.ndarray:
        return self._predict_with(points, self.params_)

    def fitted(self) -> dict:
        return {"compute_efficiency": self.compute_efficiency_, "memory_efficiency": self.memory_efficiency_,
                "attention_memory_efficiency": self.attention_memory_efficiency_,
                "vector_memory_efficiency": self.vector_memory_efficiency_,
                "launch_overhead_s": self.launch_overhead_s_, "gemm_tile_m": self.gemm_tile_m_,
                "step_overhead_s": self.step_overhead_s_, "kernels": self.kernels_,
                "per_kernel_cost_fitted_on": self.per_kernel_from_,
                "eager_step_host_per_kernel_s": self.step_host_per_kernel_s_, "n_train": self.n_train_,
                "loss": self.loss, "cost": self.cost_}

    def calibrated_spec(self, hw: HardwareSpec, what: str = "", cuda_graphs: bool = False) -> HardwareSpec:
        """``hw`` with the fitted values (verified: measured, source naming the calibration)."""
        source = f"dsdsim calibrate {_dt.date.today().isoformat()} on {self.n_train_} points" + (f" ({what})" if what else "")
        p = self.params_
        if self.step_overhead_s_ is None:
            p = replace(p, step_overhead_s=hw.step_overhead_s.value)
        return flag_implausible(spec_with(hw, p, cuda_graphs, source=source), source)


# --- plausibility of a fitted spec ----------------------------------------------------------------------
# A fitted figure past these bounds is the fit absorbing what the model misses, not a property of the device:
# the written spec keeps it (efficiencies clamped) but marks it ``verified: unverified`` with a note starting
# IMPLAUSIBLE, and ``dsdsim calibrate`` prints each such note as a warning.

IMPLAUSIBLE = "implausible fit"
# Efficiencies are fractions of the spec's peak FLOP/s or bandwidth. Above 1 the peak in the spec is too low (a
# probe that under-measured it, a datasheet figure for another part) or the fit traded one term for another: no
# kernel runs faster than peak. The fit ranges to 1.2 (the spec validators' margin); the written value is 1.0.
MAX_EFFICIENCY = 1.0
# A constant per whole step beyond its kernels. 5 ms is above the largest host cost per step of any shipped engine
# spec (engine_specs/vllm-0.7.yaml schedule_and_prepare, range up to 3 ms, from microsoft/vidur's measured
# CPU overheads of a vLLM-V0-style engine); the torch harness runs no scheduler, so its own constant is far smaller.
MAX_STEP_OVERHEAD_S = 5e-3
# Per kernel: a CUDA launch or graph replay costs a few us and eager torch dispatch on a CPU tens of us (what
# ``dsdsim probe`` measures); above 100 us the launch term is absorbing work, not launches.
MAX_LAUNCH_OVERHEAD_S = 1e-4

_FRACTIONS = ("compute", "memory", "attention_memory", "vector_memory", "moe_bandwidth_fraction",
              "bandwidth_fraction")
_OVERHEADS = {"step_overhead_s": (MAX_STEP_OVERHEAD_S, "the largest per-step host cost of a shipped engine spec "
                                                       "is 3 ms"),
              "launch_overhead_s": (MAX_LAUNCH_OVERHEAD_S, "a kernel launch costs a few us, eager dispatch tens"),
              "eager_launch_overhead_s": (MAX_LAUNCH_OVERHEAD_S, "a kernel launch costs a few us, eager dispatch "
                                                                 "tens")}


def _is_figure(d) -> bool:
    return isinstance(d, dict) and {"value", "source", "verified"} <= set(d)


def _flag(name: str, fig: dict) -> Optional[dict]:
    """The figure ``name`` marked as an implausible fit (efficiencies clamped to 1), or None when plausible."""
    v = float(fig["value"])
    if name in _FRACTIONS and v > MAX_EFFICIENCY:
        note = (f"{IMPLAUSIBLE}: {v:.3f} of peak, above {MAX_EFFICIENCY:g} (the spec's peak is under-stated, or the "
                f"fit traded terms); written as {MAX_EFFICIENCY:g}: re-probe the peak (dsdsim probe)")
        return {**fig, "value": MAX_EFFICIENCY, "verified": Verified.unverified.value, "note": note}
    if name in _OVERHEADS and v > _OVERHEADS[name][0]:
        bound, why = _OVERHEADS[name]
        note = (f"{IMPLAUSIBLE}: {v * 1e3:.3g} ms, above the {bound * 1e3:g} ms bound ({why}): the fit absorbs "
                "what the kernel model misses; check the report's errors by kind")
        return {**fig, "verified": Verified.unverified.value, "note": note}
    return None


def flag_implausible(spec: HardwareSpec, source: str) -> HardwareSpec:
    """``spec`` with every figure this calibration wrote (``source``) that lies past the bounds above marked:
    ``verified: unverified`` and a note saying why (efficiencies also clamped to MAX_EFFICIENCY)."""
    data = spec.model_dump(mode="json")
    changed = False

    def walk(node: dict, skip: tuple[str, ...] = ()) -> None:
        nonlocal changed
        for name, value in node.items():
            if name in skip:
                continue
            if _is_figure(value):
                flagged = _flag(name, value) if value["source"] == source else None
                if flagged is not None:
                    node[name] = flagged
                    changed = True
            elif isinstance(value, dict):
                # with MoE families the single MoE figures are views of the default family's: flag the family's
                views = ("moe_call_latency_s", "moe_bandwidth_fraction") if value.get("moe_families") else ()
                walk(value, views)

    walk(data)
    return HardwareSpec.model_validate(data) if changed else spec


def implausible_figures(spec: HardwareSpec) -> list[str]:
    """'efficiency.compute: implausible fit: ...' for every figure of ``spec`` marked by flag_implausible."""
    out: list[str] = []

    def walk(node: dict, path: str) -> None:
        for name, value in node.items():
            if _is_figure(value):
                if (value.get("note") or "").startswith(IMPLAUSIBLE):
                    out.append(f"{path}{name}: {value['note']}")
            elif isinstance(value, dict):
                walk(value, f"{path}{name}.")

    walk(spec.model_dump(mode="json"), "")
    return out


# --- calibration from a validation report ---------------------------------------------------------------


def calibrate_points(points: Sequence[Point], hw: HardwareSpec, cuda_graphs: bool = False
                     ) -> tuple[Calibrator, dict]:
    """Fit on the train half, fill every point's ``calibrated_s``, and summarise errors (held-out = test)."""
    train = [p for p in points if p.split == "train"]
    test = [p for p in points if p.split == "test"]
    cal = Calibrator.for_spec(hw, cuda_graphs).fit(train)
    for p, t in zip(points, cal.predict(points)):
        p.calibrated_s = float(t)
    summary = {
        "uncalibrated": error_summary([p.measured_s for p in points], [p.predicted_s for p in points]),
        "uncalibrated_test": error_summary([p.measured_s for p in test], [p.predicted_s for p in test]),
        "calibrated": error_summary([p.measured_s for p in test], [p.calibrated_s for p in test]),
        "calibrated_train": error_summary([p.measured_s for p in train], [p.calibrated_s for p in train]),
    }
    return cal, summary


# --- calibration from vLLM batch_stats ------------------------------------------------------------------


def read_batch_stats(path: str | Path) -> tuple[dict[int, dict[int, float]], list[float]]:
    """{bs: {k: step_ms}} and acceptance_rate_per_pos from a vLLM dynamic-SD profile (keys may be strings).

    The values are STEP times T(B, K) in ms, one meaning with ``predict --format vllm-batch-stats``: vLLM PR #32374
    fills batch_stats with ``median_itl_ms`` of ``vllm bench serve``, whose ITL is the time between streamed chunks
    (one chunk per engine step under speculation), and its manager scores K by (1 + sum a_i) / ITL, tokens per
    second only if ITL is the step time."""
    data = json.loads(Path(path).read_text())
    stats = data.get("batch_stats")
    if not isinstance(stats, dict) or not stats:
        raise ValueError(f"{path}: no 'batch_stats' mapping {{bs: {{k: itl_ms}}}}")
    table = {int(b): {int(k): float(v) for k, v in row.items()} for b, row in stats.items()}
    return table, [float(a) for a in data.get("acceptance_rate_per_pos", [])]


def _acceptance_from_rates(rates: list[float]):
    """vLLM's acceptance_rate_per_pos is unconditional (accepted at i / drafts): convert to conditional."""
    from dsdsim.policy.acceptance import from_unconditional_rates

    return from_unconditional_rates(rates, source="batch_stats acceptance_rate_per_pos (unconditional)")


def calibrate_from_batch_stats(path: str | Path, model, hardware, drafter="eagle3", acceptance=None,
                               context: float = 1024, deployment=None, tiles: Optional[Sequence[int]] = TILE_CANDIDATES,
                               engine="vllm") -> tuple[HardwareSpec, CalibrationSummary]:
    """Fit efficiencies, launch cost (graphed, as engines run), GEMM tile and step overhead so that
    simulate_step (with ``engine``'s terms, vLLM by default: batch_stats is vLLM's format) reproduces the measured
    step times T(B, K) = batch_stats[B][K] (``read_batch_stats``: the values are step times, not T / tau).

    acceptance: an Acceptance (default: from the file's unconditional acceptance_rate_per_pos); reported only,
    step times do not depend on it."""
    from dsdsim.cost.step import simulate_step
    from dsdsim.specs.setup import resolve

    table, rates = read_batch_stats(path)
    if acceptance is None:
        if not rates:
            raise ValueError(f"{path}: no acceptance_rate_per_pos; pass an acceptance model")
        acceptance = _acceptance_from_rates(rates)
    setup = resolve(model, hardware, deployment, drafter, engine)
    hw = setup.hardware
    bs, ks, step_ms = [], [], []
    for b, row in sorted(table.items()):
        for k, ms in sorted(row.items()):
            bs.append(b)
            ks.append(k)
            step_ms.append(ms * 1e-3)
    b, k = np.asarray(bs, dtype=float), np.asarray(ks, dtype=float)
    measured = np.asarray(step_ms)
    graphs = setup.deployment.cuda_graphs

    def step_times(p: Params) -> np.ndarray:
        keys = {"compute": p.compute, "memory": p.memory, "gemm_tile_m": p.tile, "step_overhead_s": p.step_overhead_s,
                ("launch_overhead_s" if graphs else "eager_launch_overhead_s"): p.launch_s}
        s = setup.__class__(setup.model, hw.with_efficiency(source="fit", **keys), setup.deployment, setup.drafter,
                            setup.draft_model, setup.engine)
        return np.asarray(simulate_step(None, None, batch=b, k=k, context=context, setup=s).step_time_s, dtype=float)

    start_launch = hw.launch_overhead_s.value if graphs else hw.eager_launch_overhead_s.value
    uncal = step_times(Params(hw.efficiency.compute.value, hw.efficiency.memory.value, start_launch,
                              hw.gemm_tile_m.value, hw.step_overhead_s.value))
    best = None
    for tile in (tiles or [hw.gemm_tile_m.value]):
        def resid(x, tile=tile):
            pr = step_times(Params(np.exp(x[0]), np.exp(x[1]), np.exp(x[2]), tile, x[3]))
            return np.log(pr) - np.log(measured)

        x0 = [np.log(np.clip(hw.efficiency.compute.value, 0.011, 1.19)),
              np.log(np.clip(hw.efficiency.memory.value, 0.011, 1.19)), np.log(max(start_launch, 1.1e-8)),
              hw.step_overhead_s.value]
        r = least_squares(resid, x0, bounds=([np.log(0.01), np.log(0.01), np.log(1e-8), 0.0],
                                             [np.log(1.2), np.log(1.2), np.log(1e-3), 0.1]), loss="soft_l1",
                          f_scale=0.1)
        if best is None or r.cost < best[0]:
            best = (r.cost, tile, r.x)
    _, tile, x = best
    p = Params(float(np.exp(x[0])), float(np.exp(x[1])), float(np.exp(x[2])), int(tile), float(x[3]))
    keys = {"compute": p.compute, "memory": p.memory, "gemm_tile_m": p.tile, "step_overhead_s": p.step_overhead_s,
            ("launch_overhead_s" if graphs else "eager_launch_overhead_s"): p.launch_s}
    source = (f"dsdsim calibrate {_dt.date.today().isoformat()} from vLLM batch_stats {Path(path).name} "
              f"({len(measured)} (B, K) step times, {setup.model.name}, {setup.drafter.label if setup.drafter else 'no drafter'})")
    spec = flag_implausible(hw.with_efficiency(source=source, **keys), source)
    cal = step_times(p)
    summary = {"source": str(path), "points": len(measured), "acceptance": acceptance.describe(int(max(ks))),
               "fitted": {"compute_efficiency": p.compute, "memory_efficiency": p.memory,
                          ("launch_overhead_s" if graphs else "eager_launch_overhead_s"): p.launch_s,
                          "gemm_tile_m": p.tile, "step_overhead_s": p.step_overhead_s},
               "uncalibrated": error_summary(measured, uncal), "calibrated": error_summary(measured, cal),
               "rows": [{"batch": int(bb), "k": int(kk), "measured_step_s": float(m), "predicted_s": float(u),
                         "calibrated_s": float(c)} for bb, kk, m, u, c in zip(b, k, measured, uncal, cal)]}
    return spec, CalibrationSummary.from_json(summary)


# --- entry points ---------------------------------------------------------------------------------------


def write_calibrated_spec(spec: HardwareSpec, path: str | Path, header: str = "") -> Path:
    from dsdsim.specs.hardware_yaml import write_spec

    return write_spec(spec, path, header=header or f"{spec.name}: calibrated by `dsdsim calibrate`; all SI units.")


def run_calibrate(source: str | Path, hardware, output: Optional[str | Path] = None, *, model=None,
                  drafter="eagle3", context: float = 1024, name: Optional[str] = None
                  ) -> tuple[HardwareSpec, CalibrationSummary]:
    """Calibrate ``hardware`` from a validation report.json or a vLLM batch_stats JSON; write ``output`` (YAML).

    A report is refitted on its train half and scored on its held-out half; a batch_stats file needs ``model``.
    A partial report (``partial: true``, a run cut short) is fitted on what it holds and its figures' source says
    so. Figures past the plausibility bounds (MAX_EFFICIENCY, MAX_STEP_OVERHEAD_S, MAX_LAUNCH_OVERHEAD_S) are
    written marked (``implausible_figures`` lists them); the summary's errors are those of the unclamped fit.
    """
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(hardware)
    data = json.loads(Path(source).read_text())
    if "batch_stats" in data:
        if model is None:
            raise ValueError("calibrating from batch_stats needs the model spec it was measured with")
        spec, summary = calibrate_from_batch_stats(source, model, hw, drafter=drafter, context=context)
    else:
        points = [Point.from_json(p) for p in data["points"]]
        graphs = bool(data.get("cuda_graphs", False))
        cal, summary = calibrate_points(points, hw, graphs)
        summary = CalibrationSummary.from_json({"source": str(source), "fitted": cal.fitted(), **summary})
        what = f"validation report {Path(source).parent.name or source}"
        if data.get("partial"):
            what += f", partial: the run stopped after its {data.get('stage', 'first')} stage"
        spec = cal.calibrated_spec(hw, what=what, cuda_graphs=graphs)
    if name:
        spec = spec.model_copy(update={"name": name})
    if output is not None:
        write_calibrated_spec(spec, output)
    return spec, summary
