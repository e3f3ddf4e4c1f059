"""Hardware specs: frozen, validated, every figure with a source and a verification flag.

Files live in ``hw_specs/`` (one YAML per accelerator). All figures are SI: bytes, bytes/s, FLOP/s, seconds.
Peaks are DENSE (no 2:4 sparsity); a file whose peaks look sparse is refused.
"""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

import math
from enum import Enum
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, field_validator, model_validator

from dsdsim.errors import SpecError
from dsdsim.records import frozen
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.units import DType


class Verified(str, Enum):
    vendor = "vendor"          # vendor document or verbatim copy of a vendor table
    secondary = "secondary"    # reputable secondary source citing the vendor
    derived = "derived"        # arithmetic on other figures (sparse/2, per-GPU share, ...)
    unverified = "unverified"  # placeholder or conflicting sources
    measured = "measured"      # measured by `dsdsim probe` or fitted by `dsdsim calibrate`
    fitted = "fitted"          # fitted by least squares on named measurement cases (engine specs)


class Sourced(FrozenSpec):
    """A value with where it came from: the one shape of every sourced figure, flag and tag in the specs. Each kind
    states its value's type (a redefined ``value`` keeps its place, first, in files and dumps)."""

    value: Any
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None


class Figure(Sourced):
    """One number with where it came from. ``measured_on``: the hardware names (``hw_specs/``, or a part the catalog
    lacks) it was measured on; a kernel figure of a spec whose name is not among them is assumed for that part."""

    value: float = Field(ge=0)
    measured_on: Optional[tuple[str, ...]] = None

    @field_validator("measured_on")
    @classmethod
    def _parts(cls, parts: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
        return _part_names(parts)


def _part_names(parts: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
    if parts is not None and (not parts or any(not p.strip() for p in parts)):
        raise ValueError("measured_on lists hardware names (at least one, none empty); leave it out when unknown")
    return parts


class Efficiency(FrozenSpec):
    """Achievable fractions of peak, before calibration.

    ``memory`` is the fraction of bandwidth weight-streaming GEMMs reach. Kernel classes differ: KV-cache reads
    in attention and vector kernels (norms, activations, sampling) often reach less
    (e.g. 42-57% for KV reads vs 78-84% for weights in one per-op profile of 70B decode on H100), so they may
    carry their own fraction; absent, they use ``memory``. Calibration fits all three.
    """

    compute: Figure
    memory: Figure
    collective: Figure
    attention_memory: Optional[Figure] = None
    vector_memory: Optional[Figure] = None
    # GEMMs with fp8 weights: a lower share of the fp8 peak (MAMF) and of bandwidth at small M (per-tensor or
    # per-block scales, less mature kernels); absent: ``compute`` and ``memory``
    compute_fp8: Optional[Figure] = None
    memory_fp8: Optional[Figure] = None

    @model_validator(mode="after")
    def _fractions(self) -> "Efficiency":
        for name in ("compute", "memory", "collective", "attention_memory", "vector_memory", "compute_fp8",
                     "memory_fp8"):
            fig = getattr(self, name)
            if fig is None:
                continue
            if not 0.01 <= fig.value <= 1.2:
                raise ValueError(f"efficiency.{name} = {fig.value} is not a fraction of peak; use a value in (0, 1.2]")
        return self

    @property
    def attention_memory_value(self) -> float:
        return (self.attention_memory or self.memory).value

    @property
    def vector_memory_value(self) -> float:
        return (self.vector_memory or self.memory).value


class AllReduceAlgorithm(str, Enum):
    one_shot = "one-shot"      # every rank reads all n-1 peers' buffers and reduces locally: (n-1)*S per rank
    two_shot = "two-shot"      # reduce-scatter then all-gather over the same link: 2(n-1)/n*S per rank
    ring = "ring"              # NCCL ring/tree: 2(n-1)/n*S per rank, a larger fixed latency


class AllReduceTier(FrozenSpec):
    """One all-reduce algorithm an engine uses on this link, up to ``max_bytes`` per call.

    t(S) = latency_s + traffic(S, n) / (link bandwidth * bandwidth_fraction); engines pick the fastest tier
    allowed for the message size (vLLM custom all-reduce: one-shot for small, two-shot up to its buffer, NCCL beyond).
    """

    algorithm: AllReduceAlgorithm
    max_bytes: float = Field(gt=0)            # largest message this algorithm takes (inf: no limit)
    latency_s: float = Field(ge=0, le=1e-3)
    bandwidth_fraction: float = Field(gt=0, le=1.2)
    source: str = Field(min_length=1)
    verified: Verified
    note: Optional[str] = None
    measured_on: Optional[tuple[str, ...]] = None     # as Figure.measured_on

    @field_validator("measured_on")
    @classmethod
    def _parts(cls, parts: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
        return _part_names(parts)


class MoEFamilyFigures(FrozenSpec):
    """One fused-MoE kernel family on this part (``dsdsim.cost.timing.moe_family_rates``). One call costs

        kernels(w) launch gaps + the two grouped GEMMs' kernel floor (where their work is shorter)
        + latency_s + W_e / (BW * lead_expert_bandwidth_fraction) + E * align_s_per_expert
        + (t_c^p + t_m^p)^(1/p),  t_m = bytes / (BW * bandwidth_fraction),  t_c = padded FLOPs / (peak(w) * c(w))

    with W_e the bytes of one routed expert's weights on the rank and E its routed experts, and c(w) the fraction of
    the weight format's peak the grouped GEMMs reach where they are compute-bound: ``compute_fractions[w]`` where the
    family was timed there (verify and prefill sizes), else the part's ``moe_compute_fraction``. ``kernels`` counts the
    launches of one call with unquantised or weight-only weights, the two grouped GEMMs included (the others are
    routing, align/sort, activation and combine kernels, each a trivial kernel at decode sizes: one launch gap);
    formats that quantise activations per call add ``quantised_kernels``. ``tile_m``: the rows each touched
    expert's block is padded to. The last two figures are optional shape terms, present where the data show them.
    """

    source: str = Field(min_length=1)            # the engines and backends that run it, and for which formats
    weight_formats: tuple[DType, ...] = Field(min_length=1)
    kernels: Figure
    quantised_kernels: Figure
    tile_m: Figure
    latency_s: Figure
    bandwidth_fraction: Figure
    lead_expert_bandwidth_fraction: Optional[Figure] = None
    align_s_per_expert: Optional[Figure] = None
    compute_fractions: dict[DType, Figure] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ranges(self) -> "MoEFamilyFigures":
        for fmt, fig in self.compute_fractions.items():
            if not 0.01 <= fig.value <= 1.0:
                raise ValueError(f"compute_fractions.{fmt.value} = {fig.value} is not a fraction of peak; "
                                 f"use a value in (0, 1]")
        for name in ("kernels", "quantised_kernels", "tile_m"):
            v = getattr(self, name).value
            if v != int(v) or v > 64:
                raise ValueError(f"{name} = {v:g} must be a whole number of launches / rows (at most 64)")
        if self.kernels.value < GROUPED_GEMM_LAUNCHES or self.tile_m.value < 1:
            raise ValueError(f"kernels must count the {GROUPED_GEMM_LAUNCHES} grouped GEMMs; tile_m must be >= 1")
        for name in ("bandwidth_fraction", "lead_expert_bandwidth_fraction"):
            fig = getattr(self, name)
            if fig is not None and not 0.01 <= fig.value <= 1.2:
                raise ValueError(f"{name} = {fig.value} is not a fraction of peak; use a value in (0, 1.2]")
        if self.latency_s.value > 1e-3 or (self.align_s_per_expert and self.align_s_per_expert.value > 1e-5):
            raise ValueError("latency_s / align_s_per_expert are implausible; write seconds (12 us -> 12.0e-6)")
        return self

    def launches(self, weight: DType) -> float:
        """Kernel launches of one call with ``weight`` weights."""
        quantised = self.quantised_kernels.value if weight.kernel_format in ACTIVATION_QUANTISED else 0.0
        return self.kernels.value + quantised

    def compute_fraction(self, weight: DType, default: float) -> float:
        """The fraction of ``weight``'s peak its grouped GEMMs reach compute-bound (``default``: the part's)."""
        fig = self.compute_fractions.get(weight)
        return default if fig is None else fig.value

    def figures(self) -> dict[str, Figure]:
        """Its figures by name (the optional ones where present; compute fractions as compute_fraction.<format>)."""
        out = {name: fig for name in MoEFamilyFigures.model_fields
               if isinstance(fig := getattr(self, name), Figure)}
        out.update({f"compute_fraction.{fmt.value}": fig for fmt, fig in self.compute_fractions.items()})
        return out


# The two grouped GEMMs of a SwiGLU MoE call (gate_up, down; an activation may be fused into the first), the launches
# ``MoEExperts`` counts (dsdsim.cost.ops)
GROUPED_GEMM_LAUNCHES = 2
# Weight formats whose kernels quantise the activations on every call (W8A8 fp8/int8 per-token-group quant of both
# GEMMs' inputs in vLLM/SGLang fused_moe; NVFP4 W4A4 fp4 quantize in FlashInfer); int4 and mxfp4 are weight-only
# (W4A16: Marlin, and the Hopper mixed-input CUTLASS path of lightseekorg/tokenspeed PR #1664)
ACTIVATION_QUANTISED = frozenset({DType.fp8, DType.int8, DType.fp4, DType.nvfp4})


class GemmFigures(FrozenSpec):
    """Dense GEMMs of one weight format on this part, fitted on published M sweeps (``scripts/fit_gemm.py``;
    measurements/kernels/gemm_m.csv): one call of an m x k by k x n GEMM costs

        (t_c^p + t_m^p)^(1/p) + latency_s + the launch gap,
        t_c = padded FLOPs / (peak * compute_fraction),  t_m = bytes / (BW * bandwidth_fraction)

    (no kernel floor: ``latency_s`` is the call's fixed time, for fp8 with its activation-quantisation kernel).
    Production libraries reach a lower plateau than a large square MAMF on most parts and a sharper transition
    than p = 1.1 (docs/kernel_shapes.md); where this block is absent, GEMMs take ``efficiency`` and
    ``gemm_transition_p``."""

    source: str = Field(min_length=1)
    compute_fraction: Figure
    bandwidth_fraction: Figure
    transition_p: Figure
    latency_s: Figure

    @model_validator(mode="after")
    def _ranges(self) -> "GemmFigures":
        for name in ("compute_fraction", "bandwidth_fraction"):
            v = getattr(self, name).value
            if not 0.01 <= v <= 1.2:
                raise ValueError(f"gemm {name} = {v} is not a fraction of peak; use a value in (0, 1.2]")
        if not 1.0 <= self.transition_p.value <= 64.0:
            raise ValueError(f"gemm transition_p = {self.transition_p.value} must be in [1, 64]")
        if self.latency_s.value > 1e-4:
            raise ValueError(f"gemm latency_s = {self.latency_s.value:g} s is implausible; write seconds (2 us -> 2.0e-6)")
        return self


def nearest_head_size(measured, head_dim: int) -> int:
    """The measured head size nearest to ``head_dim`` (log ratio; the smaller on a tie): 96 -> 128, 512 -> 256."""
    return min(measured, key=lambda d: (abs(math.log(d / head_dim)), d))


GEMM_FORMATS = ("bf16", "fp8")     # the weight formats a GemmFigures block may describe (kernel_format values)


class KernelFigures(FrozenSpec):
    """How kernels depart from the flat roofline ``max(F/P, bytes/BW)``; each figure sourced.

    * ``gemm_transition_p``: GEMM time is the p-norm (t_c^p + t_m^p)^(1/p) of compute and memory time, so time
      keeps rising with M well before the ridge point (p -> inf recovers the max).
    * ``kernel_floor_s``: the shortest a launched kernel runs (ramp-up and tail), on top of the launch gap.
    * ``decode_attention_bandwidth_fraction`` / ``decode_attention_ramp_tokens``: paged decode attention
      (FlashAttention / FlashInfer) reaches fraction * c / (c + ramp) of bandwidth at c cached tokens per
      sequence: every sequence costs as if ``ramp`` more tokens were read. ``decode_attention_fp8_*``: the same over
      an 8-bit cache, which the kernel dequantises (absent: the 16-bit figures over half the bytes);
      ``decode_attention_fp8_head_dim_fractions``, where the dequantising kernel's rate follows the head size
      (Hopper FlashAttention-3), the fraction at each measured head size, a head size between them taking the
      nearest (log ratio), in place of the one fraction.
    * ``mla_attention_*``: the same for MLA decode kernels (FlashMLA) over the latent cache.
    * ``moe_families``: fused-MoE kernel families (Triton fused_moe, FlashInfer TRT-LLM-gen, ...), each with its
      own launches, fixed latency and bandwidth (``MoEFamilyFigures``); the engine names the family it runs and
      ``moe_default_family`` runs where it names none. Grouped-GEMM compute reaches ``moe_compute_fraction``.
    * ``moe_call_latency_s`` / ``moe_bandwidth_fraction``: the older single figures (one fixed latency per call,
      one bandwidth fraction, whatever the kernel). A spec without ``moe_families`` is timed by them; with
      families they are views of the default family, filled in for readers of the old fields (calibration).
    """

    gemm_transition_p: Figure
    kernel_floor_s: Figure
    decode_attention_bandwidth_fraction: Figure
    decode_attention_ramp_tokens: Figure
    decode_attention_fp8_bandwidth_fraction: Optional[Figure] = None   # an 8-bit cache, dequantised in the kernel
    decode_attention_fp8_ramp_tokens: Optional[Figure] = None
    decode_attention_fp8_head_dim_fractions: dict[int, Figure] = Field(default_factory=dict)   # head size -> fraction
    mla_attention_bandwidth_fraction: Figure
    mla_attention_ramp_tokens: Figure
    moe_call_latency_s: Optional[Figure] = None
    moe_bandwidth_fraction: Optional[Figure] = None
    moe_compute_fraction: Figure
    moe_default_family: Optional[str] = None
    moe_families: dict[str, MoEFamilyFigures] = Field(default_factory=dict)
    all_reduce: tuple[AllReduceTier, ...] = ()
    # dense GEMMs by weight format (bf16, fp8), fitted on published M sweeps; absent: ``efficiency`` and
    # ``gemm_transition_p`` time them
    gemm: dict[str, GemmFigures] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _ranges(self) -> "KernelFigures":
        if not 1.0 <= self.gemm_transition_p.value <= 64.0:
            raise ValueError(f"kernels.gemm_transition_p = {self.gemm_transition_p.value} must be in [1, 64]")
        for name in ("decode_attention_bandwidth_fraction", "decode_attention_fp8_bandwidth_fraction",
                     "mla_attention_bandwidth_fraction", "moe_bandwidth_fraction", "moe_compute_fraction"):
            fig = getattr(self, name)
            if fig is not None and not 0.01 <= fig.value <= 1.2:
                raise ValueError(f"kernels.{name} = {fig.value} is not a fraction of peak; use a value in (0, 1.2]")
        for name in ("kernel_floor_s", "moe_call_latency_s"):
            fig = getattr(self, name)
            if fig is not None and fig.value > 1e-3:
                raise ValueError(f"kernels.{name} = {fig.value:g} s is implausible; write seconds (3 us -> 3.0e-6)")
        if (self.decode_attention_fp8_bandwidth_fraction is None) != (self.decode_attention_fp8_ramp_tokens is None):
            raise ValueError("kernels.decode_attention_fp8_bandwidth_fraction and decode_attention_fp8_ramp_tokens "
                             "come together: give both or neither")
        by_head = self.decode_attention_fp8_head_dim_fractions
        if by_head and self.decode_attention_fp8_ramp_tokens is None:
            raise ValueError("kernels.decode_attention_fp8_head_dim_fractions needs the fp8 pair it refines "
                             "(decode_attention_fp8_bandwidth_fraction and _ramp_tokens); give them too")
        for head_dim, fig in by_head.items():
            if head_dim <= 0:
                raise ValueError(f"kernels.decode_attention_fp8_head_dim_fractions: head size {head_dim} must be a "
                                 "positive number of elements (64, 128, 256)")
            if not 0.01 <= fig.value <= 1.2:
                raise ValueError(f"kernels.decode_attention_fp8_head_dim_fractions.{head_dim} = {fig.value} is not a "
                                 "fraction of peak; use a value in (0, 1.2]")
        self._check_moe_figures()
        unknown = sorted(set(self.gemm) - set(GEMM_FORMATS))
        if unknown:
            raise ValueError(f"kernels.gemm describes weight formats {', '.join(GEMM_FORMATS)}, not {', '.join(unknown)}")
        return self._with_views() if self.moe_families else self

    def fp8_decode_fraction(self, head_dim: int) -> Optional[float]:
        """The fraction of bandwidth decode attention over an 8-bit cache reaches at ``head_dim`` elements per head:
        the measured head size nearest to it (log ratio; the smaller on a tie) where the spec gives fractions by
        head size, else the one fp8 fraction; None where the spec has no fp8-cache figures."""
        by_head = self.decode_attention_fp8_head_dim_fractions
        if by_head and head_dim > 0:
            return by_head[nearest_head_size(by_head, head_dim)].value
        fig = self.decode_attention_fp8_bandwidth_fraction
        return None if fig is None else fig.value

    def gemm_figures(self, weight: DType) -> Optional[GemmFigures]:
        """The dense-GEMM figures for weights in ``weight`` (its kernel format: bf16 and fp16 run bf16 GEMMs); None
        where the part has none for that format."""
        fmt = weight.kernel_format
        key = "bf16" if fmt in (DType.bf16, DType.fp16) else fmt.value
        return self.gemm.get(key)

    def _check_moe_figures(self) -> None:
        if self.moe_families:
            if self.moe_default_family not in self.moe_families:
                raise ValueError(f"kernels.moe_default_family must name one of moe_families "
                                 f"({', '.join(self.moe_families)}), got {self.moe_default_family!r}")
        elif self.moe_call_latency_s is None or self.moe_bandwidth_fraction is None:
            raise ValueError("kernels: give moe_families (with moe_default_family), or the single figures "
                             "moe_call_latency_s and moe_bandwidth_fraction")
        elif self.moe_default_family is not None:
            raise ValueError("kernels.moe_default_family names a family of moe_families, which is empty")

    def _with_views(self) -> "KernelFigures":
        """The single MoE figures as views of the default family (equal to what a dump of this spec holds)."""
        fam = self.moe_families[self.moe_default_family]
        views = {"moe_call_latency_s": _view(fam.latency_s, self.moe_default_family, "latency_s"),
                 "moe_bandwidth_fraction": _view(fam.bandwidth_fraction, self.moe_default_family, "bandwidth_fraction")}
        for name, view in views.items():
            given = getattr(self, name)
            if given is not None and given != view:
                raise ValueError(f"kernels.{name} is a view of moe_families.{self.moe_default_family} when "
                                 "moe_families is given; leave it out")
        return self.model_copy(update=views)

    def moe_family(self, name: Optional[str], weight: DType) -> Optional[tuple[str, MoEFamilyFigures]]:
        """(family, its figures) that times a fused-MoE call with ``weight`` weights; None without families.

        ``name`` is the engine's family (None: ``moe_default_family``). A family this part has no figures for runs
        as the default family: engines fall back to Triton where their preferred backend does not run (SGLang
        ``--moe-runner-backend auto``, vLLM's MoE oracle, vllm/model_executor/layers/fused_moe/oracle/fp8.py). A weight format the family does not take
        runs the first listed family that takes it (int4 / mxfp4 weight-only on Hopper: Marlin)."""
        if not self.moe_families:
            return None
        weight = weight.kernel_format
        chosen = name if name in self.moe_families else self.moe_default_family
        if weight not in self.moe_families[chosen].weight_formats:
            chosen = next((n for n, f in self.moe_families.items() if weight in f.weight_formats), chosen)
        return chosen, self.moe_families[chosen]

    def moe_tile_m(self, name: Optional[str], weight: DType) -> Optional[int]:
        """The rows each touched expert's block is padded to by the family ``moe_family`` resolves (what a plan
        builds ``MoEExperts`` with); None without families (the part's GEMM tile applies)."""
        family = self.moe_family(name, weight)
        return int(family[1].tile_m.value) if family is not None else None


def _view(fig: Figure, family: Optional[str], name: str) -> Figure:
    return fig.model_copy(update={"source": f"view of moe_families.{family}.{name}: {fig.source}"})


class Generation(str, Enum):
    """Accelerator architecture generation: what an engine's kernel choice depends on (``MoEKernels.family``)."""

    ampere = "ampere"            # NVIDIA SM80/SM86 (A100, A10G)
    ada = "ada"                  # NVIDIA SM89 (L4, L40S, L20, RTX 4090)
    hopper = "hopper"            # NVIDIA SM90 (H100, H200, H20, GH200)
    blackwell = "blackwell"      # NVIDIA SM100/SM103 (B200, B300, GB200) and SM120 (RTX 5090)
    cdna3 = "cdna3"              # AMD gfx942 (MI300X, MI325X)
    cdna4 = "cdna4"              # AMD gfx950 (MI355X)
    gaudi3 = "gaudi3"            # Intel Gaudi 3
    tpu = "tpu"                  # Google TPU (v5e, v6e)


class CapabilityTag(Sourced):
    """An NVIDIA part's CUDA compute capability ('10.0'), with where it is stated: engines key some defaults on its
    family (vLLM captures CUDA graphs to 1024 tokens on SM100: ``is_device_capability_family(100)``)."""

    value: str = Field(pattern=r"^[0-9]+\.[0-9]+$")

    @property
    def family(self) -> str:
        """The major version: '10' for SM100 and SM103 (B200, GB200, B300), '12' for SM120 (RTX 50)."""
        return self.value.split(".")[0]


class GenerationTag(Sourced):
    """The part's generation, with where it is stated."""

    value: Generation


class Measurement(FrozenSpec):
    """Provenance of a measured spec (written by `dsdsim probe` / `dsdsim calibrate`)."""

    date: str
    device_name: str
    torch_version: Optional[str] = None
    method: Optional[str] = None


# Plausibility ranges catch unit mistakes (GB/s where bytes/s is expected) and sparse peaks.
_BANDWIDTH_RANGE = (1e9, 1e14)         # bytes/s: a laptop CPU (~1e10) .. far beyond any HBM stack
_MEMORY_RANGE = (1e8, 1e13)            # bytes
_MAX_DENSE_PEAK = {                     # FLOP/s; the largest DENSE figure of any shipped part x 1.5
    DType.fp32: 3e14, DType.tf32: 2e15, DType.bf16: 4e15, DType.fp16: 4e15,
    DType.fp8: 8e15, DType.int8: 8e15, DType.fp4: 2.4e16,
}
# FLOP/byte. Shipped dense parts sit at 37 (H20) .. 560 (TPU v6e: 918 TFLOP/s on 1.64 TB/s); H100 SXM's SPARSE bf16
# (1979 TFLOP/s) on its 3.35 TB/s gives 591, so the limit sits between the two.
_MAX_BF16_RIDGE = 575.0


class HardwareSpec(FrozenSpec):
    """One accelerator. Scale-up link bandwidth is per GPU, one direction."""

    name: str = Field(min_length=1)
    description: str = ""
    vendor: str = ""
    generation: Optional[GenerationTag] = None       # absent (a user's or a probed spec): engines use their default
    compute_capability: Optional[CapabilityTag] = None   # NVIDIA parts: engines' per-capability defaults
    memory_bytes: Figure
    # The device memory as the driver reports it (torch.cuda.mem_get_info's total, which vLLM logs as
    # total_gpu_memory and takes gpu_memory_utilization of): below the marketed figure by the driver's reserve, and
    # in GiB where the vendor writes GB. Absent: memory_bytes (``engine_memory_bytes``).
    memory_reported_bytes: Optional[Figure] = None
    memory_bandwidth_bytes_per_s: Figure
    peak_flops_per_s: dict[DType, Figure]
    last_level_cache_bytes: Figure
    link_bandwidth_bytes_per_s: Figure
    link_latency_s: Figure
    # A full-mesh scale-up fabric (AMD Infinity Fabric, Gaudi's RoCE ports): each pair of GPUs has links of its own of
    # this bandwidth, so a collective over g GPUs of a node runs on g-1 of them
    # (``dsdsim.cost.timing.link_bytes_per_s``); absent: a switched fabric (NVLink through NVSwitch), where any group
    # gets the whole link bandwidth.
    link_peer_bandwidth_bytes_per_s: Optional[Figure] = None
    gpus_per_node: Figure
    efficiency: Efficiency
    launch_overhead_s: Figure
    eager_launch_overhead_s: Figure
    # Host time per engine step used to live here. Engine time now has its own spec (engine_specs/, --engine);
    # shipped hardware specs leave this at 0. A user spec that still carries it keeps working: it is charged on
    # every step, on top of the engine's terms (with --engine ideal, exactly as before).
    step_overhead_s: Figure = Figure(value=0.0, source="engine time lives in engine_specs/ (dsdsim --engine)",
                                     verified=Verified.derived)
    gemm_tile_m: Figure
    kernels: Optional[KernelFigures] = None           # absent: the flat roofline (no shape effects)
    # Scale-out network per GPU (one direction) and its collective latency: used once a group spans more than
    # gpus_per_node GPUs. Absent: the scale-up figures apply.
    scale_out_bandwidth_bytes_per_s: Optional[Figure] = None
    scale_out_latency_s: Optional[Figure] = None
    measured: Optional[Measurement] = None

    @field_validator("memory_bandwidth_bytes_per_s")
    @classmethod
    def _bandwidth_units(cls, f: Figure) -> Figure:
        lo, hi = _BANDWIDTH_RANGE
        if not lo <= f.value <= hi:
            raise ValueError(
                f"{f.value:g} bytes/s is outside {lo:g}..{hi:g}; write bandwidth in bytes/s (3.35 TB/s -> 3.35e+12)")
        return f

    @field_validator("memory_bytes", "memory_reported_bytes")
    @classmethod
    def _memory_units(cls, f: Optional[Figure]) -> Optional[Figure]:
        lo, hi = _MEMORY_RANGE
        if f is not None and not lo <= f.value <= hi:
            raise ValueError(f"{f.value:g} bytes is outside {lo:g}..{hi:g}; write capacity in bytes (80 GB -> 80.0e+9)")
        return f

    @field_validator("link_bandwidth_bytes_per_s", "link_peer_bandwidth_bytes_per_s", "scale_out_bandwidth_bytes_per_s")
    @classmethod
    def _link_units(cls, f: Optional[Figure]) -> Optional[Figure]:
        if f is not None and not 1e8 <= f.value <= 1e13:
            raise ValueError(f"{f.value:g} bytes/s is implausible for a link; write it in bytes/s, one direction")
        return f

    @field_validator("scale_out_latency_s")
    @classmethod
    def _latency_units(cls, f: Optional[Figure]) -> Optional[Figure]:
        if f is not None and f.value > 1e-2:
            raise ValueError(f"{f.value:g} s is implausible for a network latency; write seconds (20 us -> 20.0e-6)")
        return f

    @field_validator("gemm_tile_m", "gpus_per_node")
    @classmethod
    def _positive_int(cls, f: Figure) -> Figure:
        if f.value < 1 or f.value != int(f.value):
            raise ValueError(f"{f.value:g} must be a positive whole number")
        return f

    @model_validator(mode="after")
    def _reported_memory(self) -> "HardwareSpec":
        reported = self.memory_reported_bytes
        if reported is not None and not 0.85 <= reported.value / self.memory_bytes.value <= 1.08:
            raise ValueError(
                f"memory_reported_bytes {reported.value:g} is not within 0.85-1.08 x memory_bytes "
                f"({self.memory_bytes.value:g}); write both in bytes (a driver's 79.22 GiB -> 85.06e+9)")
        return self

    @model_validator(mode="after")
    def _dense_peaks(self) -> "HardwareSpec":
        if not self.peak_flops_per_s:
            raise ValueError("peak_flops_per_s is empty; give at least one dtype's dense peak (e.g. bf16)")
        for dtype, fig in self.peak_flops_per_s.items():
            limit = _MAX_DENSE_PEAK.get(dtype, 2.4e16)
            if fig.value <= 0:
                raise ValueError(f"peak_flops_per_s.{dtype.value} must be > 0 (omit dtypes the part lacks)")
            if fig.value > limit:
                raise ValueError(
                    f"peak_flops_per_s.{dtype.value} = {fig.value:g} FLOP/s looks sparse or mis-scaled; "
                    f"store DENSE FLOP/s (sparse / 2), below {limit:g}")
        bf16 = self.peak_flops_per_s.get(DType.bf16)
        if bf16 is not None:
            ridge = bf16.value / self.memory_bandwidth_bytes_per_s.value
            if ridge > _MAX_BF16_RIDGE:
                raise ValueError(
                    f"bf16 ridge point {ridge:.0f} FLOP/byte is implausible for a dense peak "
                    f"(dense parts: 37-560); is the bf16 peak a sparse figure, or the bandwidth too low?")
            fp8 = self.peak_flops_per_s.get(DType.fp8)
            if fp8 is not None and fp8.value > 2.05 * bf16.value:
                raise ValueError("peak_flops_per_s.fp8 is more than 2x bf16: it looks like a sparse figure")
        return self

    # --- convenient plain-number views (SI) -------------------------------------------------
    @property
    def memory_capacity(self) -> float:
        return self.memory_bytes.value

    @property
    def engine_memory_bytes(self) -> float:
        """What a serving engine sizes its memory share from: the driver's figure where the spec gives one
        (``memory_reported_bytes``), else the marketed ``memory_bytes``."""
        reported = self.memory_reported_bytes
        return reported.value if reported is not None else self.memory_bytes.value

    @property
    def bandwidth(self) -> float:
        return self.memory_bandwidth_bytes_per_s.value

    @property
    def generation_name(self) -> Optional[str]:
        """The generation as the engine specs key it (``MoEKernels.by_generation``); None when not stated."""
        return self.generation.value.value if self.generation is not None else None

    def peak(self, dtype: DType) -> float:
        """Dense peak FLOP/s for GEMMs in ``dtype``; falls back to bf16 (weight-only quantization dequantizes)."""
        key = dtype.peak_key
        if key in self.peak_flops_per_s:
            return self.peak_flops_per_s[key].value
        for fallback in (DType.bf16, DType.fp16, DType.fp32):
            if fallback in self.peak_flops_per_s:
                return self.peak_flops_per_s[fallback].value
        return max(f.value for f in self.peak_flops_per_s.values())

    def ridge_point(self, dtype: DType) -> float:
        """Arithmetic intensity (FLOP/byte) where compute and memory time are equal, at datasheet peaks."""
        return self.peak(dtype) / self.bandwidth

    def with_efficiency(self, source: str = "override", **values: float) -> "HardwareSpec":
        """A copy with some efficiencies/overheads replaced (used by calibration and --efficiency overrides).

        Keys: compute, memory, collective, attention_memory, vector_memory (fractions), launch_overhead_s,
        eager_launch_overhead_s, step_overhead_s, gemm_tile_m.
        """
        eff = self.efficiency.model_dump()
        top = {}
        for key, v in values.items():
            fig = {"value": float(v), "source": source, "verified": Verified.measured}
            if key in ("compute", "memory", "collective", "attention_memory", "vector_memory"):
                eff[key] = fig
            elif key in ("launch_overhead_s", "eager_launch_overhead_s", "step_overhead_s", "gemm_tile_m"):
                top[key] = fig
            else:
                raise SpecError(f"unknown efficiency key {key!r}; use compute, memory, collective, attention_memory, "
                                "vector_memory, gemm_tile_m or an *_overhead_s")
        data = self.model_dump()
        data["efficiency"] = eff
        data.update(top)
        return HardwareSpec.model_validate(data)

    def with_kernels(self, source: str = "override", **values: float) -> "HardwareSpec":
        """A copy with some kernel figures replaced (calibration). Keys: the scalar figures of KernelFigures
        (gemm_transition_p, kernel_floor_s, decode_attention_ramp_tokens, moe_call_latency_s, ...). With
        ``moe_families``, moe_call_latency_s and moe_bandwidth_fraction write the default family's latency_s and
        bandwidth_fraction (the figures they are views of)."""
        if self.kernels is None:
            raise SpecError(f"{self.name} has no kernels block to update")
        names = {n for n, f in KernelFigures.model_fields.items()
                 if n not in ("all_reduce", "moe_families", "moe_default_family")}
        unknown = set(values) - names
        if unknown:
            raise SpecError(f"unknown kernel figure(s) {sorted(unknown)}; use one of {sorted(names)}")
        update = {k: Figure(value=float(v), source=source, verified=Verified.measured).model_dump()
                  for k, v in values.items()}
        data = self.kernels.model_dump()
        if self.kernels.moe_families:
            family = data["moe_families"][self.kernels.moe_default_family]
            for legacy, name in _FAMILY_VIEWS.items():
                data.pop(legacy)
                if legacy in update:
                    family[name] = update.pop(legacy)
        kernels = KernelFigures.model_validate({**data, **update})
        return self.model_copy(update={"kernels": kernels})

    def scaled(self, bandwidth: float = 1.0, compute: float = 1.0, launch: float = 1.0,
               source: Optional[str] = None) -> "HardwareSpec":
        """A copy with every bandwidth fraction times ``bandwidth`` (GEMM weights, attention, vector kernels, fp8,
        fitted GEMM figures, fused-MoE families), every compute fraction times ``compute`` (dense, fp8, fitted GEMM
        figures, grouped MoE GEMMs) and both
        launch gaps times ``launch``; a scaled fraction stops at 1 (a kernel does not beat the part's peak). What
        ``dsdsim calibrate --measurements`` fits: three figures that move a whole class of kernels together.
        ``source`` (when given) is written on every changed figure."""
        def fig(f: Optional[Figure], factor: float, cap: Optional[float] = 1.0) -> Optional[Figure]:
            if f is None or factor == 1.0:
                return f
            v = f.value * factor
            update = {"value": min(v, cap) if cap is not None else v}
            if source is not None:
                update.update(source=source, verified=Verified.measured,
                              note=f"x{factor:.4g} of the spec's {f.value:.4g} ({f.source})"[:400])
            return f.model_copy(update=update)

        eff = self.efficiency
        eff = eff.model_copy(update={
            "compute": fig(eff.compute, compute), "compute_fp8": fig(eff.compute_fp8, compute),
            "memory": fig(eff.memory, bandwidth), "memory_fp8": fig(eff.memory_fp8, bandwidth),
            "attention_memory": fig(eff.attention_memory, bandwidth),
            "vector_memory": fig(eff.vector_memory, bandwidth)})
        update = {"efficiency": eff, "launch_overhead_s": fig(self.launch_overhead_s, launch, None),
                  "eager_launch_overhead_s": fig(self.eager_launch_overhead_s, launch, None)}
        kf = self.kernels
        if kf is not None:
            families = {name: fam.model_copy(update={
                "bandwidth_fraction": fig(fam.bandwidth_fraction, bandwidth),
                "lead_expert_bandwidth_fraction": fig(fam.lead_expert_bandwidth_fraction, bandwidth),
                "compute_fractions": {fmt: fig(c, compute) for fmt, c in fam.compute_fractions.items()}})
                for name, fam in kf.moe_families.items()}
            gemm = {fmt: g.model_copy(update={"compute_fraction": fig(g.compute_fraction, compute),
                                              "bandwidth_fraction": fig(g.bandwidth_fraction, bandwidth)})
                    for fmt, g in kf.gemm.items()}
            update["kernels"] = kf.model_copy(update={
                "gemm": gemm,
                "decode_attention_bandwidth_fraction": fig(kf.decode_attention_bandwidth_fraction, bandwidth),
                "decode_attention_fp8_bandwidth_fraction":
                    fig(kf.decode_attention_fp8_bandwidth_fraction, bandwidth),
                "decode_attention_fp8_head_dim_fractions":
                    {d: fig(f, bandwidth) for d, f in kf.decode_attention_fp8_head_dim_fractions.items()},
                "mla_attention_bandwidth_fraction": fig(kf.mla_attention_bandwidth_fraction, bandwidth),
                "moe_bandwidth_fraction": fig(kf.moe_bandwidth_fraction, bandwidth),
                "moe_compute_fraction": fig(kf.moe_compute_fraction, compute),
                "moe_families": families})
        return self.model_copy(update=update)


# the single MoE figures -> the default family's figures they are views of
_FAMILY_VIEWS = {"moe_call_latency_s": "latency_s", "moe_bandwidth_fraction": "bandwidth_fraction"}


@frozen
class KernelFigureOrigin:
    """Where one kernel figure of a spec was measured (``kernel_figure_origins``)."""

    name: str                               # its path in the kernels block: moe_families.triton_fused_moe.latency_s
    value: float
    measured_on: Optional[tuple[str, ...]]  # None: the spec does not say
    assumed: Optional[bool]                 # True: measured on other parts only; None: not stated
    source: str
    verified: Verified


def kernel_figure_origins(hw: HardwareSpec) -> list[KernelFigureOrigin]:
    """Every kernel figure of ``hw`` (all-reduce tiers included; the single MoE views left out where families
    give them) and whether it was measured on this part or assumed from others."""
    kf = hw.kernels
    if kf is None:
        return []
    figures: list[tuple[str, float, Optional[tuple[str, ...]], str, Verified]] = []
    for name in KernelFigures.model_fields:
        fig = getattr(kf, name)
        if isinstance(fig, Figure) and not (kf.moe_families and name in _FAMILY_VIEWS):
            figures.append((name, fig.value, fig.measured_on, fig.source, fig.verified))
    for head_dim, fig in sorted(kf.decode_attention_fp8_head_dim_fractions.items()):
        figures.append((f"decode_attention_fp8_head_dim_fractions.{head_dim}", fig.value, fig.measured_on,
                        fig.source, fig.verified))
    for family, figs in kf.moe_families.items():
        for name, fig in figs.figures().items():
            figures.append((f"moe_families.{family}.{name}", fig.value, fig.measured_on, fig.source, fig.verified))
    for tier in kf.all_reduce:
        figures.append((f"all_reduce.{tier.algorithm.value}.latency_s", tier.latency_s, tier.measured_on,
                        tier.source, tier.verified))
    return [KernelFigureOrigin(name, value, on, None if on is None else hw.name not in on, source, verified)
            for name, value, on, source, verified in figures]


def hardware_from_dict(data: object, where: str = "hardware spec") -> HardwareSpec:
    from dsdsim.specs.io import validated

    return validated(HardwareSpec, data, where)


def load_hardware(path: str | Path) -> HardwareSpec:
    """Load a hardware spec from a YAML or JSON file."""
    from dsdsim.specs.io import read_structured

    path = Path(path)
    return hardware_from_dict(read_structured(path), where=str(path.name))
