"""Tensor-parallel checks with torch.distributed: all-reduce timing against the link model, and a
tensor-parallel SwiGLU MLP (column-parallel gate_up, row-parallel down, one all-reduce) checked against the
single-device result.

Where it runs:
- CPU: gloo, ``world_size`` spawned processes on localhost (a free port), one torch thread each;
- GPUs: NCCL, one process per GPU, spawned here (``dsdsim comm-check --backend nccl --device cuda
  --world-size N``); a rank started by torchrun initialises from its environment (env://).

The link model is dsdsim's: ops.all_reduce (a rank sends 2(n-1)/n of the buffer) timed by op_time,
t = link_latency + sent / (link_bandwidth * collective_efficiency). The sweep also fits that line (latency,
bus bandwidth) to what was measured, which is what a spec's link figures should be for this transport.

``nccl_smoke`` proves the NCCL code path on one GPU (world size 1: init with ``device_id``, all-reduce, barrier,
destroy) and reports instead of raising: ``dsdsim comm-check --backend nccl --device cuda -o
smoke.json`` (the same with ``--backend gloo`` runs on a CPU).
"""
from __future__ import annotations

import datetime
import inspect
import json
import os
import socket
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from dsdsim.records import frozen

DEFAULT_SIZES = (4 << 10, 64 << 10, 1 << 20, 8 << 20)


@frozen
class CollectiveTiming:
    """One all-reduce size: median seconds over repeats; bus bandwidth = 2(n-1)/n * bytes / seconds."""

    bytes: int
    seconds: float
    busbw_bytes_per_s: float


@frozen
class TPCheck:
    """Tensor-parallel SwiGLU MLP: max abs difference from the unsplit MLP, and median seconds per call."""

    tokens: int
    hidden: int
    intermediate: int
    world_size: int
    max_abs_error: float
    seconds: float
    all_reduce_seconds: float


@dataclass
class DistributedReport:
    backend: str
    world_size: int
    sweep: list[CollectiveTiming]
    tp: Optional[TPCheck]
    link_fit: dict = field(default_factory=dict)
    model_comparison: list[dict] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict:
        return {"backend": self.backend, "world_size": self.world_size, "sweep": [asdict(s) for s in self.sweep],
                "tp": asdict(self.tp) if self.tp else None, "link_fit": self.link_fit,
                "model_comparison": self.model_comparison, "wall_s": self.wall_s}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the worker (one per rank) --------------------------------------------------------------------------


def _device(backend: str, rank: int) -> str:
    return f"cuda:{rank}" if backend == "nccl" else "cpu"


def _sync(dev: str) -> None:
    import torch

    if dev.startswith("cuda"):
        torch.cuda.synchronize(dev)


