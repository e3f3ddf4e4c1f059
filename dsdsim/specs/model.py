"""Typed, frozen model specs: per-layer mixer (attention or a Mamba-2 mixer) and FFN kinds, and the parameter counts
derived from them.

A layer holds a mixer, an FFN, or both: a transformer layer has both; a hybrid such as Nemotron-H has blocks with a
single part (a Mamba-2 mixer, an attention mixer, an MLP or a MoE, one norm each). A ModelSpec is what the cost model
reads; ``dsdsim.specs.hf_config`` builds one from a Hugging Face config.json. Sizes are element counts; bytes appear
only once a dtype is chosen.
"""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

from enum import Enum
from typing import Optional

from pydantic import Field, model_validator

from dsdsim.records import frozen
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.units import DType



# elements per fp32 scale of the indexer's fp8 keys (DeepSeek-V3.2-Exp inference/model.py, block_size = 128)
INDEXER_SCALE_BLOCK = 128


class AttentionKind(str, Enum):
    full = "full"          # every query attends to the whole context (GQA/MHA)
    sliding = "sliding"    # attends to the last `window` tokens
    chunked = "chunked"    # attends within fixed chunks of `window` tokens (Llama-4 iRoPE)
    mla = "mla"            # multi-head latent attention (DeepSeek), absorbed weights, latent KV cache
    linear = "linear"      # gated DeltaNet linear attention (Qwen3-Next): a fixed-size recurrent state per sequence,
                           # no KV cache


class FFNKind(str, Enum):
    dense = "dense"        # SwiGLU: gate, up (h -> I) and down (I -> h)
    moe = "moe"            # router + routed SwiGLU experts (+ shared experts)


class NormKind(str, Enum):
    rms = "rms"
    layer = "layer"        # LayerNorm (Cohere: no bias; PhiMoE: with bias)


