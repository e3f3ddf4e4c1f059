"""Torch skeletons of the 2026 decoder families, built from a published config.json and nothing else.

Independent ground truth for ``ModelSpec.params_total``: every module here mirrors the parameters that the
Hugging Face transformers (and, where named, vLLM) modeling class allocates, and reads its sizes straight from
the raw config dict (the files under model_specs/, Hugging Face config.json form), never from dsdsim's parser.
Forward passes are not written: the modules only hold parameters. Build them under ``torch.device("meta")``
so a 1T model costs no memory, and count with :func:`param_count`.

Conventions (the same as ``tests/test_torch_param_counts.py`` and ``params_total``):

* the text decoder only: no vision tower, no MTP / next-n module (transformers skips both on load:
  ``_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]`` in Qwen3Next/Qwen3_5Moe/NemotronH, ``model.layers.78.*``
  in GlmMoeDsa);
* a tied lm_head is the embedding tensor, counted once (no lm_head module is built);
* tensors the checkpoint stores and the modeling class loads are weights even where transformers registers
  them as a persistent buffer rather than an ``nn.Parameter``: the MoE router's ``e_score_correction_bias``
  (transformers ``DeepseekV3TopkRouter`` / ``GlmMoeDsaTopkRouter`` / ``NemotronHTopkRouter``:
  ``register_buffer``; vLLM ``DeepseekV2MoE``: ``nn.Parameter``) and Gemma 4's per-layer ``layer_scalar``
  (transformers ``Gemma4TextDecoderLayer``: ``register_buffer("layer_scalar", torch.ones(1))``, stored in the
  checkpoint as ``layers.N.layer_scalar``). Both are built here as parameters; :func:`param_count` counts
  parameters only, so non-persistent buffers (rotary ``inv_freq``) stay out.

Sources (transformers ``src/transformers/models/<family>/modeling_<family>.py``; vLLM
``vllm/model_executor/models/deepseek_v2.py``), class by class in the docstrings below.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

Config = dict[str, Any]


def param_count(module: nn.Module) -> int:
    """Elements in all parameters (shared tensors once, as ``nn.Module.parameters`` yields them)."""
    return sum(p.numel() for p in module.parameters())


def text_config(cfg: Config) -> Config:
    """The decoder's config: ``text_config`` of a multimodal wrapper (Qwen3.5, Kimi-K2.6, Gemma 4), else the file."""
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def _vector(n: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(n))


# The parameters of torch.nn.Linear / Conv1d / Embedding / LayerNorm, same names and shapes (checked against torch's
# classes in the test), without their weight initialisation, which makes construction on the meta device ~4x
# slower and allocates nothing anyway.


class Linear(nn.Module):
    """torch.nn.Linear(in_features, out_features, bias): weight (out, in), bias (out)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        if bias:
            self.bias = _vector(out_features)


class DepthwiseConv1d(nn.Module):
    """torch.nn.Conv1d(channels, channels, kernel_size, groups=channels, bias): weight (channels, 1, kernel),
    bias (channels)."""

    def __init__(self, channels: int, kernel_size: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size))
        if bias:
            self.bias = _vector(channels)


class Embedding(nn.Module):
    """torch.nn.Embedding(num_embeddings, embedding_dim): weight (num, dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm(dim) (elementwise_affine, bias): weight and bias (dim)."""

    def __init__(self, dim: int):
        super().__init__()
        self.weight = _vector(dim)
        self.bias = _vector(dim)


class RMSNorm(nn.Module):
    """One weight per channel: Qwen3NextRMSNorm, NemotronHRMSNorm, GlmMoeDsaRMSNorm, DeepseekV3RMSNorm,
    Gemma4RMSNorm (``with_scale=False`` builds none), Qwen3NextRMSNormGated, Zamba2RMSNormGated (the gate is an
    input, not a weight)."""

    def __init__(self, dim: int, with_scale: bool = True):
        super().__init__()
        if with_scale:
            self.weight = _vector(dim)


class GatedMLP(nn.Module):
    """gate_proj, up_proj (h -> i) and down_proj (i -> h), no bias: Qwen3NextMLP, Qwen3_5MoeMLP, DeepseekV3MLP,
    GlmMoeDsaMLP, Gemma4TextMLP."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = Linear(hidden, inter, bias=False)
        self.up_proj = Linear(hidden, inter, bias=False)
        self.down_proj = Linear(inter, hidden, bias=False)


class GatedExperts(nn.Module):
    """E gated experts as two 3D tensors: gate_up_proj (E, 2i, h), down_proj (E, h, i) (Qwen3_5MoeExperts,
    DeepseekV3NaiveMoe, GlmMoeDsaNaiveMoe; the same weights as E separate GatedMLPs)."""

    def __init__(self, n_experts: int, hidden: int, inter: int):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, 2 * inter, hidden))
        self.down_proj = nn.Parameter(torch.empty(n_experts, hidden, inter))


