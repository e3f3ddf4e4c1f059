"""Engine specs: what a serving engine adds to a step beyond its kernels, per engine version range.

Files live in ``engine_specs/``, one YAML per engine and version range (``vllm-0.8-0.13.yaml``: vLLM releases 0.8
to 0.13). An engine's costs change more between releases than between GPUs: async scheduling, CUDA-graph modes
and where rejection sampling runs all moved between vLLM releases. A file may ``extend`` another (the terms of the
older range, with what changed): a term shared by several ranges is one figure, fitted on the cases of all of them.

Every engine term names what it is in the engine (``component``), where it runs (``runs_on``), what it scales
with (``per``), which steps pay it (``applies``), the sourced range any fit stays inside, and its mechanism.
Per step of B sequences verifying q tokens each (K draft tokens; q = K + 1, or a tree's tokens + 1):

    units(per)  = 1 (step), B (sequence), B * q (token), draft passes (draft_pass), the target's mixer layers
                where piecewise graphs are cut (layer: ``ModelSpec.graph_split_ops``)
    host        = sum over host terms of value * units                      CPU time of the step
    gpu         = sum over GPU terms of value * units (seconds), or kernels * units * (kernel floor + the launch
                  gap: graph replay for ``kernels``, an eager launch for ``eager_kernels``)
    device      = kernels of the passes (at the CUDA-graph padded size; eager past the largest capture) + gpu
    exposed     = host work per draft pass beyond the pass's own kernels (the loop launches pass i while the
                  device runs pass i - 1), plus the rest of the host work where the step does not overlap
    T           = max(device, host)   where the step's host work overlaps the device (async scheduling)
                  device + exposed     otherwise

Four kinds of step pay different terms and overlap differently: ``plain`` (K = 0 on a server without
speculation), ``speculative`` (K >= 1 with a fixed K), ``dynamic`` speculative steps (K >= 1 on a server
running a dynamic K table) and ``off_tier`` (K = 0 on such a server: the K = 0 tier, which vLLM measured slower
than a plain server, issue #49548; where ``off_tier_drafts`` says so, the drafter's first pass still runs).

A figure fitted on the measurement corpus says ``verified: fitted`` and names its train cases; its ``range`` is
the search's bounds, and a figure on its bound says so (``on_bound``).
"""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

import functools
import re
from enum import Enum
from typing import Optional

from pydantic import Field, model_validator

from dsdsim.errors import SpecError
from dsdsim.records import frozen
from dsdsim.specs.drafters.base import DrafterKind
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.specs.hardware import Sourced, Verified

_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)")


def parse_version(text: str) -> tuple[int, ...]:
    """The release a version string starts with, as numbers: 'v0.4.10.post1' -> (0, 4, 10)."""
    m = _VERSION.match(str(text).strip())
    if not m:
        raise SpecError(f"cannot read engine version {text!r}; write a release number such as 0.8.4")
    return tuple(int(p) for p in m.group(1).split("."))


class VersionRange(FrozenSpec):
    """Releases ``first`` to ``last``, both inclusive at their precision (last '0.13' covers 0.13.2); ``last``
    None: every later release (the current release line)."""

    first: str
    last: Optional[str] = None
    # an open range (last None): the newest release its sources were read at, and where; a later release is priced
    # with this spec, with a warning that names it (the spec may not hold there)
    checked_through: Optional[str] = None
    checked_source: Optional[str] = None

    @model_validator(mode="after")
    def _check(self) -> "VersionRange":
        lo = parse_version(self.first)
        if self.last is not None and parse_version(self.last) < lo[:len(parse_version(self.last))]:
            raise ValueError(f"version range {self.label}: last comes before first")
        if self.checked_through is not None:
            if self.last is not None:
                raise ValueError(f"version range {self.label}: checked_through is for an open range (no last)")
            if parse_version(self.checked_through) < lo[:len(parse_version(self.checked_through))]:
                raise ValueError(f"version range {self.label}: checked_through comes before first")
            if not self.checked_source:
                raise ValueError(f"version range {self.label}: checked_through needs its checked_source")
        return self

    def past_checked(self, version: str) -> bool:
        """Whether ``version`` is past the newest release this open range was checked at (at its precision:
        checked_through '0.34' covers 0.34.2)."""
        if self.checked_through is None:
            return False
        hi = parse_version(self.checked_through)
        return parse_version(version)[:len(hi)] > hi

    def covers(self, version: str) -> bool:
        v = parse_version(version)
        lo = parse_version(self.first)
        if v[:len(lo)] < lo:
            return False
        if self.last is None:
            return True
        hi = parse_version(self.last)
        return v[:len(hi)] <= hi

    @property
    def label(self) -> str:
        return f"{self.first}-{self.last}" if self.last is not None else f">={self.first}"


