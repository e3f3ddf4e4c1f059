"""Measure a device's ceilings and write them as a HardwareSpec (``dsdsim probe``).

What is measured (all through dsdsim.bench.timing):
- memory bandwidth: a large device-to-device copy, counting read + write bytes (2 x buffer);
- dense GEMM throughput per dtype the device runs (CPU: fp32, bf16, fp16; CUDA: fp32 without TF32, tf32,
  bf16, fp16), FLOPs = 2*n^3, best of two square sizes;
- per-kernel launch overhead: a one-element add (eager); on CUDA also the same add replayed from a CUDA graph;
- on CUDA with >= 2 GPUs: all-reduce bus bandwidth and latency between two GPUs (else the link is a stated
  placeholder, marked unverified).
The measured peaks ARE the ceilings, so efficiencies start at 1.0 (measured). Run ``python3 -m
dsdsim.bench.probe --device cpu --output spec.yaml``.

Sweeps (raw points, not spec figures; written beside the spec as ``<spec>.sweeps.json``, see ``sweeps_path``):
- gemm_m: x[M, k] @ W[n, k]^T on a model's real layer shapes (llama-3.1-8b qkv, o, gate_up, down, taken from
  dsdsim.cost.layers) over M = 1..1024, weights cycled through enough sets to come from DRAM;
- decode_attention: GQA (llama-3.1-8b heads, q = 1 and 4, through shapes.attend and GQA-packed) and MLA-like
  (deepseek-v3 latent 576 / value 512, q = 1) over the KV context; the SDPA math backend is forbidden on CUDA;
- kernel_floor: a one-element add and a 1x128x128 GEMM, eager and replayed from a CUDA graph;
- copy: copy bandwidth over buffer sizes.
GPU points are timed under CUDA graphs (timing.time_kernels); each point and each sweep fails soft: an error
is recorded in the sweep and the probe carries on. The SM clock is logged before and after each sweep.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from dsdsim.bench.timing import (DEFAULT_CPU_THREADS, Timing, cpu_threads, device_name, last_level_cache_bytes,
                                 on_device, random_tensor, rotation_sets, sm_clock_mhz, time_fn, time_graph,
                                 time_kernels, torch_dtype)
from dsdsim.records import frozen
from dsdsim.specs.hardware_yaml import write_spec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.units import DType

Progress = Optional[Callable[[str], None]]

# Placeholders for what one device cannot measure. Stated, not hidden: each is marked unverified in the spec.
_LINK_PLACEHOLDER_BYTES_PER_S = 10e9      # a PCIe-4 x16-class link, one direction
_LINK_LATENCY_PLACEHOLDER_S = 20e-6


@dataclass
class Sweep:
    """One sweep's raw points (dicts of SI figures: seconds, FLOP/s, bytes/s), what failed, and the SM clock.

    ``errors`` holds "label: ExceptionType: message" per failed point (or for the whole sweep); ``skipped`` the
    labels of points left out when the sweep ran past its wall-clock budget."""

    name: str
    points: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    wall_s: float = 0.0
    sm_clock_mhz_before: Optional[float] = None
    sm_clock_mhz_after: Optional[float] = None

    def to_json(self) -> dict:
        return _finite(asdict(self))


@frozen
class ProbeResult:
    """Raw measurements behind a probed spec."""

    device: str
    device_name: str
    date: str
    torch_version: str
    memory_bytes: float
    cache_bytes: float
    bandwidth_bytes_per_s: float
    bandwidth_timing: Timing
    peaks_flops_per_s: dict[DType, float]
    gemm_sizes: dict[DType, int]
    eager_launch_s: float
    graph_launch_s: Optional[float]
    gpus: int
    threads: int
    link_bytes_per_s: Optional[float]
    link_latency_s: Optional[float]
    sweeps: tuple[Sweep, ...] = ()
    errors: tuple[str, ...] = ()                 # soft failures of the spec measurements (graph launch, links)
    sm_clock_mhz_before: Optional[float] = None
    sm_clock_mhz_after: Optional[float] = None
    wall_s: float = 0.0
    quick: bool = False


def _is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def measure_bandwidth(device: str, nbytes: Optional[int] = None) -> tuple[float, Timing]:
    """Streaming bandwidth of dst.copy_(src): 2 * nbytes moved per call (bytes/s)."""
    cache = last_level_cache_bytes(device)
    if nbytes is None:
        nbytes = int(max(4 * cache, (2 << 30) if _is_cuda(device) else (512 << 20)))
    n = nbytes // 4
    src = random_tensor((n,), torch.float32, device)
    dst = torch.empty_like(src)
    t = time_fn(lambda a, b: b.copy_(a), lambda i: (src, dst), device, warmup=2,
                repeats=10 if _is_cuda(device) else 6)
    return 2.0 * n * 4 / t.median_s, t


_GEMM_BUDGET_S = 2.0          # seconds of timed calls per square GEMM size (time_fn's budget)


def _gemm_rate(device: str, dtype: torch.dtype, n: int, tf32: bool = False) -> float:
    a = random_tensor((n, n), dtype, device)
    b = random_tensor((n, n), dtype, device)
    prev = torch.backends.cuda.matmul.allow_tf32 if _is_cuda(device) else None
    try:
        if prev is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        t = time_fn(lambda x, y: x @ y, lambda i: (a, b), device, warmup=2, repeats=8 if _is_cuda(device) else 4,
                    budget_s=_GEMM_BUDGET_S)
    finally:
        if prev is not None:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return 2.0 * n ** 3 / t.median_s


def measure_gemm_peaks(device: str, quick: bool = False) -> tuple[dict[DType, float], dict[DType, int]]:
    """Best FLOP/s over two square sizes per dtype the device runs; dtypes that fail are left out.

    ``quick`` on a CPU: one small size per dtype (fp16 GEMMs run at ~1 GFLOP/s on many CPUs)."""
    if quick and not _is_cuda(device):
        plan = [(DType.fp32, torch.float32, False, (512,)), (DType.bf16, torch.bfloat16, False, (512,)),
                (DType.fp16, torch.float16, False, (256,))]
    elif _is_cuda(device):
        plan = [(DType.fp32, torch.float32, False, (4096, 8192)), (DType.tf32, torch.float32, True, (4096, 8192)),
                (DType.bf16, torch.bfloat16, False, (4096, 8192)), (DType.fp16, torch.float16, False, (4096, 8192))]
    else:
        plan = [(DType.fp32, torch.float32, False, (1024, 2048)), (DType.bf16, torch.bfloat16, False, (1024, 2048)),
                (DType.fp16, torch.float16, False, (1024,))]
    peaks: dict[DType, float] = {}
    sizes: dict[DType, int] = {}
    for key, dtype, tf32, ns in plan:
        for n in ns:
            # a larger size whose call would take longer than the timing budget at the rate just measured is not
            # timed: a CPU without bf16 / fp16 instructions (~1 GFLOP/s) would spend minutes on n = 2048
            if key in peaks and 2.0 * n ** 3 / peaks[key] > _GEMM_BUDGET_S:
                break
            try:
                rate = _gemm_rate(device, dtype, n, tf32)
            except (RuntimeError, TypeError):
                break
            if rate > peaks.get(key, 0.0):
                peaks[key], sizes[key] = rate, n
    return peaks, sizes


_LAUNCH_BURST = 200          # one-element adds per timed call


def _add_burst(t: torch.Tensor) -> None:
    for _ in range(_LAUNCH_BURST):
        t.add_(1.0)


def measure_eager_launch(device: str) -> float:
    """Seconds per one-element add issued eagerly (host dispatch + launch), median over 200-call bursts."""
    x = torch.ones(1, device=device)
    return time_fn(_add_burst, lambda i: (x,), device, warmup=2, repeats=10).median_s / _LAUNCH_BURST


def measure_graph_launch(device: str) -> float:
    """Seconds per one-element add replayed from a CUDA graph of 200 adds (raises RuntimeError off CUDA)."""
    if not _is_cuda(device):
        raise RuntimeError("CUDA graphs need a CUDA device")
    with on_device(device):
        x = torch.ones(1, device=device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _add_burst(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _add_burst(x)
        return time_fn(lambda: graph.replay(), lambda i: (), device, warmup=2, repeats=10).median_s / _LAUNCH_BURST


def measure_all_reduce(device: str) -> tuple[Optional[float], Optional[float]]:
    """(bus bandwidth bytes/s one direction, latency s) of a two-GPU all-reduce, or (None, None) with < 2 GPUs.

    Runs in spawned processes through dsdsim.bench.distributed (NCCL)."""
    if not _is_cuda(device) or torch.cuda.device_count() < 2:
        return None, None
    from dsdsim.bench.distributed import all_reduce_sweep

    sweep = all_reduce_sweep(backend="nccl", world_size=2, sizes_bytes=(8 << 10, 256 << 20))
    small, large = sweep[0], sweep[-1]
    # ring all-reduce: each rank sends 2(n-1)/n of the buffer; bus bandwidth = that / time
    busbw = 2.0 * (2 - 1) / 2 * large.bytes / (large.seconds - small.seconds)
    return busbw, small.seconds


def _memory_bytes(device: str) -> float:
    if _is_cuda(device):
        return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def run_measurements(device: str, progress: Progress = None, threads: Optional[int] = DEFAULT_CPU_THREADS,
                     sweeps: bool = False, quick: bool = False) -> ProbeResult:
    """All probe measurements; on a CPU with ``threads`` torch threads (validate must use the same).

    ``sweeps`` adds the raw sweeps (GEMM M, decode attention, kernel floor, copy sizes); ``quick`` shrinks the
    CPU measurements and every sweep (for tests). Everything runs with ``device`` current (``cuda:1`` times GPU 1).
    """
    dev = str(torch.device(device))
    with cpu_threads(dev, threads), on_device(dev):
        return _run_measurements(dev, progress, sweeps, quick)


def _run_measurements(dev: str, progress: Progress, sweeps: bool, quick: bool) -> ProbeResult:
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    clock0 = sm_clock_mhz(dev)
    say(f"memory bandwidth (SM clock {_mhz(clock0)})")
    bw, bw_t = measure_bandwidth(dev, _quick_copy_bytes(dev) if quick else None)
    say("GEMM peaks")
    peaks, sizes = measure_gemm_peaks(dev, quick)
    say("launch overhead")
    errors: list[str] = []
    eager = measure_eager_launch(dev)
    graphed = _soft(errors, "graph launch", measure_graph_launch, dev) if _is_cuda(dev) else None
    say("links")
    link, latency = _soft(errors, "all-reduce", measure_all_reduce, dev) or (None, None)
    done = run_sweeps(dev, sweep_plan(dev, quick), progress, eager, graphed) if sweeps else ()
    clock1 = sm_clock_mhz(dev)
    return ProbeResult(
        device=dev, device_name=device_name(dev), date=_dt.date.today().isoformat(), torch_version=torch.__version__,
        memory_bytes=_memory_bytes(dev), cache_bytes=last_level_cache_bytes(dev), bandwidth_bytes_per_s=bw,
        bandwidth_timing=bw_t, peaks_flops_per_s=peaks, gemm_sizes=sizes, eager_launch_s=eager,
        graph_launch_s=graphed, gpus=torch.cuda.device_count() if _is_cuda(dev) else 1,
        threads=torch.get_num_threads(),
        link_bytes_per_s=link, link_latency_s=latency, sweeps=tuple(done), errors=tuple(errors),
        sm_clock_mhz_before=clock0, sm_clock_mhz_after=clock1, wall_s=time.perf_counter() - t0, quick=quick)


def _quick_copy_bytes(device: str) -> Optional[int]:
    """A smaller copy for quick CPU probes (still 2x the last-level cache); GPUs keep the full size."""
    return None if _is_cuda(device) else int(max(2 * last_level_cache_bytes(device), 128 << 20))


def _soft(errors: list[str], label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None with "label: Type: message" appended to ``errors`` when it raises."""
    try:
        return fn(*args)
    except Exception as exc:                  # noqa: BLE001 (fail soft: one measurement must not end the probe)
        errors.append(_error(label, exc))
        _recover(args[0] if args and isinstance(args[0], str) else "cpu")
        return None