class TopkRouter(nn.Module):
    """weight (E, h), plus e_score_correction_bias (E) for noaux_tc / sigmoid routing (DeepseekV3TopkRouter,
    GlmMoeDsaTopkRouter, NemotronHTopkRouter; vLLM DeepseekV2MoE.gate)."""

    def __init__(self, n_experts: int, hidden: int, correction_bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_experts, hidden))
        if correction_bias:
            self.e_score_correction_bias = _vector(n_experts)


# --- Qwen3-Next / Qwen3.5 / Qwen3.6 (model_type qwen3_next, qwen3_5_moe_text) ------------------------------


class Qwen3NextGatedDeltaNet(nn.Module):
    """transformers Qwen3NextGatedDeltaNet: in_proj_qkvz (h -> 2*Hk*dk + 2*Hv*dv), in_proj_ba (h -> 2*Hv),
    conv1d depthwise over conv_dim = 2*Hk*dk + Hv*dv (kernel K, bias=False), dt_bias and A_log (Hv each),
    norm = Qwen3NextRMSNormGated(dv), out_proj (Hv*dv -> h). Qwen3_5MoeGatedDeltaNet splits the two input
    projections into in_proj_qkv / in_proj_z / in_proj_b / in_proj_a: the same weights."""

    def __init__(self, c: Config):
        super().__init__()
        h = c["hidden_size"]
        key_dim = c["linear_num_key_heads"] * c["linear_key_head_dim"]
        n_v = c["linear_num_value_heads"]
        value_dim = n_v * c["linear_value_head_dim"]
        conv_dim = 2 * key_dim + value_dim
        self.conv1d = DepthwiseConv1d(conv_dim, c["linear_conv_kernel_dim"], bias=False)
        self.in_proj_qkvz = Linear(h, 2 * key_dim + 2 * value_dim, bias=False)
        self.in_proj_ba = Linear(h, 2 * n_v, bias=False)
        self.dt_bias = _vector(n_v)
        self.A_log = _vector(n_v)
        self.norm = RMSNorm(c["linear_value_head_dim"])
        self.out_proj = Linear(value_dim, h, bias=False)


class Qwen3NextAttention(nn.Module):
    """transformers Qwen3NextAttention / Qwen3_5MoeAttention: q_proj emits the query and the output gate
    (h -> 2*n_q*d), k_proj / v_proj (h -> n_kv*d), o_proj (n_q*d -> h), all with bias=attention_bias;
    q_norm / k_norm over head_dim."""

    def __init__(self, c: Config):
        super().__init__()
        h, d, n_q, n_kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
        bias = c.get("attention_bias", False)
        self.q_proj = Linear(h, 2 * n_q * d, bias=bias)
        self.k_proj = Linear(h, n_kv * d, bias=bias)
        self.v_proj = Linear(h, n_kv * d, bias=bias)
        self.o_proj = Linear(n_q * d, h, bias=bias)
        self.q_norm = RMSNorm(d)
        self.k_norm = RMSNorm(d)


