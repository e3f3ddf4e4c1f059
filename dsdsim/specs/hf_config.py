"""Hugging Face config.json -> ModelSpec.

Reads configs as published on the Hub. Each family maps its own field names onto the typed layers of
``dsdsim.specs.model``. A feature the cost model cannot represent (state-space layers outside the families that
model them, an unknown layer type) is refused with one line naming the field — never silently approximated.
"""
from __future__ import annotations

from typing import Any, Callable

from pydantic import ValidationError

from dsdsim.errors import SpecError, kind_of, pydantic_one_line
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, Mamba2, ModelSpec, NormKind
from dsdsim.units import DType

SUPPORTED_FAMILIES = (
    "llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mixtral", "phimoe", "deepseek_v2",
    "deepseek_v3", "deepseek_v32", "kimi_k2", "gpt_oss", "llama4", "llama4_text", "cohere", "cohere2", "gemma3", "gemma3_text",
    "gemma4", "gemma4_text", "gemma4_assistant", "glm4_moe", "qwen3_next", "qwen3_5", "qwen3_5_text",
    "qwen3_5_moe", "qwen3_5_moe_text", "glm_moe_dsa", "nemotron_h", "kimi_k25",
    "minimax_m2",
)
# transformers' per-class default for tie_word_embeddings (PretrainedConfig's own default is True).
_TIE_DEFAULT = {"cohere": True, "cohere2": True, "gemma3_text": True, "gemma4_text": True}
# multimodal or drafter wrappers whose decoder is their text_config
_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text", "gemma4": "gemma4_text",
             "gemma4_assistant": "gemma4_text", "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
             "kimi_k25": "kimi_k2"}
# wrappers with no decoder of their own outside text_config (Kimi-K2.5 / K2.6: KimiK25Config)
_TEXT_CONFIG_ONLY = ("kimi_k25",)
# hybrid gated-DeltaNet families (linear-attention layers between gated full-attention layers)
_GDN_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
_LAYER_TYPE_KIND = {
    "full_attention": AttentionKind.full, "attention": AttentionKind.full, "global": AttentionKind.full,
    "sliding_attention": AttentionKind.sliding, "sliding": AttentionKind.sliding, "local": AttentionKind.sliding,
    "chunked_attention": AttentionKind.chunked,
}


class _Cfg:
    """Typed access to a config dict with one-line errors naming the field."""

    def __init__(self, data: dict, family: str, where: str):
        self.data, self.family, self.where = data, family, where

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def int(self, key: str, default: Any = ..., minimum: int = 1, maximum: int = 2**31) -> int:
        v = self.data.get(key)
        if v is None:
            if default is ...:
                raise SpecError(f"{self.where}: required field {key!r} is missing (model_type {self.family})")
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")) \
                or v != int(v):
            raise SpecError(f"{self.where}: field {key!r} must be a whole number, got {v!r}")
        if v < minimum:
            raise SpecError(f"{self.where}: field {key!r} must be >= {minimum}, got {v}")
        if v > maximum:
            raise SpecError(f"{self.where}: field {key!r} = {v} is implausibly large (at most {maximum})")
        return int(v)

    def int_list(self, key: str) -> list[int]:
        v = self.data.get(key)
        if v is None:
            return []
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
            raise SpecError(f"{self.where}: field {key!r} must be a list of whole numbers, got {v!r}")
        return list(v)

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise SpecError(f"{self.where}: field {key!r} must be true or false, got {v!r}")
        return v

    def refuse(self, key: str, why: str) -> SpecError:
        return SpecError(f"{self.where}: field {key!r}: {why}; dsdsim cannot model this (model_type {self.family})")


def model_from_hf_config(config: object, name: str, source: str = "") -> ModelSpec:
    """Build a ModelSpec from a parsed config.json (a dict)."""
    where = name or "config.json"
    if not isinstance(config, dict):
        raise SpecError(f"{where}: a config.json must be a JSON object, got {kind_of(config)}")
    family = config.get("model_type")
    if not isinstance(family, str):
        raise SpecError(f"{where}: required field 'model_type' is missing; is this a Hugging Face config.json?")
    outer = config
    if family in _WRAPPERS and isinstance(config.get("text_config"), dict):
        config = {**config["text_config"]}
        config.setdefault("model_type", _WRAPPERS[family])
        family = config["model_type"]
        for key in ("tie_word_embeddings",):
            if key not in config and key in outer:
                config[key] = outer[key]
    if family in _TEXT_CONFIG_ONLY:
        raise SpecError(f"{where}: model_type {family!r} keeps its decoder in 'text_config', which is missing or not "
                        "an object")
    if family not in SUPPORTED_FAMILIES:
        raise SpecError(
            f"{where}: unknown model_type {family!r}; supported: {', '.join(SUPPORTED_FAMILIES)}")
    cfg = _Cfg(config, family, where)
    build = _FAMILY_BUILDERS.get(family, _build_standard)
    try:
        layers, mtp_layers, mtp_layer = build(cfg)
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, where)) from None
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError) as exc:
        if isinstance(exc, SpecError):
            raise
        # a field of an unexpected type that the checks above did not anticipate: still one line, no traceback
        raise SpecError(f"{where}: cannot read this {family} config ({type(exc).__name__}: {exc}); "
                        "check the field types against the published config.json") from None
    dtype, expert_dtype = _checkpoint_dtypes(outer, cfg)
    try:
        return ModelSpec(
            name=name, family=family, hidden_size=cfg.int("hidden_size"), vocab_size=cfg.int("vocab_size"),
            tie_word_embeddings=cfg.bool("tie_word_embeddings", _TIE_DEFAULT.get(family, False)),
            lm_head_bias=cfg.bool("lm_head_bias", False), layers=tuple(layers), mtp_layers=mtp_layers,
            mtp_layer=mtp_layer, max_position_embeddings=cfg.get("max_position_embeddings"),
            default_dtype=dtype, default_expert_dtype=expert_dtype, source=source,
            backbone_hidden_size=_Cfg(outer, family, where).int("backbone_hidden_size", None),
            architecture=_architecture(outer),
        )
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, where)) from None


