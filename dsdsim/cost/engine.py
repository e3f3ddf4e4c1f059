"""Engine time of a step: host scheduling (overlapped or not), the speculative machinery, CUDA-graph padding.

Pure functions of the step's shape and an engine spec (``dsdsim.specs.engine`` has the equations). The kernel
time they add to comes from ``dsdsim.cost.step``; fitting (scripts/fit_engines.py, ``dsdsim calibrate
--measurements``) calls ``engine_time`` with the kernel times held fixed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

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
    b = np.asarray(batch, dtype=float)
    spec = np.asarray(k, dtype=float) > 0
    host = p.host_step_s + p.host_per_sequence_s * b
    fixed = np.where(spec, p.spec_fixed_s, 0.0)
    passes = np.where(spec, p.draft_pass_s * np.asarray(draft_passes, dtype=float), 0.0)
    rejection = np.where(spec, p.rejection_per_token_s * b * np.asarray(verify_tokens, dtype=float), 0.0)
    device = np.asarray(device_s, dtype=float) + fixed + passes + rejection
    overlaps = np.where(spec, p.host_overlaps_speculative, p.host_overlaps_plain)
    exposed = np.where(overlaps, np.maximum(host - device, 0.0), host)
    shape = np.broadcast_shapes(np.shape(device), np.shape(host), np.shape(exposed))
    return EngineTime(*(np.broadcast_to(x, shape) for x in (host, exposed, fixed, passes, rejection)))


def no_engine_time(shape) -> EngineTime:
    z = np.zeros(shape)
    return EngineTime(z, z, z, z, z)


# --- CUDA graphs -----------------------------------------------------------------------------------------------


def _next_size(sizes: tuple[int, ...], n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the smallest capture size >= n, whether there is one)."""
    arr = np.asarray(sizes, dtype=float)
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
    b = np.asarray(batch, dtype=float)
    q = np.asarray(tokens_per_sequence, dtype=float)
    shape = np.broadcast_shapes(b.shape, q.shape)
    q_full = np.broadcast_to(q, shape)
    if not graphs_on:
        return q_full, np.zeros(shape, dtype=bool)
    if graphs is None or graphs.capture_sizes is None:
        return q_full, np.ones(shape, dtype=bool)
    sizes = graphs.capture_sizes
    if graphs.padding is GraphPadding.tokens:
        n = b * q
        size, ok = _next_size(sizes, n)
        return np.broadcast_to(np.where(ok, size / b, q), shape), np.broadcast_to(ok, shape)
    size, ok = _next_size(sizes, b)
    if graphs.padding is GraphPadding.none:
        return q_full, np.broadcast_to(ok & (size == b), shape)
    return np.broadcast_to(np.where(ok, q * size / b, q), shape), np.broadcast_to(ok, shape)
