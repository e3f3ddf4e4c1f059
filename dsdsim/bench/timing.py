"""The one place where dsdsim times torch code on a device.

Protocol (gpt-fast style): build several input sets up front (fresh random values, never zeros), run the
function untimed `warmup` times, then time `repeats` calls, each on the next input set in rotation so that
a set's weights and activations have left the caches by the time it comes round again. The device is
synchronised around every timed call: CUDA events on a GPU (GPU time of the call, launch gap included since
the stream is idle when the start event is recorded), ``time.perf_counter`` on the CPU. The result is the
median with the 10th and 90th percentiles.

Nothing here prints; nothing here is imported by the rest of dsdsim (torch is imported only in dsdsim.bench).
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from dsdsim.records import frozen
from dsdsim.units import DType

DEFAULT_CPU_THREADS = 1

TORCH_DTYPE = {
    DType.fp32: torch.float32, DType.tf32: torch.float32, DType.bf16: torch.bfloat16, DType.fp16: torch.float16,
}


@frozen
class Timing:
    """Seconds per call of one timed function."""

    median_s: float
    p10_s: float
    p90_s: float
    repeats: int          # timed calls
    rotate: int           # input sets cycled through
    mode: str = "eager"   # "eager": one call between events (host dispatch included); "graph": CUDA-graph replay

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: a rough noise figure of the measurement."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else float("nan")


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype that runs a dsdsim DType (fp8/int/fp4 formats have no plain torch GEMM: refused)."""
    try:
        return TORCH_DTYPE[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype.value} has no plain torch kernel to time; run the bench in bf16 or fp32") \
            from None