def spec_from_probe(r: ProbeResult, name: Optional[str] = None) -> HardwareSpec:
    """A full HardwareSpec from measurements: measured figures marked ``measured``, placeholders ``unverified``."""
    src = f"dsdsim probe {r.date} torch {r.torch_version} on {r.device_name}"
    cuda = r.device.startswith("cuda")

    def fig(value: float, note: Optional[str] = None, verified: str = "measured", source: str = src) -> dict:
        out = {"value": float(f"{value:.4g}"), "source": source, "verified": verified}
        if note:
            out["note"] = note
        return out

    peaks = {d.value: fig(v, f"square GEMM n={r.gemm_sizes[d]}, 2n^3 FLOP / median time"
                          + ("; TF32 disabled" if cuda and d is DType.fp32 else ""))
             for d, v in r.peaks_flops_per_s.items()}
    peer = None
    if r.link_bytes_per_s is not None:
        link = fig(r.link_bytes_per_s, "2-GPU NCCL all-reduce bus bandwidth, 256 MiB")
        latency = fig(r.link_latency_s, "2-GPU NCCL all-reduce of 8 KiB")
        collective = fig(1.0, "the link figure is the measured all-reduce bus bandwidth")
        if _vendor(r.device_name) == "amd" and r.gpus > 2:
            # an AMD Instinct platform links each GPU to each other one (a full mesh, one Infinity Fabric link a
            # peer): two GPUs measure one link; a group of g runs on g-1 (HardwareSpec.link_peer_bandwidth_bytes_per_s)
            peer = fig(r.link_bytes_per_s, "2-GPU NCCL all-reduce bus bandwidth, 256 MiB: one link of the full mesh")
            link = fig(r.link_bytes_per_s * (r.gpus - 1), f"{r.gpus - 1} peer links of the measured one: AMD Instinct "
                       "platforms link each GPU to each other (full mesh)", "derived")
    else:
        link = fig(_LINK_PLACEHOLDER_BYTES_PER_S, "placeholder: one device, no link to measure (PCIe-4 x16 class)",
                   "unverified", "dsdsim probe placeholder")
        latency = fig(_LINK_LATENCY_PLACEHOLDER_S, "placeholder: one device, no link to measure", "unverified",
                      "dsdsim probe placeholder")
        collective = fig(0.8, "placeholder: no collective measured", "unverified", "dsdsim probe placeholder")
    eager = fig(r.eager_launch_s, "one-element add, eager, median over 200-call bursts")
    if r.graph_launch_s is not None:
        graphed = fig(r.graph_launch_s, "one-element add replayed from a CUDA graph")
    elif cuda:
        graphed = fig(r.eager_launch_s, "CUDA-graph replay failed in the probe: eager figure instead; see the "
                      "probe's errors", "unverified")
    else:
        graphed = fig(r.eager_launch_s, "no CUDA graphs on this device: same as eager")
    if cuda:
        tile = fig(64.0 if _sm_major(r.device) >= 9 else 16.0, "wgmma M=64 (sm90+) / mma M=16; `dsdsim calibrate` "
                   "fits the effective tile", "derived", "NVIDIA PTX ISA (wgmma .m64, mma .m16)")
    else:
        tile = fig(1.0, "CPU GEMMs do not pad the row count to a tile")
    host = "per-step host work of a serving engine is not probed; a bare torch loop has none; `dsdsim calibrate` fits it"
    data = {
        "name": name or _slug(r.device_name, r.device),
        "description": f"{r.device_name}, measured by dsdsim probe",
        "vendor": _vendor(r.device_name),
        "memory_bytes": fig(r.memory_bytes, "device memory reported by the driver" if cuda else "physical RAM"),
        **({"memory_reported_bytes": fig(r.memory_bytes, "torch.cuda.get_device_properties().total_memory: what "
                                         "an engine's memory share is taken of")} if cuda else {}),
        "memory_bandwidth_bytes_per_s": fig(
            r.bandwidth_bytes_per_s,
            f"copy of {_mib(r.bandwidth_bytes_per_s * r.bandwidth_timing.median_s / 2)} MiB, read + write counted"),
        "peak_flops_per_s": peaks,
        "last_level_cache_bytes": fig(r.cache_bytes, "L2 size reported by the driver" if cuda else "sysfs cache size"),
        "link_bandwidth_bytes_per_s": link,
        **({"link_peer_bandwidth_bytes_per_s": peer} if peer is not None else {}),
        "link_latency_s": latency,
        "gpus_per_node": fig(max(1, r.gpus), "devices visible to torch"),
        "efficiency": {
            "compute": fig(1.0, "peaks are the measured GEMM ceilings; `dsdsim calibrate` fits the achieved fraction"),
            "memory": fig(1.0, "bandwidth is the measured copy ceiling; `dsdsim calibrate` fits the achieved fraction"),
            "collective": collective,
        },
        "launch_overhead_s": graphed,
        "eager_launch_overhead_s": eager,
        "step_overhead_s": fig(0.0, host, "unverified", "dsdsim probe placeholder"),
        "gemm_tile_m": tile,
        **({"kernels": kernels} if (kernels := _kernels_block(r, graphed["value"], fig)) else {}),
        "measured": {"date": r.date, "device_name": r.device_name, "torch_version": r.torch_version,
                     "method": "dsdsim probe: copy bandwidth, square GEMMs per dtype, one-element-add launches"
                               + ("" if cuda else f"; {r.threads} torch CPU thread(s)")
                               + (f"; raw sweeps ({', '.join(w.name for w in r.sweeps)}) in the .sweeps.json "
                                  "file beside this spec" if r.sweeps else "")},
    }
    return HardwareSpec.model_validate(data)


