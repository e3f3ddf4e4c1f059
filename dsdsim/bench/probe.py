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
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from dsdsim.bench.timing import (DEFAULT_CPU_THREADS, Timing, cpu_threads, device_name, last_level_cache_bytes,
                                 random_tensor, time_fn)
from dsdsim.bench.specfile import spec_yaml, write_spec  # noqa: F401  (re-exported: probe.write_spec)
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.units import DType

Progress = Optional[Callable[[str], None]]

# Placeholders for what one device cannot measure. Stated, not hidden: each is marked unverified in the spec.
_LINK_PLACEHOLDER_BYTES_PER_S = 10e9      # a PCIe-4 x16-class link, one direction
_LINK_LATENCY_PLACEHOLDER_S = 20e-6


@dataclass(frozen=True)
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


def _gemm_rate(device: str, dtype: torch.dtype, n: int, tf32: bool = False) -> float:
    a = random_tensor((n, n), dtype, device)
    b = random_tensor((n, n), dtype, device)
    prev = torch.backends.cuda.matmul.allow_tf32 if _is_cuda(device) else None
    try:
        if prev is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        t = time_fn(lambda x, y: x @ y, lambda i: (a, b), device, warmup=2, repeats=8 if _is_cuda(device) else 4,
                    budget_s=2.0)
    finally:
        if prev is not None:
            torch.backends.cuda.matmul.allow_tf32 = prev
    return 2.0 * n ** 3 / t.median_s


def measure_gemm_peaks(device: str) -> tuple[dict[DType, float], dict[DType, int]]:
    """Best FLOP/s over two square sizes per dtype the device runs; dtypes that fail are left out."""
    if _is_cuda(device):
        plan = [(DType.fp32, torch.float32, False, (4096, 8192)), (DType.tf32, torch.float32, True, (4096, 8192)),
                (DType.bf16, torch.bfloat16, False, (4096, 8192)), (DType.fp16, torch.float16, False, (4096, 8192))]
    else:
        plan = [(DType.fp32, torch.float32, False, (1024, 2048)), (DType.bf16, torch.bfloat16, False, (1024, 2048)),
                (DType.fp16, torch.float16, False, (1024,))]
    peaks: dict[DType, float] = {}
    sizes: dict[DType, int] = {}
    for key, dtype, tf32, ns in plan:
        for n in ns:
            try:
                rate = _gemm_rate(device, dtype, n, tf32)
            except (RuntimeError, TypeError):
                break
            if rate > peaks.get(key, 0.0):
                peaks[key], sizes[key] = rate, n
    return peaks, sizes