class Component(str, Enum):
    """What an engine term is, in the engine."""

    scheduler = "scheduler"                   # picks the requests of the step, allocates KV blocks
    input_preparation = "input_preparation"   # builds the step's input tensors and attention metadata
    drafter = "drafter"                       # the drafter's launches and bookkeeping beyond its kernels
    rejection_sampling = "rejection_sampling"
    sampling = "sampling"
    logits_processing = "logits_processing"
    output_processing = "output_processing"   # detokenisation, stop checks, streaming the tokens out
    synchronisation = "synchronisation"       # the device waiting for the host (a sync the step cannot hide)


class RunsOn(str, Enum):
    host = "host"     # CPU work: hidden behind device time where the step overlaps (async scheduling)
    gpu = "gpu"       # device time: small kernels or a device-side wait, never hidden


class Per(str, Enum):
    step = "step"
    sequence = "sequence"         # B sequences in the step
    token = "token"               # B * q tokens in the verify pass
    draft_pass = "draft_pass"     # sequential draft passes
    layer = "layer"               # the target's piecewise-graph cut points (``ModelSpec.graph_split_ops``: its
                                  # attention, Mamba-2 and linear-attention layers, sparse layers' indexers), e.g.
                                  # one eager attention launch per layer


class Applies(str, Enum):
    all = "all"
    plain = "plain"               # K = 0 on a server without speculation
    speculative = "speculative"   # K >= 1 (fixed or dynamic K)
    dynamic = "dynamic"           # every step of a server running a dynamic K table (K >= 1 and its K = 0 tier)
    off_tier = "off_tier"         # K = 0 on a server running a dynamic K table
    spec_server = "spec_server"   # every step of a speculative server: speculative and off-tier


class Unit(str, Enum):
    seconds = "seconds"
    kernels = "kernels"               # small kernels replayed from a graph: kernel floor + graph launch gap each
    eager_kernels = "eager_kernels"   # small kernels launched from Python: kernel floor + eager launch gap each


