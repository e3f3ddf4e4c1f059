"""Memory on one GPU: weights, KV cache for B*(c+K+1) tokens, activations, drafter weights and KV.

Feasible when the sum fits in capacity x memory_utilization (vLLM's gpu_memory_utilization). Infeasible
points are reported as such, never silently predicted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsdsim.cost.drafts import drafter_weight_params, eagle_layer
from dsdsim.cost.layers import effective_context, kv_elements_per_token_per_rank, layer_groups
from dsdsim.cost.memo import by_identity
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, DrafterSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import FFNKind, ModelSpec


@dataclass(frozen=True)
class MemoryUse:
    weights_bytes: float
    kv_bytes: np.ndarray
    activation_bytes: np.ndarray
    draft_bytes: np.ndarray
    capacity_bytes: float          # capacity x utilisation

    @property
    def used_bytes(self) -> np.ndarray:
        return self.weights_bytes + self.kv_bytes + self.activation_bytes + self.draft_bytes

    @property
    def feasible(self) -> np.ndarray:
        return self.used_bytes <= self.capacity_bytes


@by_identity
def weight_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """Non-expert weights in the deployment dtype, routed experts in the expert dtype, all split tp ways."""
    w = dep.weight_dtype(model).bytes_per_element
    we = dep.routed_expert_dtype(model).bytes_per_element
    h = model.hidden_size
    routed = sum(layer.ffn.num_experts * 3 * h * layer.ffn.expert_intermediate_size
                 for layer in model.layers if layer.ffn.kind is FFNKind.moe)
    return ((model.params_total - routed) * w + routed * we) / dep.tp


def kv_bytes_per_gpu(model: ModelSpec, dep: Deployment, tokens_per_seq, batch) -> np.ndarray:
    """KV cache for `batch` sequences of `tokens_per_seq` tokens; sliding/chunked layers keep only their window."""
    total = np.zeros(())
    for layer, count, _ in layer_groups(model):
        held = effective_context(layer.attention, tokens_per_seq)
        total = total + count * held * kv_elements_per_token_per_rank(layer.attention, dep.tp)
    return total * np.asarray(batch, dtype=float) * dep.kv_dtype.bytes_per_element


def memory_use(model: ModelSpec, hw: HardwareSpec, dep: Deployment, drafter: Optional[DrafterSpec], batch, k,
               context, draft_model: Optional[ModelSpec] = None) -> MemoryUse:
    b = np.asarray(batch, dtype=float)
    k = np.asarray(k, dtype=float)
    tokens_per_seq = np.asarray(context, dtype=float) + k + 1.0
    weights = weight_bytes_per_gpu(model, dep)
    kv = kv_bytes_per_gpu(model, dep, tokens_per_seq, b)
    # activations of the widest layer for N = B*(K+1) tokens, plus fp32 logits (vocab-parallel) twice
    n = b * (k + 1.0)
    a = dep.act_dtype.bytes_per_element
    widest = _widest_ffn(model) // dep.tp
    act = n * (4 * model.hidden_size + 3 * widest) * a + 2 * n * (model.vocab_size / dep.tp) * 4.0
    draft = np.zeros(())
    if drafter is not None:
        w = dep.weight_dtype(model).bytes_per_element
        extra = drafter_weight_params(model, drafter, draft_model)
        draft = draft + extra * w / dep.tp
        if drafter.kind is DrafterKind.draft_model and draft_model is not None:
            draft = draft + kv_bytes_per_gpu(draft_model, dep, tokens_per_seq, b)
        elif drafter.kind in (DrafterKind.eagle, DrafterKind.eagle3):
            layer = eagle_layer(model, drafter)
            draft = draft + b * tokens_per_seq * kv_elements_per_token_per_rank(layer.attention, dep.tp) \
                * dep.kv_dtype.bytes_per_element
        elif drafter.kind is DrafterKind.mtp and model.mtp_layer is not None:
            draft = draft + b * tokens_per_seq * model.mtp_layers * kv_elements_per_token_per_rank(
                model.mtp_layer.attention, dep.tp) * dep.kv_dtype.bytes_per_element
    capacity = hw.memory_capacity * dep.memory_utilization
    return MemoryUse(weights_bytes=weights, kv_bytes=kv, activation_bytes=act, draft_bytes=draft,
                     capacity_bytes=capacity)


@by_identity
def _widest_ffn(model: ModelSpec) -> int:
    return max(_ffn_width(layer) for layer in model.layers)


def _ffn_width(layer) -> int:
    f = layer.ffn
    if f.kind is FFNKind.dense:
        return f.intermediate_size
    return max(f.expert_intermediate_size * f.top_k, f.num_shared_experts * f.shared_intermediate_size)