def measure_launch_overhead(device: str) -> tuple[float, Optional[float]]:
    """Seconds per trivial kernel: eager (host dispatch + launch), and replayed from a CUDA graph (GPU only)."""
    x = torch.ones(1, device=device)
    calls = 200

    def burst(t):
        for _ in range(calls):
            t.add_(1.0)

    eager = time_fn(burst, lambda i: (x,), device, warmup=2, repeats=10).median_s / calls
    graphed = None
    if _is_cuda(device):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            burst(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            burst(x)
        graphed = time_fn(lambda: graph.replay(), lambda i: (), device, warmup=2, repeats=10).median_s / calls
    return eager, graphed


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


def run_measurements(device: str, progress: Progress = None, threads: Optional[int] = DEFAULT_CPU_THREADS
                     ) -> ProbeResult:
    """All probe measurements; on a CPU with ``threads`` torch threads (validate must use the same)."""
    with cpu_threads(device, threads):
        return _run_measurements(device, progress)


def _run_measurements(device: str, progress: Progress = None) -> ProbeResult:
    say = progress or (lambda _msg: None)
    dev = str(torch.device(device))
    say("memory bandwidth")
    bw, bw_t = measure_bandwidth(dev)
    say("GEMM peaks")
    peaks, sizes = measure_gemm_peaks(dev)
    say("launch overhead")
    eager, graphed = measure_launch_overhead(dev)
    say("links")
    link, latency = measure_all_reduce(dev)
    return ProbeResult(
        device=dev, device_name=device_name(dev), date=_dt.date.today().isoformat(), torch_version=torch.__version__,
        memory_bytes=_memory_bytes(dev), cache_bytes=last_level_cache_bytes(dev), bandwidth_bytes_per_s=bw,
        bandwidth_timing=bw_t, peaks_flops_per_s=peaks, gemm_sizes=sizes, eager_launch_s=eager,
        graph_launch_s=graphed, gpus=torch.cuda.device_count() if _is_cuda(dev) else 1,
        threads=torch.get_num_threads(),
        link_bytes_per_s=link, link_latency_s=latency)


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
    if r.link_bytes_per_s is not None:
        link = fig(r.link_bytes_per_s, "2-GPU NCCL all-reduce bus bandwidth, 256 MiB")
        latency = fig(r.link_latency_s, "2-GPU NCCL all-reduce of 8 KiB")
        collective = fig(1.0, "the link figure is the measured all-reduce bus bandwidth")
    else:
        link = fig(_LINK_PLACEHOLDER_BYTES_PER_S, "placeholder: one device, no link to measure (PCIe-4 x16 class)",
                   "unverified", "dsdsim probe placeholder")
        latency = fig(_LINK_LATENCY_PLACEHOLDER_S, "placeholder: one device, no link to measure", "unverified",
                      "dsdsim probe placeholder")
        collective = fig(0.8, "placeholder: no collective measured", "unverified", "dsdsim probe placeholder")
    eager = fig(r.eager_launch_s, "one-element add, eager, median over 200-call bursts")
    if r.graph_launch_s is not None:
        graphed = fig(r.graph_launch_s, "one-element add replayed from a CUDA graph")
        tile = fig(64.0 if _sm_major(r.device) >= 9 else 16.0, "wgmma M=64 (sm90+) / mma M=16; `dsdsim calibrate` "
                   "fits the effective tile", "derived", "NVIDIA PTX ISA (wgmma .m64, mma .m16)")
    else:
        graphed = fig(r.eager_launch_s, "no CUDA graphs on this device: same as eager")
        tile = fig(1.0, "CPU GEMMs do not pad the row count to a tile")
    host = "per-step host work of a serving engine is not probed; a bare torch loop has none; `dsdsim calibrate` fits it"
    data = {
        "name": name or _slug(r.device_name, r.device),
        "description": f"{r.device_name}, measured by dsdsim probe",
        "vendor": _vendor(r.device_name),
        "memory_bytes": fig(r.memory_bytes, "device memory reported by the driver" if cuda else "physical RAM"),
        "memory_bandwidth_bytes_per_s": fig(
            r.bandwidth_bytes_per_s,
            f"copy of {_mib(r.bandwidth_bytes_per_s * r.bandwidth_timing.median_s / 2)} MiB, read + write counted"),
        "peak_flops_per_s": peaks,
        "last_level_cache_bytes": fig(r.cache_bytes, "L2 size reported by the driver" if cuda else "sysfs cache size"),
        "link_bandwidth_bytes_per_s": link,
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
        "measured": {"date": r.date, "device_name": r.device_name, "torch_version": r.torch_version,
                     "method": "dsdsim probe: copy bandwidth, square GEMMs per dtype, one-element-add launches"
                               + ("" if cuda else f"; {r.threads} torch CPU thread(s)")},
    }
    return HardwareSpec.model_validate(data)


def probe(device: str = "cpu", name: Optional[str] = None, progress: Progress = None,
          threads: Optional[int] = DEFAULT_CPU_THREADS) -> HardwareSpec:
    """Measure ``device`` ('cpu', 'cuda', 'cuda:1') and return its HardwareSpec (CPU: with ``threads`` threads)."""
    return spec_from_probe(run_measurements(device, progress, threads), name)


def run_probe(device: str = "cpu", output: str | Path = "probe.yaml", name: Optional[str] = None,
              progress: Progress = None, threads: Optional[int] = DEFAULT_CPU_THREADS) -> Path:
    """Probe ``device`` and write its spec to ``output``; returns the path (CLI entry point)."""
    spec = probe(device, name, progress, threads)
    return write_spec(spec, output, header=f"{spec.description}.\nWritten by `dsdsim probe`; all SI units.")


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


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m dsdsim.bench.probe", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1")
    p.add_argument("--output", default="probe.yaml", help="YAML spec file to write")
    p.add_argument("--name", default=None, help="spec name (default: derived from the device name)")
    p.add_argument("--threads", type=int, default=DEFAULT_CPU_THREADS, help="torch threads on a CPU (default 1)")
    a = p.parse_args(argv)
    path = run_probe(a.device, a.output, a.name, threads=a.threads)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
