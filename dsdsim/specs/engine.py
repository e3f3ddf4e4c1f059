"""Engine specs: what a serving engine adds to a step beyond its kernels. Frozen, validated, every figure sourced.

Files live in ``engine_specs/`` (one YAML per engine: vllm, sglang, trtllm, ideal). Seconds throughout.

Per step of B sequences verifying q tokens each (K draft tokens; q = K + 1, or a tree's tokens + 1):

    host(B)   = host_step_s + host_per_sequence_s * B            scheduling, input preparation, output processing
    spec(B,K) = spec_fixed_s + passes * draft_pass_s + rejection_per_token_s * B * q      (K >= 1 only)
    device    = kernels (at the CUDA-graph padded size; eager past the largest capture) + spec(B, K)
    T         = max(device, host)  where host time overlaps device time (async scheduling), else device + host

Overlap differs for plain and speculative steps: vLLM's async scheduling hides host time for plain decoding but,
when added, not for speculative decoding (vllm-project/vllm PR #23569).

A figure fitted on the measurement corpus says ``verified: fitted`` and names its train cases and bounds.
"""
from __future__ import annotations

from dataclasses import dataclass

from enum import Enum
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dsdsim.errors import SpecError
from dsdsim.specs.hardware import Verified

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class EngineFigure(BaseModel):
    """One engine time in seconds with where it came from; a fitted one names its cases and its bounds."""

    model_config = _FROZEN
    value: float = Field(ge=0, le=0.1)
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None
    cases: Optional[tuple[str, ...]] = None           # fitted: the train cases it was fitted on
    bounds: Optional[tuple[float, float]] = None      # fitted: the physical bounds of the search

    @model_validator(mode="after")
    def _fitted(self) -> "EngineFigure":
        if self.verified is Verified.fitted and not self.cases:
            raise ValueError("a fitted figure names the cases it was fitted on (cases: [...])")
        if self.bounds is not None and not self.bounds[0] <= self.value <= self.bounds[1]:
            raise ValueError(f"value {self.value:g} is outside its bounds {self.bounds}")
        return self


class EngineFlag(BaseModel):
    model_config = _FROZEN
    value: bool
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None


class GraphPadding(str, Enum):
    batch = "batch"      # graphs captured per batch size; the batch is padded up to the next capture size
    tokens = "tokens"    # graphs captured per token count; B * q tokens are padded up to the next capture size
    none = "none"        # only the captured sizes themselves replay a graph; any other size runs eager


class CudaGraphs(BaseModel):
    """Which step shapes replay a CUDA graph. ``capture_sizes`` None: every shape is captured, nothing padded."""

    model_config = _FROZEN
    capture_sizes: Optional[tuple[int, ...]] = None
    padding: GraphPadding = GraphPadding.batch
    draft_graphs: bool = True            # draft passes replay graphs too (padded by batch)
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None

    @model_validator(mode="after")
    def _sizes(self) -> "CudaGraphs":
        s = self.capture_sizes
        if s is not None:
            if not s or any(x < 1 for x in s) or list(s) != sorted(set(s)):
                raise ValueError("capture_sizes must be whole numbers >= 1, increasing, without repeats")
        return self


class DraftShape(str, Enum):
    chain = "chain"
    tree = "tree"


class FitProvenance(BaseModel):
    """How the fitted figures were obtained (written by scripts/fit_engines.py or dsdsim calibrate)."""

    model_config = _FROZEN
    method: str
    date: str
    cases: tuple[str, ...]
    residuals: dict[str, float]          # case id -> predicted / measured - 1 after the fit
    median_abs_residual: float
    max_abs_residual: float
    note: Optional[str] = None


FITTABLE = ("host_step_s", "host_per_sequence_s", "spec_fixed_s", "draft_pass_s", "rejection_per_token_s")


class EngineSpec(BaseModel):
    """One serving engine's costs beyond kernels (module docstring)."""

    model_config = _FROZEN
    name: str = Field(min_length=1)
    description: str = ""
    engine_version: Optional[str] = None
    host_step_s: EngineFigure
    host_per_sequence_s: EngineFigure
    host_overlaps_plain: EngineFlag            # async scheduling hides host time behind plain decode steps
    host_overlaps_speculative: EngineFlag      # ... and behind speculative steps
    spec_fixed_s: EngineFigure                 # per speculative step: input preparation, extra sync, bookkeeping
    draft_pass_s: EngineFigure                 # per draft pass, beyond its kernels
    rejection_per_token_s: EngineFigure        # per verified token (B * q per step)
    cuda_graphs: CudaGraphs
    draft_shape: DraftShape = DraftShape.chain
    draft_shape_source: Optional[str] = None
    fit: Optional[FitProvenance] = None

    def figure(self, key: str) -> EngineFigure:
        if key not in FITTABLE:
            raise SpecError(f"unknown engine figure {key!r}; use one of {', '.join(FITTABLE)}")
        return getattr(self, key)

    def with_values(self, values: dict[str, float], source: str, verified: Verified = Verified.fitted,
                    cases: tuple[str, ...] = (), bounds: Optional[dict[str, tuple[float, float]]] = None,
                    fit: Optional[FitProvenance] = None, name: Optional[str] = None) -> "EngineSpec":
        """A copy with some figures replaced (fitting and calibration)."""
        data = self.model_dump()
        for key, v in values.items():
            self.figure(key)
            data[key] = {"value": float(v), "source": source, "verified": verified,
                         "cases": tuple(cases) or None, "bounds": (bounds or {}).get(key)}
        if fit is not None:
            data["fit"] = fit.model_dump()
        if name is not None:
            data["name"] = name
        return EngineSpec.model_validate(data)


def engine_from_dict(data: object, where: str = "engine spec") -> EngineSpec:
    from dsdsim.specs.io import validated

    return validated(EngineSpec, data, where)


def load_engine_file(path: str | Path) -> EngineSpec:
    from dsdsim.specs.io import read_structured

    path = Path(path)
    return engine_from_dict(read_structured(path), where=str(path.name))


YAML_HEADER = ("# Engine spec (dsdsim/specs/engine.py). Figures marked 'fitted' name the cases or points they were fitted on.\n")


def engine_yaml(spec: EngineSpec, header: str = YAML_HEADER) -> str:
    """The spec as YAML, fields in schema order (deterministic: the same spec always gives the same text)."""
    import yaml

    data = spec.model_dump(mode="json", exclude_none=True)
    return header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


@dataclass(frozen=True)
class EngineParams:
    """The fittable engine figures as plain floats (seconds), in ``FITTABLE`` order."""

    host_step_s: float = 0.0
    host_per_sequence_s: float = 0.0
    spec_fixed_s: float = 0.0
    draft_pass_s: float = 0.0
    rejection_per_token_s: float = 0.0
    host_overlaps_plain: bool = False
    host_overlaps_speculative: bool = False

    @classmethod
    def of(cls, spec: EngineSpec, **override: float) -> "EngineParams":
        values = {k: spec.figure(k).value for k in FITTABLE}
        values.update(override)
        return cls(**values, host_overlaps_plain=spec.host_overlaps_plain.value,
                   host_overlaps_speculative=spec.host_overlaps_speculative.value)
