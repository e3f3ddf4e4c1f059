"""Engine time of a step: host scheduling (overlapped or not), the speculative machinery, CUDA-graph padding.

Pure functions of the step's shape and an engine spec's terms (``dsdsim.specs.engine`` has the equations). The
kernel time they add to comes from ``dsdsim.cost.step``; fitting (``dsdsim.fit``) calls ``engine_time`` with the
kernel times held fixed.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from functools import lru_cache
from typing import NamedTuple, Optional

import numpy as np

from dsdsim.cost.num import is_scalar, maximum, num, where
from dsdsim.specs.engine import CudaGraphs, EngineParams, GraphPadding, KindCoefficients
from dsdsim.specs.hardware import HardwareSpec


class EngineTime(NamedTuple):
    """Seconds per step the engine adds (floats at one point, arrays over the step grid). ``added_s`` is what the
    step time gains: the GPU terms plus the host time that is not hidden behind device time."""

    host_s: np.ndarray | float            # host time per step (whether hidden or not)
    host_exposed_s: np.ndarray | float    # the part of it the step waits for
    gpu_s: np.ndarray | float             # GPU terms: device time beyond the kernels of the passes
    overlapped: np.ndarray | bool = False   # whether the step's host work overlaps its device time (async)

    @property
    def added_s(self) -> np.ndarray:
        return self.gpu_s + self.host_exposed_s


def _units(c: tuple, b, tokens, passes, layers):
    """step + sequence * B + token * B q + draft_pass * passes + layer * layers, for one coefficient tuple."""
    out = c[0] + c[1] * b if c[1] else c[0]
    if c[2]:
        out = out + c[2] * tokens
    if c[3]:
        out = out + c[3] * passes
    if c[4]:
        out = out + c[4] * layers
    return out


def _kind_terms(c: KindCoefficients, b, tokens, passes, layers, kernel_s, eager_kernel_s):
    """(host seconds, of which per draft pass, GPU seconds) of one kind of step."""
    host = _units(c.host_s, b, tokens, passes, layers)
    host_pass = c.host_s[3] * passes if c.host_s[3] else 0.0
    if not c.has_gpu:
        return host, host_pass, 0.0
    gpu = _units(c.gpu_s, b, tokens, passes, layers) if any(c.gpu_s) else 0.0
    if any(c.gpu_kernels):
        gpu = gpu + _units(c.gpu_kernels, b, tokens, passes, layers) * kernel_s
    if any(c.gpu_eager_kernels):
        gpu = gpu + _units(c.gpu_eager_kernels, b, tokens, passes, layers) * eager_kernel_s
    return host, host_pass, gpu


def _exposed(overlaps: bool, host, host_pass, device, draft_device):
    """Host time the step waits for: with overlap, what exceeds the device time; without, all of it except the
    draft-pass host work that its passes' kernels hide."""
    if overlaps:
        return maximum(host - device, 0.0)
    if type(host_pass) is float and host_pass == 0.0:
        return host
    return host - host_pass + maximum(host_pass - draft_device, 0.0)


def piecewise_attention_s(piecewise, layers: float, kernel_s: float, eager_kernel_s: float):
    """GPU seconds a step replaying a PIECEWISE graph adds over a FULL one: its ``layers`` split ops (attention)
    launched eagerly between the graphed pieces, each paying the eager launch gap instead of the graphed one."""
    if type(piecewise) is bool:
        return layers * (eager_kernel_s - kernel_s) if piecewise else 0.0
    return np.where(piecewise, layers * (eager_kernel_s - kernel_s), 0.0)