# --- pieces shared by the families ------------------------------------------------------------------


def _num_layers(cfg: _Cfg) -> int:
    return cfg.int("num_hidden_layers", maximum=4096)


def _head_dim(cfg: _Cfg) -> int:
    heads = cfg.int("num_attention_heads")
    if cfg.has("head_dim"):
        return cfg.int("head_dim")
    hidden = cfg.int("hidden_size")
    if hidden % heads:
        raise SpecError(f"{cfg.where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}; "
                        "add 'head_dim'")
    return hidden // heads


def _attention_kinds(cfg: _Cfg, n_layers: int) -> list[tuple[AttentionKind, int | None]]:
    """Per-layer (kind, window) from layer_types, sliding_window_pattern, no_rope_layers or sliding_window."""
    window = cfg.get("sliding_window")
    if cfg.has("layer_types"):
        types = cfg.get("layer_types")
        if not isinstance(types, list) or len(types) != n_layers:
            raise SpecError(f"{cfg.where}: field 'layer_types' must list one type per layer ({n_layers})")
        out = []
        for t in types:
            kind = _LAYER_TYPE_KIND.get(t)
            if kind is None:
                raise cfg.refuse("layer_types", f"layer type {t!r} is not full/sliding/chunked attention")
            size = None
            if kind is AttentionKind.sliding:
                if window is None:
                    raise SpecError(f"{cfg.where}: layer_types has sliding layers but 'sliding_window' is missing")
                size = cfg.int("sliding_window")
            elif kind is AttentionKind.chunked:
                size = cfg.int("attention_chunk_size")
            out.append((kind, int(size) if size else None))
        return out
    pattern = cfg.get("sliding_window_pattern")
    if pattern is not None and window is not None:
        p = cfg.int("sliding_window_pattern")
        size = cfg.int("sliding_window")
        return [(AttentionKind.full, None) if (i + 1) % p == 0 else (AttentionKind.sliding, size)
                for i in range(n_layers)]
    if cfg.family == "llama4_text" and cfg.has("attention_chunk_size"):
        chunk = cfg.int("attention_chunk_size")
        no_rope = cfg.int_list("no_rope_layers")
        if not no_rope:
            interval = cfg.int("no_rope_layer_interval", 4)
            no_rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
        if len(no_rope) != n_layers:
            raise SpecError(f"{cfg.where}: field 'no_rope_layers' must have one entry per layer ({n_layers})")
        # transformers Llama4: 1 = RoPE layer (chunked attention), 0 = NoPE layer (global attention)
        return [(AttentionKind.chunked, chunk) if r else (AttentionKind.full, None) for r in no_rope]
    uses_window = window is not None and cfg.bool("use_sliding_window", True)
    if cfg.family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not cfg.bool("use_sliding_window", False):
        uses_window = False
    if uses_window:
        return [(AttentionKind.sliding, cfg.int("sliding_window"))] * n_layers
    return [(AttentionKind.full, None)] * n_layers


# transformers' per-class default for partial_rotary_factor where a config leaves it out (Qwen3NextConfig 0.25;
# Qwen3_5TextConfig / Qwen3_5MoeTextConfig 0.25, "assign default for BC"; Glm4MoeConfig 0.5); others rotate whole heads
_PARTIAL_ROTARY_DEFAULT = {"qwen3_next": 0.25, "qwen3_5_text": 0.25, "qwen3_5_moe_text": 0.25, "glm4_moe": 0.5}