class EngineTerm(FrozenSpec):
    """One cost of the engine beyond the kernels of the passes (module docstring)."""

    name: str = Field(min_length=1)
    component: Component
    runs_on: RunsOn
    per: Per
    applies: Applies = Applies.all
    # the drafter kinds whose speculative worker pays it (SGLang: EAGLEWorker and DFlashWorker differ); None: all
    drafters: Optional[tuple[str, ...]] = None
    unit: Unit = Unit.seconds
    value: float = Field(ge=0)
    range: tuple[float, float]          # from sources: a fit stays inside it
    source: str = Field(min_length=1)
    verified: Verified
    mechanism: str = Field(min_length=1)   # what it is in the engine and why it scales with `per`
    fit: bool = False                   # fitted on the corpus by scripts/fit_engines.py
    prior: Optional[float] = None       # fit: the sourced value the fit starts at and is pulled towards
    note: Optional[str] = None
    cases: Optional[tuple[str, ...]] = None   # fitted: the train cases it was fitted on

    @model_validator(mode="after")
    def _check(self) -> "EngineTerm":
        lo, hi = self.range
        if not 0 <= lo <= hi:
            raise ValueError(f"term {self.name}: range must be 0 <= low <= high, got {self.range}")
        if self.unit is Unit.seconds and hi > 0.1:
            raise ValueError(f"term {self.name}: {hi:g} s is not a per-unit engine time (range above 0.1 s)")
        if self.unit is not Unit.seconds and self.runs_on is not RunsOn.gpu:
            raise ValueError(f"term {self.name}: kernel launches run on the gpu")
        if not lo <= self.value <= hi:
            raise ValueError(f"term {self.name}: value {self.value:g} is outside its range {self.range}")
        if self.verified is Verified.fitted and not self.cases:
            raise ValueError(f"term {self.name}: a fitted figure names the cases it was fitted on (cases: [...])")
        if self.fit and (self.prior is None or not lo <= self.prior <= hi):
            raise ValueError(f"term {self.name}: a fitted term gives its sourced prior inside its range")
        if self.drafters is not None:
            known = {k.value for k in DrafterKind}
            bad = [d for d in self.drafters if d not in known]
            if bad or not self.drafters:
                raise ValueError(f"term {self.name}: drafters {list(self.drafters)} must be drafter kinds "
                                 f"({', '.join(sorted(known))})")
            if self.applies is Applies.plain:
                raise ValueError(f"term {self.name}: a term paid by some drafters' workers applies to speculative "
                                 f"steps, not to plain ones")
        return self

    def paid_by(self, drafter_kind: Optional[str]) -> bool:
        """Whether a step drafting with ``drafter_kind`` pays this term (None: a plain step, or not known)."""
        return self.drafters is None or drafter_kind is None or drafter_kind in self.drafters

    @property
    def on_bound(self) -> Optional[str]:
        """'low' or 'high' when a fitted figure sits on a bound of its range (the data pushed it there)."""
        if self.verified is not Verified.fitted:
            return None
        lo, hi = self.range
        tol = 1e-3 * max(hi - lo, 1e-12)
        if self.value <= lo + tol and lo < hi:
            return "low"
        if self.value >= hi - tol and lo < hi:
            return "high"
        return None


class EngineFlag(Sourced):
    """A yes / no of the engine, with its source."""

    value: bool


class ReleaseFlag(EngineFlag):
    """A yes / no that holds through one release of the range (``through``; None: the whole range), the range's
    default after it."""

    through: Optional[str] = None

    @model_validator(mode="after")
    def _release(self) -> "ReleaseFlag":
        if self.through is not None:
            parse_version(self.through)
        return self

    def holds_for(self, release: Optional[str]) -> bool:
        """Whether the flag speaks for ``release`` (None: the range as a whole, which it does)."""
        return self.through is None or release is None or parse_version(release) <= parse_version(self.through)


class EngineLimit(Sourced):
    """A whole-number limit of the engine, with its source (SGLang's 48 running requests under speculation)."""

    value: int = Field(ge=1)


class Overlap(FrozenSpec):
    """Whether the host work of a step runs while the device runs the previous one (async scheduling)."""

    plain: EngineFlag
    speculative: EngineFlag
    # the drafter kinds speculative overlap covers (vLLM: EAGLE/MTP only, the drafts stay on the GPU); None: all
    speculative_drafters: Optional[tuple[str, ...]] = None
    speculative_trees: bool = True           # False: a draft tree (top-k > 1) runs without overlap
    off_tier: Optional[EngineFlag] = None    # None: as speculative steps

    def speculative_overlaps(self, drafter_kind: Optional[str] = None, tree: bool = False) -> bool:
        if not self.speculative.value:
            return False
        if tree and not self.speculative_trees:
            return False
        return self.speculative_drafters is None or drafter_kind is None or drafter_kind in self.speculative_drafters


class GraphPadding(str, Enum):
    batch = "batch"      # graphs captured per batch size; the batch is padded up to the next capture size
    tokens = "tokens"    # graphs captured per token count; B * q tokens are padded up to the next capture size
    none = "none"        # only the captured sizes themselves replay a graph; any other size runs eager


class GraphMode(str, Enum):
    full = "full"              # the whole pass is one graph (attention included)
    piecewise = "piecewise"    # graphs between attention calls; attention launched eagerly per layer
    none = "none"