REFERENCE_KERNELS_SPEC = "h100-sxm"     # where the figures the probe cannot measure come from (marked unverified)


def _kernels_block(r: ProbeResult, launch_s: float, fig) -> Optional[dict]:
    """The spec's kernel-shape figures fitted to the sweeps (dsdsim.fit.kernels); the MLA and fused-MoE
    figures, which need kernels the probe does not run, from the reference spec, marked unverified. None
    without sweeps or when the floor, GEMM or attention fits are missing."""
    from dsdsim.fit.kernels import NOT_PROBED, KernelFigureFit
    from dsdsim.specs.catalog import load_hardware

    if not r.sweeps:
        return None
    peak = r.peaks_flops_per_s.get(DType.bf16) or max(r.peaks_flops_per_s.values(), default=0.0)
    fitted = KernelFigureFit(peak, r.bandwidth_bytes_per_s, launch_s, graphs=r.device.startswith("cuda")
                             and r.graph_launch_s is not None).fit({w.name: w.points for w in r.sweeps}).figures_
    needed = ("kernel_floor_s", "gemm_transition_p", "decode_attention_bandwidth_fraction",
              "decode_attention_ramp_tokens")
    if not all(k in fitted for k in needed):
        return None
    ref = load_hardware(REFERENCE_KERNELS_SPEC).kernels
    block = {k: fig(v, f"fitted to the probe's sweeps: {how}") for k, (v, how) in fitted.items()}
    block["decode_attention_bandwidth_fraction"]["value"] = min(block["decode_attention_bandwidth_fraction"]["value"], 1.2)
    for k in NOT_PROBED:
        f = getattr(ref, k)
        block[k] = {"value": f.value, "source": f.source, "verified": "unverified",
                    "note": f"not measured by the probe (needs a kernel it does not run): {REFERENCE_KERNELS_SPEC}'s "
                            "figure; `dsdsim calibrate` on a validation fits the MoE ones"}
    return block