def _rotary_dim(cfg: _Cfg, head_dim: int) -> int | None:
    """Elements of each q/k head that rotary rotates, int(head_dim x partial_rotary_factor) as vLLM's get_rope
    takes it: the config's partial_rotary_factor, else rope_parameters' (the transformers v5 layout, Qwen3.5), else
    the family's class default; None where the whole head rotates."""
    factor = cfg.get("partial_rotary_factor")
    rope = cfg.get("rope_parameters")
    if factor is None and isinstance(rope, dict):
        factor = rope.get("partial_rotary_factor")
    if factor is None and cfg.has("rotary_dim"):        # MiniMax-M2: the rotated elements themselves (64 of 128)
        factor = cfg.int("rotary_dim") / head_dim
    if factor is None:
        factor = _PARTIAL_ROTARY_DEFAULT.get(cfg.family, 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise SpecError(f"{cfg.where}: field 'partial_rotary_factor' must be a number in (0, 1], got {factor!r}")
    dim = int(head_dim * factor)
    if dim < 1:
        raise SpecError(f"{cfg.where}: partial_rotary_factor {factor} rotates no element of a {head_dim}-wide head")
    return None if dim == head_dim else dim


def _gqa(cfg: _Cfg, kind: AttentionKind, window: int | None) -> Attention:
    heads = cfg.int("num_attention_heads")
    fam = cfg.family
    bias = cfg.bool("attention_bias", False)
    qkv_bias = bias or fam in ("qwen2", "qwen2_moe")      # Qwen2 always has q/k/v biases (no config field)
    o_bias = bias and fam not in ("glm4_moe", "qwen2", "qwen2_moe")
    qk_norm = fam in ("qwen3", "qwen3_moe", "gemma3_text", "gemma4_text") or cfg.bool("use_qk_norm", False)
    if fam == "llama4_text":
        qk_norm = False  # Llama-4 qk norm is a parameter-free L2 norm
    head_dim = _head_dim(cfg)
    return Attention(
        kind=kind, num_heads=heads, num_kv_heads=cfg.int("num_key_value_heads", heads), head_dim=head_dim,
        window=window, qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=qk_norm, sinks=fam == "gpt_oss",
        qk_norm_per_layer=qk_norm and cfg.get("qk_norm_type") == "per_layer",
        rotary_dim=_rotary_dim(cfg, head_dim),
    )


def _dense(cfg: _Cfg, key: str = "intermediate_size") -> FFN:
    return FFN(kind=FFNKind.dense, intermediate_size=cfg.int(key), bias=cfg.bool("mlp_bias", False))


def _norm_layout(cfg: _Cfg) -> dict:
    fam = cfg.family
    if fam in ("cohere", "cohere2"):
        return {"norm": NormKind.layer, "norms": 1, "norm_bias": False}  # parallel attention + MLP block
    if fam == "phimoe":
        return {"norm": NormKind.layer, "norms": 2, "norm_bias": True}
    if fam in ("gemma3_text", "gemma4_text"):
        return {"norm": NormKind.rms, "norms": 4, "norm_bias": False}
    return {"norm": NormKind.rms, "norms": 2, "norm_bias": False}


def _moe_layer_set(cfg: _Cfg, n_layers: int) -> set[int]:
    fam = cfg.family
    if fam in ("mixtral", "phimoe", "gpt_oss", "minimax_m2"):
        return set(range(n_layers))
    if fam in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        if cfg.int("num_experts", 0, minimum=0) == 0:
            return set()
        step = cfg.int("decoder_sparse_step", 1)
        skip = set(cfg.int_list("mlp_only_layers"))
        return {i for i in range(n_layers) if i not in skip and (i + 1) % step == 0}
    if fam == "llama4_text":
        if cfg.has("moe_layers"):
            return set(cfg.int_list("moe_layers"))
        step = cfg.int("interleave_moe_layer_step", 1)
        return set(range(step - 1, n_layers, step))
    if fam == "glm_moe_dsa" and cfg.has("mlp_layer_types"):
        types = _per_layer_list(cfg, "mlp_layer_types", n_layers, ("dense", "sparse"))
        return {i for i, t in enumerate(types) if t == "sparse"}
    if fam in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa"):
        if cfg.int("n_routed_experts", 0, minimum=0) == 0:
            return set()
        first = cfg.int("first_k_dense_replace", 0, minimum=0)
        freq = cfg.int("moe_layer_freq", 1)
        return {i for i in range(first, n_layers) if i % freq == 0}
    return set()


def _moe(cfg: _Cfg) -> FFN:
    fam = cfg.family
    if fam in ("mixtral", "phimoe"):
        return FFN(kind=FFNKind.moe, num_experts=cfg.int("num_local_experts"), top_k=cfg.int("num_experts_per_tok"),
                   expert_intermediate_size=cfg.int("intermediate_size"))
    if fam == "gpt_oss":
        k = cfg.int("num_experts_per_tok") if cfg.has("num_experts_per_tok") else cfg.int("experts_per_token")
        return FFN(kind=FFNKind.moe, num_experts=cfg.int("num_local_experts"), top_k=k,
                   expert_intermediate_size=cfg.int("intermediate_size"), bias=True, router_bias=True)
    if fam in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        shared = cfg.int("shared_expert_intermediate_size", 0, minimum=0)
        return FFN(kind=FFNKind.moe, num_experts=cfg.int("num_experts"), top_k=cfg.int("num_experts_per_tok"),
                   expert_intermediate_size=cfg.int("moe_intermediate_size"), num_shared_experts=1 if shared else 0,
                   shared_intermediate_size=shared, shared_gate=bool(shared))
    if fam == "llama4_text":
        return FFN(kind=FFNKind.moe, num_experts=cfg.int("num_local_experts"), top_k=cfg.int("num_experts_per_tok"),
                   expert_intermediate_size=cfg.int("intermediate_size"), num_shared_experts=1,
                   shared_intermediate_size=cfg.int("intermediate_size"))
    if fam == "minimax_m2":      # sigmoid scores with a routing bias (e_score_correction_bias), as DeepSeek-V3's
        shared = cfg.int("shared_intermediate_size", 0, minimum=0)
        return FFN(kind=FFNKind.moe, num_experts=cfg.int("num_local_experts"), top_k=cfg.int("num_experts_per_tok"),
                   expert_intermediate_size=cfg.int("intermediate_size"), num_shared_experts=1 if shared else 0,
                   shared_intermediate_size=shared, router_bias=cfg.bool("use_routing_bias", True))
    # DeepSeek-V2/V3, Kimi-K2, GLM-4.5: shared experts have the routed width each
    width = cfg.int("moe_intermediate_size")
    n_shared = cfg.int("n_shared_experts", 0, minimum=0)
    return FFN(kind=FFNKind.moe, num_experts=cfg.int("n_routed_experts"), top_k=cfg.int("num_experts_per_tok"),
               expert_intermediate_size=width, num_shared_experts=n_shared, shared_intermediate_size=width,
               router_bias=fam in ("deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa"))


def _ffns(cfg: _Cfg, n_layers: int) -> list[FFN]:
    moe_layers = _moe_layer_set(cfg, n_layers)
    dense_key = "intermediate_size_mlp" if cfg.family == "llama4_text" else "intermediate_size"
    dense = _dense(cfg, dense_key) if len(moe_layers) < n_layers else None
    moe = _moe(cfg) if moe_layers else None
    return [moe if i in moe_layers else dense for i in range(n_layers)]


def _refuse_unrepresentable(cfg: _Cfg) -> None:
    for key in ("linear_num_key_heads", "linear_conv_kernel_dim", "full_attention_interval", "ssm_cfg",
                "mamba_d_state", "attn_layer_period"):
        if cfg.has(key):
            raise cfg.refuse(key, "linear-attention / state-space layers")


def _build_standard(cfg: _Cfg):
    _refuse_unrepresentable(cfg)
    n = _num_layers(cfg)
    kinds = _attention_kinds(cfg, n)
    ffns = _ffns(cfg, n)
    norm = _norm_layout(cfg)
    try:
        layers = [Layer(attention=_gqa(cfg, kind, window), ffn=ffn, **norm) for (kind, window), ffn in zip(kinds, ffns)]
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, cfg.where)) from None
    return layers, 0, None