class Attention(FrozenSpec):
    kind: AttentionKind
    num_heads: int = Field(gt=0)               # n_q
    num_kv_heads: int = Field(gt=0)            # n_kv (MLA: equals n_q nominally; the cache is the latent)
    head_dim: int = Field(gt=0)                # d (MLA: qk_nope + qk_rope, the query/key width per head)
    window: Optional[int] = Field(default=None, gt=0)  # sliding window or chunk size, tokens
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    # the q / k norms weigh the whole projection (n_q*d and n_kv*d weights) instead of one head (d each): MiniMax-M2's
    # qk_norm_type "per_layer" (transformers FlexOlmoAttention's q_norm / k_norm); the same elements are normalised
    qk_norm_per_layer: bool = False
    sinks: bool = False                        # gpt-oss learned attention sinks: one scalar per head
    # elements of each q/k head that rotary embedding rotates (partial_rotary_factor x head_dim: Qwen3-Next 64 of
    # 256, GLM-4.5 64 of 128; vLLM get_rope rotary_dim); None: the whole head; 0: no rotary at all (Nemotron-H's
    # attention has no positional encoding: vLLM NemotronHAttention passes q and k to attention unrotated)
    rotary_dim: Optional[int] = Field(default=None, ge=0)
    # the value is the key projection's output (Gemma-4's full-attention layers, attention_k_eq_v): one k projection
    # of n_kv*d and no v_proj, but keys and values are still cached apart, the key after k_norm and rotary, the value
    # after the unweighted v_norm (transformers Gemma4TextAttention: ``value_states = ... if self.v_proj is not None
    # else key_states``, then ``past_key_values.update(key_states, value_states)``)
    value_from_key: bool = False
    # reads the cache of an earlier layer instead of its own (Gemma-4 num_kv_shared_layers; the Gemma-4 assistant's
    # layers read the target's): no k/v projections or k norm, no cache of its own, no K/V written
    kv_shared: bool = False
    # gated attention (Qwen3-Next attn_output_gate): q_proj also emits a per-element gate of n_q*d, and the attention
    # output is multiplied by sigmoid(gate) before o_proj
    output_gate: bool = False
    # linear (gated DeltaNet) only: num_heads = linear_num_value_heads, num_kv_heads = linear_num_key_heads,
    # head_dim = linear_key_head_dim, v_head_dim = linear_value_head_dim; a causal depthwise convolution of
    # conv_kernel taps over q, k and v; the recurrent state (value heads x d_k x d_v) kept in state_dtype
    conv_kernel: Optional[int] = Field(default=None, gt=0)
    state_dtype: DType = DType.fp32
    # MLA only (v_head_dim also for linear)
    q_lora_rank: Optional[int] = None          # None: plain q projection h -> n_q*(nope+rope)
    kv_lora_rank: Optional[int] = None
    qk_nope_head_dim: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    # DeepSeek Sparse Attention (MLA only; DeepSeek-V3.2 config index_n_heads, index_head_dim, index_topk): a
    # lightning indexer scores every cached token per query and MLA attends to the index_topk best only
    index_n_heads: Optional[int] = Field(default=None, gt=0)
    index_head_dim: Optional[int] = Field(default=None, gt=0)
    index_topk: Optional[int] = Field(default=None, gt=0)
    # GLM-5.2 IndexShare (transformers GlmMoeDsaConfig ``indexer_types``: "full" runs the indexer, "shared" reuses
    # the previous full layer's top-k): a shared layer attends to index_topk keys like any sparse layer but has no
    # indexer of its own: no indexer weights, no indexer K cache, no scoring
    index_shared: bool = False

    @model_validator(mode="after")
    def _check(self) -> "Attention":
        indexer = (self.index_n_heads, self.index_head_dim, self.index_topk)
        if any(v is not None for v in indexer):
            if self.kind is not AttentionKind.mla or None in indexer or not self.q_lora_rank:
                raise ValueError("a sparse-attention indexer needs MLA attention with q_lora_rank and all of "
                                 "index_n_heads, index_head_dim and index_topk")
            if self.index_head_dim % INDEXER_SCALE_BLOCK:
                raise ValueError(f"index_head_dim {self.index_head_dim} is not a multiple of the indexer's "
                                 f"{INDEXER_SCALE_BLOCK}-element fp8 scale block")
        if self.rotary_dim is not None and self.rotary_dim > self.head_dim:
            raise ValueError(f"rotary_dim {self.rotary_dim} exceeds head_dim {self.head_dim}")
        if self.index_shared and self.index_topk is None:
            raise ValueError("a layer sharing an earlier layer's top-k (index_shared) needs a sparse-attention "
                             "indexer configuration (index_n_heads, index_head_dim, index_topk)")
        if self.kind in (AttentionKind.sliding, AttentionKind.chunked) and self.window is None:
            raise ValueError(f"{self.kind.value} attention needs a window size")
        if self.kind is AttentionKind.mla:
            for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, f) is None:
                    raise ValueError(f"MLA attention needs {f}")
        elif self.kind is AttentionKind.linear and (self.v_head_dim is None or self.conv_kernel is None):
            raise ValueError("linear attention needs v_head_dim and conv_kernel")
        elif self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        return self

    @property
    def q_width(self) -> int:
        """Elements of q per token: n_q * d (NOT hidden size; several models differ)."""
        return self.num_heads * self.head_dim

    @property
    def o_width(self) -> int:
        """Input width of the output projection: n_q * d_v (linear attention: value heads x d_v)."""
        return self.num_heads * (self.v_head_dim if self.kind in (AttentionKind.mla, AttentionKind.linear)
                                 else self.head_dim)

    @property
    def kv_elements_per_token(self) -> int:
        """Cached elements per token per layer: 2 n_kv d (keys and values), or the MLA latent kv_lora_rank +
        qk_rope_head_dim; none for linear attention (its state does not grow with the context)."""
        if self.kind is AttentionKind.mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.kind is AttentionKind.linear:
            return 0
        return 0 if self.kv_shared else 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_projections(self) -> int:
        """k/v projections a new token runs: 2, 1 where the value is the key's output, 0 reading a shared cache."""
        return 0 if self.kv_shared else 1 if self.value_from_key else 2

    @property
    def sparse(self) -> bool:
        """DeepSeek Sparse Attention: a lightning indexer picks the index_topk keys each query attends to."""
        return self.index_topk is not None

    @property
    def runs_indexer(self) -> bool:
        """A sparse layer that scores the context itself (not one reusing an earlier layer's top-k)."""
        return self.sparse and not self.index_shared

    @property
    def indexer_cache_bytes_per_token(self) -> float:
        """The indexer's own K cache, one key of index_head_dim per token in fp8 e4m3 plus one fp32 scale per
        INDEXER_SCALE_BLOCK elements, whatever the MLA cache's format (DeepSeek-V3.2-Exp inference/model.py
        ``Indexer``: k_cache float8_e4m3fn [.., index_head_dim], k_scale_cache float32 [.., index_head_dim //
        block_size], block_size 128): 128 + 4 = 132 bytes for index_head_dim 128; 0 without an indexer of the
        layer's own (no indexer, or one sharing an earlier layer's top-k)."""
        if not self.runs_indexer:
            return 0.0
        d = self.index_head_dim
        return d * DType.fp8.bytes_per_element + d // INDEXER_SCALE_BLOCK * DType.fp32.bytes_per_element

    def indexer_params(self, hidden: int) -> int:
        """The lightning indexer's weights (DeepSeek-V3.2-Exp inference/model.py ``Indexer``): wq_b from the q latent
        (q_lora_rank -> index_n_heads x index_head_dim), wk from the hidden state (h -> index_head_dim, one head),
        k_norm (a LayerNorm: weight and bias of index_head_dim) and weights_proj (h -> index_n_heads, one weight per
        head); none of them has a bias. 0 without an indexer of the layer's own."""
        if not self.runs_indexer:
            return 0
        n, d = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * n * d + hidden * d + 2 * d + hidden * n

    @property
    def kv_elements_read_per_token(self) -> int:
        """Cached elements per token one query reads: the layer's own, or the shared cache it reads."""
        if self.kind in (AttentionKind.mla, AttentionKind.linear):
            return self.kv_elements_per_token
        return 2 * self.num_kv_heads * self.head_dim

    # --- linear attention (gated DeltaNet; vLLM/transformers Qwen3NextGatedDeltaNet) ------------------------------
    @property
    def linear_qkvz_width(self) -> int:
        """in_proj_qkvz outputs per token: q and k (n_k d_k each), v and the output gate z (n_v d_v each)."""
        return 2 * self.num_kv_heads * self.head_dim + 2 * self.num_heads * self.v_head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal convolution: q, k and v, 2 n_k d_k + n_v d_v (vLLM conv_dim)."""
        return 2 * self.num_kv_heads * self.head_dim + self.num_heads * self.v_head_dim

    @property
    def state_elements(self) -> int:
        """The recurrent state of one sequence: value heads x d_k x d_v (vLLM temporal_state_shape); 0 unless
        linear."""
        return self.num_heads * self.head_dim * self.v_head_dim if self.kind is AttentionKind.linear else 0

    @property
    def conv_state_elements(self) -> int:
        """The convolution state of one sequence: its last conv_kernel - 1 inputs per channel (vLLM
        conv_state_shape); 0 unless linear."""
        return self.conv_channels * (self.conv_kernel - 1) if self.kind is AttentionKind.linear else 0

    def _linear_params(self, h: int) -> int:
        """in_proj_qkvz, in_proj_ba (h -> 2 n_v: the beta and decay gates), the conv1d weight (one filter of
        conv_kernel taps per channel, no bias), dt_bias and A_log (n_v each), the gated RMSNorm weight (d_v, shared by
        the heads) and out_proj (n_v d_v -> h): transformers Qwen3NextGatedDeltaNet."""
        return (h * self.linear_qkvz_width + h * 2 * self.num_heads + self.conv_channels * self.conv_kernel
                + 2 * self.num_heads + self.v_head_dim + self.o_width * h)

    def params(self, hidden: int, qkv_in: Optional[int] = None) -> int:
        """Weights of the projections, biases, q/k norms and sinks. ``qkv_in``: the width q/k/v read when it is
        not ``hidden`` (the EAGLE-3 draft layer reads 2h, embedding ++ hidden)."""
        h = hidden
        if self.kind is AttentionKind.mla:
            if qkv_in not in (None, hidden):
                raise ValueError("MLA attention reads the hidden state only (no qkv_in)")
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.num_heads * qk
            else:
                q = h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv += self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.o_width * h + self.indexer_params(h)
        if self.kind is AttentionKind.linear:
            if qkv_in not in (None, hidden):
                raise ValueError("linear attention reads the hidden state only (no qkv_in)")
            return self._linear_params(h)
        k_in = qkv_in or h
        kv = self.kv_projections * self.num_kv_heads * self.head_dim   # k and v projections' outputs
        q = self.q_width * (2 if self.output_gate else 1)   # the gate doubles q_proj's outputs
        n = k_in * (q + kv) + self.o_width * h
        if self.qkv_bias:
            n += q + kv
        if self.o_bias:
            n += h
        if self.qk_norm and self.qk_norm_per_layer:
            n += (self.num_heads + (0 if self.kv_shared else self.num_kv_heads)) * self.head_dim
        elif self.qk_norm:
            n += (1 if self.kv_shared else 2) * self.head_dim
        if self.sinks:
            n += self.num_heads
        return n


class Mamba2(FrozenSpec):
    """A Mamba-2 mixer (Dao & Gu, Transformers are SSMs, arXiv:2405.21060; transformers ``NemotronHMamba2Mixer``,
    vLLM ``MambaMixer2``). in_proj (h -> 2 d_inner + 2 G N + H) emits the gate z and the input x (d_inner = H x P
    each), B and C (G x N each: the heads of a group share them, as GQA heads share keys) and one time step per head;
    a causal depthwise convolution of conv_kernel taps runs over x, B and C; the selective scan updates a state of
    H x P x N per sequence; a gated RMSNorm of the output by SiLU(z) and out_proj (d_inner -> h) follow.

    d_inner is H x P as transformers builds it (``intermediate_size = mamba_num_heads * mamba_head_dim``), not the
    config's ``expand`` x h (Nemotron 3 Nano: 64 x 64 = 4096, expand x h = 5376)."""

    num_heads: int = Field(gt=0)        # H (mamba_num_heads)
    head_dim: int = Field(gt=0)         # P (mamba_head_dim)
    state_size: int = Field(gt=0)       # N (ssm_state_size)
    n_groups: int = Field(gt=0)         # G (n_groups): groups of heads sharing B and C
    conv_kernel: int = Field(gt=0)      # taps of the causal convolution (conv_kernel)
    conv_bias: bool = True              # a bias per convolution channel (use_conv_bias)
    proj_bias: bool = False             # biases on in_proj and out_proj (use_bias)
    state_dtype: DType = DType.fp32     # the SSM state's format (mamba_ssm_cache_dtype)

    @model_validator(mode="after")
    def _check(self) -> "Mamba2":
        if self.num_heads % self.n_groups:
            raise ValueError(f"Mamba-2 num_heads {self.num_heads} is not a multiple of n_groups {self.n_groups}")
        return self

    @property
    def inner(self) -> int:
        """d_inner = H x P: the width of x, z and the output y."""
        return self.num_heads * self.head_dim

    @property
    def conv_channels(self) -> int:
        """Channels of the causal convolution: x, B and C, d_inner + 2 G N (transformers ``conv_dim``)."""
        return self.inner + 2 * self.n_groups * self.state_size

    @property
    def in_proj_width(self) -> int:
        """in_proj outputs per token: z, x (d_inner each), B, C (G N each) and dt (H)."""
        return 2 * self.inner + 2 * self.n_groups * self.state_size + self.num_heads

    @property
    def state_elements(self) -> int:
        """The SSM state of one sequence: H x P x N (vLLM ``mamba2_state_shape`` temporal state)."""
        return self.num_heads * self.head_dim * self.state_size

    @property
    def conv_state_elements(self) -> int:
        """The convolution state of one sequence: its last conv_kernel - 1 inputs per channel."""
        return self.conv_channels * (self.conv_kernel - 1)

    def params(self, hidden: int) -> int:
        """in_proj, conv1d (conv_kernel taps per channel, and its bias), dt_bias, A_log and D (H each), the gated
        norm's weight (d_inner) and out_proj (d_inner -> h): transformers NemotronHMamba2Mixer."""
        h, inner, conv = hidden, self.inner, self.conv_channels
        n = h * self.in_proj_width + conv * self.conv_kernel + 3 * self.num_heads + inner + inner * h
        if self.conv_bias:
            n += conv
        if self.proj_bias:
            n += self.in_proj_width + h
        return n


