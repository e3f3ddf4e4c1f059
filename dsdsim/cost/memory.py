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

from typing import NamedTuple, Optional

import numpy as np

from dsdsim.cost.drafts import draft_kv_layers, drafter_weight_params, drafter_whole_params
from dsdsim.cost.layers import (context_limit, kv_elements_per_token_per_rank, layer_groups,
                                 state_bytes_per_sequence_per_rank)
from dsdsim.cost.memo import by_value
from dsdsim.cost.num import ceil, minimum, num, where
from dsdsim.cost.plan import stage_layer_ranges
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import FFNKind, ModelSpec, group_layers


@frozen
class MemoryUse:
    """Bytes on the (busiest) GPU per batch size: weights, KV cache, activations, the drafter, recurrent states,
    against the capacity the engine may use."""

    weights_bytes: float
    kv_bytes: np.ndarray
    activation_bytes: np.ndarray
    draft_bytes: np.ndarray
    capacity_bytes: float          # capacity x utilisation
    state_bytes: np.ndarray | float = 0.0   # linear-attention recurrent states and their speculative snapshots
    # pipeline parallelism: each stage's GPU, first to last; the fields above are then the busiest stage's
    stages: tuple = ()

    @property
    def used_bytes(self) -> np.ndarray:
        used = self.weights_bytes + self.kv_bytes + self.activation_bytes + self.draft_bytes
        return used if type(self.state_bytes) is float and self.state_bytes == 0.0 else used + self.state_bytes

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
    routed = sum(layer.routed_matrix_params(h) for layer in model.layers)
    whole = whole_params(model, dep)
    return whole * w + ((model.params_total - routed - whole) * w + routed * we) / dep.tp


def whole_params(model: ModelSpec, dep: Deployment) -> int:
    """Weights every rank holds whole: under data-parallel attention every layer but its routed experts; else the
    weights a layer replicates on every tensor-parallel rank (LatentMoE's projections, vLLM ReplicatedLinear; 0 for
    other models)."""
    h = model.hidden_size
    if not dep.dp_attention:
        return sum(layer.replicated_params(h) for layer in model.layers)
    return sum(layer.params(h) - layer.routed_params(h) for layer in model.layers)


def sequences_per_rank(dep: Deployment, batch) -> np.ndarray:
    """Sequences whose KV one rank caches: all B under tensor-parallel attention, ceil(B/tp) (the busiest rank)
    under data-parallel attention."""
    b = num(batch)
    return ceil(b / dep.tp) if dep.dp_attention else b


def _attention_tp(dep: Deployment) -> int:
    """Ranks one sequence's attention heads are split over: tp, or 1 under data-parallel attention."""
    return 1 if dep.dp_attention else dep.tp


class KVLayout(NamedTuple):
    """How one rank caches a model's KV: per layer group (layers, the most tokens a layer keeps or None for all,
    cached elements per token on the rank), over which sequences, in which format."""

    groups: tuple[tuple[int, Optional[float], int], ...]
    dep: Deployment
    bytes_per_element: float
    # sparse-attention layers: (layers, indexer K-cache bytes per token in its own fixed format), whole on every rank
    indexer_groups: tuple[tuple[int, float], ...] = ()

    def bytes(self, tokens_per_seq, batch) -> np.ndarray:
        """KV cache for ``batch`` sequences of ``tokens_per_seq`` tokens on one rank, the indexer's K cache of
        sparse-attention layers included."""
        total = 0.0
        for count, limit, per_token in self.groups:
            held = num(tokens_per_seq) if limit is None else minimum(num(tokens_per_seq), limit)
            total = total + count * held * per_token
        kv = total * sequences_per_rank(self.dep, batch) * self.bytes_per_element
        if not self.indexer_groups:
            return kv
        per_token = sum(count * key_bytes for count, key_bytes in self.indexer_groups)
        return kv + num(tokens_per_seq) * per_token * sequences_per_rank(self.dep, batch)


@by_value
def kv_layout(model: ModelSpec, dep: Deployment) -> KVLayout:
    """Layers without attention (Mamba-2 and FFN-only blocks) cache nothing per token: they have no group here."""
    return _stage_kv_layout([(layer, count) for layer, count, _ in layer_groups(model)], dep)


def kv_bytes_per_gpu(model: ModelSpec, dep: Deployment, tokens_per_seq, batch) -> np.ndarray:
    """KV cache for `batch` sequences of `tokens_per_seq` tokens on one rank; sliding/chunked layers keep only
    their window."""
    return kv_layout(model, dep).bytes(tokens_per_seq, batch)