class Qwen3NextSparseMoeBlock(nn.Module):
    """transformers Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: gate (h -> E, no bias), E gated experts
    of moe_intermediate_size, one shared_expert of shared_expert_intermediate_size and its shared_expert_gate
    (h -> 1, no bias)."""

    def __init__(self, c: Config):
        super().__init__()
        h = c["hidden_size"]
        self.gate = Linear(h, c["num_experts"], bias=False)
        self.experts = GatedExperts(c["num_experts"], h, c["moe_intermediate_size"])
        self.shared_expert = GatedMLP(h, c["shared_expert_intermediate_size"])
        self.shared_expert_gate = Linear(h, 1, bias=False)


def qwen3_next_layer_types(c: Config) -> list[str]:
    """``layer_types`` as written, else Qwen3NextConfig's default: full attention every full_attention_interval-th
    layer (``"linear_attention" if bool((i + 1) % full_attention_interval) else "full_attention"``)."""
    if c.get("layer_types"):
        return list(c["layer_types"])
    every = c.get("full_attention_interval", 4)
    return ["linear_attention" if (i + 1) % every else "full_attention" for i in range(c["num_hidden_layers"])]


class Qwen3NextDecoderLayer(nn.Module):
    """transformers Qwen3NextDecoderLayer: linear_attn or self_attn, then the sparse MoE block where
    ``i not in mlp_only_layers and num_experts > 0 and (i + 1) % decoder_sparse_step == 0`` (else a dense
    Qwen3NextMLP of intermediate_size), input_layernorm and post_attention_layernorm."""

    def __init__(self, c: Config, layer_idx: int, layer_type: str):
        super().__init__()
        if layer_type == "linear_attention":
            self.linear_attn = Qwen3NextGatedDeltaNet(c)
        else:
            self.self_attn = Qwen3NextAttention(c)
        sparse = (layer_idx not in c.get("mlp_only_layers", []) and c["num_experts"] > 0
                  and (layer_idx + 1) % c.get("decoder_sparse_step", 1) == 0)
        self.mlp = Qwen3NextSparseMoeBlock(c) if sparse else GatedMLP(c["hidden_size"], c["intermediate_size"])
        self.input_layernorm = RMSNorm(c["hidden_size"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"])


class Qwen3NextForCausalLM(nn.Module):
    """transformers Qwen3NextForCausalLM (and the text model of Qwen3_5MoeForConditionalGeneration):
    embed_tokens, the decoder layers, the final norm, and lm_head unless tie_word_embeddings."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Qwen3NextDecoderLayer(c, i, t)
                                     for i, t in enumerate(qwen3_next_layer_types(c))])
        self.norm = RMSNorm(c["hidden_size"])
        if not _tied(cfg):
            self.lm_head = Linear(c["hidden_size"], c["vocab_size"], bias=False)


# --- Nemotron-H / Nemotron 3 (model_type nemotron_h) --------------------------------------------------------

NEMOTRON_BLOCK_TYPES = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


class NemotronHMamba2Mixer(nn.Module):
    """transformers NemotronHMamba2Mixer, with d_inner = mamba_num_heads * mamba_head_dim and
    conv_dim = d_inner + 2 * n_groups * ssm_state_size: in_proj (h -> d_inner + conv_dim + n_heads,
    bias=use_bias), conv1d depthwise (kernel conv_kernel, bias=use_conv_bias), dt_bias, A_log and D (n_heads
    each), norm = Zamba2RMSNormGated(d_inner), out_proj (d_inner -> h, bias=use_bias)."""

    def __init__(self, c: Config):
        super().__init__()
        h, n_heads = c["hidden_size"], c["mamba_num_heads"]
        d_inner = n_heads * c["mamba_head_dim"]
        conv_dim = d_inner + 2 * c["n_groups"] * c["ssm_state_size"]
        self.conv1d = DepthwiseConv1d(conv_dim, c["conv_kernel"], bias=c["use_conv_bias"])
        self.in_proj = Linear(h, d_inner + conv_dim + n_heads, bias=c.get("use_bias", False))
        self.dt_bias = _vector(n_heads)
        self.A_log = _vector(n_heads)
        self.norm = RMSNorm(d_inner)
        self.D = _vector(n_heads)
        self.out_proj = Linear(d_inner, h, bias=c.get("use_bias", False))


def nemotron_head_dim(c: Config) -> int:
    """NemotronHAttention's head_dim: ``head_dim`` (Nemotron 3), the early configs' ``attention_head_dim``
    (Nemotron-H 8B), else hidden_size // num_attention_heads."""
    return c.get("head_dim") or c.get("attention_head_dim") or c["hidden_size"] // c["num_attention_heads"]


class NemotronHAttention(nn.Module):
    """transformers NemotronHAttention: q/k/v/o projections without bias, no q/k norms, no rotary weights."""

    def __init__(self, c: Config):
        super().__init__()
        h, d, n_q, n_kv = c["hidden_size"], nemotron_head_dim(c), c["num_attention_heads"], c["num_key_value_heads"]
        self.q_proj = Linear(h, n_q * d, bias=False)
        self.k_proj = Linear(h, n_kv * d, bias=False)
        self.v_proj = Linear(h, n_kv * d, bias=False)
        self.o_proj = Linear(n_q * d, h, bias=False)


class NemotronHMLP(nn.Module):
    """transformers NemotronHMLP: up_proj (h -> i) and down_proj (i -> h), bias=mlp_bias, ReLU^2 between: no
    gate projection."""

    def __init__(self, c: Config, inter: int, width: int | None = None):
        super().__init__()
        h = width or c["hidden_size"]
        self.up_proj = Linear(h, inter, bias=c.get("mlp_bias", False))
        self.down_proj = Linear(inter, h, bias=c.get("mlp_bias", False))


class NemotronHExperts(nn.Module):
    """transformers NemotronHExperts: E non-gated experts, up_proj (E, i, d) and down_proj (E, d, i), where d is
    moe_latent_size when set (LatentMoE) and hidden_size otherwise."""

    def __init__(self, c: Config):
        super().__init__()
        d = c.get("moe_latent_size") or c["hidden_size"]
        n, i = c["n_routed_experts"], c["moe_intermediate_size"]
        self.up_proj = nn.Parameter(torch.empty(n, i, d))
        self.down_proj = nn.Parameter(torch.empty(n, d, i))


class NemotronHMoE(nn.Module):
    """transformers NemotronHMoE: the routed experts, gate = NemotronHTopkRouter (weight (E, h) on the full hidden
    state, e_score_correction_bias), shared_experts = NemotronHMLP(moe_shared_expert_intermediate_size) on the
    hidden state, and fc1_latent_proj (h -> latent) / fc2_latent_proj (latent -> h), bias=mlp_bias, where
    moe_latent_size is set (nn.Identity otherwise)."""

    def __init__(self, c: Config):
        super().__init__()
        h = c["hidden_size"]
        self.experts = NemotronHExperts(c)
        self.gate = TopkRouter(c["n_routed_experts"], h, correction_bias=True)
        self.shared_experts = NemotronHMLP(c, c["moe_shared_expert_intermediate_size"])
        latent = c.get("moe_latent_size")
        if latent:
            self.fc1_latent_proj = Linear(h, latent, bias=c.get("mlp_bias", False))
            self.fc2_latent_proj = Linear(latent, h, bias=c.get("mlp_bias", False))


class NemotronHBlock(nn.Module):
    """transformers NemotronHBlock: one RMSNorm and one mixer (MIXER_TYPES: mamba, attention, mlp, moe)."""

    def __init__(self, c: Config, block_type: str):
        super().__init__()
        self.norm = RMSNorm(c["hidden_size"])
        mixers: dict[str, Callable[[], nn.Module]] = {
            "mamba": lambda: NemotronHMamba2Mixer(c),
            "attention": lambda: NemotronHAttention(c),
            "mlp": lambda: NemotronHMLP(c, c["intermediate_size"]),
            "moe": lambda: NemotronHMoE(c),
        }
        self.mixer = mixers[block_type]()


class NemotronHForCausalLM(nn.Module):
    """transformers NemotronHForCausalLM: embeddings, one block per character of hybrid_override_pattern
    (M Mamba-2, * attention, - MLP, E MoE), norm_f, lm_head unless tied."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        pattern = c["hybrid_override_pattern"]
        assert len(pattern) == c["num_hidden_layers"], (len(pattern), c["num_hidden_layers"])
        self.embeddings = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([NemotronHBlock(c, NEMOTRON_BLOCK_TYPES[ch]) for ch in pattern])
        self.norm_f = RMSNorm(c["hidden_size"])
        if not _tied(cfg):
            self.lm_head = Linear(c["hidden_size"], c["vocab_size"], bias=False)


# --- DeepSeek-V3 lineage with MLA: DeepSeek-V3.2-Exp, GLM-5 / GLM-5.2, Kimi-K2.6 (and V2 / V3 / K2) -----------


class DsaIndexer(nn.Module):
    """The DSA lightning indexer (DeepSeek-V3.2-Exp inference/model.py Indexer; transformers GlmMoeDsaIndexer;
    vLLM deepseek_v2.py Indexer): wq_b (q_lora_rank -> index_n_heads * index_head_dim), wk
    (h -> index_head_dim), k_norm = LayerNorm(index_head_dim) with weight and bias, weights_proj
    (h -> index_n_heads), no biases on the projections."""

    def __init__(self, c: Config):
        super().__init__()
        h, n, d = c["hidden_size"], c["index_n_heads"], c["index_head_dim"]
        self.wq_b = Linear(c["q_lora_rank"], n * d, bias=False)
        self.wk = Linear(h, d, bias=False)
        self.k_norm = LayerNorm(d)
        self.weights_proj = Linear(h, n, bias=False)


class MlaAttention(nn.Module):
    """Multi-head latent attention, transformers DeepseekV3Attention / GlmMoeDsaAttention (vLLM
    DeepseekV2MLAAttention): q_a_proj (h -> q_lora_rank), q_a_layernorm, q_b_proj
    (q_lora_rank -> n * (qk_nope + qk_rope)) (q_proj h -> n * (qk_nope + qk_rope) when q_lora_rank is null),
    kv_a_proj_with_mqa (h -> kv_lora_rank + qk_rope), kv_a_layernorm, kv_b_proj
    (kv_lora_rank -> n * (qk_nope + v)), o_proj (n * v -> h); q_a / kv_a / o with bias=attention_bias.
    The indexer where the layer runs one."""

    def __init__(self, c: Config, with_indexer: bool):
        super().__init__()
        h, n, bias = c["hidden_size"], c["num_attention_heads"], c.get("attention_bias", False)
        qk_head = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
        q_lora, kv_lora = c.get("q_lora_rank"), c["kv_lora_rank"]
        if q_lora is None:
            self.q_proj = Linear(h, n * qk_head, bias=False)
        else:
            self.q_a_proj = Linear(h, q_lora, bias=bias)
            self.q_a_layernorm = RMSNorm(q_lora)
            self.q_b_proj = Linear(q_lora, n * qk_head, bias=False)
        self.kv_a_proj_with_mqa = Linear(h, kv_lora + c["qk_rope_head_dim"], bias=bias)
        self.kv_a_layernorm = RMSNorm(kv_lora)
        self.kv_b_proj = Linear(kv_lora, n * (c["qk_nope_head_dim"] + c["v_head_dim"]), bias=False)
        self.o_proj = Linear(n * c["v_head_dim"], h, bias=bias)
        if with_indexer:
            self.indexer = DsaIndexer(c)


class DeepseekV3MoE(nn.Module):
    """transformers DeepseekV3MoE / GlmMoeDsaMoE (vLLM DeepseekV2MoE): gate (weight (E, h), and
    e_score_correction_bias when topk_method is noaux_tc, as vLLM DeepseekV2MoE and SGLang DeepseekV2MoEGate build
    it; DeepSeek-V2's greedy softmax gate has none), E gated experts of moe_intermediate_size, and
    shared_experts = one gated MLP of moe_intermediate_size * n_shared_experts."""

    def __init__(self, c: Config):
        super().__init__()
        h, n = c["hidden_size"], c["n_routed_experts"]
        self.gate = TopkRouter(n, h, correction_bias=c.get("topk_method") == "noaux_tc")
        self.experts = GatedExperts(n, h, c["moe_intermediate_size"])
        if c.get("n_shared_experts"):
            self.shared_experts = GatedMLP(h, c["moe_intermediate_size"] * c["n_shared_experts"])


def deepseek_is_moe(c: Config, layer_idx: int) -> bool:
    """``mlp_layer_types[i] == "sparse"`` where written (GlmMoeDsaDecoderLayer), else DeepSeek-V3's rule:
    ``n_routed_experts and i >= first_k_dense_replace and i % moe_layer_freq == 0``."""
    if c.get("mlp_layer_types"):
        return c["mlp_layer_types"][layer_idx] == "sparse"
    return bool(c.get("n_routed_experts")) and layer_idx >= c.get("first_k_dense_replace", 0) \
        and layer_idx % c.get("moe_layer_freq", 1) == 0


def dsa_runs_indexer(c: Config, layer_idx: int) -> bool:
    """Whether layer i owns a lightning indexer. None without DSA (no ``index_topk``: DeepSeek-V3, Kimi). With it,
    vLLM DeepseekV2MLAAttention (IndexCache, arXiv:2603.12201) builds the indexer unless the layer skips top-k:
    ``index_topk_pattern[i] == "S"`` where a pattern is given, else
    ``max(i - index_skip_topk_offset + 1, 0) % index_topk_freq != 0`` (defaults: offset 2, freq 1: every layer)."""
    if "index_topk" not in c:
        return False
    pattern = c.get("index_topk_pattern")
    if pattern is not None:
        return pattern[layer_idx] != "S"
    freq, offset = c.get("index_topk_freq", 1), c.get("index_skip_topk_offset", 2)
    return max(layer_idx - offset + 1, 0) % freq == 0


class DeepseekV3DecoderLayer(nn.Module):
    """transformers DeepseekV3DecoderLayer / GlmMoeDsaDecoderLayer: self_attn (MLA), mlp (MoE or a dense gated
    MLP of intermediate_size), input_layernorm, post_attention_layernorm."""

    def __init__(self, c: Config, layer_idx: int):
        super().__init__()
        h = c["hidden_size"]
        self.self_attn = MlaAttention(c, with_indexer=dsa_runs_indexer(c, layer_idx))
        self.mlp = DeepseekV3MoE(c) if deepseek_is_moe(c, layer_idx) else GatedMLP(h, c["intermediate_size"])
        self.input_layernorm = RMSNorm(h)
        self.post_attention_layernorm = RMSNorm(h)


class DeepseekV3ForCausalLM(nn.Module):
    """transformers DeepseekV3ForCausalLM / GlmMoeDsaForCausalLM (the decoder of KimiK25ForConditionalGeneration):
    embed_tokens, num_hidden_layers decoder layers (the MTP layer num_hidden_layers is not built), norm,
    lm_head unless tied."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DeepseekV3DecoderLayer(c, i) for i in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"])
        if not _tied(cfg):
            self.lm_head = Linear(c["hidden_size"], c["vocab_size"], bias=False)


# --- Gemma 4 (model_type gemma4 text model, gemma4_assistant) -----------------------------------------------


class Gemma4TextAttention(nn.Module):
    """transformers Gemma4TextAttention. Sliding layers use head_dim and num_key_value_heads; full layers use
    global_head_dim and, with attention_k_eq_v, num_global_key_value_heads and no v_proj (V reuses K). q_proj,
    q_norm and o_proj always; k_proj, v_proj, k_norm and v_norm (RMSNorm with_scale=False: no weight) only on
    layers that own their KV: a layer is KV-shared when ``i >= num_hidden_layers - num_kv_shared_layers >= 0``
    with num_kv_shared_layers > 0 (the assistant shares all its layers with the target's cache; transformers
    releases before the assistant wrote ``> 0`` there, under which an all-shared model could not be built)."""

    def __init__(self, c: Config, layer_type: str, kv_shared: bool):
        super().__init__()
        h, n_q, bias = c["hidden_size"], c["num_attention_heads"], c.get("attention_bias", False)
        sliding = layer_type == "sliding_attention"
        d = c["head_dim"] if sliding or not c.get("global_head_dim") else c["global_head_dim"]
        k_eq_v = bool(c.get("attention_k_eq_v")) and not sliding
        n_kv = c["num_global_key_value_heads"] if k_eq_v else c["num_key_value_heads"]
        self.q_proj = Linear(h, n_q * d, bias=bias)
        self.q_norm = RMSNorm(d)
        if not kv_shared:
            self.k_norm = RMSNorm(d)
            self.v_norm = RMSNorm(d, with_scale=False)
            self.k_proj = Linear(h, n_kv * d, bias=bias)
            if not k_eq_v:
                self.v_proj = Linear(h, n_kv * d, bias=bias)
        self.o_proj = Linear(n_q * d, h, bias=bias)


class Gemma4TextDecoderLayer(nn.Module):
    """transformers Gemma4TextDecoderLayer: self_attn, a GeGLU MLP (intermediate_size, doubled on KV-shared
    layers under use_double_wide_mlp), four RMSNorms (input, post_attention, pre_feedforward,
    post_feedforward) and layer_scalar (1). Per-layer-input embeddings (hidden_size_per_layer_input) and the
    MoE block (enable_moe_block) are not built: the shipped configs set 0 and false, checked by the caller."""

    def __init__(self, c: Config, layer_type: str, kv_shared: bool):
        super().__init__()
        h = c["hidden_size"]
        self.self_attn = Gemma4TextAttention(c, layer_type, kv_shared)
        wide = 2 if c.get("use_double_wide_mlp") and kv_shared else 1
        self.mlp = GatedMLP(h, c["intermediate_size"] * wide)
        self.input_layernorm = RMSNorm(h)
        self.post_attention_layernorm = RMSNorm(h)
        self.pre_feedforward_layernorm = RMSNorm(h)
        self.post_feedforward_layernorm = RMSNorm(h)
        self.layer_scalar = _vector(1)


class Gemma4TextModel(nn.Module):
    """transformers Gemma4TextModel: embed_tokens (Gemma4TextScaledWordEmbedding), the decoder layers, norm. The
    lm_head of Gemma4ForConditionalGeneration / Gemma4AssistantForCausalLM is tied to embed_tokens."""

    def __init__(self, c: Config):
        super().__init__()
        if c.get("hidden_size_per_layer_input") or c.get("enable_moe_block"):
            raise NotImplementedError("per-layer inputs and the Gemma 4 MoE block are not mirrored here")
        n = c["num_hidden_layers"]
        n_shared = c.get("num_kv_shared_layers", 0)
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Gemma4TextDecoderLayer(c, t, kv_shared=n_shared > 0 and i >= n - n_shared)
                                     for i, t in enumerate(c["layer_types"])])
        self.norm = RMSNorm(c["hidden_size"])