def synchronize(device: str | torch.device) -> None:
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def last_level_cache_bytes(device: str | torch.device) -> float:
    """L2 of a GPU, or the largest CPU cache level from sysfs (fallback 32 MiB)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return float(torch.cuda.get_device_properties(dev).L2_cache_size)
    best = 0.0
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            try:
                with open(os.path.join(base, entry, "size")) as fh:
                    text = fh.read().strip().upper()
            except OSError:
                continue
            scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
            digits = text.rstrip("KMG")
            if digits.isdigit():
                best = max(best, float(digits) * scale)
    except OSError:
        pass
    return best or 32.0 * 1024 ** 2


def rotation_sets(bytes_per_set: float, cache_bytes: float, max_sets: int = 16,
                  max_total_bytes: float = 2e9) -> int:
    """Input sets to cycle through so the working set is >= 2x the last-level cache, within a memory cap."""
    if bytes_per_set <= 0:
        return 1
    want = math.ceil(2.0 * cache_bytes / bytes_per_set)
    afford = max(1, int(max_total_bytes // bytes_per_set))
    return int(max(1, min(want, max_sets, afford)))


def random_tensor(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device,
                  generator: Optional[torch.Generator] = None, scale: float = 1.0) -> torch.Tensor:
    """Random normal values (never zeros), made fast for large tensors.

    Large tensors tile a 1 Mi-element random block with a random per-tile sign and scale, which keeps the
    values non-zero and varied (no compression or zero-skipping can flatter a kernel) at copy speed.
    """
    numel = int(np.prod(shape)) if len(shape) else 1
    block = 1 << 20
    gen_device = "cpu"
    if numel <= block:
        t = torch.randn(numel, generator=generator, device=gen_device, dtype=torch.float32) * scale
        return t.to(device=device, dtype=dtype).view(*shape)
    base = (torch.randn(block, generator=generator, dtype=torch.float32) * scale).to(device=device, dtype=dtype)
    tiles = -(-numel // block)
    factors = (torch.rand(tiles, 1, generator=generator) * 0.5 + 0.75)
    factors = factors * torch.where(torch.rand(tiles, 1, generator=generator) < 0.5, -1.0, 1.0)
    out = torch.empty(tiles * block, dtype=dtype, device=device)
    view = out.view(tiles, block)
    view.copy_(base.unsqueeze(0).expand(tiles, block))
    view.mul_(factors.to(device=device, dtype=dtype))
    return out[:numel].view(*shape)


def time_fn(fn: Callable[..., Any], make_inputs: Callable[[int], Sequence[Any]], device: str | torch.device = "cpu",
            warmup: int = 2, repeats: int = 10, rotate: int = 1, budget_s: Optional[float] = None,
            min_repeats: int = 3, warmup_s: float = 0.0) -> Timing:
    """Median seconds of ``fn(*make_inputs(i))`` over ``repeats`` timed calls, cycling ``rotate`` input sets.

    make_inputs(i) builds input set i once (before any timing). ``budget_s`` stops timing early (after at least
    ``min_repeats`` calls) once the timed calls have used that many seconds. Warm-up runs at least ``warmup``
    calls and at least ``warmup_s`` seconds (a GPU's clocks ramp up from idle over tens of milliseconds).
    """
    dev = torch.device(device)
    with on_device(dev), torch.inference_mode():
        sets = [tuple(make_inputs(i)) for i in range(max(1, rotate))]
        _warm(lambda j: fn(*sets[j % len(sets)]), dev, warmup, warmup_s)
        times: list[float] = []
        spent = 0.0
        for i in range(repeats):
            args = sets[(warmup + i) % len(sets)]
            t = _time_once(fn, args, dev)
            times.append(t)
            spent += t
            if budget_s is not None and spent > budget_s and len(times) >= min_repeats:
                break
    return _timing(times, len(sets))


def _timing(times: Sequence[float], rotate: int, mode: str = "eager") -> Timing:
    arr = np.asarray(times)
    return Timing(median_s=float(np.median(arr)), p10_s=float(np.percentile(arr, 10)),
                  p90_s=float(np.percentile(arr, 90)), repeats=len(times), rotate=rotate, mode=mode)


def _warm(call: Callable[[int], Any], dev: torch.device, calls: int, seconds: float) -> None:
    """At least ``calls`` calls and at least ``seconds`` of wall time, then a device sync."""
    t0 = time.perf_counter()
    j = 0
    while j < calls or time.perf_counter() - t0 < seconds:
        call(j)
        j += 1
        if seconds > 0 and j % 8 == 0:
            synchronize(dev)
    synchronize(dev)


@contextlib.contextmanager
def on_device(device: str | torch.device):
    """Make ``device`` current for events, streams and graph capture (``cuda:1`` must time GPU 1)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            yield
    else:
        yield


def time_graph(fn: Callable[..., Any], make_inputs: Callable[[int], Sequence[Any]], device: str | torch.device,
               rotate: int = 1, repeats: int = 20, warmup_s: float = 0.025, budget_s: Optional[float] = None,
               min_repeats: int = 3) -> Timing:
    """Kernel time of one call: ``fn`` over all ``rotate`` input sets captured into one CUDA graph, replayed.

    Per timed replay: CUDA events around the graph launch, divided by the number of calls in the graph. This
    removes host dispatch (what a deployment's CUDA graphs remove) and leaves the kernels, their launch gaps
    inside the graph included. Raises RuntimeError when ``fn`` cannot be captured (a host sync inside)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError("CUDA graphs need a CUDA device")
    with on_device(dev), torch.inference_mode():
        sets = [tuple(make_inputs(i)) for i in range(max(1, rotate))]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                    # eager warm-up on a side stream (lazy init, workspaces)
            for args in sets:
                fn(*args)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for args in sets:
                fn(*args)
        _warm(lambda _j: graph.replay(), dev, 2, warmup_s)
        times: list[float] = []
        spent = 0.0
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) * 1e-3 / len(sets)
            times.append(t)
            spent += t * len(sets)
            if budget_s is not None and spent > budget_s and len(times) >= min_repeats:
                break
        del graph
    return _timing(times, len(sets), mode="graph")


def time_kernels(fn: Callable[..., Any], make_inputs: Callable[[int], Sequence[Any]], device: str | torch.device,
                 rotate: int = 1, repeats: int = 20, warmup: int = 2, warmup_s: float = 0.025,
                 budget_s: Optional[float] = None, graphs: bool = True) -> Timing:
    """Kernel time under a CUDA graph where the device and ``fn`` allow it, else eager ``time_fn``.

    The returned Timing's ``mode`` says which ran ("graph" or "eager")."""
    if graphs and torch.device(device).type == "cuda":
        try:
            return time_graph(fn, make_inputs, device, rotate, repeats, warmup_s, budget_s)
        except RuntimeError:
            torch.cuda.synchronize(torch.device(device))
    return time_fn(fn, make_inputs, device, warmup=warmup, repeats=repeats, rotate=rotate, budget_s=budget_s,
                   warmup_s=warmup_s)


def _time_once(fn: Callable[..., Any], args: tuple, dev: torch.device) -> float:
    if dev.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(dev)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3        # ms -> s
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


@contextlib.contextmanager
def cpu_threads(device: str | torch.device, threads: Optional[int] = DEFAULT_CPU_THREADS):
    """Run CPU measurements with a fixed number of torch threads (default 1).

    One thread keeps CPU timings honest on a shared machine: with several OpenMP threads, a parallel region
    waits for its slowest thread, and one descheduled thread costs a whole scheduler tick (~4 ms)."""
    if torch.device(device).type != "cpu" or threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def count_kernels(fn: Callable[..., Any], args: Sequence[Any], device: str | torch.device = "cpu") -> int:
    """Device kernels one call of ``fn(*args)`` launches.

    CUDA: kernels the profiler sees (split-K, split-KV combine and copy kernels included). CPU: aten ops seen
    by a dispatch mode, views excluded. Eager torch does not fuse what an engine fuses (residual add + RMSNorm,
    rotary, SiLU-and-mul), so one cost-model operator can be several kernels here; calibration charges launch
    overhead per kernel actually run."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return _count_cuda_kernels(fn, args, dev)
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False) and func.overloadpacket.__name__ not in _NOT_KERNELS:
                self.n += 1
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), _Count() as c:
        fn(*args)
    return c.n


def _count_cuda_kernels(fn: Callable[..., Any], args: Sequence[Any], dev: torch.device) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with on_device(dev), torch.inference_mode():
        fn(*args)                                          # lazy initialisation outside the profile
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn(*args)
            torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA and not _is_memop(e.name))


def _is_memop(name: str) -> bool:
    n = name.lower()
    return n.startswith("memset") or n.startswith("memcpy")


def sm_clock_mhz(device: str | torch.device) -> Optional[float]:
    """The GPU's current SM clock (MHz) from NVML, or None where it cannot be read (CPU, no NVML)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(dev.index or 0)
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:            # NVML missing or refused: the clock is simply not logged
        return None


_NOT_KERNELS = {"detach", "alias", "lift_fresh", "_local_scalar_dense", "empty", "empty_like", "sym_size",
                "sym_stride", "sym_numel", "_to_copy_meta"}


def device_name(device: str | torch.device) -> str:
    """Marketing name of the GPU, or the CPU's model name from /proc/cpuinfo."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"
