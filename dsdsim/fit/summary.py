"""What a validation run or a calibration concludes, as typed records: what the command line, notebooks and tests read.

report.json holds these as JSON objects (that is its format, kept as it was); code reads them through these
dataclasses, built with ``from_json`` from a run just made or from a report on disk (``validate --reanalyse``).
Errors are |predicted - measured| / measured in percent; regret is the goodput a predicted K gives up against the
measured best K, as a fraction.
"""
from __future__ import annotations

from dataclasses import field
from typing import Any, Mapping, Optional

from dsdsim.records import frozen


@frozen
class ErrorStats:
    """Prediction error over a set of points (percent); n = 0 leaves the figures None."""

    n: int
    median_abs_pct_error: Optional[float] = None
    mape: Optional[float] = None                           # mean absolute percentage error
    max_abs_pct_error: Optional[float] = None
    median_ratio_pred_over_meas: Optional[float] = None

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "ErrorStats":
        d = d or {}
        return cls(int(d.get("n", 0)), d.get("median_abs_pct_error"), d.get("mape"), d.get("max_abs_pct_error"),
                   d.get("median_ratio_pred_over_meas"))


@frozen
class Comparison:
    """One subset of points (an operator kind, or how it was measured): spec as given vs calibrated, held out."""

    uncalibrated: ErrorStats
    calibrated_test: ErrorStats

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Comparison":
        return cls(ErrorStats.from_json(d.get("uncalibrated")), ErrorStats.from_json(d.get("calibrated_test")))


@frozen
class ValidationSummary:
    """Errors of a validation run: every point, its train/held-out halves, by operator kind and by how measured
    (``operator``, ``pass``, ``spec_step``: an operator alone, a whole forward pass, a whole speculative step)."""

    uncalibrated: ErrorStats           # all points, the spec as given
    uncalibrated_test: ErrorStats      # the held-out half, the spec as given
    calibrated: ErrorStats             # the held-out half, the spec fitted on the train half
    calibrated_train: ErrorStats
    by_kind: Mapping[str, Comparison] = field(default_factory=dict)
    by_measurement: Mapping[str, Comparison] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ValidationSummary":
        def blocks(key: str) -> dict[str, Comparison]:
            return {name: Comparison.from_json(v) for name, v in (d.get(key) or {}).items()}

        return cls(ErrorStats.from_json(d.get("uncalibrated")), ErrorStats.from_json(d.get("uncalibrated_test")),
                   ErrorStats.from_json(d.get("calibrated")), ErrorStats.from_json(d.get("calibrated_train")),
                   blocks("by_kind"), blocks("by_measurement"))


@frozen
class BatchCheck:
    """The K the measurements make best at one batch size against the K the model predicts."""

    batch: int
    k_best_measured: int
    k_predicted_uncalibrated: Optional[int] = None
    regret_uncalibrated: Optional[float] = None
    k_predicted_calibrated: Optional[int] = None
    regret_calibrated: Optional[float] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "BatchCheck":
        return cls(int(d["batch"]), int(d["k_best_measured"]), d.get("k_predicted_uncalibrated"),
                   d.get("regret_uncalibrated"), d.get("k_predicted_calibrated"), d.get("regret_calibrated"))


@frozen
class Composition:
    """Sum of a pass's separately timed operators over the same pass timed at once (verify passes measured both
    ways); n = 0: none was."""

    n: int
    median_sum_of_ops_over_step: Optional[float] = None
    min: Optional[float] = None
    max: Optional[float] = None

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> Optional["Composition"]:
        if d is None:
            return None
        return cls(int(d.get("n", 0)), d.get("median_sum_of_ops_over_step"), d.get("min"), d.get("max"))


@frozen
class TableCheck:
    """The K table checked against measured step times: per batch size, and per context when several were measured
    (``contexts``, each a TableCheck of one context). NaN regrets: nothing was measured to check against."""

    measured_from: str
    mean_regret: float
    max_regret: float
    acceptance: Optional[str] = None
    context: Optional[int] = None
    mean_regret_calibrated: Optional[float] = None
    max_regret_calibrated: Optional[float] = None
    per_batch: tuple[BatchCheck, ...] = ()
    contexts: tuple["TableCheck", ...] = ()
    measured_step_s: Optional[list] = None      # (B, K) step seconds the check used
    composition: Optional[Composition] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TableCheck":
        return cls(d.get("measured_from", ""), float(d.get("mean_regret", float("nan"))),
                   float(d.get("max_regret", float("nan"))), d.get("acceptance"), d.get("context"),
                   d.get("mean_regret_calibrated"), d.get("max_regret_calibrated"),
                   tuple(BatchCheck.from_json(r) for r in d.get("per_batch", ())),
                   tuple(cls.from_json(t) for t in d.get("contexts", ())), d.get("measured_step_s"),
                   Composition.from_json(d.get("composition")))

    @property
    def tables(self) -> tuple["TableCheck", ...]:
        """One table per measured context (this one when a single context was measured)."""
        return self.contexts or (self,)


@frozen
class BatchStatsRow:
    batch: int
    k: int
    measured_step_s: float
    predicted_s: float
    calibrated_s: float


@frozen
class CalibrationSummary:
    """A calibration's fit: the figures fitted (spec field -> value) and the errors before and after.

    From a validation report, ``calibrated`` is the held-out half (fitted on the train half); from vLLM
    batch_stats, every measured (B, K) step time (``rows``)."""

    source: str
    fitted: Mapping[str, Any]
    uncalibrated: ErrorStats
    calibrated: ErrorStats
    rows: tuple[BatchStatsRow, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "CalibrationSummary":
        return cls(str(d.get("source", "")), dict(d.get("fitted") or {}), ErrorStats.from_json(d.get("uncalibrated")),
                   ErrorStats.from_json(d.get("calibrated")),
                   tuple(BatchStatsRow(int(r["batch"]), int(r["k"]), float(r["measured_step_s"]),
                                       float(r["predicted_s"]), float(r["calibrated_s"])) for r in d.get("rows", ())))