def probe(device: str = "cpu", name: Optional[str] = None, progress: Progress = None,
          threads: Optional[int] = DEFAULT_CPU_THREADS, quick: bool = False) -> HardwareSpec:
    """Measure ``device`` ('cpu', 'cuda', 'cuda:1') and return its HardwareSpec (CPU: with ``threads`` threads).

    No sweeps (they are not spec figures): ``run_probe`` runs them and writes them beside the spec."""
    return spec_from_probe(run_measurements(device, progress, threads, quick=quick), name)


def run_probe(device: str = "cpu", output: str | Path = "probe.yaml", name: Optional[str] = None,
              progress: Progress = None, threads: Optional[int] = DEFAULT_CPU_THREADS, sweeps: bool = True,
              quick: bool = False, sweeps_output: Optional[str | Path] = None) -> Path:
    """Probe ``device`` and write its spec to ``output``; returns the spec's path (CLI entry point).

    With ``sweeps`` the raw sweeps go to ``sweeps_output`` (default ``sweeps_path(output)``), written BEFORE the
    spec so that they survive a spec that fails validation."""
    r = run_measurements(device, progress, threads, sweeps=sweeps, quick=quick)
    if sweeps:
        write_sweeps(r, sweeps_output or sweeps_path(output), spec_file=Path(output).name,
                     name=name or _slug(r.device_name, r.device))
    spec = spec_from_probe(r, name)
    return write_spec(spec, output, header=f"{spec.description}.\nWritten by `dsdsim probe`; all SI units.")


def sweeps_path(spec_path: str | Path) -> Path:
    """Where the sweeps of the spec at ``spec_path`` go: ``h200.yaml`` -> ``h200.sweeps.json``."""
    p = Path(spec_path)
    return p.with_name(f"{p.stem if p.suffix in ('.yaml', '.yml', '.json') else p.name}.sweeps.json")


def sweeps_json(r: ProbeResult, spec_file: Optional[str] = None, name: Optional[str] = None) -> dict:
    """The sidecar document: provenance, the spec measurements' soft errors, and every sweep's raw points."""
    return _finite({
        "format": "dsdsim-probe-sweeps/1",
        "spec_file": spec_file, "name": name, "device": r.device, "device_name": r.device_name, "date": r.date,
        "torch_version": r.torch_version, "cuda_version": torch.version.cuda, "threads": r.threads,
        "quick": r.quick, "wall_s": r.wall_s, "cache_bytes": r.cache_bytes,
        "sm_clock_mhz": {"before": r.sm_clock_mhz_before, "after": r.sm_clock_mhz_after},
        "spec_measurements": {"bandwidth_bytes_per_s": r.bandwidth_bytes_per_s,
                              "peaks_flops_per_s": {d.value: v for d, v in r.peaks_flops_per_s.items()},
                              "eager_launch_s": r.eager_launch_s, "graph_launch_s": r.graph_launch_s,
                              "errors": list(r.errors)},
        "sweeps": {w.name: w.to_json() for w in r.sweeps},
    })


def write_sweeps(r: ProbeResult, path: str | Path, spec_file: Optional[str] = None,
                 name: Optional[str] = None) -> Path:
    """Write ``sweeps_json(r)`` to ``path`` (atomically); returns the path."""
    from dsdsim.files import to_json, write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, to_json(sweeps_json(r, spec_file, name), indent=1) + "\n")
    return path


# --- sweeps: raw points beside the spec ------------------------------------------------------------------

GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
GEMM_LAYERS = ("qkv", "o", "gate_up", "down")
ATTENTION_CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)
_SDPA_FUSED = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")    # never MATH on a GPU


@frozen
class SweepPlan:
    """Sizes and budgets of the sweeps on one device class (``sweep_plan``)."""

    gemm_m: tuple[int, ...]                # rows M of x[M, k] @ W[n, k]^T
    gemm_layers: tuple[str, ...]           # GEMMs of one decoder layer, by the cost model's op names
    dtype: DType                           # element type of GEMMs and attention
    attention_contexts: tuple[int, ...]    # keys attended per sequence (the q new tokens included)
    attention_batch: int
    attention_q_lens: tuple[int, ...]      # GQA query tokens per sequence (MLA: q = 1)
    copy_bytes: tuple[int, ...]            # copy sweep buffer sizes
    point_budget_s: float                  # timed seconds per point (at least 3 timed calls)
    sweep_budget_s: float                  # wall seconds per sweep; later points are skipped
    max_rotation_bytes: float              # memory for the rotated input sets of one point
    gemm_model: str = "llama-3.1-8b"
    gqa_model: str = "llama-3.1-8b"
    mla_model: str = "deepseek-v3"
    repeats: int = 20
    profile_kernels: bool = True           # CUDA: kernel names of the first point of each series