def _time_all_reduce(buf, dev: str, repeats: int) -> float:
    import torch.distributed as dist

    for _ in range(3):
        dist.all_reduce(buf)
    _sync(dev)
    times = []
    for _ in range(repeats):
        dist.barrier()
        _sync(dev)
        t0 = time.perf_counter()
        dist.all_reduce(buf)
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _tp_mlp(rank: int, world: int, dev: str, tokens: int, hidden: int, inter: int, repeats: int) -> TPCheck:
    """Column-parallel gate_up (each rank: 2*I/n columns), row-parallel down (I/n rows), one all-reduce."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1234)                    # same full weights on every rank
    x = torch.randn(tokens, hidden, generator=g).to(dev)
    w_gate = torch.randn(inter, hidden, generator=g).to(dev) * hidden ** -0.5
    w_up = torch.randn(inter, hidden, generator=g).to(dev) * hidden ** -0.5
    w_down = torch.randn(hidden, inter, generator=g).to(dev) * inter ** -0.5
    full = F.linear(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up), w_down)
    shard = inter // world
    sl = slice(rank * shard, (rank + 1) * shard)
    wg, wu, wd = w_gate[sl].contiguous(), w_up[sl].contiguous(), w_down[:, sl].contiguous()

    def step():
        y = F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)     # partial sums (tokens, hidden)
        dist.all_reduce(y)
        return y

    y = step()
    err = float((y - full).abs().max())
    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        dist.barrier()
        _sync(dev)
        t0 = time.perf_counter()
        step()
        _sync(dev)
        times.append(time.perf_counter() - t0)
    ar = _time_all_reduce(torch.empty(tokens, hidden, device=dev).normal_(), dev, repeats)
    return TPCheck(tokens, hidden, inter, world, err, float(np.median(times)), ar)


def _worker(rank: int, world: int, backend: str, port: int, sizes: Sequence[int], repeats: int, tp: Optional[dict],
            out_path: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dev = _device(backend, rank)
    if dev.startswith("cuda"):
        torch.cuda.set_device(dev)
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        dist.init_process_group(backend)                                   # launched by torchrun (env://)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sweep = []
        for nbytes in sizes:
            buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=dev)
            t = _time_all_reduce(buf, dev, repeats)
            sweep.append(CollectiveTiming(int(buf.numel() * 4), t, 2.0 * (world - 1) / world * buf.numel() * 4 / t))
        check = _tp_mlp(rank, world, dev, **tp, repeats=repeats) if tp else None
        if rank == 0:
            Path(out_path).write_text(json.dumps({"sweep": [asdict(s) for s in sweep],
                                                  "tp": asdict(check) if check else None}))
    finally:
        dist.destroy_process_group()


# --- the driver -----------------------------------------------------------------------------------------


def all_reduce_sweep(backend: str = "gloo", world_size: int = 2, sizes_bytes: Sequence[int] = DEFAULT_SIZES,
                     repeats: int = 10) -> list[CollectiveTiming]:
    """Median all-reduce time per buffer size across ``world_size`` spawned ranks."""
    return _spawn(backend, world_size, sizes_bytes, repeats, None)[0]


def _spawn(backend: str, world: int, sizes: Sequence[int], repeats: int, tp: Optional[dict]):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.json")
        mp.spawn(_worker, args=(world, backend, free_port(), tuple(sizes), repeats, tp, out), nprocs=world, join=True)
        data = json.loads(Path(out).read_text())
    sweep = [CollectiveTiming(**s) for s in data["sweep"]]
    return sweep, (TPCheck(**data["tp"]) if data["tp"] else None)


def fit_link(sweep: Sequence[CollectiveTiming], world: int) -> dict:
    """Least-squares line t = latency + sent / bandwidth over the sweep (sent = 2(n-1)/n * bytes)."""
    sent = np.array([2.0 * (world - 1) / world * s.bytes for s in sweep])
    t = np.array([s.seconds for s in sweep])
    a = np.vstack([np.ones_like(sent), sent]).T
    (lat, inv_bw), *_ = np.linalg.lstsq(a, t, rcond=None)
    return {"latency_s": float(max(lat, 0.0)), "bandwidth_bytes_per_s": float(1.0 / inv_bw) if inv_bw > 0 else None}


def compare_with_link_model(sweep: Sequence[CollectiveTiming], hardware, world: int) -> list[dict]:
    """Measured all-reduce time vs dsdsim's ops.all_reduce + op_time on ``hardware``'s link figures."""
    from dsdsim.cost import ops
    from dsdsim.cost.timing import op_time
    from dsdsim.specs.catalog import load_hardware
    from dsdsim.units import DType

    hw = load_hardware(hardware)
    out = []
    for s in sweep:
        op = ops.all_reduce("all_reduce", 1, s.bytes // 4, DType.fp32, world)
        t = op_time(op, hw, cuda_graphs=False)
        pred = float(np.asarray(t.time_s)) - float(np.asarray(t.overhead_s))     # the link part only
        out.append({"bytes": s.bytes, "measured_s": s.seconds, "predicted_s": pred,
                    "measured_over_predicted": s.seconds / pred if pred > 0 else None})
    return out


def run_distributed(backend: str = "gloo", world_size: int = 2, hardware=None, sizes_bytes=DEFAULT_SIZES,
                    repeats: int = 10, tp: Optional[dict] = None) -> DistributedReport:
    """All-reduce sweep + tensor-parallel MLP check in ``world_size`` processes; compare with the link model."""
    tp = tp if tp is not None else {"tokens": 16, "hidden": 256, "inter": 1024}
    t0 = time.perf_counter()
    sweep, check = _spawn(backend, world_size, sizes_bytes, repeats, tp)
    rep = DistributedReport(backend=backend, world_size=world_size, sweep=sweep, tp=check,
                            link_fit=fit_link(sweep, world_size))
    if hardware is not None:
        rep.model_comparison = compare_with_link_model(sweep, hardware, world_size)
    rep.wall_s = time.perf_counter() - t0
    return rep


# --- world-size-1 smoke test ------------------------------------------------------------------------------

SMOKE_LARGE_BYTES = 64 << 20


def smoke_device(device: str = "cuda") -> str:
    """The device a smoke rank uses: ``cuda`` becomes ``cuda:$LOCAL_RANK`` under torchrun (else ``cuda:0``);
    an explicit index or a CPU device is kept."""
    if device == "cuda":
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _accepts_device_id() -> bool:
    import torch.distributed as dist

    try:
        return "device_id" in inspect.signature(dist.init_process_group).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class CommCheck:
    """What ``nccl_smoke`` saw: whether the collective path works, its timings, and what it ran on. ``error`` is None
    or "Type: message" (with ``traceback``); ``times_s`` holds the median seconds of init, all_reduce_small,
    all_reduce_large, barrier and destroy; ``correct``: the all-reduced sums equal the inputs times the world size."""

    ok: bool = False
    backend: Optional[str] = None
    device: Optional[str] = None
    rank: int = 0
    world_size: int = 1
    init: Optional[str] = None                 # "env://" under torchrun, else a TCPStore on 127.0.0.1
    device_id_passed: bool = False             # the communicator bound to this GPU at init (eager NCCL init)
    times_s: dict[str, float] = field(default_factory=dict)
    large_bytes: int = 0
    large_bytes_per_s: Optional[float] = None  # algorithm bandwidth of the large all-reduce
    correct: Optional[bool] = None
    torch_version: Optional[str] = None
    nccl_version: Optional[str] = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    wall_s: Optional[float] = None

    def to_json(self) -> dict:
        return asdict(self)


def nccl_smoke(device: str = "cuda", backend: str = "nccl", large_bytes: int = SMOKE_LARGE_BYTES, repeats: int = 5,
               timeout_s: float = 120.0) -> CommCheck:
    """Init a world-size-1 process group, all-reduce a small and a ``large_bytes`` tensor (timed), barrier,
    destroy. Never raises: the result says whether it worked and, if not, why (``CommCheck``).

    Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR set) the group is the launcher's; ``device`` "cuda" follows
    LOCAL_RANK. ``backend`` "gloo" with device "cpu" runs the same path on a CPU."""
    t_start = time.perf_counter()
    out = CommCheck(backend=backend, large_bytes=int(large_bytes))
    try:
        _smoke(out, device, backend, large_bytes, repeats, timeout_s)
        out.ok = bool(out.correct)
        if not out.ok:
            out.error = "all-reduce returned a wrong sum"
    except Exception as exc:                  # noqa: BLE001 (a smoke test reports; it does not raise)
        out.error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:800]}"
        out.traceback = traceback.format_exc(limit=8)[-4000:]
    out.wall_s = time.perf_counter() - t_start
    return out


def _smoke(out: CommCheck, device: str, backend: str, large_bytes: int, repeats: int, timeout_s: float) -> None:
    import torch
    import torch.distributed as dist

    out.torch_version = torch.__version__
    dev = torch.device(smoke_device(device))
    out.device = str(dev)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        out.nccl_version = _nccl_version()
    if dist.is_initialized():
        raise RuntimeError("a default process group is already initialised in this process")
    kwargs: dict = {"timeout": datetime.timedelta(seconds=timeout_s)}
    if dev.type == "cuda" and _accepts_device_id():
        kwargs["device_id"] = dev                      # binds the communicator to this GPU (eager NCCL init)
        out.device_id_passed = True
    t0 = time.perf_counter()
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        out.init = "env://"
        dist.init_process_group(backend, init_method="env://", **kwargs)
    else:
        out.init = "TCPStore 127.0.0.1"
        store = dist.TCPStore("127.0.0.1", free_port(), 1, True, timeout=kwargs["timeout"])
        dist.init_process_group(backend, store=store, rank=0, world_size=1, **kwargs)
    out.times_s["init"] = time.perf_counter() - t0
    try:
        out.rank, out.world_size = dist.get_rank(), dist.get_world_size()
        _smoke_collectives(out, dev, large_bytes, repeats)
    finally:
        t0 = time.perf_counter()
        dist.destroy_process_group()
        out.times_s["destroy"] = time.perf_counter() - t0


def _smoke_collectives(out: CommCheck, dev, large_bytes: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist

    world = out.world_size
    small = torch.arange(1024, dtype=torch.float32, device=dev)
    expect = small * world
    dist.all_reduce(small)                                              # first call: lazy communicator setup
    _sync(str(dev))
    out.correct = bool(torch.equal(small, expect))
    out.times_s["all_reduce_small"] = _median_s(lambda: dist.all_reduce(small), str(dev), repeats)
    large = torch.ones(max(1, large_bytes // 4), dtype=torch.float32, device=dev)
    dist.all_reduce(large)
    _sync(str(dev))
    out.correct = out.correct and bool(large[0].item() == world and large[-1].item() == world)
    t = _median_s(lambda: dist.all_reduce(large), str(dev), repeats)
    out.times_s["all_reduce_large"] = t
    out.large_bytes_per_s = large.numel() * 4 / t if t > 0 else None
    barrier = {"device_ids": [dev.index]} if dev.type == "cuda" and dev.index is not None else {}
    out.times_s["barrier"] = _median_s(lambda: dist.barrier(**barrier), str(dev), repeats)


def _median_s(call, dev: str, repeats: int) -> float:
    """Median wall seconds of ``call()`` with the device synchronised around each call."""
    times = []
    for _ in range(max(1, repeats)):
        _sync(dev)
        t0 = time.perf_counter()
        call()
        _sync(dev)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _nccl_version() -> Optional[str]:
    try:
        import torch

        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:                         # noqa: BLE001 (a version string is informative only)
        return None