class CudaGraphs(FrozenSpec):
    """Which step shapes replay a CUDA graph. ``capture_sizes`` None: every shape is captured, nothing padded."""

    capture_sizes: Optional[tuple[int, ...]] = None
    padding: GraphPadding = GraphPadding.batch
    mode: GraphMode = GraphMode.full
    # vLLM with speculation keeps only capture sizes that are multiples of q = K + 1 (uniform decode batches)
    multiple_of_verify_tokens: bool = False
    # a server running a dynamic K table: whether its capture sizes are rounded so (None: as a fixed-K server's;
    # vLLM 0.24-0.28 model runner V1 runs such a server on PIECEWISE graphs over the unrounded grid)
    dynamic_multiple_of_verify_tokens: Optional[bool] = None
    # vLLM from 0.29: the capture list also holds n x q for the request counts [1, 2, 4] + range(8, 256, 8) +
    # range(256, .., 16), within the largest size (the uniform decode batches of each K: PR #50488, #54418)
    uniform_decode_request_grid: bool = False
    # capture sizes on parts of one compute-capability family (the key: its major version, '10' for SM100), where
    # the engine's default differs there (vLLM from 0.28: the largest capture 1024 tokens on SM100, not 512)
    capture_sizes_by_capability: Optional[dict[str, tuple[int, ...]]] = None
    # capture sizes for one model architecture (its config.json architectures[0]) where the engine overrides its
    # default for it (vLLM 0.12+: GptOssForCausalLM to 1024 tokens); before the per-capability sizes
    capture_sizes_by_architecture: Optional[dict[str, tuple[int, ...]]] = None
    # a speculative server's own capture list where the engine captures another one when speculating (SGLang:
    # get_batch_sizes_to_capture's finer list for EAGLE / NEXTN); its steps at K > 0 and its draft passes replay it
    speculative_capture_sizes: Optional[tuple[int, ...]] = None
    # ... and how that server pads a batch between its sizes, where it differs (SGLang before 0.4.5 sets
    # disable_cuda_graph_padding for EAGLE: a batch not captured runs eager); None: as ``padding``
    speculative_padding: Optional[GraphPadding] = None
    # the raw capture sizes are captured as PIECEWISE graphs too, and a uniform decode batch whose next token count
    # is a raw size before the next FULL (rounded) one replays it, attention launched eagerly per split op (vLLM
    # model runner V2 0.25-0.28: CudaGraphManager._init_candidates / dispatch; FULL first from 0.29, PR #53407)
    piecewise_raw_sizes: bool = False
    draft_graphs: bool = True            # draft passes replay graphs too (padded by batch)
    # the drafter's first pass (B x q tokens, over the tokens verified last step) replays a graph only while its
    # token count is within the largest capture size, padded by tokens to the next one, where the later passes graph
    # by batch (vLLM model runner V1 from 0.9: EagleProposer.propose pads num_tokens with pad_for_cudagraph while
    # num_tokens <= max_cudagraph_capture_size, PIECEWISE, else runs eager). False: as the later passes
    draft_first_pass_by_tokens: bool = False
    # the drafter's first pass over the tokens verified last step (SGLang's draft extend after decode) replays a
    # graph as the later passes do; False: it runs eager (SGLang before 0.4.7 has no EAGLEDraftExtendCudaGraphRunner)
    draft_extend_graphs: bool = True
    # the first release whose server runs these graphs by default; an ENGINE@VERSION before it is priced eager, as
    # such a server ran unless configured (TensorRT-LLM PyTorch backend: graphs on by default from PR #5480, 1.0).
    # None: every release of the range runs them by default
    default_from: Optional[str] = None
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None

    def off_by_default(self, release: Optional[str]) -> bool:
        """Whether a server of ``release`` (None: the range as a whole, priced at its newest) ran without these
        graphs unless configured (``default_from``)."""
        return (self.default_from is not None and release is not None
                and parse_version(release) < parse_version(self.default_from))

    @model_validator(mode="after")
    def _sizes(self) -> "CudaGraphs":
        if self.default_from is not None:
            parse_version(self.default_from)      # a release number, or one line naming it
        lists = [self.capture_sizes, self.speculative_capture_sizes, *(self.capture_sizes_by_capability or {}).values(),
                 *(self.capture_sizes_by_architecture or {}).values()]
        for s in lists:
            if s is not None:
                if not s or any(x < 1 for x in s) or list(s) != sorted(set(s)):
                    raise ValueError("capture_sizes must be whole numbers >= 1, increasing, without repeats")
        if self.speculative_padding is not None and self.speculative_capture_sizes is None:
            raise ValueError("speculative_padding needs speculative_capture_sizes (the speculative server's list)")
        if (self.capture_sizes_by_capability or self.capture_sizes_by_architecture
                or self.speculative_capture_sizes) and self.capture_sizes is None:
            raise ValueError("speculative capture sizes, or sizes by capability or architecture, need capture_sizes "
                             "(the sizes elsewhere)")
        return self


