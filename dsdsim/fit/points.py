"""A full (batch, K) table from a few measured points: fit an engine spec to your deployment.

Input points come from a CSV ``batch_size,k,context,itl_ms,acceptance_length``, from result JSON files of
``vllm bench serve --save-result``, or from SGLang ``bench_serving`` JSON lines. ``itl_ms`` is the time per
output token of one sequence (vLLM's and SGLang's mean TPOT), so a step takes itl_ms x acceptance_length.

The hardware, the kernel model and the base engine version's own terms stay fixed: the fit adds device-time
terms for what the points show beyond them (``CALIBRATION_TERMS``, bounded least squares on log step time), as
many as the points can tell apart: a speculative per-step time and a per-sequence time always, a per-draft-pass time
with two or more K > 0; never more figures than points - 1.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, finite_number, whole_number
from dsdsim.records import frozen

CSV_HEADER = ("batch_size", "k", "context", "itl_ms", "acceptance_length")
MIN_POINTS = 3
AGREE = 0.2          # rows of one (batch, K) more than 20% apart contradict one another


@frozen
class MeasuredPoint:
    batch: int
    k: int
    context: int
    itl_ms: float              # per output token of one sequence
    acceptance_length: float   # tokens per step (1 for k = 0)

    @property
    def step_ms(self) -> float:
        return self.itl_ms * self.acceptance_length


# --- reading ---------------------------------------------------------------------------------------------------


def _read_csv(path: Path, context: int) -> list[tuple[MeasuredPoint, str]]:
    text = path.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise DsdsimError(f"{path}: empty file; expected the header {','.join(CSV_HEADER)}")
    head = [h.strip() for h in rows[0]]
    required = [h for h in CSV_HEADER if h != "context"]
    missing = [h for h in required if h not in head]
    if missing:
        raise DsdsimError(f"{path}: header lacks {', '.join(missing)}; expected {','.join(CSV_HEADER)} "
                          "(context optional)")
    out, seen = [], set()
    for n, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        where = f"{path.name} line {n}"
        if len(row) != len(head):
            raise DsdsimError(f"{where}: {len(row)} fields, the header has {len(head)}")
        rec = dict(zip(head, (c.strip() for c in row)))
        key = tuple(rec.get(h, "") for h in CSV_HEADER)
        if key in seen:
            raise DsdsimError(f"{where}: duplicate row (the same line appears twice); remove one")
        seen.add(key)
        ctx = whole_number(rec["context"], f"{where}: context") if rec.get("context") else context
        out.append((MeasuredPoint(whole_number(rec["batch_size"], f"{where}: batch_size"),
                                  whole_number(rec["k"], f"{where}: k"), ctx,
                                  finite_number(rec["itl_ms"], f"{where}: itl_ms"),
                                  finite_number(rec["acceptance_length"], f"{where}: acceptance_length")), where))
    return out


def _k_of(rec: dict, where: str, has_acceptance: bool) -> int:
    """K of a benchmark result: num_speculative_tokens (vllm bench serve --metadata num_speculative_tokens=K),
    speculative_num_steps (SGLang), or a speculative_config; none and no acceptance reported: plain decoding."""
    for key in ("num_speculative_tokens", "speculative_num_steps"):
        if key in rec:
            return whole_number(rec[key], f"{where}: {key}")
    cfg = rec.get("speculative_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            cfg = None
    if isinstance(cfg, dict) and "num_speculative_tokens" in cfg:
        return whole_number(cfg["num_speculative_tokens"], f"{where}: speculative_config.num_speculative_tokens")
    if has_acceptance:
        raise DsdsimError(f"{where}: reports speculative acceptance but not K; add it to the result (vllm bench "
                          "serve --metadata num_speculative_tokens=K)")
    return 0


def _from_result(rec: dict, where: str, context: int) -> MeasuredPoint:
    """One benchmark result: vLLM (mean_tpot_ms, spec_decode_acceptance_length, max_concurrency) or SGLang
    bench_serving (mean_tpot_ms, accept_length, max_concurrency)."""
    if "mean_tpot_ms" not in rec:
        raise DsdsimError(f"{where}: no mean_tpot_ms; expected a vllm bench serve --save-result JSON or an SGLang "
                          "bench_serving JSON line")
    batch = rec.get("max_concurrency")
    if batch is None:
        raise DsdsimError(f"{where}: no max_concurrency; run the benchmark with --max-concurrency B (the batch)")
    al = rec.get("spec_decode_acceptance_length", rec.get("accept_length"))
    has_al = al is not None and finite_number(al, f"{where}: acceptance length") > 1.0
    k = _k_of(rec, where, has_al)
    acceptance = finite_number(al, f"{where}: acceptance length") if (al is not None and k > 0) else 1.0
    return MeasuredPoint(whole_number(batch, f"{where}: max_concurrency"), k, context,
                         finite_number(rec["mean_tpot_ms"], f"{where}: mean_tpot_ms"), acceptance)


def _read_json(path: Path, context: int) -> list[tuple[MeasuredPoint, str]]:
    text = path.read_text(encoding="utf-8-sig").strip()
    if not text:
        raise DsdsimError(f"{path}: empty file")
    try:
        data = json.loads(text)
        records = data if isinstance(data, list) else [data]
        wheres = [f"{path.name}" if len(records) == 1 else f"{path.name} item {i + 1}" for i in range(len(records))]
    except ValueError:
        records, wheres = [], []
        for n, line in enumerate(text.splitlines(), start=1):     # JSON lines (SGLang bench_serving)
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    raise DsdsimError(f"{path.name} line {n}: not JSON") from None
                wheres.append(f"{path.name} line {n}")
    out = []
    for rec, where in zip(records, wheres):
        if not isinstance(rec, dict):
            raise DsdsimError(f"{where}: expected a JSON object (one benchmark result)")
        out.append((_from_result(rec, where, context), where))
    return out


def read_measurements(paths: Sequence[str | Path], context: int) -> list[MeasuredPoint]:
    """Points from CSV / JSON / JSON-lines files, checked, rows of one (batch, K, context) averaged."""
    rows: list[tuple[MeasuredPoint, str]] = []
    for p in paths:
        path = Path(p).expanduser()
        if not path.is_file():
            raise DsdsimError(f"measurements file {path}: no such file")
        try:
            rows += _read_csv(path, context) if path.suffix.lower() == ".csv" else _read_json(path, context)
        except UnicodeDecodeError:
            raise DsdsimError(f"measurements file {path} is not UTF-8 text: save it as UTF-8") from None
    return merge_points(rows)


def merge_points(rows: list[tuple[MeasuredPoint, str]]) -> list[MeasuredPoint]:
    for pt, where in rows:
        if pt.batch < 1 or pt.k < 0 or pt.context < 0:
            raise DsdsimError(f"{where}: batch_size must be >= 1, k >= 0 and context >= 0")
        if pt.itl_ms <= 0:
            raise DsdsimError(f"{where}: itl_ms must be > 0 (got {pt.itl_ms:g})")
        if not 1.0 <= pt.acceptance_length <= pt.k + 1:
            raise DsdsimError(f"{where}: acceptance_length {pt.acceptance_length:g} is outside [1, K+1] = "
                              f"[1, {pt.k + 1}] (it counts the bonus token; 1 for k = 0)")
    groups: dict[tuple[int, int, int], list[tuple[MeasuredPoint, str]]] = {}
    for pt, where in rows:
        groups.setdefault((pt.batch, pt.k, pt.context), []).append((pt, where))
    out = []
    for (b, k, c), members in sorted(groups.items()):
        steps = [m.step_ms for m, _ in members]
        if max(steps) > (1 + AGREE) * min(steps):
            raise DsdsimError(f"{members[0][1]} and {members[-1][1]}: contradictory rows for batch {b}, K {k} "
                              f"(step times {min(steps):.3g} and {max(steps):.3g} ms differ by more than "
                              f"{100 * AGREE:.0f}%)")
        itl = float(np.mean([m.itl_ms for m, _ in members]))
        al = float(np.mean([m.acceptance_length for m, _ in members]))
        out.append(MeasuredPoint(b, k, c, itl, al))
    if len(out) < MIN_POINTS:
        raise DsdsimError(f"{len(out)} distinct (batch, K) point(s); calibrate needs at least {MIN_POINTS} "
                          "(e.g. batch 1, 16, 64 x K 0, 3)")
    if not any(p.k == 0 for p in out):
        raise DsdsimError("no K = 0 point: measure plain decoding at one batch size or more (K = 0 anchors the "
                          "kernel time the engine terms add to)")
    if not any(p.k > 0 for p in out):
        raise DsdsimError("no K > 0 point: measure at least one speculative configuration")
    return out


# --- fitting ---------------------------------------------------------------------------------------------------


# The terms a calibration adds to the base engine: device time the measured points show beyond the modelled terms.
# On the device timeline (never hidden by async scheduling), so they are identifiable whether the base engine
# overlaps host work or not; each bounded like the largest engine terms the shipped specs source.
CALIBRATION_TERMS = (
    # name, per, applies, range (seconds), used when
    ("measured_speculative_step", "step", "speculative", (0.0, 5e-3)),
    ("measured_per_sequence", "sequence", "all", (0.0, 1e-4)),
    ("measured_draft_pass", "draft_pass", "speculative", (0.0, 2e-3)),
)


def calibration_terms(names: Sequence[str], source: str) -> list:
    """The calibration terms ``names`` at zero, fittable (``dsdsim.specs.engine.EngineTerm``)."""
    from dsdsim.specs.engine import EngineTerm
    from dsdsim.specs.hardware import Verified

    out = []
    for name, per, applies, rng in CALIBRATION_TERMS:
        if name in names:
            out.append(EngineTerm(name=name, component="synchronisation", runs_on="gpu", per=per, applies=applies,
                                  value=0.0, range=rng, fit=True, prior=0.0, source=source, verified=Verified.derived,
                                  mechanism="step time your measured points show beyond the modelled engine terms "
                                            f"(per {per}; fitted by dsdsim calibrate --measurements)"))
    return out


@dataclass
class EngineCalibration:
    """Fitted engine figures for one deployment; estimator conventions (fit -> self, learned values end in _).

    The base engine spec (its version's terms) is kept whole; the fit adds calibration terms on the device timeline
    (``CALIBRATION_TERMS``): a speculative per-step time and a per-sequence time always, a per-draft-pass time with
    two or more K > 0 among the points; never more figures than points - 1."""

    model: object
    hardware: object
    base_engine: object = "vllm"
    deployment: object = None
    drafter: object = "eagle3"
    keys_: tuple[str, ...] = field(default=(), init=False)
    values_: dict[str, float] = field(default_factory=dict, init=False)
    fitted_ms_: list[float] = field(default_factory=list, init=False)
    loo_error_: list[Optional[float]] = field(default_factory=list, init=False)
    points_: list[MeasuredPoint] = field(default_factory=list, init=False)

    def _steps(self, points: Sequence[MeasuredPoint]):
        from dsdsim.cost.step import simulate_step
        from dsdsim.specs.setup import resolve

        setup = resolve(self.model, self.hardware, self.deployment, self.drafter, self.base_engine)
        self._setup = setup
        return [simulate_step(None, None, batch=p.batch, k=p.k, context=p.context, setup=setup) for p in points]

    def _keys(self, points: Sequence[MeasuredPoint]) -> tuple[str, ...]:
        keys = ["measured_speculative_step", "measured_per_sequence"]
        if len({p.k for p in points if p.k > 0}) >= 2:
            keys.append("measured_draft_pass")
        return tuple(keys[:max(1, len(points) - 1)])

    def _spec(self, keys: Sequence[str], source: str = "dsdsim calibrate --measurements"):
        base = self._setup.engine
        return base.model_copy(update={"terms": tuple(base.terms) + tuple(calibration_terms(keys, source))})

    def _params(self, keys: Sequence[str], values: dict[str, float], drafter):
        from dsdsim.specs.engine import EngineParams

        kind = drafter.kind.value if drafter is not None else None
        return EngineParams.of(self._spec(keys), values, drafter_kind=kind,
                               tree=drafter is not None and drafter.tree is not None)

    def _predict(self, steps, values: dict[str, float]) -> np.ndarray:
        keys = tuple(values)
        p = self._params(keys, values, self._setup.drafter)
        return np.array([float(s.step_time_with(p)) for s in steps])

    def _solve(self, steps, measured_s: np.ndarray, keys: tuple[str, ...]) -> dict[str, float]:
        from scipy.optimize import least_squares

        ranges = {name: rng for name, _, _, rng in CALIBRATION_TERMS}
        lo = np.array([ranges[k][0] for k in keys])
        hi = np.array([ranges[k][1] for k in keys])

        def resid(x):
            return np.log(self._predict(steps, dict(zip(keys, map(float, x)))) / measured_s)

        res = least_squares(resid, lo + 0.01 * (hi - lo), bounds=(lo, hi), x_scale=hi - lo, diff_step=1e-3,
                            method="trf")
        return {k: float(v) for k, v in zip(keys, res.x)}

    def fit(self, points: Sequence[MeasuredPoint]) -> "EngineCalibration":
        self.points_ = list(points)
        steps = self._steps(self.points_)
        measured = np.array([p.step_ms * 1e-3 for p in self.points_])
        self.keys_ = self._keys(self.points_)
        self.values_ = self._solve(steps, measured, self.keys_)
        self.fitted_ms_ = [1e3 * t / p.acceptance_length for t, p in zip(self._predict(steps, self.values_),
                                                                          self.points_)]
        self.loo_error_ = []
        for i, p in enumerate(self.points_):      # leave one out: refit without point i, predict it
            rest = [j for j in range(len(self.points_)) if j != i]
            keys = self.keys_[:max(1, len(rest) - 1)]
            vals = self._solve([steps[j] for j in rest], measured[rest], keys)
            t = float(self._predict([steps[i]], vals)[0])
            self.loo_error_.append(t / measured[i] - 1.0)
        return self

    def engine_spec(self, name: str, source_files: Sequence[str], date: str):
        """The base engine with the fitted calibration terms, named ``name``, provenance naming the points."""
        from dsdsim.fit.engine import round_value
        from dsdsim.specs.engine import FitProvenance

        ids = tuple(f"b{p.batch}-k{p.k}-c{p.context}" for p in self.points_)
        res = {i: round(f / p.itl_ms - 1.0, 4) for i, f, p in zip(ids, self.fitted_ms_, self.points_)}
        fit = FitProvenance(method="dsdsim calibrate --measurements: bounded least squares on log step time, "
                                   "kernel model, hardware and the base engine's terms fixed", date=date, cases=ids,
                            residuals=res,
                            median_abs_residual=round(float(np.median(np.abs(list(res.values())))), 4),
                            max_abs_residual=round(float(np.max(np.abs(list(res.values())))), 4),
                            note="measured points: " + ", ".join(source_files))
        source = f"dsdsim calibrate --measurements ({', '.join(source_files)})"
        spec = self._spec(self.keys_, source)
        values = {k: round_value(v) for k, v in self.values_.items()}
        return spec.with_values(values, source, cases=ids, fit=fit, name=name)