@frozen
class MemoryFigures:
    """What the memory of a step on one GPU is made of, fixed per setup (``memory_figures``); ``use`` evaluates it at
    batch B, K draft tokens, context c (floats or arrays)."""

    weights_bytes: float
    kv: KVLayout
    tree_tokens: Optional[int]            # a draft tree's tokens (q = tokens + 1 when K > 0), else None: q = K + 1
    act_elements_per_token: int           # 4h + 3 x the widest FFN slice (activations of the widest layer)
    act_bytes_per_element: float
    vocab_per_rank: float                 # V / tp: the fp32 logits (vocab-parallel), held twice
    draft_weights_bytes: Optional[float]  # None without a drafter
    draft_kv: Optional[KVLayout]          # a draft model's own cache
    draft_kv_factors: tuple = ()          # EAGLE / MTP: the head's cache as own tokens x these factors
    capacity_bytes: float = 0.0           # capacity x utilisation
    # linear-attention layers: the recurrent and convolution state of one sequence on one rank, all layers
    # (``state_bytes_per_sequence_per_rank``); 0 without such layers
    state_bytes_per_sequence: float = 0.0

    def states(self, batch, q, k) -> np.ndarray | float:
        """Recurrent state held for ``batch`` sequences verifying ``q`` tokens at draft length ``k``: the committed
        state, and while speculating (k > 0) a snapshot of every verified position for rollback, 1 + q states per
        sequence (SGLang MambaPool: the pool state plus ``intermediate_ssm_state_cache`` and
        ``intermediate_conv_window_cache`` of speculative_num_draft_tokens = q per slot; vLLM keeps
        1 + num_speculative_tokens state blocks per request, one fewer)."""
        if not self.state_bytes_per_sequence:
            return 0.0
        held = where(k > 0, 1.0 + q, 1.0)
        return sequences_per_rank(self.kv.dep, batch) * held * self.state_bytes_per_sequence

    @property
    def head_kv_bytes_per_token(self) -> float:
        """One token's cache in an EAGLE / MTP head's own layers (``draft_kv_factors``; 0 without them)."""
        if not self.draft_kv_factors:
            return 0.0
        own = self.kv.bytes_per_element
        for factor in self.draft_kv_factors:
            own = own * factor
        return own

    def use(self, batch, k, context) -> MemoryUse:
        b = num(batch)
        k = num(k)
        tree = self.tree_tokens
        q = where(k > 0, tree + 1.0, 1.0) if tree is not None else k + 1.0   # verify tokens per sequence
        tokens_per_seq = num(context) + q
        kv = self.kv.bytes(tokens_per_seq, b)
        n = b * q
        act = n * self.act_elements_per_token * self.act_bytes_per_element + 2 * n * self.vocab_per_rank * 4.0
        draft = 0.0
        if self.draft_weights_bytes is not None:
            draft = draft + self.draft_weights_bytes
            if self.draft_kv is not None:
                draft = draft + self.draft_kv.bytes(tokens_per_seq, b)
            elif self.draft_kv_factors:
                draft = draft + sequences_per_rank(self.kv.dep, b) * tokens_per_seq * self.head_kv_bytes_per_token
        return MemoryUse(weights_bytes=self.weights_bytes, kv_bytes=kv, activation_bytes=act, draft_bytes=draft,
                         capacity_bytes=self.capacity_bytes, state_bytes=self.states(b, q, k))


def profile_peak_bytes(figures: MemoryFigures, vocab_size: int, max_num_batched_tokens: int,
                       max_num_seqs: int) -> float:
    """The PyTorch activation peak of vLLM's profile run, which it reserves before it sizes the KV cache: a forward
    pass of ``max_num_batched_tokens`` tokens (the widest layer's activations, ``act_elements_per_token``), and the
    sampler over the last token of each of min(tokens, ``max_num_seqs``) dummy requests: their logits in fp32, held
    twice (the cast and the probabilities), over the whole vocabulary on every rank (V1's ``LogitsProcessor``
    all-gathers the logits: ``Platform.use_all_gather`` is true under V1).
    Source: ``vllm/v1/worker/gpu_model_runner.py`` ``profile_run``: ``_dummy_run(self.max_num_tokens)``, whose dummy
    batch has ``num_reqs = min(num_tokens, max_num_reqs)`` requests and one logit index each, then
    ``_dummy_sampler_run(last_hidden_states)`` (its speculative dummy, one draft token per request, runs after the
    sampler's tensors are freed). For Meta-Llama-3-8B at 8,192 tokens and 256 sequences this gives 1.15 GiB, where
    vLLM logged "PyTorch activation peak memory 1.26GiB" (vllm-project/vllm PR #10511)."""
    tokens = float(max_num_batched_tokens)
    forward = tokens * figures.act_elements_per_token * figures.act_bytes_per_element
    sampler = 2.0 * min(tokens, float(max_num_seqs)) * vocab_size * 4.0
    return forward + sampler