def sweep_plan(device: str, quick: bool = False) -> SweepPlan:
    """Full sizes on CUDA (bf16; each sweep capped at 15 s, a few seconds each on an H200); reduced fp32 sizes
    on a CPU; ``quick``: fewer still (CPU: about 3 s of sweeps)."""
    if _is_cuda(device):
        return SweepPlan(
            gemm_m=(1, 16, 128, 1024) if quick else GEMM_M, gemm_layers=GEMM_LAYERS, dtype=DType.bf16,
            attention_contexts=(1024, 8192, 32768) if quick else ATTENTION_CONTEXTS, attention_batch=8,
            attention_q_lens=(1, 4), copy_bytes=(32 << 20, 256 << 20, 1 << 30, 4 << 30), point_budget_s=0.05,
            sweep_budget_s=8.0 if quick else 15.0, max_rotation_bytes=4e9)
    if quick:
        return SweepPlan(
            gemm_m=(1, 8, 64, 256), gemm_layers=("qkv", "o"), dtype=DType.fp32, attention_contexts=(256, 1024),
            attention_batch=2, attention_q_lens=(1, 4), copy_bytes=(16 << 20, 64 << 20), point_budget_s=0.02,
            sweep_budget_s=3.0, max_rotation_bytes=256e6, profile_kernels=False)
    return SweepPlan(                      # a few seconds in all on one CPU thread
        gemm_m=(1, 8, 64), gemm_layers=GEMM_LAYERS, dtype=DType.fp32, attention_contexts=(512, 2048),
        attention_batch=4, attention_q_lens=(1, 4), copy_bytes=(16 << 20, 64 << 20), point_budget_s=0.03,
        sweep_budget_s=5.0, max_rotation_bytes=512e6, profile_kernels=False)


def run_sweeps(device: str, plan: SweepPlan, progress: Progress = None, eager_launch_s: Optional[float] = None,
               graph_launch_s: Optional[float] = None) -> tuple[Sweep, ...]:
    """Kernel floor, GEMM M-sweep, decode attention, copy sizes; each fails soft into its own Sweep."""
    runs = [("kernel_floor", lambda: sweep_kernel_floor(device, plan, progress, eager_launch_s, graph_launch_s)),
            ("gemm_m", lambda: sweep_gemm_m(device, plan, progress)),
            ("decode_attention", lambda: sweep_decode_attention(device, plan, progress)),
            ("copy", lambda: sweep_copy(device, plan, progress))]
    out = []
    with on_device(device):
        for name, run in runs:
            try:
                out.append(run())
            except Exception as exc:          # noqa: BLE001 (each sweep catches its own; this is the last net)
                out.append(Sweep(name, errors=[_error(name, exc)]))
            _recover(device)
    return tuple(out)


# --- sweep plumbing ---------------------------------------------------------------------------------------

@contextlib.contextmanager
def _sweep_scope(sweep: Sweep, device: str, progress: Progress):
    """Progress lines, SM clock and wall time around one sweep; an exception ends the sweep, not the probe."""
    say = progress or (lambda _msg: None)
    sweep.sm_clock_mhz_before = sm_clock_mhz(device)
    say(f"sweep {sweep.name} (SM clock {_mhz(sweep.sm_clock_mhz_before)})")
    t0 = time.perf_counter()
    try:
        yield
    except Exception as exc:                  # noqa: BLE001 (fail soft)
        sweep.errors.append(_error(sweep.name, exc))
        _recover(device)
    finally:
        sweep.wall_s = time.perf_counter() - t0
        sweep.sm_clock_mhz_after = sm_clock_mhz(device)
        say(f"sweep {sweep.name}: {len(sweep.points)} points, {len(sweep.errors)} errors, {len(sweep.skipped)} "
            f"skipped, {sweep.wall_s:.1f} s (SM clock {_mhz(sweep.sm_clock_mhz_after)})")
        for err in sweep.errors[:3]:
            say(f"  {sweep.name} error: {err}")


def _deadline(seconds: float) -> Callable[[], bool]:
    """A callable that turns True once ``seconds`` of wall time have passed."""
    end = time.perf_counter() + seconds
    return lambda: time.perf_counter() > end


def _point(sweep: Sweep, label: str, device: str, over: Callable[[], bool], measure: Callable[[], dict]) -> None:
    """Append ``measure()`` to the sweep's points; on an exception record it; past the budget, skip."""
    if over():
        sweep.skipped.append(label)
        return
    try:
        sweep.points.append(measure())
    except Exception as exc:                  # noqa: BLE001 (fail soft: one point must not end the sweep)
        sweep.errors.append(_error(label, exc))
        _recover(device)


def _timing_fields(t: Timing) -> dict:
    return {"seconds": t.median_s, "p10_s": t.p10_s, "p90_s": t.p90_s, "repeats": t.repeats, "rotate": t.rotate,
            "mode": t.mode}


def _recover(device: str) -> None:
    """After a failed CUDA measurement: drain the stream and return cached blocks (errors here are ignored)."""
    if not _is_cuda(device):
        return
    try:
        torch.cuda.synchronize(torch.device(device))
        torch.cuda.empty_cache()
    except Exception:                         # noqa: BLE001 (a sticky CUDA error shows up in the next point)
        pass


