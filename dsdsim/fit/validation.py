"""Analysis of a validation run, torch-free: what is timed (each step's operators keyed by shape), calibration on
the train half, errors by kind and by how a point was measured, and the K table check (loop 2 of
``dsdsim validate``: regret = 1 - G(K_predicted) / G(K_measured_best) under one acceptance model).

dsdsim.bench measures; this module reads what it measured (``Point``s, dsdsim.fit.calibrate), so a report can be
re-analysed without torch (``dsdsim validate --reanalyse``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from dsdsim.cost.drafts import draft_head, draft_ops
from dsdsim.cost.layers import PassContext, pass_ops
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.cost.step import Setup, simulate_step
from dsdsim.fit.calibrate import Point, calibrate_points, error_summary, split_points
from dsdsim.fit.summary import TableCheck, ValidationSummary
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec

# communication and host work are not timed on one device
SKIP_KINDS = (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather, OpKind.host)


@dataclass
class ValidationReport:
    """Everything ``validate`` measured and concluded; ``data`` is the report.json content."""

    data: dict
    points: list[Point]
    calibrated_hardware: HardwareSpec
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def summary(self) -> ValidationSummary:
        return ValidationSummary.from_json(self.data["summary"])

    @property
    def table_check(self) -> TableCheck:
        return TableCheck.from_json(self.data["table_check"])

    @property
    def errors(self) -> list[dict]:
        """What failed or was skipped: {"what", "error"} per item, as report.json lists them."""
        return list(self.data.get("errors") or [])



# --- what is timed: each step's operators, keyed by shape -----------------------------------------------


def op_key(op: OpCost, vocab: Optional[int]) -> str:
    shape = {k: float(np.asarray(v)) for k, v in (op.shape._asdict() if op.shape is not None else {}).items()}
    impl = ""
    if op.kind is OpKind.elementwise:
        n = op.name.lower()
        impl = "rotary" if "rotary" in n else "act" if ".act" in n else "norm"
    return json.dumps([op.kind.value, op.dtype.value, impl, shape, round(float(np.asarray(op.bytes))),
                       round(float(np.asarray(op.flops))), vocab], sort_keys=True)


def vocab_for(op: OpCost, model: ModelSpec, drafter: Optional[DrafterSpec]) -> Optional[int]:
    if op.kind is not OpKind.logits:
        return None
    head = draft_head(model, drafter) if drafter is not None else None
    if head is not None and head.lm_head is not None and f"{drafter.kind.value}." in op.name:
        return head.lm_head.outputs          # the drafter's own lm_head (EAGLE-3: its draft vocabulary)
    return model.vocab_size


def clean_name(name: str) -> str:
    for prefix in ("pass1.", "passN."):
        name = name.replace(prefix, "")
    if name.startswith("L(") and ")." in name:
        name = "L." + name.split(").", 1)[1]
    return name


@dataclass
class StepOps:
    """The operators of one (B, K) step with their per-step counts (comm / host kinds dropped)."""

    batch: int
    k: int
    ops: list[tuple[str, OpCost, float]]       # (key, one-occurrence op, count)


def step_ops(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, batch: int, k: int, context: int
             ) -> StepOps:
    """Verify pass (q = K + 1, rejection sampling when K > 0) and the draft phase, as keyed single occurrences."""
    q = k + 1
    ops = list(pass_ops(model, pc, batch, q, context, sampling_passes=2.0 if k > 0 else 1.0))
    if drafter is not None and k > 0:
        ops += draft_ops(model, drafter, pc, batch, k, context)
    out = []
    for op in ops:
        count = float(np.asarray(op.count))
        if op.kind in SKIP_KINDS or count <= 0:
            continue
        single = replace(op, count=1)
        out.append((op_key(single, vocab_for(single, model, drafter)), single, count))
    return StepOps(batch, k, out)



def spec_step_ops(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, batch: int, k: int,
                  context: int) -> list[OpCost]:
    """The operators of one whole speculative step as the torch step runs them (comm / host kinds dropped)."""
    so = step_ops(model, drafter, pc, batch, k, context)
    return [replace(op, count=cnt) for _, op, cnt in so.ops]


def error_record(what: str, exc: BaseException) -> dict:
    """One entry of report.json's ``errors``: what failed and the first line of why."""
    return {"what": what, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]}


# --- calibration and errors -----------------------------------------------------------------------------