@by_value
def memory_figures(model: ModelSpec, hw: HardwareSpec, dep: Deployment, drafter: Optional[DrafterSpec],
                   draft_model: Optional[ModelSpec] = None) -> MemoryFigures:
    """The figures of ``memory_use`` that do not depend on the point, once per set of spec objects."""
    if dep.pp > 1:
        if drafter is not None:
            raise DsdsimError(PP_DRAFTER_ERROR)
        return StagedMemoryFigures(stage_memory_figures(model, hw, dep))
    tree = drafter.tree if drafter is not None else None
    draft_w = draft_kv = None
    factors = ()
    if drafter is not None:
        w = dep.weight_dtype(model).bytes_per_element
        extra = drafter_weight_params(model, drafter, draft_model)
        whole = drafter_whole_params(model, drafter) if dep.dp_attention else 0
        draft_w = (whole + (extra - whole) / dep.tp) * w
        if drafter.info.loads_model and draft_model is not None:
            draft_kv = kv_layout(draft_model, dep.model_copy(update={"dp_attention": False}))
        else:   # the drafter's own cached layers (EAGLE, MTP, DFlash): own tokens x layers x elements per token
            for attn, layers in draft_kv_layers(model, drafter):
                per_token = kv_elements_per_token_per_rank(attn, _attention_tp(dep))
                if attn.sparse:   # the indexer's K cache in cache elements (the factors multiply bytes per element)
                    per_token = per_token + attn.indexer_cache_bytes_per_token / dep.kv_dtype.bytes_per_element
                factors += (per_token,) if layers == 1 else (layers, per_token)
    return MemoryFigures(weight_bytes_per_gpu(model, dep), kv_layout(model, dep),
                         tree.tokens if tree is not None else None, 4 * model.hidden_size + 3 * (_widest_ffn(model) // dep.tp),
                         dep.act_dtype.bytes_per_element, model.vocab_size / dep.tp, draft_w, draft_kv, factors,
                         hw.engine_memory_bytes * dep.memory_utilization,
                         state_bytes_per_sequence=_state_bytes_per_sequence(model, dep))


@by_value
def _state_bytes_per_sequence(model: ModelSpec, dep: Deployment) -> float:
    """The recurrent state of one sequence on one rank across all layers (0 without linear-attention or Mamba-2
    layers); the convolution state in the activation format (SGLang SGLANG_MAMBA_CONV_DTYPE bfloat16; vLLM the model
    dtype)."""
    tp = _attention_tp(dep)
    return sum(count * state_bytes_per_sequence_per_rank(layer.mixer, tp, dep.act_dtype)
               for layer, count, _ in layer_groups(model))


def memory_use(model: ModelSpec, hw: HardwareSpec, dep: Deployment, drafter: Optional[DrafterSpec], batch, k,
               context, draft_model: Optional[ModelSpec] = None) -> MemoryUse:
    return memory_figures(model, hw, dep, drafter, draft_model).use(batch, k, context)


@by_value
def _widest_ffn(model: ModelSpec) -> int:
    return max(_ffn_width(layer) for layer in model.layers)


def _ffn_width(layer) -> int:
    f = layer.ffn
    if f is None:
        return 0
    if f.kind is FFNKind.dense:
        return f.intermediate_size
    return max(f.expert_intermediate_size * f.top_k, f.num_shared_experts * f.shared_intermediate_size)


# --- pipeline parallelism: one GPU of each stage --------------------------------------------------------------

# vLLM does not run speculative decoding with pipeline parallelism (vllm-project/vllm#14117: "Speculative decoding
# is not yet supported with pipeline parallelism"; RFC #44697 for MTP under PP > 1): dsdsim models plain decoding only
PP_DRAFTER_ERROR = ("pipeline parallelism (pp > 1) is modelled for plain decoding only: vLLM does not run "
                    "speculative decoding with pipeline parallelism; drop the drafter or use pp 1")


def stage_layers(layers: tuple, lo: int, hi: int) -> list[tuple]:
    """Identical layers of ``layers[lo:hi]`` grouped with their counts, in first-appearance order."""
    return group_layers(layers[lo:hi])


def stage_weight_bytes(model: ModelSpec, dep: Deployment, stage: int) -> float:
    """Weights on one GPU of ``stage``: its layers, and the embedding (+ a drafter-reading model's pre_projection) on
    the first stage, the final norm, lm_head (+ post_projection) on the last, split tp ways (routed experts in the
    expert format). A tied lm_head is a second V x h copy on the last stage: vLLM builds ``embed_tokens`` on the first
    rank and, with tie_word_embeddings, on the last rank too (LlamaModel: ``is_first_rank or
    (tie_word_embeddings and is_last_rank)``), whose lm_head ties to it."""
    w = dep.weight_dtype(model).bytes_per_element
    we = dep.routed_expert_dtype(model).bytes_per_element
    h = model.hidden_size
    lo, hi = stage_layer_ranges(model.num_layers, dep.pp)[stage]
    layers = model.layers[lo:hi]
    routed = sum(layer.routed_matrix_params(h) for layer in layers)
    replicated = sum(layer.replicated_params(h) for layer in layers)     # whole on every rank (LatentMoE)
    params = sum(layer.params(h) for layer in layers)
    projections = [p.params for p in model.backbone_projections]
    if stage == 0:
        params += model.params_embedding + sum(projections[:1])
    if stage == dep.pp - 1:
        head = model.params_embedding if model.tie_word_embeddings else model.params_lm_head
        params += model.params_final_norm + head + sum(projections[1:])
    if not replicated:
        return ((params - routed) * w + routed * we) / dep.tp
    return ((params - routed - replicated) * w + routed * we) / dep.tp + replicated * w


def _stage_kv_layout(groups: list[tuple], dep: Deployment) -> KVLayout:
    """The KV layout of (layer, count) groups; layers without attention cache nothing per token and are left out."""
    tp = _attention_tp(dep)
    attns = [(layer.attention, count) for layer, count in groups if layer.attention is not None]
    return KVLayout(tuple((count, context_limit(a), kv_elements_per_token_per_rank(a, tp)) for a, count in attns),
                    dep, dep.kv_dtype.bytes_per_element,
                    tuple((count, a.indexer_cache_bytes_per_token) for a, count in attns if a.sparse))


@by_value
def stage_memory_figures(model: ModelSpec, hw: HardwareSpec, dep: Deployment) -> tuple[MemoryFigures, ...]:
    """``MemoryFigures`` of one GPU of each stage: its weights (``stage_weight_bytes``), the KV cache and recurrent
    states of its layers only, the activations of its widest layer, and the fp32 logits on the last stage only."""
    out = []
    tp = _attention_tp(dep)
    for stage, (lo, hi) in enumerate(stage_layer_ranges(model.num_layers, dep.pp)):
        groups = stage_layers(model.layers, lo, hi)
        widest = max(_ffn_width(layer) for layer, _ in groups)
        state = sum(count * state_bytes_per_sequence_per_rank(layer.mixer, tp, dep.act_dtype)
                    for layer, count in groups)
        vocab = model.vocab_size / dep.tp if stage == dep.pp - 1 else 0.0
        out.append(MemoryFigures(stage_weight_bytes(model, dep, stage), _stage_kv_layout(groups, dep), None,
                                 4 * model.hidden_size + 3 * (widest // dep.tp), dep.act_dtype.bytes_per_element,
                                 vocab, None, None, (), hw.engine_memory_bytes * dep.memory_utilization,
                                 state_bytes_per_sequence=state))
    return tuple(out)


@frozen
class StagedMemoryFigures:
    """The memory figures of every pipeline stage; a point fits when every stage's GPU fits."""

    stages: tuple[MemoryFigures, ...]

    def use(self, batch, k, context) -> MemoryUse:
        """The busiest stage's use at each point (every stage has the same capacity: it fits iff all fit), with
        every stage's own use in ``stages``."""
        uses = tuple(f.use(batch, k, context) for f in self.stages)
        best = uses[0]
        for u in uses[1:]:
            more = u.used_bytes > best.used_bytes
            best = MemoryUse(*(where(more, getattr(u, f), getattr(best, f)) for f in _USE_FIELDS),
                             capacity_bytes=best.capacity_bytes, state_bytes=where(more, u.state_bytes,
                                                                                      best.state_bytes))
        return MemoryUse(best.weights_bytes, best.kv_bytes, best.activation_bytes, best.draft_bytes,
                         best.capacity_bytes, best.state_bytes, stages=uses)


_USE_FIELDS = ("weights_bytes", "kv_bytes", "activation_bytes", "draft_bytes")