class Gemma4ForConditionalGeneration(nn.Module):
    """The text decoder of transformers Gemma4ForConditionalGeneration (vision and audio towers left out)."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        self.model = Gemma4TextModel(c)
        if not _tied(cfg):
            self.lm_head = Linear(c["hidden_size"], c["vocab_size"], bias=False)


class Gemma4AssistantForCausalLM(nn.Module):
    """transformers Gemma4AssistantForCausalLM: a Gemma4TextModel, pre_projection (2 * backbone_hidden_size -> h)
    of the target's embedding and last hidden state, post_projection (h -> backbone_hidden_size), the lm_head tied
    to embed_tokens, and the centroid head (Gemma4AssistantMaskedEmbedder.centroids, h -> num_centroids) only
    with use_ordered_embeddings."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        h, backbone = c["hidden_size"], cfg["backbone_hidden_size"]
        self.model = Gemma4TextModel(c)
        self.pre_projection = Linear(2 * backbone, h, bias=False)
        self.post_projection = Linear(h, backbone, bias=False)
        if not _tied(cfg):
            self.lm_head = Linear(h, c["vocab_size"], bias=False)
        if cfg.get("use_ordered_embeddings"):
            self.centroids = Linear(h, cfg["num_centroids"], bias=False)


# --- MiniMax-M2 / M2.1 / M2.5 (model_type minimax_m2) ------------------------------------------------------