def _build_deepseek(cfg: _Cfg):
    """MLA attention (deepseek_v2/v3, kimi_k2) plus dense-first MoE and optional MTP modules; deepseek_v32 adds the
    lightning indexer of DeepSeek Sparse Attention to every layer, the MTP layer's included (transformers
    DeepseekV32Config: index_n_heads, index_head_dim, index_topk). glm_moe_dsa (GLM-5) is the same DSA model whose
    layers may share an earlier layer's top-k (``indexer_types``, see ``_indexer_types``); its MTP layer keeps an
    indexer of its own."""
    _refuse_unrepresentable(cfg)
    n = _num_layers(cfg)
    heads = cfg.int("num_attention_heads")
    nope, rope = cfg.int("qk_nope_head_dim"), cfg.int("qk_rope_head_dim")
    q_lora = cfg.get("q_lora_rank")
    try:
        attn = Attention(
            kind=AttentionKind.mla, num_heads=heads, num_kv_heads=cfg.int("num_key_value_heads", heads),
            head_dim=nope + rope, q_lora_rank=cfg.int("q_lora_rank") if q_lora else None,
            kv_lora_rank=cfg.int("kv_lora_rank"), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
            v_head_dim=cfg.int("v_head_dim"), **_indexer(cfg),
        )
        shared_attn = attn.model_copy(update={"index_shared": True}) if attn.sparse else attn
        indexers = _indexer_types(cfg, n) if cfg.family == "glm_moe_dsa" else ["full"] * n
        layers = [Layer(attention=shared_attn if t == "shared" else attn, ffn=ffn)
                  for t, ffn in zip(indexers, _ffns(cfg, n))]
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, cfg.where)) from None
    count, mtp_layer = _mtp(cfg, layers)
    if mtp_layer is not None and mtp_layer.attention.index_shared:
        # the MTP layer owns indexer weights (GLM-5.2 checkpoints ship model.layers.78.self_attn.indexer.*; its
        # index_share_for_mtp_iteration reuses them across draft steps)
        mtp_layer = mtp_layer.model_copy(update={"attention": attn})
    return layers, count, mtp_layer


def _indexer(cfg: _Cfg) -> dict:
    """The sparse-attention indexer's fields (deepseek_v32 and glm_moe_dsa; every one required, as the config
    class has them)."""
    if cfg.family not in ("deepseek_v32", "glm_moe_dsa"):
        return {}
    return {"index_n_heads": cfg.int("index_n_heads"), "index_head_dim": cfg.int("index_head_dim"),
            "index_topk": cfg.int("index_topk")}


def _per_layer_list(cfg: _Cfg, key: str, n: int, allowed: tuple[str, ...]) -> list[str]:
    v = cfg.get(key)
    if not isinstance(v, list) or len(v) != n or any(t not in allowed for t in v):
        raise SpecError(f"{cfg.where}: field {key!r} must list one of {' / '.join(allowed)} per layer ({n})")
    return list(v)


