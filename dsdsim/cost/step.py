"""One speculative step: draft (K tokens) + verify (q = K + 1 tokens per sequence) + fixed overheads.

T(B, K, c) = draft + verify + step overhead (+ hand-off when K >= 1). K = 0 is plain decoding: no draft,
a q = 1 pass sampled once. Everything broadcasts over numpy arrays of batch, k and context.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsdsim.cost.drafts import draft_ops
from dsdsim.cost.layers import PassContext, pass_ops
from dsdsim.cost.memory import MemoryUse, memory_use
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.cost.timing import OpTime, op_time, total_time
from dsdsim.errors import DsdsimError
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, DrafterSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec
from dsdsim.specs.setup import Setup, resolve  # noqa: F401  (resolve re-exported for callers of the old place)


@dataclass(frozen=True)
class PassCost:
    """Operators of one phase (draft or verify) with their roofline times."""

    op_times: list[OpTime]

    @property
    def time_s(self) -> np.ndarray:
        return total_time(self.op_times)

    @property
    def flops(self) -> np.ndarray:
        return sum((np.asarray(t.op.flops) * t.op.count for t in self.op_times), np.zeros(()))

    @property
    def bytes(self) -> np.ndarray:
        return sum((np.asarray(t.op.bytes) * t.op.count for t in self.op_times), np.zeros(()))


@dataclass(frozen=True)
class StepCost:
    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    drafter: Optional[DrafterSpec]
    batch: np.ndarray
    k: np.ndarray
    context: np.ndarray
    verify: PassCost
    draft: PassCost
    overhead_s: np.ndarray
    memory: MemoryUse
    experts_touched: Optional[np.ndarray]     # mean distinct routed experts per MoE layer (verify, all ranks)

    @property
    def step_time_s(self) -> np.ndarray:
        return self.verify.time_s + self.draft.time_s + self.overhead_s

    @property
    def feasible(self) -> np.ndarray:
        return self.memory.feasible


def _check_grid(batch, k, context, drafter: Optional[DrafterSpec]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b = np.asarray(batch, dtype=float)
    kk = np.asarray(k, dtype=float)
    c = np.asarray(context, dtype=float)
    if np.any(~np.isfinite(b)) or np.any(b < 1) or np.any(b != np.round(b)):
        raise DsdsimError("batch sizes must be whole numbers >= 1")
    if np.any(~np.isfinite(kk)) or np.any(kk < 0) or np.any(kk != np.round(kk)):
        raise DsdsimError("K (draft tokens) must be whole numbers >= 0")
    if np.any(~np.isfinite(c)) or np.any(c < 0):
        raise DsdsimError("context length must be >= 0 tokens")
    if np.any(kk > 0) and drafter is None:
        raise DsdsimError("K > 0 needs a drafter (e.g. eagle3)")
    if drafter is not None and np.any(kk > drafter.max_k):
        raise DsdsimError(f"K = {int(kk.max())} is beyond the {drafter.label} drafter's limit of {drafter.max_k}")
    return b, kk, c


def simulate_step(model, hardware, deployment: Optional[Deployment] = None, drafter=None, batch=1, k=0,
                  context=1024, setup: Optional[Setup] = None) -> StepCost:
    """Cost of one speculative step. batch, k, context: scalars or broadcastable numpy arrays."""
    s = setup or resolve(model, hardware, deployment, drafter)
    b, kk, c = _check_grid(batch, k, context, s.drafter)
    m, hw, dep = s.model, s.hardware, s.deployment
    pc = PassContext.build(m, hw, dep)
    tree = s.drafter.tree if s.drafter is not None else None
    q = np.where(kk > 0, tree.tokens + 1.0, 1.0) if tree is not None else kk + 1.0   # a tree verifies TOKENS + 1
    sampling_passes = np.where(kk > 0, 2.0, 1.0)   # rejection sampling reads target and draft probabilities
    verify_ops = pass_ops(m, pc, b, q, c, sampling_passes=sampling_passes)
    d_ops: list[OpCost] = []
    if s.drafter is not None:
        dpc = PassContext.build(s.draft_model, hw, s.draft_deployment) if s.draft_model else None
        d_ops = draft_ops(m, s.drafter, pc, b, kk, c, draft_model=s.draft_model, draft_pc=dpc)
    verify = PassCost([op_time(o, hw, dep.cuda_graphs) for o in verify_ops])
    draft = PassCost([op_time(o, hw, dep.cuda_graphs) for o in d_ops])
    handoff = s.drafter.handoff_s if s.drafter is not None and s.drafter.kind is not DrafterKind.ngram else 0.0
    overhead = hw.step_overhead_s.value + handoff * (kk > 0)
    overhead = np.broadcast_to(overhead, np.broadcast_shapes(b.shape, kk.shape, c.shape)).astype(float)
    memory = memory_use(m, hw, dep, s.drafter, b, kk, c, s.draft_model)
    touched = _mean_touched(verify_ops)
    return StepCost(m, hw, dep, s.drafter, b, kk, c, verify, draft, overhead, memory, touched)


def _mean_touched(verify_ops: list[OpCost]) -> Optional[np.ndarray]:
    totals, counts = np.zeros(()), 0.0
    for o in verify_ops:
        if o.kind is OpKind.moe_experts:
            totals = totals + o.extra["experts_touched_total"] * o.count
            counts += float(np.max(o.count))
    return totals / counts if counts else None


def step_time_grid(model, hardware, deployment: Optional[Deployment] = None, drafter=None, batch_sizes=(1,),
                   k_values=(0,), contexts=(1024,), setup: Optional[Setup] = None) -> tuple[np.ndarray, np.ndarray]:
    """(step_time_s, feasible), each shaped (len(batch_sizes), len(k_values), len(contexts))."""
    b = np.asarray(batch_sizes, dtype=float)[:, None, None]
    kk = np.asarray(k_values, dtype=float)[None, :, None]
    c = np.asarray(contexts, dtype=float)[None, None, :]
    step = simulate_step(model, hardware, deployment, drafter, b, kk, c, setup=setup)
    shape = (b.shape[0], kk.shape[1], c.shape[2])
    return np.broadcast_to(step.step_time_s, shape), np.broadcast_to(step.feasible, shape)