class MiniMaxM2Attention(nn.Module):
    """transformers MiniMaxM2Attention (a FlexOlmoAttention): q/k/v/o projections without bias, q_norm over the whole
    query projection (n_q*d) and k_norm over the whole key projection (n_kv*d)."""

    def __init__(self, c: Config):
        super().__init__()
        h, d, n_q, n_kv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
        self.q_proj = Linear(h, n_q * d, bias=False)
        self.k_proj = Linear(h, n_kv * d, bias=False)
        self.v_proj = Linear(h, n_kv * d, bias=False)
        self.o_proj = Linear(n_q * d, h, bias=False)
        self.q_norm = RMSNorm(n_q * d)
        self.k_norm = RMSNorm(n_kv * d)


class MiniMaxM2DecoderLayer(nn.Module):
    """transformers MiniMaxM2DecoderLayer (a MixtralDecoderLayer): self_attn, the sparse MoE block (a Mixtral top-k
    router, weight (E, h), with the sigmoid routing's e_score_correction_bias (E), a checkpoint tensor; E gated
    experts of intermediate_size), input_layernorm and post_attention_layernorm."""

    def __init__(self, c: Config):
        super().__init__()
        h, e = c["hidden_size"], c["num_local_experts"]
        self.self_attn = MiniMaxM2Attention(c)
        self.gate = TopkRouter(e, h, correction_bias=True)
        self.experts = GatedExperts(e, h, c["intermediate_size"])
        self.input_layernorm = RMSNorm(h)
        self.post_attention_layernorm = RMSNorm(h)


