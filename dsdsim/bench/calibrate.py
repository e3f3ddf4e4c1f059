"""Fit the roofline's efficiencies and overheads to measured times (``dsdsim calibrate``).

The model being fitted is the one in dsdsim.cost.timing, per operator occurrence:

    t = max(F_padded(tile) / (P_dtype * eta_c), bytes / (BW * eta_m)) + launches * t_launch + host_s

and, for a measured whole step, the sum over its operators plus ``step_overhead_s``. Estimator conventions:
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

import argparse
import datetime as _dt
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from scipy.optimize import least_squares

from dsdsim.cost.ops import OpCost, OpKind, pad_rows
from dsdsim.specs.hardware import HardwareSpec

TILE_CANDIDATES = (1, 8, 16, 32, 64, 128)


# --- what a point is made of ----------------------------------------------------------------------------


@dataclass(frozen=True)
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
    shape = op.extra.get("shape", {})
    if op.kind is OpKind.gemm and "m" in shape:
        pad, rows = "gemm", f(shape["m"])
    elif op.kind is OpKind.moe_experts and "tokens" in shape:
        pad = "moe"
        rows = f(shape["tokens"]) * float(shape["top_k"]) * f(shape.get("token_share", 1.0))
        groups = max(f(op.experts_touched), 1e-12)
    memory_class = {OpKind.attention: "attention_memory", OpKind.elementwise: "vector_memory",
                    OpKind.logits: "vector_memory"}.get(op.kind, "memory")
    return OpFeatures(flops=f(op.flops), flops_padded=f(op.flops_padded), bytes=f(op.bytes), launches=f(op.launches),
                      host_s=f(op.host_s), peak_flops_per_s=hw.peak(op.dtype), bandwidth_bytes_per_s=hw.bandwidth,
                      count=f(op.count), pad=pad, rows=rows, groups=groups, memory_class=memory_class)


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

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "shape": self.shape, "predicted_s": self.predicted_s,
                "measured_s": self.measured_s, "calibrated_s": self.calibrated_s, "p10_s": self.p10_s,
                "p90_s": self.p90_s, "split": self.split, "is_step": self.is_step, "kernels": self.kernels,
                "measured_as": self.measured_as, "timing_mode": self.timing_mode,
                "components": [asdict(c) for c in self.components]}

    @classmethod
    def from_json(cls, d: dict) -> "Point":
        return cls(kind=d["kind"], name=d["name"], shape=d.get("shape", {}), measured_s=float(d["measured_s"]),
                   predicted_s=float(d["predicted_s"]), components=[OpFeatures(**c) for c in d["components"]],
                   is_step=bool(d.get("is_step", False)), calibrated_s=d.get("calibrated_s"),
                   p10_s=d.get("p10_s"), p90_s=d.get("p90_s"), split=d.get("split", "train"),
                   kernels=d.get("kernels"), measured_as=d.get("measured_as", "pass" if d.get("is_step") else "operator"),
                   timing_mode=d.get("timing_mode", "eager"))


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


@dataclass(frozen=True)
class Params:
    compute: float
    memory: float
    launch_s: float
    tile: float
    step_overhead_s: float
    attention_memory: Optional[float] = None    # None: same as memory
    vector_memory: Optional[float] = None

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


@dataclass
class Calibrator:
    """Fits compute / memory efficiency, per-kernel launch cost, GEMM tile and (with step points) step overhead.

    tiles: candidate GEMM M tiles (None: keep ``start.tile``). bounds follow the spec's validators
    (efficiencies in [0.01, 1.2]). ``start`` seeds the fit (usually the spec's current values).
    """

    start: Params
    tiles: Optional[Sequence[int]] = TILE_CANDIDATES
    loss: str = "soft_l1"
    f_scale: float = 0.1         # log-error scale beyond which a point counts as an outlier (~10%)
    balance_kinds: bool = False  # weight points 1/n_kind (no operator kind outvotes the others by number)
    compute_efficiency_: float = field(default=float("nan"), init=False)
    memory_efficiency_: float = field(default=float("nan"), init=False)
    attention_memory_efficiency_: Optional[float] = field(default=None, init=False)
    vector_memory_efficiency_: Optional[float] = field(default=None, init=False)
    launch_overhead_s_: float = field(default=float("nan"), init=False)
    gemm_tile_m_: int = field(default=1, init=False)
    step_overhead_s_: Optional[float] = field(default=None, init=False)
    cost_: float = field(default=float("nan"), init=False)
    n_train_: int = field(default=0, init=False)

    @classmethod
    def for_spec(cls, hw: HardwareSpec, cuda_graphs: bool = False, **kw) -> "Calibrator":
        launch = hw.launch_overhead_s.value if cuda_graphs else hw.eager_launch_overhead_s.value
        eff = hw.efficiency
        return cls(start=Params(eff.compute.value, eff.memory.value, max(launch, 1e-7), hw.gemm_tile_m.value,
                                hw.step_overhead_s.value, eff.attention_memory_value, eff.vector_memory_value), **kw)

    def fit(self, points: Sequence[Point]) -> "Calibrator":
        """Operator points fix the efficiencies (compute; memory per kernel class: GEMM weight streaming,
        attention KV reads, vector kernels — each only where the points contain that class), launch cost and
        tile; step points then give the step overhead. Without operator points everything is fitted together."""
        pts = [p for p in points if p.measured_s > 0 and p.components]
        if len(pts) < 3:
            raise ValueError(f"calibration needs at least 3 measured points, got {len(pts)}")
        ops_only = [p for p in pts if not p.is_step]
        steps = [p for p in pts if p.is_step]
        core = ops_only if len(ops_only) >= 3 else pts
        joint_step = any(p.is_step for p in core)
        classes = sorted({c.memory_class for p in core for c in p.components} - {"memory"})
        cost, tile, params = self._fit_core(core, joint_step, classes)
        self.compute_efficiency_ = params.compute
        self.memory_efficiency_ = params.memory
        self.attention_memory_efficiency_ = params.attention_memory if "attention_memory" in classes else None
        self.vector_memory_efficiency_ = params.vector_memory if "vector_memory" in classes else None
        self.launch_overhead_s_ = params.launch_s
        self.gemm_tile_m_ = int(tile)
        if joint_step:
            self.step_overhead_s_ = params.step_overhead_s
        elif steps:
            base = predict(steps, replace(params, step_overhead_s=0.0))
            self.step_overhead_s_ = step_overhead_fit(np.array([p.measured_s for p in steps]), base)
        else:
            self.step_overhead_s_ = None
        self.cost_ = float(cost)
        self.n_train_ = len(pts)
        return self

    def _fit_core(self, pts: Sequence[Point], has_step: bool, classes: Sequence[str]):
        """Least squares on log time over x = [log eta_c, log eta_m, log t_launch, log eta_m,class..., step_s]."""
        uses_tile = any(c.pad != "none" for p in pts for c in p.components)
        tiles = list(self.tiles) if (self.tiles and uses_tile) else [self.start.tile]
        log_meas = np.log([p.measured_s for p in pts])
        counts: dict[str, int] = {}
        for p in pts:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        w = np.sqrt([len(pts) / (len(counts) * counts[p.kind]) for p in pts]) if self.balance_kinds else 1.0
        n_cls = len(classes)
        lo = [np.log(0.01), np.log(0.01), np.log(1e-8)] + [np.log(0.01)] * n_cls + ([0.0] if has_step else [])
        hi = [np.log(1.2), np.log(1.2), np.log(1e-2)] + [np.log(1.2)] * n_cls + ([10.0] if has_step else [])

        def params(x, tile) -> Params:
            extra = dict(zip(classes, np.exp(x[3:3 + n_cls])))
            so = float(x[3 + n_cls]) if has_step else self.start.step_overhead_s
            return Params(float(np.exp(x[0])), float(np.exp(x[1])), float(np.exp(x[2])), tile, so,
                          attention_memory=extra.get("attention_memory"), vector_memory=extra.get("vector_memory"))

        best = None
        for tile in tiles:
            def resid(x, tile=tile):
                pr = predict(pts, params(x, tile))
                return (np.log(np.maximum(pr, 1e-15)) - log_meas) * w

            start_cls = [self.start.memory_for(c) for c in classes]
            for seed in ((self.start.compute, self.start.memory, self.start.launch_s, *start_cls),
                         (0.5, 0.5, 1e-5, *[0.5] * n_cls)):
                x0 = [np.log(np.clip(seed[0], 0.011, 1.19)), np.log(np.clip(seed[1], 0.011, 1.19)),
                      np.log(np.clip(seed[2], 1.1e-8, 0.9e-2))] + [np.log(np.clip(v, 0.011, 1.19)) for v in seed[3:]]
                x0 += [max(self.start.step_overhead_s, 0.0)] if has_step else []
                r = least_squares(resid, x0, bounds=(lo, hi), loss=self.loss, f_scale=self.f_scale)
                if best is None or r.cost < best[0] - 1e-12:
                    best = (r.cost, tile, params(r.x, tile))
        return best

    @property
    def params_(self) -> Params:
        so = self.step_overhead_s_ if self.step_overhead_s_ is not None else self.start.step_overhead_s
        return Params(self.compute_efficiency_, self.memory_efficiency_, self.launch_overhead_s_, self.gemm_tile_m_, so,
                      attention_memory=self.attention_memory_efficiency_, vector_memory=self.vector_memory_efficiency_)

    def predict(self, points: Sequence[Point]) -> np.ndarray:
        return predict(points, self.params_)

    def fitted(self) -> dict:
        return {"compute_efficiency": self.compute_efficiency_, "memory_efficiency": self.memory_efficiency_,
                "attention_memory_efficiency": self.attention_memory_efficiency_,
                "vector_memory_efficiency": self.vector_memory_efficiency_,
                "launch_overhead_s": self.launch_overhead_s_, "gemm_tile_m": self.gemm_tile_m_,
                "step_overhead_s": self.step_overhead_s_, "n_train": self.n_train_, "loss": self.loss,
                "cost": self.cost_}

    def calibrated_spec(self, hw: HardwareSpec, what: str = "", cuda_graphs: bool = False) -> HardwareSpec:
        """``hw`` with the fitted values (verified: measured, source naming the calibration)."""
        source = f"dsdsim calibrate {_dt.date.today().isoformat()} on {self.n_train_} points" + (f" ({what})" if what else "")
        def frac(v: float) -> float:
            return min(max(v, 0.01), 1.2)

        values = {"compute": frac(self.compute_efficiency_), "memory": frac(self.memory_efficiency_),
                  "gemm_tile_m": self.gemm_tile_m_}
        if self.attention_memory_efficiency_ is not None:
            values["attention_memory"] = frac(self.attention_memory_efficiency_)
        if self.vector_memory_efficiency_ is not None:
            values["vector_memory"] = frac(self.vector_memory_efficiency_)
        values["launch_overhead_s" if cuda_graphs else "eager_launch_overhead_s"] = self.launch_overhead_s_
        if not cuda_graphs and hw.launch_overhead_s.value == hw.eager_launch_overhead_s.value:
            values["launch_overhead_s"] = self.launch_overhead_s_      # a device without graphs: one launch cost
        if self.step_overhead_s_ is not None:
            values["step_overhead_s"] = self.step_overhead_s_
        return hw.with_efficiency(source=source, **values)


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
                               engine="vllm") -> tuple[HardwareSpec, dict]:
    """Fit efficiencies, launch cost (graphed, as engines run), GEMM tile and step overhead so that
    simulate_step (with ``engine``'s terms, vLLM by default: batch_stats is vLLM's format) reproduces the measured
    step times T(B, K) = batch_stats[B][K] (``read_batch_stats``: the values are step times, not T / tau).

    acceptance: an Acceptance (default: from the file's unconditional acceptance_rate_per_pos); reported only,
    step times do not depend on it."""
    from dsdsim.cost.step import resolve, simulate_step

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
    spec = hw.with_efficiency(source=source, **keys)
    cal = step_times(p)
    summary = {"source": str(path), "points": len(measured), "acceptance": acceptance.describe(int(max(ks))),
               "fitted": {"compute_efficiency": p.compute, "memory_efficiency": p.memory,
                          ("launch_overhead_s" if graphs else "eager_launch_overhead_s"): p.launch_s,
                          "gemm_tile_m": p.tile, "step_overhead_s": p.step_overhead_s},
               "uncalibrated": error_summary(measured, uncal), "calibrated": error_summary(measured, cal),
               "rows": [{"batch": int(bb), "k": int(kk), "measured_step_s": float(m), "predicted_s": float(u),
                         "calibrated_s": float(c)} for bb, kk, m, u, c in zip(b, k, measured, uncal, cal)]}
    return spec, summary


# --- entry points ---------------------------------------------------------------------------------------


def write_calibrated_spec(spec: HardwareSpec, path: str | Path, header: str = "") -> Path:
    from dsdsim.bench.specfile import write_spec

    return write_spec(spec, path, header=header or f"{spec.name}: calibrated by `dsdsim calibrate`; all SI units.")


def run_calibrate(source: str | Path, hardware, output: Optional[str | Path] = None, *, model=None,
                  drafter="eagle3", context: float = 1024, name: Optional[str] = None) -> tuple[HardwareSpec, dict]:
    """Calibrate ``hardware`` from a validation report.json or a vLLM batch_stats JSON; write ``output`` (YAML).

    A report is refitted on its train half and scored on its held-out half; a batch_stats file needs ``model``.
    """
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(hardware)
    data = json.loads(Path(source).read_text())
    if "batch_stats" in data:
        if model is None:
            raise ValueError("calibrating from batch_stats needs the model (--model)")
        spec, summary = calibrate_from_batch_stats(source, model, hw, drafter=drafter, context=context)
    else:
        points = [Point.from_json(p) for p in data["points"]]
        graphs = bool(data.get("cuda_graphs", False))
        cal, summary = calibrate_points(points, hw, graphs)
        summary = {"source": str(source), "fitted": cal.fitted(), **summary}
        spec = cal.calibrated_spec(hw, what=f"validation report {Path(source).parent.name or source}", cuda_graphs=graphs)
    if name:
        spec = spec.model_copy(update={"name": name})
    if output is not None:
        write_calibrated_spec(spec, output)
    return spec, summary


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m dsdsim.bench.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--report", required=True, help="validation report.json, or a vLLM batch_stats JSON")
    ap.add_argument("--hardware", required=True, help="the spec the report was predicted with (name or path)")
    ap.add_argument("--output", required=True, help="calibrated spec YAML to write")
    ap.add_argument("--model", default=None, help="model (batch_stats input only)")
    ap.add_argument("--drafter", default="eagle3", help="drafter (batch_stats input only)")
    ap.add_argument("--context", type=float, default=1024, help="context length (batch_stats input only)")
    ap.add_argument("--name", default=None, help="name of the calibrated spec")
    a = ap.parse_args(argv)
    _, summary = run_calibrate(a.report, a.hardware, a.output, model=a.model, drafter=a.drafter,
                               context=a.context, name=a.name)
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