class DraftShape(str, Enum):
    chain = "chain"
    tree = "tree"


class MoEKernels(FrozenSpec):
    """The fused-MoE kernel family the engine runs, by GPU generation (``dsdsim.cost.timing`` times each family
    from its own figures in the hardware spec)."""

    by_generation: dict[str, str]            # hopper | blackwell | ampere | ada | cdna3 | ... -> kernel family
    default: str = "triton_fused_moe"
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None

    def family(self, generation: Optional[str]) -> str:
        return self.by_generation.get(generation or "", self.default)


class FitProvenance(FrozenSpec):
    """How the fitted figures were obtained (written by scripts/fit_engines.py or dsdsim calibrate)."""

    method: str
    date: str
    cases: tuple[str, ...]
    residuals: dict[str, float]          # case id -> predicted / measured - 1 after the fit
    median_abs_residual: float
    max_abs_residual: float
    note: Optional[str] = None


# The engine terms one calibration factor multiplies (``EngineCalibration``): those paid once per step (per step,
# draft pass or layer) and those that grow with the batch (per sequence or token).
STEP_PERS = ("step", "draft_pass", "layer")
TOKEN_PERS = ("sequence", "token")


class CalibratedFigure(FrozenSpec):
    """One figure ``dsdsim calibrate --measurements`` fitted: its value beside the shipped prior it started from,
    the bounds the fit stayed inside, and how well the points pinned it (the posterior's relative spread)."""

    name: str = Field(min_length=1)
    label: str = Field(min_length=1)
    unit: str = Field(min_length=1)          # fraction | s | x
    value: float = Field(ge=0)
    prior: float = Field(ge=0)
    range: tuple[float, float]
    prior_sigma: float = Field(gt=0)         # the prior's width, log space
    posterior_sigma: Optional[float] = None  # the fit's, log space (None: not worked out)
    on_bound: Optional[str] = None           # low | high where the fit ended on a bound

    @model_validator(mode="after")
    def _check(self) -> "CalibratedFigure":
        lo, hi = self.range
        tol = 1e-9 * max(abs(hi), 1.0)
        if not (0 <= lo <= hi and lo - tol <= self.value <= hi + tol and lo - tol <= self.prior <= hi + tol):
            raise ValueError(f"calibrated figure {self.name}: value {self.value:g} and prior {self.prior:g} must lie "
                             f"in its range {self.range}")
        return self