def engine_time(p: EngineParams, device_s, batch, k, draft_passes, verify_tokens, kernel_s, eager_kernel_s=None,
                dynamic: bool = False, layers: float = 0.0, draft_device_s=0.0, piecewise=False) -> EngineTime:
    """Engine terms for steps whose kernels take ``device_s`` (of which the draft passes ``draft_device_s``): batch
    B, K draft tokens, ``draft_passes`` passes, ``verify_tokens`` = q tokens per sequence in the verify pass,
    ``layers`` target layers; ``kernel_s`` / ``eager_kernel_s`` the time of one small kernel replayed from a graph /
    launched eagerly. K = 0 is a plain step, or with ``dynamic`` the K = 0 tier of a server running a dynamic K
    table (whose speculative steps are then ``dynamic`` ones). ``piecewise``: the steps whose verify pass replays a
    PIECEWISE graph (``piecewise_steps``), which add ``piecewise_attention_s``."""
    eager_kernel_s = kernel_s if eager_kernel_s is None else eager_kernel_s
    if type(k) is float and type(batch) is float and type(device_s) is float:       # one point, in floats
        c = (p.dynamic if dynamic else p.speculative) if k > 0 else (p.off_tier if dynamic else p.plain)
        host, host_pass, gpu = _kind_terms(c, batch, batch * verify_tokens, draft_passes, layers, kernel_s,
                                           eager_kernel_s)
        if piecewise is True:
            gpu += piecewise_attention_s(True, layers, kernel_s, eager_kernel_s)
        return EngineTime(host, _exposed(c.overlaps, host, host_pass, device_s + gpu, draft_device_s), gpu,
                          c.overlaps)
    b = num(batch)
    kk = num(k)
    tokens = b * num(verify_tokens)
    passes = num(draft_passes)
    zero, spec = (p.off_tier, p.dynamic) if dynamic else (p.plain, p.speculative)
    args = (b, tokens, passes, layers, kernel_s, eager_kernel_s)
    pw_s = piecewise_attention_s(piecewise, layers, kernel_s, eager_kernel_s) if piecewise is not False else 0.0
    if type(kk) is float:                          # one kind of step
        c = spec if kk > 0 else zero
        host, host_pass, gpu = _kind_terms(c, *args)
        gpu = gpu + pw_s
        device = num(device_s) + gpu
        exposed = _exposed(c.overlaps, host, host_pass, device, draft_device_s)
        overlapped = c.overlaps
    else:
        on = kk > 0
        h1, hp1, g1 = _kind_terms(spec, *args)
        h0, hp0, g0 = _kind_terms(zero, *args)
        host, gpu = np.where(on, h1, h0), np.where(on, g1, g0) + pw_s
        device = num(device_s) + gpu
        exposed = np.where(on, _exposed(spec.overlaps, h1, hp1, device, draft_device_s),
                           _exposed(zero.overlaps, h0, hp0, device, draft_device_s))
        overlapped = np.where(on, spec.overlaps, zero.overlaps)
    if is_scalar(device) and is_scalar(host) and is_scalar(exposed):
        return EngineTime(host, exposed, gpu, overlapped)
    shape = np.broadcast_shapes(np.shape(device), np.shape(host), np.shape(exposed), np.shape(gpu))
    return EngineTime(*(np.broadcast_to(x, shape) for x in (host, exposed, gpu)), overlapped)


def term_seconds(spec, step) -> list[tuple[object, float]]:
    """(term, seconds before any overlap) for every term of ``spec`` that one scalar ``step``
    (dsdsim.cost.step.StepCost) pays: value x units, kernel counts at the hardware's small-kernel times."""
    from dsdsim.specs.engine import STEP_KINDS_OF, RunsOn, Unit

    k = float(np.asarray(step.k).reshape(-1)[0])
    kind = ("dynamic" if step.dynamic else "speculative") if k > 0 else ("off_tier" if step.dynamic else "plain")
    b = float(np.asarray(step.batch).reshape(-1)[0])
    q = float(np.asarray(step.verify_tokens).reshape(-1)[0])
    units = {"step": 1.0, "sequence": b, "token": b * q,
             "draft_pass": float(np.asarray(step.draft_passes).reshape(-1)[0]),
             "layer": float(step.model.graph_split_ops)}
    graphed_s, eager_s = small_kernel_s(step.hardware)
    drafter = getattr(step, "drafter", None)
    drafter_kind = drafter.kind.value if drafter is not None else None
    out = []
    for t in spec.terms:
        if kind not in STEP_KINDS_OF[t.applies] or not t.paid_by(drafter_kind):
            continue
        per_unit = t.value if t.unit is Unit.seconds or t.runs_on is RunsOn.host else t.value * (
            graphed_s if t.unit is Unit.kernels else eager_s)
        out.append((t, per_unit * units[t.per.value]))
    return out