@frozen
class Linear:
    """A weight matrix ``inputs`` -> ``outputs`` (inputs*outputs elements) and, with ``bias``, outputs more."""

    inputs: int
    outputs: int
    bias: bool = False

    @property
    def params(self) -> int:
        return self.inputs * self.outputs + (self.outputs if self.bias else 0)


def swiglu_matrix_params(hidden: int, width: int) -> int:
    """One SwiGLU MLP or expert's matrices, gate and up (h -> I) and down (I -> h): 3*h*I elements."""
    return 3 * hidden * width


def swiglu_bias_params(hidden: int, width: int) -> int:
    """The same MLP's biases, where it has them (gpt-oss experts): gate and up (I each) and down (h)."""
    return 2 * width + hidden


def mlp_matrix_params(hidden: int, width: int, gated: bool = True) -> int:
    """One MLP or expert's matrices: SwiGLU (gated) 3*h*I, a plain two-matrix MLP, up (h -> I) and down (I -> h),
    2*h*I."""
    return swiglu_matrix_params(hidden, width) if gated else 2 * hidden * width


def mlp_bias_params(hidden: int, width: int, gated: bool = True) -> int:
    """The same MLP's biases: gate and up (I each) and down (h); a plain MLP up (I) and down (h)."""
    return swiglu_bias_params(hidden, width) if gated else width + hidden


