"""The public measurement corpus (``measurements/*.yaml``): one file per source, validated on load.

Every case names its source and where in it, how sure the figure is (tag), whether it may be fitted on
(split), the conditions it was measured under, what acceptance the source reports (and how a missing one is
handled), and the measured quantity with its value. A malformed file fails with one line naming the file and
the field.

Quantities (``Quantity``), with T the step time, T0 the step time without speculation and tau the tokens one
step emits:

    itl_ms             T / tau, per sequence, milliseconds
    step_ms            T, milliseconds
    tokens_per_s       B * tau / T, the whole batch
    speedup_vs_no_sd   (B * tau / T) / (B / T0) = tau * T0 / T
    step_time_ratio    T / T0 (does not depend on acceptance)
"""
from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dsdsim.errors import SpecError, pydantic_one_line
from dsdsim.specs.io import read_structured

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class Tag(str, Enum):
    """How sure the figure is (docs/reference/measurements.md)."""

    primary = "primary"                        # read in the primary source
    secondary = "secondary"                    # from a secondary summary
    unknown_condition = "unknown-condition"    # a condition of the measurement is not stated


class Split(str, Enum):
    train = "train"    # the training list: defaults may be fitted to it
    test = "test"      # found elsewhere: reported, never fitted or tuned against


class Quantity(str, Enum):
    itl_ms = "itl_ms"
    step_ms = "step_ms"
    tokens_per_s = "tokens_per_s"
    speedup_vs_no_sd = "speedup_vs_no_sd"
    step_time_ratio = "step_time_ratio"
    other = "other"    # a figure that is not a step-level prediction (kernel efficiency, acceptance, overlap)


class AcceptanceHandling(str, Enum):
    reported = "reported"        # the source gives AL (tau at the case's K) or a per-token alpha
    not_needed = "not-needed"    # plain decoding, or a quantity that does not depend on acceptance
    fitted = "fitted"            # one constant alpha fitted jointly over the cases of fit_group, and reported
    unknown = "unknown"          # not stated and not fitted: only allowed on a case that is not evaluated


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Source(_Frozen):
    title: str = Field(min_length=1)
    url: str = Field(min_length=1)     # URL, or owner/repo path


class Tree(_Frozen):
    """An EAGLE tree draft (SGLang speculative_num_steps / eagle_topk / num_draft_tokens)."""

    steps: int = Field(ge=1, le=64)
    topk: int = Field(ge=1, le=64)
    draft_tokens: int = Field(ge=2, le=256)   # tokens per sequence in the verify pass


class Conditions(_Frozen):
    engine: str = Field(min_length=1)               # vllm, sglang, tensorrt-llm, gpt-fast, magicdec, ...
    engine_version: Optional[str] = None            # None: not stated
    hardware: Optional[str] = None                  # a dsdsim hardware name; None: not stated and not assumed
    hardware_stated: str = Field(min_length=1)      # as the source puts it ("1xH100", "not stated")
    tp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    dtype: Optional[str] = None                     # weights; None: the checkpoint's format
    model: Optional[str] = None                     # a dsdsim model name; None: not stated
    model_stated: str = Field(min_length=1)         # as the source puts it
    drafter: Optional[str] = None                   # dsdsim drafter form (eagle, draft-model:M, ...); None: no SD
    drafter_stated: Optional[str] = None            # the head / draft checkpoint as the source names it
    k: int = Field(default=0, ge=0, le=64)          # draft tokens per step (chain length, gamma, v)
    tree: Optional[Tree] = None
    batch_size: Optional[int] = Field(default=None, ge=1)
    context_tokens: Optional[int] = Field(default=None, ge=0)   # mean KV length per sequence while decoding
    context_note: str = Field(min_length=1)          # how context_tokens was obtained (stated or assumed)
    dataset: Optional[str] = None

    @model_validator(mode="after")
    def _check(self) -> "Conditions":
        if self.tree is not None and self.drafter is None:
            raise ValueError("a tree draft needs a drafter")
        if self.k > 0 and self.drafter is None:
            raise ValueError("k > 0 needs a drafter")
        return self


class Acceptance(_Frozen):
    handling: AcceptanceHandling
    al: Optional[float] = Field(default=None, ge=1.0)        # mean tokens per step, bonus included (tau)
    alpha: Optional[float] = Field(default=None, gt=0, lt=1)  # conditional per-token acceptance
    fit_group: Optional[str] = None
    note: Optional[str] = None

    @model_validator(mode="after")
    def _check(self) -> "Acceptance":
        h = self.handling
        if h is AcceptanceHandling.reported and self.al is None and self.alpha is None:
            raise ValueError("handling 'reported' needs al or alpha")
        if h is AcceptanceHandling.fitted and not self.fit_group:
            raise ValueError("handling 'fitted' needs a fit_group (the cases that share one fitted alpha)")
        if h is not AcceptanceHandling.fitted and self.fit_group:
            raise ValueError("fit_group is only used with handling 'fitted'")
        return self