def _error(label: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{label}: {type(exc).__name__}: {text[:400]}"


def _mhz(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.0f} MHz"


def _finite(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, tuples -> lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def kernel_names(fn: Callable[..., Any], args: Sequence[Any], device: str) -> list[str]:
    """Distinct CUDA kernels one call of ``fn(*args)`` launches, by the profiler (memcpy/memset left out).

    Says which library kernel ran (cuBLAS/CUTLASS GEMM tile, flash / efficient / cuDNN attention, split-KV)."""
    if not _is_cuda(device):
        raise RuntimeError("kernel names need the CUDA profiler")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with on_device(device), torch.inference_mode():
        fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA
             and not e.name.lower().startswith(("memset", "memcpy"))]
    return sorted({n[:160] for n in names})


def _with_kernels(point: dict, plan: SweepPlan, first: bool, fn: Callable[..., Any], args: Sequence[Any],
                  device: str) -> dict:
    """Add ``kernels`` (or ``kernels_error``) to the first point of a series on CUDA."""
    if first and plan.profile_kernels and _is_cuda(device):
        try:
            point["kernels"] = kernel_names(fn, args, device)
        except Exception as exc:              # noqa: BLE001 (the timing stands without the names)
            point["kernels_error"] = _error("kernels", exc)
    return point


# --- GEMM M-sweep -----------------------------------------------------------------------------------------

def layer_gemm_shapes(model: str, names: Sequence[str] = GEMM_LAYERS) -> dict[str, tuple[int, int]]:
    """(k, n) of the named GEMMs of the model's first decoder layer, from dsdsim.cost.layers (the cost model's
    own shapes): llama-3.1-8b gives qkv (4096, 6144), o (4096, 4096), gate_up (4096, 28672), down (14336, 4096)."""
    from dsdsim.cost.layers import layer_ops
    from dsdsim.cost.ops import OpKind
    from dsdsim.specs.catalog import load_model

    spec = load_model(model)
    shapes = {}
    for op in layer_ops(spec.layers[0], spec.hidden_size, 1, 1, 1, _pass_context()):
        short = op.name.rsplit(".", 1)[-1]
        if op.kind is OpKind.gemm and short in names:
            shapes[short] = (int(op.shape.k), int(op.shape.n))
    missing = [n for n in names if n not in shapes]
    if missing:
        raise ValueError(f"{model}: no GEMM named {', '.join(missing)} in its first layer (has {', '.join(shapes)})")
    return {n: shapes[n] for n in names}


def _pass_context():
    from dsdsim.cost.layers import PassContext

    bf16 = DType.bf16
    return PassContext(tp=1, ep=1, w_dtype=bf16, expert_dtype=bf16, kv_dtype=bf16, act_dtype=bf16, tile_m=1)


def sweep_gemm_m(device: str, plan: SweepPlan, progress: Progress = None) -> Sweep:
    """x[M, k] @ W[n, k]^T (F.linear) per layer shape and M: seconds, FLOP/s (2Mkn) and bytes/s (W + x + y).

    Weights cycle through enough sets (>= 2x the last-level cache) to come from DRAM, as a model's do."""
    sweep = Sweep("gemm_m", notes={"model": plan.gemm_model, "dtype": plan.dtype.value, "op": "F.linear(x, W)",
                                   "bytes": "weights k*n + x m*k + y m*n elements"})
    with _sweep_scope(sweep, device, progress):
        over = _deadline(plan.sweep_budget_s)
        dtype = torch_dtype(plan.dtype)
        cache = last_level_cache_bytes(device)
        for layer, (k, n) in layer_gemm_shapes(plan.gemm_model, plan.gemm_layers).items():
            if over():
                sweep.skipped += [f"{layer} m={m}" for m in plan.gemm_m]
                continue
            if progress:
                progress(f"  gemm_m {layer} k={k} n={n}")
            sets = rotation_sets(k * n * dtype.itemsize, cache, max_total_bytes=plan.max_rotation_bytes)
            weights = [random_tensor((n, k), dtype, device, scale=k ** -0.5) for _ in range(sets)]
            for m in plan.gemm_m:
                _point(sweep, f"{layer} m={m}", device, over,
                       lambda: _gemm_point(device, plan, layer, m, k, n, weights, first=m == plan.gemm_m[0]))
            del weights
    return sweep


def _gemm_point(device: str, plan: SweepPlan, layer: str, m: int, k: int, n: int, weights: list[torch.Tensor],
                first: bool) -> dict:
    dtype = weights[0].dtype
    xs = [random_tensor((m, k), dtype, device) for _ in weights]
    t = time_kernels(F.linear, lambda i: (xs[i], weights[i]), device, rotate=len(weights), repeats=plan.repeats,
                     budget_s=plan.point_budget_s)
    flops = 2.0 * m * k * n
    nbytes = float(k * n + m * k + m * n) * dtype.itemsize
    point = {"layer": layer, "m": m, "k": k, "n": n, "dtype": plan.dtype.value, **_timing_fields(t),
             "flops": flops, "bytes": nbytes, "flops_per_s": flops / t.median_s, "bytes_per_s": nbytes / t.median_s}
    return _with_kernels(point, plan, first, F.linear, (xs[0], weights[0]), device)


# --- decode attention -------------------------------------------------------------------------------------

def attention_shape(model: str) -> dict:
    """heads, qk_dim, v_dim, kv_elements_per_token (and kv_heads for GQA) of the model's first layer's
    attention, from dsdsim.cost.layers: llama-3.1-8b 32 / 8 heads, d 128; deepseek-v3 (MLA) 128 heads over a
    576-element latent (512 + 64 rope), values 512."""
    from dsdsim.cost.layers import layer_ops
    from dsdsim.cost.ops import OpKind
    from dsdsim.specs.catalog import load_model

    spec = load_model(model)
    for op in layer_ops(spec.layers[0], spec.hidden_size, 1, 1, 1, _pass_context()):
        if op.kind is OpKind.attention:
            s = op.shape._asdict()
            out = {key: int(s[key]) for key in ("heads", "qk_dim", "v_dim", "kv_elements_per_token")}
            out["mla"] = out["kv_elements_per_token"] == out["qk_dim"] and out["v_dim"] <= out["qk_dim"]
            out["kv_heads"] = 1 if out["mla"] else max(1, out["kv_elements_per_token"] // (2 * out["qk_dim"]))
            return out
    raise ValueError(f"{model}: no attention operator in its first layer")


@contextlib.contextmanager
def no_math_sdpa(device: str):
    """On CUDA, let scaled_dot_product_attention use only fused kernels (flash, efficient, cuDNN): the math
    backend materialises the score matrix and must never be what a decode timing measures."""
    if not _is_cuda(device):
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([getattr(SDPBackend, name) for name in _SDPA_FUSED if hasattr(SDPBackend, name)]):
        yield


def _gqa_attend(device: str, q_len: int) -> Callable[..., torch.Tensor]:
    """shapes.attend: SDPA with enable_gqa (bottom-right causal mask when q > 1) on CUDA, packed matmuls on CPU."""
    from dsdsim.bench.shapes import attend

    cuda = _is_cuda(device)

    def fn(q, k, v):
        with no_math_sdpa(device):
            return attend(q, k, v, q_len, cuda)
    return fn


def _gqa_packed(device: str, q_len: int) -> Callable[..., torch.Tensor]:
    """GQA-packed decode: the g query heads of a KV head stacked as rows, (B, H_kv, g*q, d), one SDPA call, no
    mask (the q x q causal block among new tokens is q/T of the FLOPs and no extra bytes)."""
    def fn(q, k, v):
        b, h, ql, d = q.shape
        kvh = k.shape[1]
        with no_math_sdpa(device):
            out = F.scaled_dot_product_attention(q.reshape(b, kvh, (h // kvh) * ql, d), k, v)
        return out.reshape(b, h, ql, v.shape[-1])
    return fn


def _mla_matmul(v_dim: int, scale: float) -> Callable[..., torch.Tensor]:
    """MLA decode after weight absorption, as two batched GEMMs: q (B, H*q, D) against the latent cache
    (B, T, D) read once per sequence; values are the latent's first v_dim elements. Softmax in fp32."""
    def fn(q, latent):
        scores = torch.bmm(q, latent.transpose(1, 2)) * scale                     # (B, H*q, T)
        p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return torch.bmm(p, latent[..., :v_dim])                                  # (B, H*q, v_dim)
    return fn


def _mla_sdpa(device: str, v_dim: int) -> Callable[..., torch.Tensor]:
    """MLA decode through SDPA: one 'head' of H*q rows over k = latent (B, 1, T, D), v = its first v_dim
    elements (fused kernels may refuse D = 576: recorded as an error)."""
    def fn(q, latent):
        with no_math_sdpa(device):
            return F.scaled_dot_product_attention(q.unsqueeze(1), latent.unsqueeze(1),
                                                  latent[..., :v_dim].unsqueeze(1))
    return fn


def sweep_decode_attention(device: str, plan: SweepPlan, progress: Progress = None) -> Sweep:
    """Decode attention over the KV context: seconds, KV bytes/s (cache read once per sequence) and FLOP/s.

    GQA (plan.gqa_model heads) through shapes.attend and GQA-packed SDPA at each q; MLA-like (plan.mla_model
    latent) as two batched GEMMs and through SDPA at q = 1. Contexts are the outer loop, so a budget cut drops
    the longest contexts of every variant."""
    sweep = Sweep("decode_attention", notes={
        "dtype": plan.dtype.value, "batch": plan.attention_batch, "gqa_model": plan.gqa_model,
        "mla_model": plan.mla_model, "context": "keys attended per sequence, the q new tokens included",
        "kv_bytes": "GQA 2*B*kv_heads*T*d; MLA B*T*latent (values are part of the latent), element bytes"})
    with _sweep_scope(sweep, device, progress):
        over = _deadline(plan.sweep_budget_s)
        gqa, mla = attention_shape(plan.gqa_model), attention_shape(plan.mla_model)
        sweep.notes.update(gqa=gqa, mla=mla)
        dtype = torch_dtype(plan.dtype)
        cache = last_level_cache_bytes(device)
        for i, ctx in enumerate(plan.attention_contexts):
            if progress:
                progress(f"  decode_attention context {ctx}")
            if over():
                sweep.skipped.append(f"context {ctx}")
                continue
            _gqa_points(sweep, device, plan, gqa, ctx, dtype, cache, over, first=i == 0)
            _mla_points(sweep, device, plan, mla, ctx, dtype, cache, over, first=i == 0)
            _recover(device)
    return sweep


def _gqa_points(sweep: Sweep, device: str, plan: SweepPlan, s: dict, ctx: int, dtype: torch.dtype, cache: float,
                over: Callable[[], bool], first: bool) -> None:
    b, h, kvh, d = plan.attention_batch, s["heads"], s["kv_heads"], s["qk_dim"]
    kv_bytes = 2.0 * b * kvh * ctx * d * dtype.itemsize
    sets = rotation_sets(kv_bytes, cache, max_sets=8, max_total_bytes=plan.max_rotation_bytes)
    kvs = [(random_tensor((b, kvh, ctx, d), dtype, device), random_tensor((b, kvh, ctx, d), dtype, device))
           for _ in range(sets)]
    for ql in plan.attention_q_lens:
        qs = [random_tensor((b, h, ql, d), dtype, device) for _ in range(sets)]
        for variant, fn in (("gqa_attend", _gqa_attend(device, ql)), ("gqa_packed", _gqa_packed(device, ql))):
            def measure(fn=fn, variant=variant, qs=qs, ql=ql):
                t = time_kernels(fn, lambda j: (qs[j], *kvs[j]), device, rotate=sets, repeats=plan.repeats,
                                 budget_s=plan.point_budget_s)
                point = _attention_point(variant, b, ql, ctx, h, kvh, d, d, plan.dtype, t, kv_bytes,
                                         flops=4.0 * b * ql * h * d * ctx)
                return _with_kernels(point, plan, first, fn, (qs[0], *kvs[0]), device)
            _point(sweep, f"{variant} q={ql} context={ctx}", device, over, measure)
    del kvs


def _mla_points(sweep: Sweep, device: str, plan: SweepPlan, s: dict, ctx: int, dtype: torch.dtype, cache: float,
                over: Callable[[], bool], first: bool) -> None:
    b, h, dqk, dv, ql = plan.attention_batch, s["heads"], s["qk_dim"], s["v_dim"], 1
    kv_bytes = float(b * ctx * dqk * dtype.itemsize)
    sets = rotation_sets(kv_bytes, cache, max_sets=8, max_total_bytes=plan.max_rotation_bytes)
    latents = [random_tensor((b, ctx, dqk), dtype, device) for _ in range(sets)]
    qs = [random_tensor((b, h * ql, dqk), dtype, device) for _ in range(sets)]
    for variant, fn in (("mla_matmul", _mla_matmul(dv, dqk ** -0.5)), ("mla_sdpa", _mla_sdpa(device, dv))):
        def measure(fn=fn, variant=variant):
            t = time_kernels(fn, lambda j: (qs[j], latents[j]), device, rotate=sets, repeats=plan.repeats,
                             budget_s=plan.point_budget_s)
            point = _attention_point(variant, b, ql, ctx, h, 1, dqk, dv, plan.dtype, t, kv_bytes,
                                     flops=2.0 * b * ql * h * ctx * (dqk + dv))
            return _with_kernels(point, plan, first, fn, (qs[0], latents[0]), device)
        _point(sweep, f"{variant} q={ql} context={ctx}", device, over, measure)
    del latents


def _attention_point(variant: str, batch: int, q_len: int, context: int, heads: int, kv_heads: int, qk_dim: int,
                     v_dim: int, dtype: DType, t: Timing, kv_bytes: float, flops: float) -> dict:
    return {"variant": variant, "batch": batch, "q_len": q_len, "context": context, "heads": heads,
            "kv_heads": kv_heads, "qk_dim": qk_dim, "v_dim": v_dim, "dtype": dtype.value, **_timing_fields(t),
            "kv_bytes": kv_bytes, "kv_bytes_per_s": kv_bytes / t.median_s, "flops": flops,
            "flops_per_s": flops / t.median_s}


# --- the small-kernel floor and copy sizes ----------------------------------------------------------------

def sweep_kernel_floor(device: str, plan: SweepPlan, progress: Progress = None,
                       eager_launch_s: Optional[float] = None, graph_launch_s: Optional[float] = None,
                       graphs: Optional[bool] = None) -> Sweep:
    """Seconds per tiny kernel: a one-element add (eager, CUDA graph) and a 1x128x128 GEMM, one eager call
    between events (host dispatch included) and per GEMM of a 64-GEMM CUDA graph (the replayed floor).

    ``graphs`` (default: on CUDA) forces the graph points; off CUDA they fail soft into ``errors``."""
    graphs = _is_cuda(device) if graphs is None else graphs
    sweep = Sweep("kernel_floor", notes={"gemm": "x[1, 128] @ W[128, 128]^T", "graph_calls": 64})
    with _sweep_scope(sweep, device, progress):
        over = _deadline(plan.sweep_budget_s)
        eager = eager_launch_s
        _point(sweep, "add eager", device, over, lambda: {
            "kernel": "add 1 element", "mode": "eager",
            "seconds": eager if eager is not None else measure_eager_launch(device)})
        if graphs:
            graphed = graph_launch_s
            _point(sweep, "add graph", device, over, lambda: {
                "kernel": "add 1 element", "mode": "graph",
                "seconds": graphed if graphed is not None else measure_graph_launch(device)})
        dtype = torch_dtype(plan.dtype)
        xs = [random_tensor((1, 128), dtype, device) for _ in range(64)]
        ws = [random_tensor((128, 128), dtype, device, scale=128 ** -0.5) for _ in range(64)]
        _point(sweep, "gemm 1x128x128 eager", device, over, lambda: {
            "kernel": "gemm 1x128x128", **_timing_fields(time_fn(F.linear, lambda i: (xs[0], ws[0]), device,
                                                                  warmup=5, repeats=50, warmup_s=0.025))})
        if graphs:
            _point(sweep, "gemm 1x128x128 graph", device, over, lambda: {
                "kernel": "gemm 1x128x128", **_timing_fields(time_graph(F.linear, lambda i: (xs[i], ws[i]), device,
                                                                         rotate=64, repeats=plan.repeats))})
    return sweep


def sweep_copy(device: str, plan: SweepPlan, progress: Progress = None) -> Sweep:
    """dst.copy_(src) per buffer size: seconds and bytes/s counting read + write (2 x buffer), sets rotated."""
    sweep = Sweep("copy", notes={"bytes_moved": "2 x buffer (read + write)"})
    with _sweep_scope(sweep, device, progress):
        over = _deadline(plan.sweep_budget_s)
        cache = last_level_cache_bytes(device)
        for nbytes in plan.copy_bytes:
            _point(sweep, f"copy {nbytes} B", device, over, lambda nbytes=nbytes: _copy_point(device, plan, nbytes,
                                                                                                cache))
            _recover(device)
    return sweep


def _copy_point(device: str, plan: SweepPlan, nbytes: int, cache: float) -> dict:
    sets = rotation_sets(2.0 * nbytes, cache, max_sets=8, max_total_bytes=plan.max_rotation_bytes)
    bufs = [(random_tensor((nbytes // 4,), torch.float32, device), torch.empty(nbytes // 4, device=device))
            for _ in range(sets)]
    t = time_kernels(lambda a, b: b.copy_(a), lambda i: bufs[i], device, rotate=sets, repeats=plan.repeats,
                     budget_s=plan.point_budget_s)
    moved = 2.0 * (nbytes // 4) * 4
    return {"bytes": nbytes, "bytes_moved": moved, **_timing_fields(t), "bytes_per_s": moved / t.median_s}


def _slug(text: str, device: str) -> str:
    s = re.sub(r"\(r\)|\(tm\)|\(\d+ cores\)|processor|nvidia", "", text.lower())
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return f"probe-{'cpu' if device.startswith('cpu') else 'gpu'}-{s or 'device'}"[:60].rstrip("-")


def _vendor(text: str) -> str:
    t = text.lower()
    for key in ("nvidia", "amd", "intel", "apple", "arm"):
        if key in t:
            return key
    if any(x in t for x in ("h100", "h200", "a100", "geforce", "rtx", "tesla")):
        return "nvidia"
    return ""


def _mib(nbytes: float) -> int:
    return int(round(nbytes / 2 ** 20))


def _sm_major(device: str) -> int:
    try:
        return torch.cuda.get_device_capability(torch.device(device))[0]
    except Exception:
        return 0