def calibrate_run(points: list[Point], hw: HardwareSpec, cuda_graphs: bool, what: str, errors: list[dict]
                  ) -> tuple[dict, HardwareSpec, dict]:
    """Fit on the train half, fill every point's calibrated time; too few points: report them uncalibrated.
    Returns (error summary, calibrated spec, fitted values)."""
    split_points(points)
    try:
        cal, summary = calibrate_points(points, hw, cuda_graphs=cuda_graphs)
        return summary, cal.calibrated_spec(hw, what=what, cuda_graphs=cuda_graphs), cal.fitted()
    except ValueError as exc:
        errors.append(error_record("calibration", exc))
        for p in points:
            p.calibrated_s = p.predicted_s
        halves = (("uncalibrated", points), ("uncalibrated_test", [p for p in points if p.split == "test"]),
                  ("calibrated", [p for p in points if p.split == "test"]),
                  ("calibrated_train", [p for p in points if p.split == "train"]))
        summary = {key: error_summary([p.measured_s for p in pts], [p.predicted_s for p in pts]) for key, pts in halves}
        return summary, hw, {"error": str(exc),
                             "note": "not calibrated: calibrated values are the uncalibrated prediction"}


def by_kind(points: Sequence[Point]) -> dict:
    """Errors per operator kind: all points uncalibrated, the held-out half calibrated."""
    out = {}
    for kind in sorted({p.kind for p in points}):
        ps = [p for p in points if p.kind == kind]
        test = [p for p in ps if p.split == "test"]
        out[kind] = {"uncalibrated": error_summary([p.measured_s for p in ps], [p.predicted_s for p in ps]),
                     "calibrated_test": error_summary([p.measured_s for p in test], [p.calibrated_s for p in test])}
    return out


def by_measurement(points: Sequence[Point]) -> dict:
    """Errors by how a point was measured: operator, whole pass, whole speculative step."""
    out = {}
    for how in ("operator", "pass", "spec_step"):
        ps = [p for p in points if p.measured_as == how]
        if not ps:
            continue
        test = [p for p in ps if p.split == "test"]
        out[how] = {"uncalibrated": error_summary([p.measured_s for p in ps], [p.predicted_s for p in ps]),
                    "calibrated_test": error_summary([p.measured_s for p in test], [p.calibrated_s for p in test])}
    return out


def composition(step_points: Sequence[Point], op_points: dict[str, Point], sliced: ModelSpec,
                drafter: Optional[DrafterSpec], pc: PassContext) -> dict:
    """How the sum of separately timed operators compares with the whole pass timed at once. ``sliced``: the
    model the pass points ran (one layer of each kind)."""
    ratios = []
    for sp in step_points:
        if sp.name != "verify":
            continue
        b, q, c = sp.shape["batch"], sp.shape["q"], sp.shape["context"]
        ops = [replace(o, count=1) for o in pass_ops(sliced, pc, b, q, c, sampling_passes=2.0 if q > 1 else 1.0)
               if o.kind not in SKIP_KINDS]
        keys = [op_key(o, vocab_for(o, sliced, drafter)) for o in ops]
        if all(k in op_points for k in keys):
            ratios.append(sum(op_points[k].measured_s for k in keys) / sp.measured_s)
    if not ratios:
        return {"n": 0}
    return {"n": len(ratios), "median_sum_of_ops_over_step": float(np.median(ratios)),
            "min": float(np.min(ratios)), "max": float(np.max(ratios))}


# --- the table check ------------------------------------------------------------------------------------


def table_check(batches: Sequence[int], ks: Sequence[int], measured_s: np.ndarray, predicted_s: np.ndarray,
                acceptance, calibrated_s: Optional[np.ndarray] = None) -> dict:
    """Measured vs predicted best K per batch. measured_s / predicted_s: step seconds shaped (B, K).

    goodput G = B * tau(K) / T; K_best = argmax of measured G; regret = 1 - G_meas(K_pred) / G_meas(K_best)."""
    b = np.asarray(batches, dtype=float)[:, None]
    kv = np.asarray(ks, dtype=int)
    tau = np.asarray(acceptance.tau(kv), dtype=float)[None, :]
    g_meas = b * tau / np.asarray(measured_s, dtype=float)
    rows = []
    regrets, regrets_cal = [], []
    for i, bb in enumerate(batches):
        best = int(np.argmax(g_meas[i]))
        row = {"batch": int(bb), "k_best_measured": int(kv[best])}
        for label, pred in (("uncalibrated", predicted_s), ("calibrated", calibrated_s)):
            if pred is None:
                continue
            g_pred = b[i] * tau[0] / np.asarray(pred, dtype=float)[i]
            kp = int(np.argmax(g_pred))
            regret = float(1.0 - g_meas[i, kp] / g_meas[i, best])
            row[f"k_predicted_{label}"] = int(kv[kp])
            row[f"regret_{label}"] = regret
            (regrets if label == "uncalibrated" else regrets_cal).append(regret)
        rows.append(row)
    out = {"acceptance": acceptance.describe(int(max(ks))), "k_values": [int(k) for k in ks], "per_batch": rows,
           "mean_regret": float(np.mean(regrets)), "max_regret": float(np.max(regrets)),
           "measured_step_s": np.asarray(measured_s).tolist(), "predicted_step_s": np.asarray(predicted_s).tolist()}
    if regrets_cal:
        out.update(mean_regret_calibrated=float(np.mean(regrets_cal)), max_regret_calibrated=float(np.max(regrets_cal)),
                   calibrated_step_s=np.asarray(calibrated_s).tolist())
    return out