class EngineCalibration(FrozenSpec):
    """What a calibration to one deployment's measured points changed (``dsdsim calibrate --measurements``): factors
    on the hardware's bandwidth fractions, compute fractions and launch gaps (applied to the hardware spec when this
    engine spec is used: ``dsdsim.specs.setup.resolve``), factors on the release's engine terms paid per step and
    per sequence or token, the deployment it was fitted for, and each fitted figure with its prior and bounds."""

    model: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    tp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    drafter: Optional[str] = None
    base_engine: str = Field(min_length=1)
    bandwidth_scale: float = Field(default=1.0, gt=0, le=10)
    compute_scale: float = Field(default=1.0, gt=0, le=10)
    launch_scale: float = Field(default=1.0, gt=0, le=100)
    engine_step_scale: float = Field(default=1.0, ge=0, le=100)
    engine_token_scale: float = Field(default=1.0, ge=0, le=100)
    figures: tuple[CalibratedFigure, ...] = ()
    points: tuple[str, ...] = ()             # the measured points, b{B}-k{K}-c{context}
    loo_median_abs_error: Optional[float] = None
    loo_max_abs_error: Optional[float] = None
    # the TTFT a request spends outside the GPU steps (API server, tokenisation, hand-over, streaming): the median
    # over the replayed runs of measured minus replayed TTFT p50 (dsdsim.fit.replay); None: not fitted (no runs with
    # their requests and TTFTs). The serving simulation delays each request's arrival at the scheduler by it.
    request_overhead_ms: Optional[float] = Field(default=None, ge=0, lt=3.6e6)
    source: str = Field(min_length=1)
    date: str = Field(min_length=1)

    @model_validator(mode="after")
    def _factors_agree(self) -> "EngineCalibration":
        """The factors applied are the figures' value / prior, where the figures are written (one truth)."""
        factors = {"bandwidth": self.bandwidth_scale, "compute": self.compute_scale, "launch": self.launch_scale,
                   "engine_step": self.engine_step_scale, "engine_token": self.engine_token_scale}
        for f in self.figures:
            if f.name in factors and f.prior > 0 and abs(f.value / f.prior - factors[f.name]) > 1e-3 * max(
                    1.0, factors[f.name]):
                raise ValueError(f"calibration figure {f.name}: value / prior = {f.value / f.prior:.4g} but the "
                                 f"factor applied is {factors[f.name]:.4g}; edit both or neither")
        return self

    def term_scale(self, per: str) -> float:
        """The factor on an engine term paid ``per`` (step, sequence, token, draft_pass, layer)."""
        return self.engine_token_scale if per in TOKEN_PERS else self.engine_step_scale


class EngineSpec(FrozenSpec):
    """One serving engine's costs beyond kernels over a range of its releases (module docstring)."""

    name: str = Field(min_length=1)              # the engine: vllm, sglang, trtllm, ideal
    versions: Optional[VersionRange] = None      # None: not a versioned engine (ideal, a user's own spec)
    label: str = ""                              # what this range is ("V1 with async scheduling for speculation")
    runner: Optional[str] = None                 # vLLM's model runner the spec prices: v1 or v2 (None: not vLLM V1)
    # the release asked for (``ENGINE@VERSION``; set when the catalog reads the spec), None: the range as a whole. What
    # differs between releases of one range without changing its step costs reads it (SGLang's KV pool rule).
    release: Optional[str] = None
    description: str = ""
    release_notes: Optional[str] = None          # the releases and changes that bound the range, with sources
    terms: tuple[EngineTerm, ...] = ()
    overlap: Overlap
    dynamic_k_table: Optional[EngineFlag] = None  # the version reads a per-batch-size K table
    off_tier_drafts: Optional[EngineFlag] = None  # at the K = 0 tier the drafter's first pass still runs
    # where a checkpoint's value reuses the key's projection (Gemma-4 attention_k_eq_v), the engine loads the k_proj
    # weights again as a v_proj and runs it (vLLM: its fused QKV projection expects both); None / false: one projection
    value_projection: Optional[EngineFlag] = None
    # whether a step runs prefill chunks and decodes together (vLLM V1's chunked prefill); false: a step is a prefill
    # batch or a decode batch, prefills first (SGLang without --enable-mixed-chunk). None: mixed. The serving
    # simulation (dsdsim.serve.scheduler) reads it.
    mixed_prefill: Optional[EngineFlag] = None
    # false: a model with MLA attention is served without chunked prefill (vLLM 0.7: "MLA is enabled; forcing chunked
    # prefill and prefix caching to be disabled"): each step a prefill batch of whole prompts or a decode batch,
    # prefills first, up to max(max_model_len, 2048) tokens a step. None / true: as mixed_prefill says.
    mla_chunked_prefill: Optional[ReleaseFlag] = None
    # the most requests a speculative server runs at once unless told otherwise (SGLang: max_running_requests 48)
    speculative_max_requests: Optional[EngineLimit] = None
    # the server's scheduling defaults where they are not vLLM's (None: vLLM's; dsdsim.serve.scheduler reads them):
    # the requests and tokens one step may run (TensorRT-LLM: max_batch_size 2048, max_num_tokens 8192)
    max_running_requests: Optional[EngineLimit] = None
    max_batched_tokens: Optional[EngineLimit] = None
    # false: prompts enter a step whole, first come first served, and the queue stops at the first that does not fit
    # the tokens left (TensorRT-LLM without enable_chunked_prefill); None: chunked (vLLM V1, SGLang)
    chunked_prefill: Optional[EngineFlag] = None
    # true: a request is admitted only while the blocks of its whole sequence (prompt and output) are free beside
    # what the running requests still need to finish, so none is ever preempted (TensorRT-LLM GUARANTEED_NO_EVICT)
    reserve_to_completion: Optional[EngineFlag] = None
    # true: the KV cache is its share (--memory-utilization) of the memory left after the weights and the warm-up's
    # peak (TensorRT-LLM free_gpu_memory_fraction), not of the whole memory less them (vLLM)
    kv_cache_of_free_memory: Optional[EngineFlag] = None
    cuda_graphs: CudaGraphs
    moe_kernels: Optional[MoEKernels] = None
    draft_shape: DraftShape = DraftShape.chain
    draft_shape_source: Optional[str] = None
    fit: Optional[FitProvenance] = None
    # a spec calibrated to one deployment's measured points (dsdsim calibrate --measurements): hardware and engine
    # factors applied where the spec is used
    calibration: Optional[EngineCalibration] = None

    @model_validator(mode="after")
    def _unique(self) -> "EngineSpec":
        if self.runner not in (None, "v1", "v2"):
            raise ValueError(f"runner {self.runner!r}: write v1 or v2 (vLLM's model runner)")
        names = [t.name for t in self.terms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"engine term names must be unique: {', '.join(dup)} repeated")
        return self

    @property
    def version_label(self) -> str:
        return self.versions.label if self.versions is not None else "-"

    @property
    def speculative_cap_text(self) -> Optional[str]:
        """'sglang >=0.5.12 runs at most 48 requests on a speculative server unless started with
        --max-running-requests N (source)', or None where the spec states no such limit."""
        limit = self.speculative_max_requests
        if limit is None:
            return None
        return (f"{self.name} {self.version_label} runs at most {limit.value} requests on a speculative server unless "
                f"started with --max-running-requests N ({limit.source.split(':')[0]})")

    @property
    def newest_release(self) -> Optional[str]:
        """The release asked for, else the newest the range names (its last, or the release it was checked
        through); None for an unversioned spec or an open range checked through nothing."""
        if self.release is not None:
            return self.release
        v = self.versions
        return None if v is None else (v.last or v.checked_through)

    def term(self, name: str) -> EngineTerm:
        for t in self.terms:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.terms) or "none"
        raise SpecError(f"engine {self.name} has no term {name!r}; its terms: {known}")

    @property
    def supports_off_tier(self) -> bool:
        """Whether the version reads a dynamic K table, whose K = 0 tier is then its own kind of step."""
        return self.dynamic_k_table is not None and self.dynamic_k_table.value