class MiniMaxM2ForCausalLM(nn.Module):
    """transformers MiniMaxM2ForCausalLM (a MixtralForCausalLM): embed_tokens, the decoder layers, norm, lm_head
    unless tie_word_embeddings. The MTP modules the config names (use_mtp) are not built, as transformers builds
    none."""

    def __init__(self, cfg: Config):
        super().__init__()
        c = text_config(cfg)
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([MiniMaxM2DecoderLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"])
        if not _tied(cfg):
            self.lm_head = Linear(c["hidden_size"], c["vocab_size"], bias=False)


# --- dispatch ------------------------------------------------------------------------------------------------


def _tied(cfg: Config) -> bool:
    """tie_word_embeddings of the text config, else of the wrapper, else PretrainedConfig's default (True)."""
    c = text_config(cfg)
    return bool(c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True)))


BUILDERS: dict[str, Callable[[Config], nn.Module]] = {
    "qwen3_next": Qwen3NextForCausalLM,
    "qwen3_5_moe_text": Qwen3NextForCausalLM,
    "nemotron_h": NemotronHForCausalLM,
    "deepseek_v2": DeepseekV3ForCausalLM,  # DeepseekV2Attention / DeepseekV2MoE: the same weights, no correction bias
    "deepseek_v3": DeepseekV3ForCausalLM,
    "deepseek_v32": DeepseekV3ForCausalLM,
    "kimi_k2": DeepseekV3ForCausalLM,
    "glm_moe_dsa": DeepseekV3ForCausalLM,
    "gemma4_text": Gemma4ForConditionalGeneration,
    "minimax_m2": MiniMaxM2ForCausalLM,
}


def build_meta(cfg: Config) -> nn.Module:
    """The skeleton for a config.json dict, on the meta device. Dispatch on the decoder's model_type (the wrapper's
    for the Gemma 4 assistant, whose text_config is a plain gemma4_text)."""
    key = "gemma4_assistant" if cfg.get("model_type") == "gemma4_assistant" else text_config(cfg)["model_type"]
    builder = Gemma4AssistantForCausalLM if key == "gemma4_assistant" else BUILDERS.get(key)
    if builder is None:
        raise KeyError(f"no torch skeleton for model_type {key!r}; known: {sorted(BUILDERS) + ['gemma4_assistant']}")
    with torch.device("meta"):
        return builder(cfg)