def default_acceptance():
    from dsdsim.policy.acceptance import constant

    return constant(0.7)


def no_table(acceptance, k_max: int, context: int, why: str) -> dict:
    """The table check of a run that measured nothing to check a table on."""
    return {"measured_from": why, "per_batch": [], "acceptance": acceptance.describe(k_max), "context": context,
            "mean_regret": float("nan"), "max_regret": float("nan")}


def table_from_whole_steps(spec_points: Sequence[Point], acc, batches: Sequence[int], ks: Sequence[int],
                           contexts: Sequence[int]) -> Optional[dict]:
    """The K table check on measured whole speculative steps over ``batches`` x ``ks``, one table per context."""
    if not spec_points:
        return None
    tables = []
    for c in contexts:
        pts = {(p.shape["batch"], p.shape["k"]): p for p in spec_points if p.shape["context"] == c}
        rows = [b for b in batches if all((b, k) in pts for k in ks)]
        if not rows or len(ks) < 2:
            continue
        meas = np.array([[pts[(b, k)].measured_s for k in ks] for b in rows])
        pred = np.array([[pts[(b, k)].predicted_s for k in ks] for b in rows])
        cal = np.array([[pts[(b, k)].calibrated_s for k in ks] for b in rows])
        t = table_check(rows, ks, meas, pred, acc, cal)
        t["context"] = c
        t["held_out_batches"] = sorted({b for (b, k), p in pts.items() if p.split == "test"})
        tables.append(t)
    if not tables:
        return None
    out = dict(tables[0])
    out["measured_from"] = ("whole speculative steps timed end to end (draft passes + verify pass + rejection "
                            "sampling on the full layer stack)")
    regrets = [r["regret_uncalibrated"] for t in tables for r in t["per_batch"]]
    regrets_cal = [r["regret_calibrated"] for t in tables for r in t["per_batch"]]
    out.update(mean_regret=float(np.mean(regrets)), max_regret=float(np.max(regrets)),
               mean_regret_calibrated=float(np.mean(regrets_cal)), max_regret_calibrated=float(np.max(regrets_cal)),
               contexts=tables)
    return out


def table_from_operator_sums(steps_bk: dict, op_points: dict[str, Point], batches: Sequence[int], ks: Sequence[int],
                             context: int, setup: Setup, calibrated: HardwareSpec, acc) -> Optional[dict]:
    """The K table check on summed operator times (count x measured time of each of a step's operators), when no
    whole steps were measured; predicted on ``setup`` and on ``setup`` with the calibrated hardware."""
    rows = [b for b in batches if all(key in op_points for k in ks for key, _, _ in steps_bk[(b, k)].ops)]
    if not rows:
        return None
    meas = np.array([[sum(cnt * op_points[key].measured_s for key, _, cnt in steps_bk[(b, k)].ops)
                      for k in ks] for b in rows])
    b_arr = np.asarray(rows, dtype=float)[:, None]
    k_arr = np.asarray(ks, dtype=float)[None, :]
    pred = np.asarray(simulate_step(None, None, batch=b_arr, k=k_arr, context=context, setup=setup).step_time_s,
                      dtype=float)
    pred_cal = np.asarray(simulate_step(None, None, batch=b_arr, k=k_arr, context=context,
                                        setup=replace(setup, hardware=calibrated)).step_time_s, dtype=float)
    tc = table_check(rows, ks, meas, pred, acc, pred_cal)
    tc["context"] = context
    tc["measured_from"] = "sum over each step's operators of count x measured operator time (no whole steps)"
    return tc