class FFN(FrozenSpec):
    kind: FFNKind
    intermediate_size: int = Field(default=0, ge=0)      # dense SwiGLU width I
    num_experts: int = Field(default=0, ge=0)            # E routed experts
    top_k: int = Field(default=0, ge=0)                  # experts per token
    expert_intermediate_size: int = Field(default=0, ge=0)   # I_e
    num_shared_experts: int = Field(default=0, ge=0)
    shared_intermediate_size: int = Field(default=0, ge=0)   # width of EACH shared expert
    shared_gate: bool = False                            # Qwen2-MoE style sigmoid gate h -> 1 on the shared expert
    bias: bool = False                                   # biases on expert/MLP linears (gpt-oss)
    router_bias: bool = False
    # False: every MLP and expert is a plain two-matrix MLP, up (h -> I), an elementwise activation, down (I -> h)
    # (Nemotron-H's ReLU^2 MLPs and experts, transformers NemotronHMLP / NemotronHExperts); True: SwiGLU
    gated: bool = True
    # LatentMoE (Nemotron 3 Super, config moe_latent_size): the routed experts work in a latent space of this width,
    # entered by fc1_latent_proj (h -> L) and left by fc2_latent_proj (L -> h), both whole on every rank (vLLM
    # ReplicatedLinear); the router and the shared experts read the full hidden state. 0: no latent space
    latent_size: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "FFN":
        if self.kind is FFNKind.dense and self.intermediate_size <= 0:
            raise ValueError("a dense FFN needs intermediate_size > 0")
        if self.kind is FFNKind.moe:
            if self.num_experts <= 0 or self.expert_intermediate_size <= 0:
                raise ValueError("an MoE FFN needs num_experts > 0 and expert_intermediate_size > 0")
            if not 0 < self.top_k <= self.num_experts:
                raise ValueError(f"top_k {self.top_k} must be in 1..num_experts ({self.num_experts})")
        elif self.latent_size:
            raise ValueError("a latent space (latent_size) belongs to the routed experts of an MoE FFN")
        return self

    def _mlp(self, h: int, width: int) -> int:
        """One MLP or expert of ``width`` (SwiGLU, or a plain MLP where not ``gated``), biases included."""
        return mlp_matrix_params(h, width, self.gated) + (mlp_bias_params(h, width, self.gated) if self.bias else 0)

    def expert_input(self, hidden: int) -> int:
        """The width a routed expert reads and writes: the latent size under LatentMoE, else h."""
        return self.latent_size or hidden

    def routed_matrix_params(self, hidden: int) -> int:
        """The routed experts' matrices without their biases (what an expert format such as MXFP4 stores)."""
        if self.kind is FFNKind.dense:
            return 0
        return self.num_experts * mlp_matrix_params(self.expert_input(hidden), self.expert_intermediate_size,
                                                    self.gated)

    def params(self, hidden: int) -> int:
        h = hidden
        if self.kind is FFNKind.dense:
            return self._mlp(h, self.intermediate_size)
        n = self._router(h) + self.num_experts * self._mlp(self.expert_input(h), self.expert_intermediate_size)
        return n + self._shared(h) + self.replicated_params(h)

    def active_params(self, hidden: int) -> int:
        h = hidden
        if self.kind is FFNKind.dense:
            return self._mlp(h, self.intermediate_size)
        n = self._router(h) + self.top_k * self._mlp(self.expert_input(h), self.expert_intermediate_size)
        return n + self._shared(h) + self.replicated_params(h)

    def routed_params(self, hidden: int) -> int:
        """Weights of the routed experts (0 for a dense FFN): what expert parallelism splits."""
        if self.kind is FFNKind.dense:
            return 0
        return self.num_experts * self._mlp(self.expert_input(hidden), self.expert_intermediate_size)

    def replicated_params(self, hidden: int) -> int:
        """Weights every tensor-parallel rank holds whole: LatentMoE's two projections, h x L each (and their
        biases); 0 without a latent space."""
        if not self.latent_size:
            return 0
        h, lat = hidden, self.latent_size
        return 2 * h * lat + (lat + h if self.bias else 0)

    def _router(self, h: int) -> int:
        return h * self.num_experts + (self.num_experts if self.router_bias else 0)

    def _shared(self, h: int) -> int:
        n = self.num_shared_experts * self._mlp(h, self.shared_intermediate_size)
        return n + (h if self.shared_gate and self.num_shared_experts else 0)


