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
    ratio              one of the above (``ratio_of``) divided by the same quantity under other conditions
                       (``relative_to``: the fields that differ, e.g. another batch size, context or engine
                       version). Where both emit the same tokens per step (same drafter, K and dataset) the
                       acceptance cancels (``handling: cancels``): the case checks step times only.
    e2e_latency_ms     mean end-to-end latency of a request (prefill and queueing included)
    run_tokens_per_s   output tokens per second over a whole benchmark run (prefill and the tail included)
    tpot_p50_ms        median time per output token of a request after its first (a benchmark client's TPOT p50)
    ttft_p50_ms        median time to a request's first token (queueing and prefill included)
The last four are end-to-end figures: a case gives them with ``conditions.serving`` (how its benchmark client
drove the server: workload, requests, input and output lengths, or a trace of the run's requests shipped in
``measurements/traces/``), and ``dsdsim accuracy`` predicts them through the serving simulation
(``dsdsim.corpus.serving``); without it a case keeps a not_evaluated reason.

Every case measured on a serving engine names the engine version it ran (``engine_version``) and how that is
known (``engine_version_stated``: ``stated``, or ``inferred from date YYYY-MM`` for the release current at the
source's date); it is predicted with the engine spec whose version range covers it.
"""
from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from dsdsim.errors import SpecError, pydantic_one_line
from dsdsim.specs.io import read_structured

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")                      # the release a version string starts with
_VERSION_STATED = re.compile(r"^(stated|inferred from date \d{4}-\d{2})$")
SERVING_ENGINES = ("vllm", "vllm-mrv2", "sglang", "tensorrt-llm")   # engines with versioned specs (engine_specs/)


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
    ratio = "ratio"                        # ratio_of under these conditions / under relative_to
    e2e_latency_ms = "e2e_latency_ms"      # end to end: predicted through the serving simulation
    run_tokens_per_s = "run_tokens_per_s"  # end to end: predicted through the serving simulation
    tpot_p50_ms = "tpot_p50_ms"            # end to end: predicted through the serving simulation
    ttft_p50_ms = "ttft_p50_ms"            # end to end: predicted through the serving simulation
    other = "other"    # a figure that is not a step-level prediction (kernel efficiency, acceptance, overlap)


class AcceptanceHandling(str, Enum):
    reported = "reported"        # the source gives AL (tau at the case's K) or a per-token alpha
    not_needed = "not-needed"    # plain decoding, or a quantity that does not depend on acceptance
    fitted = "fitted"            # one constant alpha fitted jointly over the cases of fit_group, and reported
    cancels = "cancels"          # a ratio of two runs that emit the same tokens per step (same drafter, K, data)
    assumed = "assumed"          # the source gives none: al or alpha from another source, named in the note (a stated
                                 # assumption, never fitted to the case)
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


_WORKLOAD = re.compile(r"^(closed:\d+|poisson:[0-9.]+|gamma:[0-9.]+:[0-9.]+|rollout|trace:traces/[a-z0-9._-]+\.csv)$")


class Serving(_Frozen):
    """How an end-to-end case's benchmark client drove the server, as ``dsdsim simulate`` takes it: the workload
    (``closed:C`` for a max concurrency C, ``poisson:QPS``, ``gamma:QPS:CV``, ``rollout``, or
    ``trace:traces/NAME.csv``: the run's own requests, arrival_s,input_len,output_len, a file of the corpus folder),
    the requests simulated, and the input and output lengths (``dsdsim.serve.lengths`` forms: a number,
    uniform:A:B, normal:MEAN:STD, lognormal:MEAN:STD, or a preset such as sharegpt; a trace carries its own); the
    scheduler's limits and the KV pool where the source states them (``kv_cache_tokens``: vLLM's logged "GPU KV cache
    size"; None: sized as the engine sizes it), and the client's limit on an open loop (``max_concurrency``: a run
    with both --request-rate and --max-concurrency)."""

    workload: str
    requests: int = Field(ge=1, le=100_000)
    input_len: str = Field(min_length=1)
    output_len: str = Field(min_length=1)
    max_num_seqs: Optional[int] = Field(default=None, ge=1)
    max_num_batched_tokens: Optional[int] = Field(default=None, ge=1)
    kv_cache_tokens: Optional[int] = Field(default=None, ge=1)   # the KV pool the run's log states (None: sized)
    max_concurrency: Optional[int] = Field(default=None, ge=1)   # the client's limit on a poisson / gamma workload
    note: str = Field(min_length=1)          # where the settings come from (stated, the client's defaults, assumed)

    @model_validator(mode="after")
    def _check(self) -> "Serving":
        if not _WORKLOAD.match(self.workload):
            raise ValueError(f"serving.workload {self.workload!r}: write closed:C, poisson:QPS, gamma:QPS:CV, "
                             "rollout or trace:traces/NAME.csv")
        traced = self.workload.startswith("trace:")
        if traced != (self.input_len == "trace") or traced != (self.output_len == "trace"):
            raise ValueError("serving.input_len and output_len are 'trace' exactly when the workload is a trace "
                             "(a trace carries each request's lengths)")
        if self.max_concurrency is not None and not self.workload.startswith(("poisson:", "gamma:", "trace:")):
            raise ValueError(f"serving.max_concurrency is the limit of an open loop or a trace; {self.workload!r} "
                             "has none (closed:C is its own limit): drop it")
        return self


class Conditions(_Frozen):
    engine: str = Field(min_length=1)               # vllm (vllm-mrv2: model runner V2), sglang, tensorrt-llm, ...
    engine_version: Optional[str] = None            # "0.8.4", "v0.4.4", "0.24 (commit c5d967c23)"; None: no release
    engine_version_stated: Optional[str] = None     # "stated" | "inferred from date YYYY-MM"
    hardware: Optional[str] = None                  # a dsdsim hardware name; None: not stated and not assumed
    hardware_stated: str = Field(min_length=1)      # as the source puts it ("1xH100", "not stated")
    tp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    dtype: Optional[str] = None                     # weights; None: the checkpoint's format
    model: Optional[str] = None                     # a dsdsim model name; None: not stated
    model_stated: str = Field(min_length=1)         # as the source puts it
    drafter: Optional[str] = None                   # dsdsim drafter form (eagle, draft-model:M, ...); None: no SD
    drafter_stated: Optional[str] = None            # the head / draft checkpoint as the source names it
    engine_method: Optional[str] = None             # the engine's method when it differs from the drafter kind
                                                    # (vLLM runs the Gemma-4 assistant draft model as method mtp)
    k: int = Field(default=0, ge=0, le=64)          # draft tokens per step (chain length, gamma, v)
    tree: Optional[Tree] = None
    batch_size: Optional[int] = Field(default=None, ge=1)
    context_tokens: Optional[int] = Field(default=None, ge=0)   # mean KV length per sequence while decoding
    context_note: str = Field(min_length=1)          # how context_tokens was obtained (stated or assumed)
    dataset: Optional[str] = None
    dynamic_k: bool = False                         # the server ran a dynamic K table (k: the tier; 0: its off tier)
    kv_dtype: Optional[str] = None                  # the KV cache format (None: bf16)
    dp_attention: bool = False                      # data-parallel attention (SGLang --enable-dp-attention)
    async_scheduling: Optional[bool] = None         # None: the engine version's default
    model_runner: Optional[str] = None              # vLLM's model runner as the source states it (v1 | v2); None:
                                                    # the release's default for the model (dsdsim.specs.runners)
    serving: Optional[Serving] = None               # an end-to-end case: how its benchmark drove the server

    @model_validator(mode="after")
    def _check(self) -> "Conditions":
        if self.engine in SERVING_ENGINES:
            if not self.engine_version or not _VERSION.match(self.engine_version):
                raise ValueError(f"a case measured on {self.engine} names the engine_version it ran (e.g. 0.8.4), "
                                 "stated by the source or the release current at the source's date")
            if not self.engine_version_stated or not _VERSION_STATED.match(self.engine_version_stated):
                raise ValueError("engine_version_stated: write 'stated' or 'inferred from date YYYY-MM'")
        elif self.engine_version_stated is not None and not _VERSION_STATED.match(self.engine_version_stated):
            raise ValueError("engine_version_stated: write 'stated' or 'inferred from date YYYY-MM'")
        if self.model_runner not in (None, "v1", "v2"):
            raise ValueError("model_runner: write v1 or v2 (vLLM's model runner, as the source states it)")
        if self.dynamic_k and self.drafter is None:
            raise ValueError("dynamic_k is a speculative server running a K table: give its drafter (k: 0 for its "
                             "off tier)")
        if self.tree is not None and self.drafter is None:
            raise ValueError("a tree draft needs a drafter")
        if self.k > 0 and self.drafter is None:
            raise ValueError("k > 0 needs a drafter")
        return self


class Reference(_Frozen):
    """The conditions of the run a ratio divides by: only the fields that differ from the case's own."""

    engine_version: Optional[str] = None
    engine_version_stated: Optional[str] = None
    hardware: Optional[str] = None
    tp: Optional[int] = Field(default=None, ge=1, le=1024)
    ep: Optional[int] = Field(default=None, ge=1, le=1024)
    dtype: Optional[str] = None
    model: Optional[str] = None
    drafter: Optional[str] = None                   # explicitly null: plain decoding
    k: Optional[int] = Field(default=None, ge=0, le=64)
    tree: Optional[Tree] = None
    batch_size: Optional[int] = Field(default=None, ge=1)
    context_tokens: Optional[int] = Field(default=None, ge=0)
    dynamic_k: Optional[bool] = None
    kv_dtype: Optional[str] = None
    dp_attention: Optional[bool] = None
    async_scheduling: Optional[bool] = None
    note: Optional[str] = None

    def applied_to(self, c: Conditions) -> Conditions:
        """The case's conditions with these fields replaced."""
        changes = {f: getattr(self, f) for f in self.model_fields_set if f != "note"}
        if "drafter" in changes and changes["drafter"] is None:
            changes.setdefault("k", 0)
            changes.setdefault("tree", None)
            changes["dynamic_k"] = False
        return Conditions.model_validate({**c.model_dump(), **changes})


class Acceptance(_Frozen):
    handling: AcceptanceHandling
    al: Optional[float] = Field(default=None, ge=1.0)        # mean tokens per step, bonus included (tau)
    al_reference: Optional[float] = Field(default=None, ge=1.0)   # a ratio's reference run (relative_to)
    alpha: Optional[float] = Field(default=None, gt=0, lt=1)  # conditional per-token acceptance
    fit_group: Optional[str] = None
    note: Optional[str] = None

    @model_validator(mode="after")
    def _check(self) -> "Acceptance":
        h = self.handling
        if h in (AcceptanceHandling.reported, AcceptanceHandling.assumed) and self.al is None and self.alpha is None:
            raise ValueError(f"handling '{h.value}' needs al or alpha")
        if h is AcceptanceHandling.assumed and not self.note:
            raise ValueError("handling 'assumed' needs a note naming where the assumed acceptance comes from")
        if h is AcceptanceHandling.fitted and not self.fit_group:
            raise ValueError("handling 'fitted' needs a fit_group (the cases that share one fitted alpha)")
        if h is not AcceptanceHandling.fitted and self.fit_group:
            raise ValueError("fit_group is only used with handling 'fitted'")
        return self


RATIO_OF = ("itl_ms", "step_ms", "tokens_per_s", "speedup_vs_no_sd")
END_TO_END = ("e2e_latency_ms", "run_tokens_per_s", "tpot_p50_ms", "ttft_p50_ms")


class Measured(_Frozen):
    quantity: Quantity
    value: Optional[float] = Field(default=None, gt=0)       # None: the source states a direction, not a figure
    value_high: Optional[float] = Field(default=None, gt=0)  # upper end when the source gives a range (value = low)
    description: Optional[str] = None      # what the figure is (required for quantity 'other')
    derived_from: Optional[str] = None     # the arithmetic from the source's own numbers, when not read directly
    ratio_of: Optional[Quantity] = None    # quantity 'ratio': what is divided
    relative_to: Optional[Reference] = None   # quantity 'ratio': the conditions of the denominator

    @model_validator(mode="after")
    def _check(self) -> "Measured":
        if self.quantity is Quantity.other and not self.description:
            raise ValueError("quantity 'other' needs a description of the figure")
        if self.quantity is Quantity.ratio:
            if self.ratio_of is None or self.ratio_of.value not in RATIO_OF:
                raise ValueError(f"quantity 'ratio' needs ratio_of: one of {', '.join(RATIO_OF)}")
            if self.relative_to is None or not (self.relative_to.model_fields_set - {"note"}):
                raise ValueError("quantity 'ratio' needs relative_to: the conditions that differ in the denominator")
        elif self.ratio_of is not None or self.relative_to is not None:
            raise ValueError("ratio_of and relative_to are only used with quantity 'ratio'")
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
    # the corpus folder ``load_corpus`` read the case from (where a trace it names lies); None: built otherwise. Not a
    # field: no file states it. Two cases with the same fields are equal wherever they were read (``__eq__``); what
    # is priced from a trace is remembered by the trace's path (``dsdsim.corpus.serving``)
    _folder: Optional[Path] = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.__dict__ == other.__dict__

    @model_validator(mode="after")
    def _check(self) -> "Case":
        if not _ID.match(self.id):
            raise ValueError(f"id {self.id!r}: use lower-case letters, digits, '.', '_' and '-'")
        if (self.split is Split.train) != (self.train_list_item is not None):
            raise ValueError("train cases name their train_list_item; test cases have none")
        q, c, h = self.measured.quantity, self.conditions, self.acceptance.handling
        if q.value in END_TO_END and self.not_evaluated is None and c.serving is None:
            raise ValueError(f"{q.value} is an end-to-end figure: give conditions.serving (the benchmark's workload, "
                             "requests and lengths) or a not_evaluated reason")
        if c.serving is not None and q.value not in END_TO_END:
            raise ValueError(f"conditions.serving is for end-to-end figures ({', '.join(END_TO_END)}), not "
                             f"{q.value}")
        if q is Quantity.ratio:
            ref = self.measured.relative_to.applied_to(c)
            if h is AcceptanceHandling.cancels and (ref.drafter != c.drafter or ref.k != c.k or ref.tree != c.tree):
                raise ValueError("acceptance 'cancels' needs the same drafter, k and tree in the case and its "
                                 "relative_to (give al and al_reference otherwise)")
            if h is AcceptanceHandling.reported and (self.acceptance.al is None or self.acceptance.al_reference is None):
                raise ValueError("a ratio with reported acceptance gives al and al_reference")
            if h is AcceptanceHandling.fitted:
                raise ValueError("a ratio's acceptance cancels or is reported, never fitted")
            if (h is AcceptanceHandling.not_needed and self.measured.ratio_of is not Quantity.step_ms
                    and (c.k > 0 or ref.k > 0)):
                raise ValueError("a ratio of speculative runs depends on acceptance unless it cancels: use handling "
                                 "'cancels' (same drafter, k, data) or 'reported' (al, al_reference)")
        elif h is AcceptanceHandling.cancels:
            raise ValueError("acceptance 'cancels' is only used with quantity 'ratio'")
        if self.not_evaluated is None:
            needed = ("hardware", "model") if c.serving is not None else ("hardware", "model", "batch_size",
                                                                         "context_tokens")
            missing = [f for f in needed if getattr(c, f) is None]
            if missing:
                raise ValueError(f"an evaluated case needs conditions.{missing[0]} (or a not_evaluated reason)")
            if q is Quantity.other:
                raise ValueError("quantity 'other' is not a step prediction: give a not_evaluated reason")
            if self.measured.value is None or self.measured.value_high is not None:
                raise ValueError("an evaluated case needs one measured value (not a range, not missing)")
            if h is AcceptanceHandling.unknown:
                raise ValueError("acceptance 'unknown' on an evaluated case: report it, fit it, or mark the case "
                                 "not_evaluated")
            if c.serving is not None and c.tree is not None:
                raise ValueError("a serving case simulates chains: a tree draft is not simulated end to end")
            needs_acceptance = (c.k > 0 and q not in (Quantity.step_time_ratio, Quantity.step_ms, Quantity.ratio))
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
            sv = case.conditions.serving
            if sv is not None and sv.workload.startswith("trace:") and not (base / sv.workload[6:]).is_file():
                raise SpecError(f"{path}: case {case.id!r}: serving.workload names {sv.workload[6:]}, which {base} "
                                "does not hold; put the run's trace (arrival_s,input_len,output_len) there")
            case._folder = base
            g = case.acceptance.fit_group
            if g is not None:
                split, first = groups.setdefault(g, (case.split, case.id))
                if split is not case.split:
                    raise SpecError(f"{path}: case {case.id!r}: fit_group {g!r} mixes splits "
                                    f"({first} is {split.value}, this case is {case.split.value})")
            out.append((cf, case))
    _check_fit_groups(out)
    return out


def case_file(case: Case, name: str) -> Path:
    """A file a case names relative to its corpus folder (a trace: ``traces/NAME.csv``): in the folder
    ``load_corpus`` read the case from, the shipped corpus for a case built otherwise."""
    return (case._folder or shipped_corpus_dir()) / name


def _check_fit_groups(cases: list[tuple[CorpusFile, Case]]) -> None:
    """A fitted alpha needs at least two evaluated cases, or the fit reproduces its one case by construction."""
    counts: dict[str, int] = {}
    for _, c in cases:
        if c.acceptance.fit_group is not None and c.not_evaluated is None:
            counts[c.acceptance.fit_group] = counts.get(c.acceptance.fit_group, 0) + 1
    for g, n in sorted(counts.items()):
        if n < 2:
            raise SpecError(f"fit_group {g!r} has {n} evaluated case; a jointly fitted acceptance needs at least 2")
