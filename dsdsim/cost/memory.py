"""Memory on one GPU: weights, KV cache for B*(c+q) tokens (q = K + 1, or a draft tree's tokens + 1),
activations, drafter weights and KV.

Feasible when the sum fits in capacity x memory_utilization (vLLM's gpu_memory_utilization). Infeasible
points are reported as such, never silently predicted.

Two layouts, as ``dsdsim.cost.layers`` runs them:
* tensor-parallel attention (vLLM): every weight is split tp ways; a rank caches every sequence's KV for its
  share of the KV heads (the MLA latent, a single shared "head", is replicated on every rank);
* data-parallel attention (SGLang --enable-dp-attention): a rank runs attention for its own ceil(B/tp)
  sequences with all heads, so it holds the attention weights, norms, dense FFN layers and shared experts whole
  (SGLang --moe-dense-tp-size 1) and caches the KV of its own sequences only; routed experts, the embedding and
  the vocab-parallel lm_head stay split tp ways.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from dsdsim.cost.drafts import drafter_weight_params, drafter_whole_params, eagle_layer
from dsdsim.cost.layers import effective_context, kv_elements_per_token_per_rank, layer_groups
from dsdsim.cost.memo import by_value
from dsdsim.cost.num import ceil, num, where
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


@by_value
def weight_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """Non-expert weights in the deployment dtype, routed experts in the expert dtype, split tp ways; under
    data-parallel attention the layers' attention, norms, router, dense FFN and shared experts are whole on every
    rank (``whole_params``)."""
    w = dep.weight_dtype(model).bytes_per_element
    we = dep.routed_expert_dtype(model).bytes_per_element
    h = model.hidden_size
    # routed expert matrices in the expert format (their biases, as gpt-oss stores them, stay in the weight format)
    routed = sum(layer.ffn.routed_matrix_params(h) for layer in model.layers)
    whole = whole_params(model, dep)
    return whole * w + ((model.params_total - routed - whole) * w + routed * we) / dep.tp


def whole_params(model: ModelSpec, dep: Deployment) -> int:
    """Weights every rank holds whole: under data-parallel attention every layer but its routed experts; else 0."""
    if not dep.dp_attention:
        return 0
    h = model.hidden_size
    return sum(layer.params(h) - layer.ffn.routed_params(h) for layer in model.layers)


def sequences_per_rank(dep: Deployment, batch) -> np.ndarray:
    """Sequences whose KV one rank caches: all B under tensor-parallel attention, ceil(B/tp) (the busiest rank)
    under data-parallel attention."""
    b = num(batch)
    return ceil(b / dep.tp) if dep.dp_attention else b


def _attention_tp(dep: Deployment) -> int:
    """Ranks one sequence's attention heads are split over: tp, or 1 under data-parallel attention."""
    return 1 if dep.dp_attention else dep.tp


def kv_bytes_per_gpu(model: ModelSpec, dep: Deployment, tokens_per_seq, batch) -> np.ndarray:
    """KV cache for `batch` sequences of `tokens_per_seq` tokens on one rank; sliding/chunked layers keep only
    their window."""
    total = 0.0
    for layer, count, _ in layer_groups(model):
        held = effective_context(layer.attention, tokens_per_seq)
        total = total + count * held * kv_elements_per_token_per_rank(layer.attention, _attention_tp(dep))
    return total * sequences_per_rank(dep, batch) * dep.kv_dtype.bytes_per_element


def memory_use(model: ModelSpec, hw: HardwareSpec, dep: Deployment, drafter: Optional[DrafterSpec], batch, k,
               context, draft_model: Optional[ModelSpec] = None) -> MemoryUse:
    b = num(batch)
    k = num(k)
    tree = drafter.tree if drafter is not None else None
    q = where(k > 0, tree.tokens + 1.0, 1.0) if tree is not None else k + 1.0   # verify tokens per sequence
    tokens_per_seq = num(context) + q
    weights = weight_bytes_per_gpu(model, dep)
    kv = kv_bytes_per_gpu(model, dep, tokens_per_seq, b)
    # activations of the widest layer for N = B*q tokens, plus fp32 logits (vocab-parallel) twice
    n = b * q
    a = dep.act_dtype.bytes_per_element
    widest = _widest_ffn(model) // dep.tp
    act = n * (4 * model.hidden_size + 3 * widest) * a + 2 * n * (model.vocab_size / dep.tp) * 4.0
    draft = 0.0
    if drafter is not None:
        w = dep.weight_dtype(model).bytes_per_element
        extra = drafter_weight_params(model, drafter, draft_model)
        whole = drafter_whole_params(model, drafter) if dep.dp_attention else 0
        draft = draft + (whole + (extra - whole) / dep.tp) * w
        own = sequences_per_rank(dep, b) * tokens_per_seq * dep.kv_dtype.bytes_per_element
        if drafter.kind is DrafterKind.draft_model and draft_model is not None:
            draft = draft + kv_bytes_per_gpu(draft_model, dep.model_copy(update={"dp_attention": False}),
                                             tokens_per_seq, b)
        elif drafter.kind in (DrafterKind.eagle, DrafterKind.eagle3):
            layer = eagle_layer(model, drafter)
            draft = draft + own * kv_elements_per_token_per_rank(layer.attention, _attention_tp(dep))
        elif drafter.kind is DrafterKind.mtp and model.mtp_layer is not None:
            draft = draft + own * model.mtp_layers * kv_elements_per_token_per_rank(
                model.mtp_layer.attention, _attention_tp(dep))
    capacity = hw.memory_capacity * dep.memory_utilization
    return MemoryUse(weights_bytes=weights, kv_bytes=kv, activation_bytes=act, draft_bytes=draft,
                     capacity_bytes=capacity)


@by_value
def _widest_ffn(model: ModelSpec) -> int:
    return max(_ffn_width(layer) for layer in model.layers)


def _ffn_width(layer) -> int:
    f = layer.ffn
    if f.kind is FFNKind.dense:
        return f.intermediate_size
    return max(f.expert_intermediate_size * f.top_k, f.num_shared_experts * f.shared_intermediate_size)