class Layer(FrozenSpec):
    """A decoder layer: a mixer (attention, or a Mamba-2 mixer), an FFN, or both, and its norms. A transformer layer
    has attention and an FFN; a Nemotron-H block has one part only (``hybrid_override_pattern`` M, *, - or E)."""

    attention: Optional[Attention] = None
    ffn: Optional[FFN] = None
    norm: NormKind = NormKind.rms
    norms: int = Field(default=2, ge=0)         # norm vectors per layer (Gemma 3: 4; Cohere parallel block: 1)
    norm_bias: bool = False
    mamba: Optional[Mamba2] = None              # a Mamba-2 mixer in place of attention
    # learned scalars the layer stores besides its matrices and norms (Gemma 4: ``layer_scalar``, one per decoder
    # layer, a persistent buffer of transformers Gemma4TextDecoderLayer that checkpoints carry)
    scalars: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "Layer":
        if self.attention is not None and self.mamba is not None:
            raise ValueError("a layer has one mixer: attention or a Mamba-2 mixer, not both")
        if self.attention is None and self.mamba is None and self.ffn is None:
            raise ValueError("a layer needs a mixer (attention or Mamba-2), an FFN, or both")
        return self

    @property
    def mixer(self) -> Optional[Attention | Mamba2]:
        """The token mixer: the attention, the Mamba-2 mixer, or None for an FFN-only layer."""
        return self.attention if self.attention is not None else self.mamba

    def params(self, hidden: int, qkv_in: Optional[int] = None) -> int:
        """All weights of the layer; ``qkv_in`` as in ``Attention.params``."""
        n = self._norm_params(hidden)
        if self.attention is not None:
            n += self.attention.params(hidden, qkv_in)
        if self.mamba is not None:
            n += self.mamba.params(hidden)
        return n + (self.ffn.params(hidden) if self.ffn is not None else 0)

    def active_params(self, hidden: int) -> int:
        n = self._norm_params(hidden)
        if self.attention is not None:
            n += self.attention.params(hidden)
        if self.mamba is not None:
            n += self.mamba.params(hidden)
        return n + (self.ffn.active_params(hidden) if self.ffn is not None else 0)

    def routed_params(self, hidden: int) -> int:
        """The routed experts' weights (0 without an MoE FFN)."""
        return self.ffn.routed_params(hidden) if self.ffn is not None else 0

    def routed_matrix_params(self, hidden: int) -> int:
        """The routed experts' matrices without biases (0 without an MoE FFN)."""
        return self.ffn.routed_matrix_params(hidden) if self.ffn is not None else 0

    def replicated_params(self, hidden: int) -> int:
        """Weights every tensor-parallel rank holds whole (LatentMoE's projections; 0 for other layers)."""
        return self.ffn.replicated_params(hidden) if self.ffn is not None else 0

    def _norm_params(self, hidden: int) -> int:
        return self.norms * hidden * (2 if self.norm_bias else 1) + self.scalars


