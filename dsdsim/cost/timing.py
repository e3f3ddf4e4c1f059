"""Roofline time of an operator on a hardware spec.

t = count * ( max(F_padded / (P_dtype * eta_c), bytes / (BW * eta_m))      device work
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
    """Seconds per step spent on one operator (all its occurrences), split by what bounds it."""

    op: OpCost
    compute_s: np.ndarray
    memory_s: np.ndarray
    comm_s: np.ndarray
    overhead_s: np.ndarray
    time_s: np.ndarray

    @property
    def bound(self) -> np.ndarray:
        """Index into (compute, memory, communication, overhead) of the largest term, per grid point."""
        stack = np.stack(np.broadcast_arrays(self.compute_s, self.memory_s, self.comm_s, self.overhead_s))
        return np.argmax(stack, axis=0)

    def bound_at(self, index=()) -> Bound:
        return _BOUNDS[int(np.asarray(self.bound)[index])]


def launch_overhead(hw: HardwareSpec, cuda_graphs: bool) -> float:
    return hw.launch_overhead_s.value if cuda_graphs else hw.eager_launch_overhead_s.value


def op_time(op: OpCost, hw: HardwareSpec, cuda_graphs: bool = True) -> OpTime:
    eff = hw.efficiency
    count = np.asarray(op.count, dtype=float)
    compute = np.asarray(op.flops_padded, dtype=float) / (hw.peak(op.dtype) * eff.compute.value)
    memory = np.asarray(op.bytes, dtype=float) / (hw.bandwidth * eff.memory.value)
    comm = np.zeros(())
    if op.kind in (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather) and op.comm_group > 1:
        link = hw.link_bandwidth_bytes_per_s.value * eff.collective.value
        comm = hw.link_latency_s.value + np.asarray(op.comm_bytes, dtype=float) / link
        memory = np.zeros(())  # the collective's own buffer traffic hides under the link time
    overhead = op.launches * launch_overhead(hw, cuda_graphs) + np.asarray(op.host_s, dtype=float)
    per = np.maximum(compute, memory) + comm + overhead
    return OpTime(op=op, compute_s=compute * count, memory_s=memory * count, comm_s=comm * count,
                  overhead_s=overhead * count, time_s=per * count)


def total_time(op_times: list[OpTime]) -> np.ndarray:
    out = np.zeros(())
    for t in op_times:
        out = out + t.time_s
    return out