def _indexer_types(cfg: _Cfg, n: int) -> list[str]:
    """GLM-5 IndexShare, as transformers GlmMoeDsaConfig.__post_init__ resolves it: ``indexer_types`` per layer
    ("full" runs the indexer; "shared" reuses the previous full layer's top-k), else ``index_topk_pattern`` ("F" /
    "S" per layer), else layer i is full when max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0
    (defaults 2 and 1: every layer full). GLM-5.2: freq 4, offset 3, so layers 0, 1, 2, 6, 10, ..., 74 are full."""
    if cfg.has("indexer_types"):
        types = _per_layer_list(cfg, "indexer_types", n, ("full", "shared"))
    elif cfg.has("index_topk_pattern"):
        pattern = cfg.get("index_topk_pattern")
        if isinstance(pattern, str):
            if len(pattern) != n or set(pattern) - {"F", "S"}:
                raise SpecError(f"{cfg.where}: field 'index_topk_pattern' must hold one F or S per layer ({n})")
            types = ["full" if c == "F" else "shared" for c in pattern]
        else:
            types = _per_layer_list(cfg, "index_topk_pattern", n, ("full", "shared"))
    else:
        freq = cfg.int("index_topk_freq", 1)
        offset = cfg.int("index_skip_topk_offset", 2, minimum=0)
        types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if types[0] != "full":
        raise SpecError(f"{cfg.where}: layer 0 is 'shared' but no earlier layer runs the indexer whose top-k it "
                        "would reuse (indexer_types)")
    return types


def _build_glm4_moe(cfg: _Cfg):
    layers, _, _ = _build_standard(cfg)
    return layers, *_mtp(cfg, layers)


def _build_gemma4(cfg: _Cfg):
    """Gemma-4 text decoder (transformers Gemma4TextConfig): sliding layers with num_key_value_heads x head_dim,
    full-attention layers with num_global_key_value_heads x global_head_dim whose value reuses the key where
    attention_k_eq_v (one k projection; keys and values are still cached apart); GeGLU MLPs (three matrices, as
    SwiGLU); four norms per layer and q/k norms."""
    for key, why in (("enable_moe_block", "the Gemma-4 MoE block"),):
        if cfg.bool(key, False):
            raise cfg.refuse(key, why)
    if cfg.int("hidden_size_per_layer_input", 0, minimum=0):
        raise cfg.refuse("hidden_size_per_layer_input", "per-layer input embeddings (Gemma-4 E2B / E4B)")
    n = _num_layers(cfg)
    kinds = _attention_kinds(cfg, n)
    ffns = _ffns(cfg, n)
    norm = _norm_layout(cfg)
    k_eq_v = cfg.bool("attention_k_eq_v", False)
    heads = cfg.int("num_attention_heads")
    # the last num_kv_shared_layers layers read the cache of the last earlier layer of their kind (the assistant:
    # all of them, the target's)
    first_shared = n - cfg.int("num_kv_shared_layers", 0, minimum=0, maximum=n)
    try:
        layers = []
        for i, ((kind, window), ffn) in enumerate(zip(kinds, ffns)):
            if kind is AttentionKind.full and cfg.has("global_head_dim"):
                # num_global_key_value_heads only where V reuses K (transformers Gemma4TextAttention)
                kv_heads = cfg.int("num_global_key_value_heads", cfg.int("num_key_value_heads")) if k_eq_v \
                    else cfg.int("num_key_value_heads")
                attn = Attention(kind=kind, num_heads=heads, num_kv_heads=kv_heads, head_dim=cfg.int("global_head_dim"),
                                 qk_norm=True, value_from_key=k_eq_v)
            else:
                attn = _gqa(cfg, kind, window)
            if i >= first_shared:
                attn = attn.model_copy(update={"kv_shared": True})
            layers.append(Layer(attention=attn, ffn=ffn, scalars=1, **norm))     # layer_scalar
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, cfg.where)) from None
    return layers, 0, None


