"""Roofline time of an operator on a hardware spec.

t = count * ( max(F_padded / (P_dtype * eta_c), bytes / (BW * eta_m,kind))  device work
              + [alpha + comm_bytes / (link_BW * eta_coll)]                 collectives
              + launches * t_launch + host_s )                              fixed costs
eta and t_launch come from the hardware spec (datasheet defaults, replaced by calibration).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dsdsim.cost.ops import Bound, OpCost, OpKind
from dsdsim.specs.hardware import HardwareSpec

_BOUNDS = (Bound.compute, Bound.memory, Bound.communication, Bound.overhead)


@dataclass(frozen=True)
class OpTime:
    """Seconds per step spent on one operator (all its occurrences), split by what bounds it.

    The split is kept per occurrence (``*_per``) and scaled by ``count`` only when asked for: a grid sweep
    needs ``time_s`` alone.
    """

    op: OpCost
    compute_per: np.ndarray
    memory_per: np.ndarray
    comm_per: np.ndarray
    overhead_per: np.ndarray
    time_s: np.ndarray

    @property
    def compute_s(self) -> np.ndarray:
        return self.compute_per * self.op.count

    @property
    def memory_s(self) -> np.ndarray:
        return self.memory_per * self.op.count

    @property
    def comm_s(self) -> np.ndarray:
        return self.comm_per * self.op.count

    @property
    def overhead_s(self) -> np.ndarray:
        return self.overhead_per * self.op.count

    @property
    def bound(self) -> np.ndarray:
        """Index into (compute, memory, communication, overhead) of the largest term, per grid point."""
        stack = np.stack(np.broadcast_arrays(self.compute_s, self.memory_s, self.comm_s, self.overhead_s))
        return np.argmax(stack, axis=0)

    def bound_at(self, index=()) -> Bound:
        return _BOUNDS[int(np.asarray(self.bound)[index])]


_VECTOR_KINDS = (OpKind.elementwise, OpKind.logits)


def memory_efficiency(hw: HardwareSpec, kind: OpKind) -> float:
    """Fraction of bandwidth an operator class reaches: GEMMs stream weights (``memory``); attention reads the
    KV cache (``attention_memory``); norms, activations and sampling are vector kernels (``vector_memory``);
    an embedding gather streams whole rows like a weight read (``memory``). The latter two default to ``memory`` until measured."""
    eff = hw.efficiency
    if kind is OpKind.attention:
        return eff.attention_memory_value
    if kind in _VECTOR_KINDS:
        return eff.vector_memory_value
    return eff.memory.value


def launch_overhead(hw: HardwareSpec, cuda_graphs: bool) -> float:
    return hw.launch_overhead_s.value if cuda_graphs else hw.eager_launch_overhead_s.value


def op_time(op: OpCost, hw: HardwareSpec, cuda_graphs: bool = True) -> OpTime:
    eff = hw.efficiency
    count = np.asarray(op.count, dtype=float)
    compute = np.asarray(op.flops_padded, dtype=float) / (hw.peak(op.dtype) * eff.compute.value)
    memory = np.asarray(op.bytes, dtype=float) / (hw.bandwidth * memory_efficiency(hw, op.kind))
    comm = np.zeros(())
    if op.kind in (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather) and op.comm_group > 1:
        link = hw.link_bandwidth_bytes_per_s.value * eff.collective.value
        comm = hw.link_latency_s.value + np.asarray(op.comm_bytes, dtype=float) / link
        memory = np.zeros(())  # the collective's own buffer traffic hides under the link time
    overhead = op.launches * launch_overhead(hw, cuda_graphs) + np.asarray(op.host_s, dtype=float)
    per = np.maximum(compute, memory)                   # a new array: the adds below may work in place
    per = _in_place(per, comm + overhead, np.add)       # fixed terms are usually scalars
    return OpTime(op=op, compute_per=compute, memory_per=memory, comm_per=comm, overhead_per=overhead,
                  time_s=_in_place(per, count, np.multiply))


def _in_place(a, b, ufunc):
    """ufunc(a, b), written into `a` when `a` is an array already of the result's shape (same values, one
    grid-sized allocation fewer)."""
    if isinstance(a, np.ndarray) and a.ndim and a.shape == np.broadcast_shapes(a.shape, np.shape(b)):
        return ufunc(a, b, out=a)
    return ufunc(a, b)


def total_time(op_times: list[OpTime]) -> np.ndarray:
    """Sum of operator times. Operators are summed within each array shape first (most do not depend on the
    context axis), then the few partial sums are broadcast together: the same sum, far fewer full-grid adds."""
    by_shape: dict[tuple, np.ndarray] = {}
    for t in op_times:
        a = np.asarray(t.time_s, dtype=float)
        by_shape[a.shape] = by_shape[a.shape] + a if a.shape in by_shape else a
    out = np.zeros(())
    for part in by_shape.values():
        out = out + part
    return out
