"""Engine time of a step: host scheduling (overlapped or not), the speculative machinery, CUDA-graph padding.

Pure functions of the step's shape and an engine spec (``dsdsim.specs.engine`` has the equations). The kernel
time they add to comes from ``dsdsim.cost.step``; fitting (scripts/fit_engines.py, ``dsdsim calibrate
--measurements``) calls ``engine_time`` with the kernel times held fixed.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsdsim.cost.num import is_scalar, maximum, num, where
from dsdsim.specs.engine import CudaGraphs, EngineParams, GraphPadding  # noqa: F401 (EngineParams re-exported)


@dataclass(frozen=True)
class EngineTime:
    """Seconds per step the engine adds (arrays over the step grid). ``added_s`` is what the step time gains:
    the speculative terms plus the host time that is not hidden behind device time."""

    host_s: np.ndarray            # host time per step (whether hidden or not)
    host_exposed_s: np.ndarray    # the part of it the step waits for
    spec_fixed_s: np.ndarray
    draft_passes_s: np.ndarray
    rejection_s: np.ndarray

    @property
    def speculative_s(self) -> np.ndarray:
        return self.spec_fixed_s + self.draft_passes_s + self.rejection_s

    @property
    def added_s(self) -> np.ndarray:
        return self.speculative_s + self.host_exposed_s


def engine_time(p: EngineParams, device_s, batch, k, draft_passes, verify_tokens) -> EngineTime:
    """Engine terms for steps whose kernels take ``device_s``; batch B, K draft tokens, ``draft_passes`` passes and
    ``verify_tokens`` = q tokens per sequence in the verify pass. K = 0 is a plain step (no speculative terms)."""
    b = num(batch)
    spec = num(k) > 0
    host = p.host_step_s + p.host_per_sequence_s * b
    fixed = where(spec, p.spec_fixed_s, 0.0)
    passes = where(spec, p.draft_pass_s * num(draft_passes), 0.0)
    rejection = where(spec, p.rejection_per_token_s * b * num(verify_tokens), 0.0)
    device = num(device_s) + fixed + passes + rejection
    overlaps = (bool(p.host_overlaps_speculative if spec else p.host_overlaps_plain) if isinstance(spec, bool)
                else np.where(spec, p.host_overlaps_speculative, p.host_overlaps_plain))
    exposed = where(overlaps, maximum(host - device, 0.0), host)
    if is_scalar(device) and is_scalar(host) and is_scalar(exposed):
        return EngineTime(host, exposed, fixed, passes, rejection)
    shape = np.broadcast_shapes(np.shape(device), np.shape(host), np.shape(exposed))
    return EngineTime(*(np.broadcast_to(x, shape) for x in (host, exposed, fixed, passes, rejection)))


def no_engine_time(shape) -> EngineTime:
    z = np.zeros(shape)
    return EngineTime(z, z, z, z, z)


# --- CUDA graphs -----------------------------------------------------------------------------------------------


def _next_size(sizes: tuple[int, ...], n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the smallest capture size >= n, whether there is one)."""
    if type(n) is float:
        idx = bisect_left(sizes, n)
        return (float(sizes[idx]), True) if idx < len(sizes) else (n, False)
    arr = num(sizes)
    idx = np.searchsorted(arr, n, side="left")
    ok = idx < arr.size
    return np.where(ok, arr[np.minimum(idx, arr.size - 1)], n), ok


def padded_tokens(graphs: Optional[CudaGraphs], batch, tokens_per_sequence, graphs_on: bool = True
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per sequence the kernels run for, whether they replay a CUDA graph) for a pass of B sequences with
    q tokens each. The padded size S is B * q rounded up to a capture size (padding by tokens) or B rounded up, times
    q (padding by batch); the pass then runs S / B tokens per sequence: GEMMs and sampling see S tokens, attention
    still reads the KV cache of the B real sequences only (padding slots hold no context). Past the largest capture
    size, or a size not captured when padding is off: eager, unpadded."""
    b = num(batch)
    q = num(tokens_per_sequence)
    if type(b) is float and type(q) is float:      # one point: (float, bool)
        def out(tokens, graphed):
            return tokens, graphed
    else:
        shape = np.broadcast_shapes(np.shape(b), np.shape(q))

        def out(tokens, graphed):
            return np.broadcast_to(tokens, shape), np.broadcast_to(graphed, shape)
    if not graphs_on:
        return out(q, False)
    if graphs is None or graphs.capture_sizes is None:
        return out(q, True)
    sizes = graphs.capture_sizes
    if graphs.padding is GraphPadding.tokens:
        size, ok = _next_size(sizes, b * q)
        return out(where(ok, size / b, q), ok)
    size, ok = _next_size(sizes, b)
    if graphs.padding is GraphPadding.none:
        return out(q, ok & (size == b))
    return out(where(ok, q * size / b, q), ok)