def _build_gated_deltanet(cfg: _Cfg):
    """Qwen3-Next / Qwen3.5 hybrid decoder (transformers Qwen3NextConfig): ``layer_types`` (else every
    ``full_attention_interval``-th layer full, the rest linear); linear layers are gated DeltaNet
    (``linear_num_key_heads`` x ``linear_key_head_dim`` for q and k, ``linear_num_value_heads`` x
    ``linear_value_head_dim`` for v, a ``linear_conv_kernel_dim``-tap causal convolution); full layers are gated
    attention (q_proj emits the output gate; q/k norms); the FFN is MoE with a gated shared expert, or dense.
    The MTP module (see ``_gdn_mtp``) is one gated full-attention layer with the model's FFN."""
    for key in ("ssm_cfg", "mamba_d_state", "attn_layer_period"):
        if cfg.has(key):
            raise cfg.refuse(key, "state-space layers")
    n = _num_layers(cfg)
    if cfg.has("layer_types"):
        types = cfg.get("layer_types")
        if not isinstance(types, list) or len(types) != n:
            raise SpecError(f"{cfg.where}: field 'layer_types' must list one type per layer ({n})")
    else:
        interval = cfg.int("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    ffns = _ffns(cfg, n)
    norm = _norm_layout(cfg)
    linear = Attention(
        kind=AttentionKind.linear, num_heads=cfg.int("linear_num_value_heads"),
        num_kv_heads=cfg.int("linear_num_key_heads"), head_dim=cfg.int("linear_key_head_dim"),
        v_head_dim=cfg.int("linear_value_head_dim"), conv_kernel=cfg.int("linear_conv_kernel_dim", 4),
        state_dtype=_state_dtype(cfg))
    full = _gqa(cfg, AttentionKind.full, None).model_copy(
        update={"qk_norm": True, "output_gate": cfg.bool("attn_output_gate", True)})
    layers = []
    for t, ffn in zip(types, ffns):
        if t not in ("linear_attention", "full_attention"):
            raise cfg.refuse("layer_types", f"layer type {t!r} is not linear_attention / full_attention")
        layers.append(Layer(attention=linear if t == "linear_attention" else full, ffn=ffn, **norm))
    return layers, *_gdn_mtp(cfg, full, norm)


def _gdn_mtp(cfg: _Cfg, full: Attention, norm: dict) -> tuple[int, Layer | None]:
    """Qwen3-Next / Qwen3.5 MTP modules: ``num_nextn_predict_layers`` (Qwen3-Next; vLLM qwen3_next_mtp.py) or
    ``mtp_num_hidden_layers`` (Qwen3.5; vLLM qwen3_5_mtp.py), each pre_fc_norm_embedding / pre_fc_norm_hidden, fc
    (2h -> h), one decoder layer built with layer_type "full_attention" (gated attention, never DeltaNet) and the
    model's FFN (MoE with the gated shared expert, or the dense MLP), and a norm; the embedding and lm_head are the
    model's (``mtp_use_dedicated_embeddings`` false)."""
    keys = [k for k in ("num_nextn_predict_layers", "mtp_num_hidden_layers") if cfg.has(k)]
    count = cfg.int(keys[0], 0, minimum=0) if keys else 0
    if not count:
        return 0, None
    if cfg.bool("mtp_use_dedicated_embeddings", False):
        raise cfg.refuse("mtp_use_dedicated_embeddings", "an MTP module with an embedding table of its own")
    ffn = _moe(cfg) if cfg.int("num_experts", 0, minimum=0) else _dense(cfg)
    return count, Layer(attention=full, ffn=ffn, **norm)


def _state_dtype(cfg: _Cfg, key: str = "mamba_ssm_dtype") -> DType:
    """The recurrent state's format: the config's ``mamba_ssm_dtype`` (Qwen3.5: float32; Nemotron-H names it
    ``mamba_ssm_cache_dtype``) where given, else fp32, what SGLang keeps it in (sglang/srt/configs/mamba_utils.py
    ``mamba2_state_dtype``: SGLANG_MAMBA_SSM_DTYPE, float32 unless set) and what vLLM keeps for Qwen3.5's GDN layers
    (MambaSpec dtypes (bfloat16, float32))."""
    v = cfg.get(key, "float32")
    known = {"float32": DType.fp32, "bfloat16": DType.bf16, "float16": DType.fp16}
    if v not in known:
        raise SpecError(f"{cfg.where}: field {key!r} must be one of {', '.join(known)}, got {v!r}")
    return known[v]


# --- Nemotron-H (Mamba-2 / attention / MLP / MoE blocks) ---------------------------------------------------------

# hybrid_override_pattern characters (transformers NemotronHConfig._pattern_to_list; E: the MoE blocks of Nemotron 3)
_NEMOTRON_BLOCK_CHARS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# layers_block_type / mtp_layers_block_type names, legacy and current (transformers remap_legacy_layer_types)
_NEMOTRON_BLOCK_NAMES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                         "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


def _nemotron_blocks(cfg: _Cfg, pattern_key: str, list_key: str) -> list[str] | None:
    """One block kind per layer from a pattern string (``hybrid_override_pattern``: M Mamba-2, * attention, - MLP,
    E MoE) or a list of names (``layers_block_type``); None when the config gives neither."""
    if cfg.has(pattern_key):
        pattern = cfg.get(pattern_key)
        if not isinstance(pattern, str) or not pattern:
            raise SpecError(f"{cfg.where}: field {pattern_key!r} must be a string of M, *, - and E (one per layer), "
                            f"got {pattern!r}")
        for i, c in enumerate(pattern):
            if c not in _NEMOTRON_BLOCK_CHARS:
                raise SpecError(f"{cfg.where}: field {pattern_key!r}: character {c!r} at layer {i} is not one of M "
                                "(Mamba-2), * (attention), - (MLP), E (MoE)")
        return [_NEMOTRON_BLOCK_CHARS[c] for c in pattern]
    if cfg.has(list_key):
        names = cfg.get(list_key)
        if not isinstance(names, list) or not names or \
                any(not isinstance(n, str) or n not in _NEMOTRON_BLOCK_NAMES for n in names):
            raise SpecError(f"{cfg.where}: field {list_key!r} must list one of "
                            f"{' / '.join(_NEMOTRON_BLOCK_NAMES)} per layer, got {names!r}")
        return [_NEMOTRON_BLOCK_NAMES[n] for n in names]
    return None


def _build_nemotron_h(cfg: _Cfg):
    """Nemotron-H / Nemotron Nano 2 / Nemotron 3 (transformers NemotronHConfig, NemotronHBlock): every layer is one
    block, a norm and one mixer: a Mamba-2 mixer (M), GQA attention without rotary or q/k norms (*), a plain
    ReLU^2 MLP (-) or a MoE of ReLU^2 experts with a shared expert and a sigmoid router with a correction bias (E),
    whose experts may work in a latent space (``moe_latent_size``, LatentMoE). The MTP module (Nemotron 3 Super:
    ``num_nextn_predict_layers``, ``mtp_hybrid_override_pattern`` "*E") is one attention block and one FFN block
    after enorm, hnorm and eh_proj (vLLM nemotron_h_mtp.py), held as one layer with two norms."""
    blocks = _nemotron_blocks(cfg, "hybrid_override_pattern", "layers_block_type")
    if blocks is None:
        raise SpecError(f"{cfg.where}: required field 'hybrid_override_pattern' is missing (model_type nemotron_h)")
    n = cfg.int("num_hidden_layers", len(blocks), maximum=4096)
    if n != len(blocks):
        raise SpecError(f"{cfg.where}: field 'hybrid_override_pattern' has {len(blocks)} layers but "
                        f"num_hidden_layers is {n}")
    if cfg.get("sliding_window") is not None:
        raise cfg.refuse("sliding_window", "sliding-window attention in a Nemotron-H model")
    count = cfg.int("num_nextn_predict_layers", 0, minimum=0)
    mtp_blocks = None
    if count:
        mtp_blocks = _nemotron_blocks(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type")
        mtp_blocks = mtp_blocks or ["attention", "moe"]      # NemotronHConfig's default mtp_layers_block_type
        if sorted(b == "attention" for b in mtp_blocks) != [False, True] or "mamba" in mtp_blocks:
            raise cfg.refuse("mtp_hybrid_override_pattern", "an MTP module other than one attention block and one "
                             "MLP or MoE block (vLLM NemotronHMultiTokenPredictor builds * and E)")
    used = set(blocks) | set(mtp_blocks or ())
    parts = {"mamba": _nemotron_mamba(cfg) if "mamba" in used else None,
             "attention": _nemotron_attention(cfg) if "attention" in used else None,
             "mlp": FFN(kind=FFNKind.dense, intermediate_size=cfg.int("intermediate_size"),
                        bias=cfg.bool("mlp_bias", False), gated=False) if "mlp" in used else None,
             "moe": _nemotron_moe(cfg) if "moe" in used else None}
    norm = {"norm": NormKind.rms, "norms": 1, "norm_bias": False}    # NemotronHBlock: one RMSNorm before the mixer
    key = {"mamba": "mamba", "attention": "attention", "mlp": "ffn", "moe": "ffn"}
    layers = [Layer(**{key[b]: parts[b]}, **norm) for b in blocks]
    if not count:
        return layers, 0, None
    ffn = next(parts[b] for b in mtp_blocks if b != "attention")
    return layers, count, Layer(attention=parts["attention"], ffn=ffn, norm=NormKind.rms, norms=len(mtp_blocks))


def _nemotron_mamba(cfg: _Cfg) -> Mamba2:
    """The Mamba-2 mixer; n_groups, conv_kernel and use_conv_bias default as NemotronHConfig does (8, 4, true; their
    legacy names mamba_n_groups, mamba_d_conv, mamba_conv_bias are read too)."""
    def first(new: str, legacy: str, default: int) -> int:
        return cfg.int(new) if cfg.has(new) else cfg.int(legacy, default)

    conv_bias = cfg.bool("use_conv_bias", cfg.bool("mamba_conv_bias", True))
    return Mamba2(num_heads=cfg.int("mamba_num_heads"), head_dim=cfg.int("mamba_head_dim"),
                  state_size=cfg.int("ssm_state_size"), n_groups=first("n_groups", "mamba_n_groups", 8),
                  conv_kernel=first("conv_kernel", "mamba_d_conv", 4), conv_bias=conv_bias,
                  proj_bias=cfg.bool("use_bias", False) or cfg.bool("mamba_proj_bias", False),
                  state_dtype=_state_dtype(cfg, "mamba_ssm_cache_dtype"))


def _nemotron_attention(cfg: _Cfg) -> Attention:
    """GQA attention (NemotronHAttention: q/k/v/o projections, no rotary, no q/k norms); the head width is head_dim,
    or attention_head_dim in the first configs (Nemotron-H-8B), else h / n_q."""
    heads = cfg.int("num_attention_heads")
    head_dim = cfg.int("attention_head_dim") if cfg.has("attention_head_dim") and not cfg.has("head_dim") \
        else _head_dim(cfg)
    bias = cfg.bool("attention_bias", False)
    return Attention(kind=AttentionKind.full, num_heads=heads, num_kv_heads=cfg.int("num_key_value_heads", heads),
                     head_dim=head_dim, qkv_bias=bias, o_bias=bias, rotary_dim=0)


def _nemotron_moe(cfg: _Cfg) -> FFN:
    """Routed ReLU^2 experts (n_routed_experts, num_experts_per_tok, moe_intermediate_size), n_shared_experts shared
    experts of moe_shared_expert_intermediate_size (vLLM builds one MLP of n_shared x that width: the same weights),
    the router's e_score_correction_bias, and LatentMoE's moe_latent_size."""
    latent = cfg.get("moe_latent_size")
    shared = cfg.int("n_shared_experts", 1, minimum=0)
    return FFN(kind=FFNKind.moe, num_experts=cfg.int("n_routed_experts"), top_k=cfg.int("num_experts_per_tok"),
               expert_intermediate_size=cfg.int("moe_intermediate_size"), num_shared_experts=shared,
               shared_intermediate_size=cfg.int("moe_shared_expert_intermediate_size") if shared else 0,
               bias=cfg.bool("mlp_bias", False), router_bias=True, gated=False,
               latent_size=cfg.int("moe_latent_size") if latent is not None else 0)


def _mtp(cfg: _Cfg, layers: list[Layer]):
    count = cfg.int("num_nextn_predict_layers", 0, minimum=0)
    return (count, layers[-1]) if count else (0, None)


def _build_minimax_m2(cfg: _Cfg):
    """MiniMax-M2 / M2.1 / M2.5: GQA with qk norm over the whole projection and partial RoPE (``rotary_dim``), a
    routed-only MoE in every layer. ``attn_type_list`` marks each layer's attention: 1 softmax attention, 0 the
    lightning (linear) attention of MiniMax-Text-01 / M1, which the cost model does not price. The released checkpoints
    hold no MTP weights though the config says ``use_mtp`` (their parameter count is the backbone's), so no MTP
    modules are modelled."""
    types = cfg.int_list("attn_type_list")
    if any(t != 1 for t in types):
        raise cfg.refuse("attn_type_list", "lightning (linear) attention layers (type 0)")
    layers, _, _ = _build_standard(cfg)
    if types and len(types) != len(layers):
        raise SpecError(f"{cfg.where}: field 'attn_type_list' must list one type per layer ({len(layers)})")
    return layers, 0, None


_FAMILY_BUILDERS: dict[str, Callable] = {
    "deepseek_v2": _build_deepseek, "deepseek_v3": _build_deepseek, "deepseek_v32": _build_deepseek,
    "kimi_k2": _build_deepseek, "glm_moe_dsa": _build_deepseek,
    "glm4_moe": _build_glm4_moe, "gemma4_text": _build_gemma4, "nemotron_h": _build_nemotron_h,
    "minimax_m2": _build_minimax_m2,
    **{fam: _build_gated_deltanet for fam in _GDN_FAMILIES},
}


def _checkpoint_dtypes(outer: dict, cfg: _Cfg) -> tuple[DType, DType | None]:
    """The published checkpoint's weight format: quantization_config first, then torch_dtype."""
    quant = outer.get("quantization_config") or cfg.get("quantization_config") or {}
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    if method == "mxfp4":
        return DType.bf16, DType.mxfp4       # gpt-oss: MXFP4 experts, bf16 elsewhere
    if method == "fp8" or (method and "fp8" in str(quant).lower()):
        return DType.fp8, None
    torch_dtype = str(outer.get("torch_dtype") or cfg.get("torch_dtype") or outer.get("dtype") or "bfloat16")
    dtype = DType.fp16 if "float16" == torch_dtype else DType.bf16
    if method == "compressed-tensors" and _int4_routed_experts(quant):
        # Kimi-K2.5 / K2.6: int4 routed experts (with their group-32 scales), the rest in the torch dtype
        return dtype, DType.int4_g32 if _int4_group_size(quant) == 32 else DType.int4
    return dtype, None


def _int4_group_size(quant: dict):
    """The one group size of a compressed-tensors int4 scheme (its weights' ``group_size`` in every config group,
    symmetric: no zero points stored), or None."""
    sizes = {(g["weights"].get("group_size"), g["weights"].get("symmetric", True))
             for g in quant["config_groups"].values()}
    if len(sizes) != 1:
        return None
    size, symmetric = sizes.pop()
    return size if symmetric else None


def _int4_routed_experts(quant: dict) -> bool:
    """A compressed-tensors scheme whose every group packs weights as 4-bit integers and whose ignore list keeps
    attention and the shared experts out (Kimi-K2-Thinking / K2.5 / K2.6: int4, group 32, symmetric; ignored:
    self_attn, shared_experts, the dense MLP, lm_head): the routed experts are int4. With groups of 32 (Kimi) their
    bf16 scales count too (``DType.int4_g32``: 0.0625 B a weight more); other group sizes count the 4 bits only."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return False
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or weights.get("num_bits") != 4 or weights.get("type") != "int":
            return False
    ignored = " ".join(str(x) for x in quant.get("ignore") or ()) if isinstance(quant.get("ignore"), list) else ""
    return "self_attn" in ignored and "shared_expert" in ignored


def _architecture(config: dict):
    """The first of a config's ``architectures`` (what an engine picks its model class and runner by), or None."""
    arch = config.get("architectures")
    if isinstance(arch, list) and arch and isinstance(arch[0], str):
        return arch[0]
    return None