def _deep_merge(parent, child):
    """Mappings merge key by key (the child's value wins); anything else is replaced by the child's."""
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for key, value in child.items():
            out[key] = _deep_merge(parent.get(key), value) if key in parent else value
        return out
    return child


def merge_engine_data(parent: dict, child: dict) -> dict:
    """``child`` over ``parent``: mappings merge key by key (``cuda_graphs: {draft_graphs: false}`` changes one
    field), other values (and ``versions``) are replaced; ``terms`` merge by name (a child term's fields
    replace those of the parent's term of the same name, which then is the child's own figure; new names are
    added) and ``remove_terms`` drops the parent's."""
    out = {k: v for k, v in parent.items() if k not in ("extends", "fit")}
    for key, value in child.items():
        if key in ("terms", "remove_terms", "extends"):
            continue
        out[key] = _deep_merge(out[key], value) if key in out and key != "versions" else value
    terms = {t["name"]: t for t in parent.get("terms", []) if isinstance(t, dict) and "name" in t}
    for name in child.get("remove_terms", []) or []:
        if name not in terms:
            raise SpecError(f"remove_terms names {name!r}, which the extended spec does not have")
        del terms[name]
    for t in child.get("terms", []) or []:
        if not isinstance(t, dict) or "name" not in t:
            raise SpecError("every engine term is a mapping with a name")
        terms[t["name"]] = _deep_merge(terms[t["name"]], t) if t["name"] in terms else t
    out["terms"] = list(terms.values())
    return out