class Measured(_Frozen):
    quantity: Quantity
    value: Optional[float] = Field(default=None, gt=0)       # None: the source states a direction, not a figure
    value_high: Optional[float] = Field(default=None, gt=0)  # upper end when the source gives a range (value = low)
    description: Optional[str] = None      # what the figure is (required for quantity 'other')
    derived_from: Optional[str] = None     # the arithmetic from the source's own numbers, when not read directly

    @model_validator(mode="after")
    def _check(self) -> "Measured":
        if self.quantity is Quantity.other and not self.description:
            raise ValueError("quantity 'other' needs a description of the figure")
        if self.value_high is not None and (self.value is None or self.value_high < self.value):
            raise ValueError("value_high is the upper end of a range: give value (the lower end) <= value_high")
        return self


class Case(_Frozen):
    id: str
    where: str = Field(min_length=1)         # where in the source (table, comment, figure)
    tag: Tag
    split: Split
    train_list_item: Optional[int] = Field(default=None, ge=1)   # item number in docs/reference/measurements.md
    conditions: Conditions
    acceptance: Acceptance
    measured: Measured
    not_evaluated: Optional[str] = None      # why dsdsim does not predict this case (yet)
    notes: Optional[str] = None

    @model_validator(mode="after")
    def _check(self) -> "Case":
        if not _ID.match(self.id):
            raise ValueError(f"id {self.id!r}: use lower-case letters, digits, '.', '_' and '-'")
        if (self.split is Split.train) != (self.train_list_item is not None):
            raise ValueError("train cases name their train_list_item; test cases have none")
        q, c, h = self.measured.quantity, self.conditions, self.acceptance.handling
        if self.not_evaluated is None:
            missing = [f for f in ("hardware", "model", "batch_size", "context_tokens") if getattr(c, f) is None]
            if missing:
                raise ValueError(f"an evaluated case needs conditions.{missing[0]} (or a not_evaluated reason)")
            if q is Quantity.other:
                raise ValueError("quantity 'other' is not a step prediction: give a not_evaluated reason")
            if self.measured.value is None or self.measured.value_high is not None:
                raise ValueError("an evaluated case needs one measured value (not a range, not missing)")
            if h is AcceptanceHandling.unknown:
                raise ValueError("acceptance 'unknown' on an evaluated case: report it, fit it, or mark the case "
                                 "not_evaluated")
            needs_acceptance = c.k > 0 and q is not Quantity.step_time_ratio and q is not Quantity.step_ms
            if needs_acceptance and h is AcceptanceHandling.not_needed:
                raise ValueError(f"{q.value} at k={c.k} depends on acceptance: handling cannot be 'not-needed'")
            if q in (Quantity.speedup_vs_no_sd, Quantity.step_time_ratio) and c.k == 0:
                raise ValueError(f"{q.value} compares a speculative step with plain decoding: k must be > 0")
        return self


class CorpusFile(_Frozen):
    source: Source
    notes: Optional[str] = None
    cases: list[Case] = Field(min_length=1)


def shipped_corpus_dir() -> Path:
    from dsdsim.specs.catalog import shipped_dir

    return shipped_dir("measurements")


def load_corpus_file(path: Path) -> CorpusFile:
    """One YAML file of the corpus; a malformed file raises one SpecError line naming the file and field."""
    data = read_structured(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping with 'source' and 'cases'")
    try:
        return CorpusFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, str(path))) from None


def load_corpus(folder: Optional[Path | str] = None) -> list[tuple[CorpusFile, Case]]:
    """Every case of every ``*.yaml`` file in ``folder`` (default: the shipped corpus), with its file's source.

    Case ids are unique across the corpus, and the cases of one fit group share a split (a test case never
    informs the acceptance fitted for a train case, nor the other way round).
    """
    base = Path(folder).expanduser() if folder is not None else shipped_corpus_dir()
    if not base.is_dir():
        raise SpecError(f"measurement corpus folder {base} does not exist")
    files = sorted(p for p in base.iterdir() if p.suffix.lower() in (".yaml", ".yml") and p.is_file())
    if not files:
        raise SpecError(f"measurement corpus folder {base} holds no .yaml files")
    out: list[tuple[CorpusFile, Case]] = []
    seen: dict[str, Path] = {}
    groups: dict[str, tuple[Split, str]] = {}
    for path in files:
        cf = load_corpus_file(path)
        for case in cf.cases:
            if case.id in seen:
                raise SpecError(f"{path}: case id {case.id!r} is already used in {seen[case.id].name}")
            seen[case.id] = path
            g = case.acceptance.fit_group
            if g is not None:
                split, first = groups.setdefault(g, (case.split, case.id))
                if split is not case.split:
                    raise SpecError(f"{path}: case {case.id!r}: fit_group {g!r} mixes splits "
                                    f"({first} is {split.value}, this case is {case.split.value})")
            out.append((cf, case))
    _check_fit_groups(out)
    return out


def _check_fit_groups(cases: list[tuple[CorpusFile, Case]]) -> None:
    """A fitted alpha needs at least two evaluated cases, or the fit reproduces its one case by construction."""
    counts: dict[str, int] = {}
    for _, c in cases:
        if c.acceptance.fit_group is not None and c.not_evaluated is None:
            counts[c.acceptance.fit_group] = counts.get(c.acceptance.fit_group, 0) + 1
    for g, n in sorted(counts.items()):
        if n < 2:
            raise SpecError(f"fit_group {g!r} has {n} evaluated case; a jointly fitted acceptance needs at least 2")