class ModelSpec(FrozenSpec):
    """A decoder-only transformer, layer by layer."""

    name: str
    family: str                                  # the config's model_type
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    lm_head_bias: bool = False
    layers: tuple[Layer, ...]
    mtp_layers: int = Field(default=0, ge=0)     # DeepSeek-style next-n prediction modules
    mtp_layer: Optional[Layer] = None            # the transformer layer inside each MTP module
    max_position_embeddings: Optional[int] = None
    default_dtype: DType = DType.bf16            # the checkpoint's weight dtype (quantization_config / torch_dtype)
    default_expert_dtype: Optional[DType] = None  # routed-expert weights when they differ (gpt-oss: MXFP4)
    # a drafter that reads its target's hidden state (Gemma-4 assistant, config backbone_hidden_size): each pass
    # projects [target embedding ++ target hidden] (2 x backbone) to h and its output h back to backbone
    backbone_hidden_size: Optional[int] = Field(default=None, gt=0)
    source: str = ""
    architecture: Optional[str] = None          # the config's first ``architectures`` entry (LlamaForCausalLM)

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if not self.layers:
            raise ValueError("a model needs at least one layer")
        if self.mtp_layers and self.mtp_layer is None:
            raise ValueError("mtp_layers > 0 needs mtp_layer")
        return self

    # --- structure -------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def graph_split_ops(self) -> int:
        """The operators a forward pass is cut at into piecewise CUDA graphs, each launched eagerly between them
        (what the engine's per-``layer`` terms count): one per attention, Mamba-2 or linear-attention mixer, one more
        for a sparse layer's own indexer; an FFN-only block has none (vLLM ``CompilationConfig._attention_ops``:
        unified_attention / unified_mla_attention, mamba_mixer2, gdn_attention_core, sparse_attn_indexer)."""
        return sum((layer.mixer is not None) + (layer.attention is not None and layer.attention.runs_indexer)
                   for layer in self.layers)

    @property
    def is_moe(self) -> bool:
        return any(_is_moe(layer) for layer in self.layers)

    @property
    def is_hybrid(self) -> bool:
        """Whether some layer mixes with a recurrent state (Mamba-2, linear attention) instead of attention."""
        return any(layer.mamba is not None or (layer.attention is not None
                                                and layer.attention.kind is AttentionKind.linear)
                   for layer in self.layers)

    def layer_groups(self) -> list[tuple[Layer, int]]:
        """Identical layers grouped with their counts, in first-appearance order (cost is per group)."""
        return group_layers(self.layers)

    @property
    def moe_ffn(self) -> Optional[FFN]:
        for layer in self.layers:
            if _is_moe(layer):
                return layer.ffn
        return None

    @property
    def num_moe_layers(self) -> int:
        return sum(_is_moe(layer) for layer in self.layers)

    def layer_pattern(self) -> dict[str, int]:
        """Layers by kind: full / sliding / chunked / mla / linear attention, ``mamba2`` mixers (a key only in models
        that have them), and MoE / dense FFN. A Nemotron-H block counts once, under its one part."""
        counts = {k.value: 0 for k in AttentionKind}
        mamba = 0
        for layer in self.layers:
            if layer.attention is not None:
                counts[layer.attention.kind.value] += 1
            elif layer.mamba is not None:
                mamba += 1
        if mamba:
            counts["mamba2"] = mamba
        counts["moe"] = self.num_moe_layers
        counts["dense_ffn"] = sum(layer.ffn is not None and layer.ffn.kind is FFNKind.dense for layer in self.layers)
        return counts

    def state_bytes_per_sequence(self, conv_dtype: DType = DType.bf16) -> float:
        """Recurrent state one sequence holds across all layers, independent of its context: each linear-attention
        or Mamba-2 layer's state in its state_dtype and its convolution state in ``conv_dtype`` (0 without such
        layers)."""
        return sum(m.state_elements * m.state_dtype.bytes_per_element
                   + m.conv_state_elements * conv_dtype.bytes_per_element
                   for m in (layer.mixer for layer in self.layers) if m is not None)

    def attention_pattern(self) -> str:
        """Short human summary of the mixers, e.g. 'full', 'mla', '52 sliding-1024 + 10 full', '24 mamba2 + 4 full'
        (FFN-only layers are left out)."""
        counts: dict[str, int] = {}
        for layer in self.layers:
            a = layer.attention
            if a is None:
                if layer.mamba is not None:
                    counts["mamba2"] = counts.get("mamba2", 0) + 1
                continue
            key = a.kind.value if a.window is None else f"{a.kind.value}-{a.window}"
            key = f"{key}-top{a.index_topk}" if a.sparse else key
            key = f"{key}-shared" if a.index_shared else key
            counts[key] = counts.get(key, 0) + 1
        if len(counts) == 1:
            return next(iter(counts))
        return " + ".join(f"{n} {k}" for k, n in counts.items())

    # --- parameter counts (elements) -------------------------------------------------------------
    @property
    def params_embedding(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def params_lm_head(self) -> int:
        if self.tie_word_embeddings:
            return 0
        return self.vocab_size * self.hidden_size + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def params_final_norm(self) -> int:
        norm = self.layers[-1]
        return self.hidden_size * (2 if norm.norm_bias else 1)

    @property
    def params_mtp(self) -> int:
        """Next-n modules: enorm, hnorm, eh_proj (2h -> h), a full layer, a head norm (embedding/head shared)."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        per = 2 * h + self.mtp_eh_proj.params + self.mtp_layer.params(h) + h
        return self.mtp_layers * per

    @property
    def mtp_eh_proj(self) -> Linear:
        """An MTP module's projection of [normed embedding ++ normed hidden state] back to h (DeepSeek-V3 eh_proj)."""
        return Linear(2 * self.hidden_size, self.hidden_size)

    @property
    def backbone_projections(self) -> tuple[Linear, ...]:
        """A target-reading drafter's pre_projection (2 x backbone -> h) and post_projection (h -> backbone);
        none for other models."""
        b = self.backbone_hidden_size
        return () if b is None else (Linear(2 * b, self.hidden_size), Linear(self.hidden_size, b))

    @property
    def params_total(self) -> int:
        """All weights except MTP modules; tied embeddings counted once."""
        body = sum(layer.params(self.hidden_size) for layer in self.layers)
        return self._params_outside_layers + body

    @property
    def params_active(self) -> int:
        """Weights one token touches, embedding and lm_head included (the lm_head once if tied)."""
        body = sum(layer.active_params(self.hidden_size) for layer in self.layers)
        return self._params_outside_layers + body

    @property
    def _params_outside_layers(self) -> int:
        projections = sum(p.params for p in self.backbone_projections)
        return self.params_embedding + self.params_final_norm + self.params_lm_head + projections

    def with_value_projections(self) -> "ModelSpec":
        """The model as an engine holds it that loads a v_proj of its own where the value reuses the key's projection
        (vLLM's Gemma-4): those layers run and keep two k/v projections, the cache unchanged; the model itself where
        no layer reuses the key."""
        if not any(layer.attention is not None and layer.attention.value_from_key for layer in self.layers):
            return self
        def own_value(layer: Layer) -> Layer:
            a = layer.attention
            if a is None or not a.value_from_key:
                return layer
            return layer.model_copy(update={"attention": a.model_copy(update={"value_from_key": False})})

        layers = tuple(own_value(layer) for layer in self.layers)
        return self.model_copy(update={"layers": layers})

    def kv_bytes_per_token(self, kv_dtype: DType = DType.bf16) -> float:
        """KV-cache bytes one token adds across all layers (ignoring window caps; see cost.memory for those), the
        sparse-attention indexer's own K cache (in its fixed format) included."""
        attns = [layer.attention for layer in self.layers if layer.attention is not None]
        kv = sum(a.kv_elements_per_token for a in attns) * kv_dtype.bytes_per_element
        indexer = sum(a.indexer_cache_bytes_per_token for a in attns)
        return kv + indexer if indexer else kv

    def weight_bytes(self, dtype: DType = DType.bf16) -> float:
        return self.params_total * dtype.bytes_per_element


def _is_moe(layer: Layer) -> bool:
    return layer.ffn is not None and layer.ffn.kind is FFNKind.moe


def group_layers(layers) -> list[tuple[Layer, int]]:
    """Identical layers grouped with their counts, in first-appearance order."""
    groups: list[list] = []
    for layer in layers:
        for g in groups:
            if g[0] == layer:
                g[1] += 1
                break
        else:
            groups.append([layer, 1])
    return [(g[0], g[1]) for g in groups]