def engine_from_dict(data: object, where: str = "engine spec") -> EngineSpec:
    from dsdsim.specs.io import validated

    return validated(EngineSpec, data, where)


YAML_HEADER = ("# Engine spec (dsdsim/specs/engine.py). Figures marked 'fitted' name the cases or points they were fitted on.\n")


def engine_yaml(spec: EngineSpec, header: str = YAML_HEADER) -> str:
    """The spec as YAML, fields in schema order (deterministic: the same spec always gives the same text)."""
    import yaml

    data = spec.model_dump(mode="json", exclude_none=True)
    return header + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


# --- the figures one step reads, gathered once per spec ----------------------------------------------------------

STEP_KINDS = ("plain", "speculative", "dynamic", "off_tier")
# the step kinds a term of each ``applies`` is paid on
STEP_KINDS_OF = {Applies.all: STEP_KINDS, Applies.plain: ("plain",), Applies.speculative: ("speculative", "dynamic"),
                 Applies.dynamic: ("dynamic", "off_tier"), Applies.off_tier: ("off_tier",),
                 Applies.spec_server: ("speculative", "dynamic", "off_tier")}
_PERS = tuple(p.value for p in Per)
_SLOTS = {Unit.seconds: "gpu_s", Unit.kernels: "gpu_k", Unit.eager_kernels: "gpu_eager_k"}


@frozen
class KindCoefficients:
    """The summed terms of one kind of step, per unit of each ``Per`` (step, sequence, token, draft_pass, layer):
    host seconds (``host_pass_s``: the draft-pass host terms, hidden behind the passes' kernels), GPU seconds,
    graph-replayed and eager small kernels."""

    host_s: tuple[float, ...]
    gpu_s: tuple[float, ...]
    gpu_kernels: tuple[float, ...]
    gpu_eager_kernels: tuple[float, ...]
    overlaps: bool

    @functools.cached_property
    def has_gpu(self) -> bool:
        return any(self.gpu_s) or any(self.gpu_kernels) or any(self.gpu_eager_kernels)


@frozen
class EngineParams:
    """An engine spec's terms as plain floats, summed per kind of step (``dsdsim.cost.engine`` evaluates them)."""

    plain: KindCoefficients
    speculative: KindCoefficients
    dynamic: KindCoefficients
    off_tier: KindCoefficients

    @classmethod
    def of(cls, spec: EngineSpec, values: Optional[dict[str, float]] = None,
           async_scheduling: Optional[bool] = None, drafter_kind: Optional[str] = None,
           tree: bool = False) -> "EngineParams":
        """The spec's coefficients; ``values`` replaces some terms' values (fitting); ``async_scheduling`` forces
        the overlap of every kind of step on or off (the engine's option; None: the version's defaults, which may
        depend on the drafter kind and on a draft tree)."""
        values = values or {}
        n = len(_PERS)
        sums = {k: {slot: [0.0] * n for slot in ("host", "gpu_s", "gpu_k", "gpu_eager_k")} for k in STEP_KINDS}
        cal = spec.calibration
        for t in spec.terms:
            if not t.paid_by(drafter_kind):
                continue
            v = float(values.get(t.name, t.value))
            if cal is not None:
                v *= cal.term_scale(t.per.value)
            slot = "host" if t.runs_on is RunsOn.host else _SLOTS[t.unit]
            i = _PERS.index(t.per.value)
            for kind in STEP_KINDS_OF[t.applies]:
                sums[kind][slot][i] += v
        ov = spec.overlap
        spec_overlaps = ov.speculative_overlaps(drafter_kind, tree)
        flags = {"plain": ov.plain.value, "speculative": spec_overlaps, "dynamic": spec_overlaps,
                 "off_tier": ov.off_tier.value if ov.off_tier is not None else spec_overlaps}
        if async_scheduling is not None:
            flags = dict.fromkeys(flags, bool(async_scheduling))
        return cls(*(KindCoefficients(*(tuple(sums[k][slot]) for slot in ("host", "gpu_s", "gpu_k", "gpu_eager_k")),
                                      flags[k]) for k in STEP_KINDS))