# --- CUDA graphs -----------------------------------------------------------------------------------------------


def next_capture_size(sizes: tuple[int, ...], n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the smallest capture size >= n, whether there is one). ``sizes``: ascending, a tuple or a float array; none
    at all: n, not held."""
    if type(n) is float:
        idx = bisect_left(sizes, n)
        return (float(sizes[idx]), True) if idx < len(sizes) else (n, False)
    arr = sizes if type(sizes) is np.ndarray else num(sizes)
    if arr.size == 0:
        return np.array(n, dtype=float), np.zeros(np.shape(n), dtype=bool)
    idx = np.searchsorted(arr, n, side="left")
    ok = idx < arr.size
    return np.where(ok, arr[np.minimum(idx, arr.size - 1)], n), ok


@lru_cache(maxsize=256)
def _multiples(graphs: CudaGraphs, q: float) -> tuple[int, ...]:
    """``graphs``' capture sizes rounded up to multiples of q, kept where they stay within the largest capture size
    (vLLM under speculation captures multiples of K + 1 so a uniform decode batch fills whole sequences). Keyed by
    the spec, whose hash is kept, not by its sizes (a tuple hashes all its items on every call)."""
    sizes = graphs.capture_sizes
    top = sizes[-1]
    kept = {math.ceil(s / q) * int(q) for s in sizes if math.ceil(s / q) * q <= top}
    if graphs.uniform_decode_request_grid:      # and n x q for the request counts of the grid, within the largest
        kept |= {n * int(q) for n in _REQUEST_COUNTS if n * q <= top}
    return tuple(sorted(kept))


def largest_capture(graphs: CudaGraphs, q: float) -> int:
    """The largest token count ``graphs`` replay for passes of q tokens per sequence (its capture sizes rounded to
    multiples of q where the engine rounds them; 0 where none is left)."""
    sizes = _multiples(graphs, q) if graphs.multiple_of_verify_tokens else graphs.capture_sizes
    return sizes[-1] if sizes else 0


@lru_cache(maxsize=256)
def _multiples_array(graphs: CudaGraphs, q: float) -> np.ndarray:
    """``_multiples`` as a float array (what a grid searches), made once per spec and q; read-only, as it is shared."""
    arr = np.array(_multiples(graphs, q), dtype=float)
    arr.flags.writeable = False
    return arr


# vllm/config/vllm.py@v0.29.0 VllmConfig._set_cudagraph_sizes: the request counts of the uniform decode sizes
_REQUEST_COUNTS = (1, 2, 4, *range(8, 256, 8), *range(256, 8193, 16))


def _next_multiple_size(graphs: CudaGraphs, b, q):
    """(the smallest capture size, rounded to a multiple of q, holding B * q tokens; whether there is one)."""
    if type(b) is float and type(q) is float:
        return next_capture_size(_multiples(graphs, q), b * q)
    b, q = np.asarray(b, dtype=float), np.asarray(q, dtype=float)
    axis = _own_axis(b, q)
    if axis is not None:      # a grid: q varies along an axis of its own (K), b along others: one column per q
        cols = [next_capture_size(_multiples_array(graphs, qv), b * qv) for qv in q.ravel().tolist()]
        return (np.concatenate([c[0] for c in cols], axis=axis),
                np.concatenate([np.broadcast_to(c[1], c[0].shape) for c in cols], axis=axis))
    size = np.array(np.broadcast_to(b * q, np.broadcast_shapes(b.shape, q.shape)))
    ok = np.zeros(size.shape, dtype=bool)
    for qv in sorted(set(q.ravel().tolist())):   # a few values of q: each evaluated over b's own shape,
                                                # written where q has it (no np.unique: numpy.ma)
        s, o = next_capture_size(_multiples_array(graphs, float(qv)), b * qv)
        where_q = q == qv
        np.copyto(size, s, where=where_q)
        np.copyto(ok, o, where=where_q)
    return size, ok


def _own_axis(b: np.ndarray, q: np.ndarray) -> Optional[int]:
    """The one axis q varies along where b does not (a grid's K axis), or None: q a single value or sharing an axis
    with b, or the two of different ranks."""
    if q.ndim != b.ndim or q.ndim == 0:
        return None
    wide = [i for i, d in enumerate(q.shape) if d > 1]
    if len(wide) != 1 or b.shape[wide[0]] != 1:
        return None
    return wide[0]


def _uniform_decode_size(graphs: CudaGraphs, b, q):
    """(the token count a uniform decode batch of B sequences x q tokens is padded to, whether a graph holds it,
    whether that graph is PIECEWISE): the next FULL size rounded to a multiple of q, or, where the engine also
    captures the raw sizes as PIECEWISE graphs for such batches (``piecewise_raw_sizes``), the next raw size when it
    comes first (vLLM model runner V2 0.25-0.28: CudaGraphManager._init_candidates lists both by token count and
    dispatch takes the next count's first compatible graph)."""
    size, ok = _next_multiple_size(graphs, b, q)
    if not graphs.piecewise_raw_sizes:
        return size, ok, False
    raw, raw_ok = next_capture_size(graphs.capture_sizes, b * q)
    if type(ok) is bool:
        pw = raw_ok and (not ok or raw < size)
        return (raw if pw else size), ok or raw_ok, pw
    pw = raw_ok & (~ok | (raw < size))
    return np.where(pw, raw, size), ok | raw_ok, pw


def piecewise_steps(graphs: Optional[CudaGraphs], batch, tokens_per_sequence, graphs_on: bool = True):
    """Whether a pass of B sequences x q tokens replays a PIECEWISE graph (attention launched eagerly between the
    graphed pieces, once per split op) rather than a FULL one (``_uniform_decode_size``); False where the engine
    captures no raw sizes for uniform decode batches."""
    if not graphs_on or graphs is None or not graphs.piecewise_raw_sizes or graphs.capture_sizes is None \
            or graphs.padding is not GraphPadding.tokens or not graphs.multiple_of_verify_tokens:
        return False
    return _uniform_decode_size(graphs, batch, tokens_per_sequence)[2]


@lru_cache(maxsize=64)
def graphs_on(graphs: Optional[CudaGraphs], hw: HardwareSpec, architecture: Optional[str] = None
              ) -> Optional[CudaGraphs]:
    """The engine's graphs for this model on this part: its capture sizes for the model's architecture where the
    spec lists them (``capture_sizes_by_architecture``), else for the part's compute-capability family
    (``capture_sizes_by_capability``), else as they are."""
    if graphs is None or not (graphs.capture_sizes_by_capability or graphs.capture_sizes_by_architecture):
        return graphs
    sizes = (graphs.capture_sizes_by_architecture or {}).get(architecture or "")
    if sizes is None and hw.compute_capability is not None:
        sizes = (graphs.capture_sizes_by_capability or {}).get(hw.compute_capability.family)
    if sizes is None:
        return graphs
    return graphs.model_copy(update={"capture_sizes": tuple(sizes), "capture_sizes_by_capability": None,
                                     "capture_sizes_by_architecture": None})


@lru_cache(maxsize=64)
def graphs_of(graphs: Optional[CudaGraphs], dynamic: bool, speculative: bool = False) -> Optional[CudaGraphs]:
    """The graphs a step replays: a fixed-K server's ``graphs``; for a server running a dynamic K table, the same
    with its own rounding where the spec states one (``dynamic_multiple_of_verify_tokens``); for a speculative step
    (K > 0), the speculative server's own capture list where the spec states one (``speculative_capture_sizes``, padded
    as ``speculative_padding`` says)."""
    if graphs is None:
        return None
    update = {}
    if dynamic and graphs.dynamic_multiple_of_verify_tokens is not None \
            and graphs.dynamic_multiple_of_verify_tokens != graphs.multiple_of_verify_tokens:
        update["multiple_of_verify_tokens"] = graphs.dynamic_multiple_of_verify_tokens
    if speculative and graphs.speculative_capture_sizes is not None:
        update["capture_sizes"] = graphs.speculative_capture_sizes
        if graphs.speculative_padding is not None:
            update["padding"] = graphs.speculative_padding
    return graphs.model_copy(update=update) if update else graphs


def padded_by_k(graphs: Optional[CudaGraphs], dynamic: bool, batch, k, tokens_per_sequence, graphs_on: bool = True
                ) -> tuple[np.ndarray, np.ndarray]:
    """``padded_tokens`` for the verify pass of a step at draft length K (arrays allowed): the speculative steps
    (K > 0) on the speculative server's graphs, K = 0 on the plain server's (``graphs_of``)."""
    plain = padded_tokens(graphs_of(graphs, dynamic), batch, tokens_per_sequence, graphs_on)
    if graphs is None or graphs.speculative_capture_sizes is None:
        return plain
    if type(k) is float:
        return padded_tokens(graphs_of(graphs, dynamic, True), batch, tokens_per_sequence, graphs_on) if k > 0 \
            else plain
    spec = padded_tokens(graphs_of(graphs, dynamic, True), batch, tokens_per_sequence, graphs_on)
    on = np.asarray(k) > 0
    return np.where(on, spec[0], plain[0]), np.where(on, spec[1], plain[1])


def padded_tokens(graphs: Optional[CudaGraphs], batch, tokens_per_sequence, graphs_on: bool = True
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per sequence the kernels run for, whether they replay a CUDA graph) for a pass of B sequences with
    q tokens each. The padded size S is B * q rounded up to a capture size (padding by tokens) or B rounded up, times
    q (padding by batch); the pass then runs S / B tokens per sequence: GEMMs and sampling see S tokens, attention
    still reads the KV cache of the B real sequences only (padding slots hold no context). Past the largest capture
    size, or a size not captured when padding is off: eager, unpadded. With ``multiple_of_verify_tokens`` (vLLM
    under speculation) the capture sizes are rounded up to multiples of q first, so a uniform decode batch of B
    sequences pads to a whole number of sequences."""
    b = batch if type(batch) is float else num(batch)
    q = tokens_per_sequence if type(tokens_per_sequence) is float else num(tokens_per_sequence)
    if type(b) is float and type(q) is float:      # one point: (float, bool)
        return _padded_point(graphs, b, q, graphs_on)
    shape = np.broadcast_shapes(np.shape(b), np.shape(q))

    def out(tokens, graphed):
        return np.broadcast_to(tokens, shape), np.broadcast_to(graphed, shape)
    if not graphs_on:
        return out(q, False)
    if graphs is None or graphs.capture_sizes is None:
        return out(q, True)
    sizes = graphs.capture_sizes
    if graphs.padding is GraphPadding.tokens:
        if graphs.multiple_of_verify_tokens:
            size, ok, _ = _uniform_decode_size(graphs, b, q)
            return out(where(ok, size / b, q), ok)
        size, ok = next_capture_size(sizes, b * q)
        return out(where(ok, size / b, q), ok)
    size, ok = next_capture_size(sizes, b)
    if graphs.padding is GraphPadding.none:
        return out(q, ok & (size == b))
    return out(where(ok, q * size / b, q), ok)


def small_kernel_s(hw: HardwareSpec) -> tuple[float, float]:
    """The time of one small kernel (the unit of an engine's kernel-count terms: a rejection sampler's or a
    drafter's bookkeeping kernels): the kernel floor plus the launch gap, replayed from a CUDA graph and launched
    eagerly."""
    floor = hw.kernels.kernel_floor_s.value if hw.kernels is not None else 0.0
    return floor + hw.launch_overhead_s.value, floor + hw.eager_launch_overhead_s.value


def _padded_point(graphs: Optional[CudaGraphs], b: float, q: float, graphs_on: bool) -> tuple[float, bool]:
    """``padded_tokens`` at one point, in floats."""
    if not graphs_on:
        return q, False
    if graphs is None or graphs.capture_sizes is None:
        return q, True
    sizes = graphs.capture_sizes
    if graphs.padding is GraphPadding.tokens:
        size, ok = _uniform_decode_size(graphs, b, q)[:2] if graphs.multiple_of_verify_tokens \
            else next_capture_size(sizes, b * q)
        return (size / b if ok else q), ok
    size, ok = next_capture_size(sizes, b)
    if graphs.padding is GraphPadding.none:
        return q, ok and size == b
    return (q * size / b if ok else q), ok
