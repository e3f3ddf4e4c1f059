"""ModelSpec.params_total of the 2026 families against torch skeletons of their Hugging Face modeling classes.

tests/test_torch_param_counts.py checks the older families with dsdsim's own torch decoder, which has no gated
DeltaNet, Mamba-2 or MLA (its KNOWN_GAPS). Here the ground truth is independent of dsdsim altogether:
tests/_hf_torch_modules.py mirrors the parameters of the transformers / vLLM classes (Qwen3NextGatedDeltaNet,
Qwen3NextAttention, Qwen3NextSparseMoeBlock, NemotronHMamba2Mixer, NemotronHMoE, DeepseekV3Attention with the
DSA indexer, GlmMoeDsaAttention, Gemma4TextAttention, ...) and reads its sizes from the shipped config.json
(model_specs/*.json) itself, never from dsdsim's parser. Built on the meta device; counted exactly. Conventions
as params_total's: text decoder only, MTP modules out, a tied lm_head counted once.

Every shipped model whose decoder has a skeleton is checked (``_covered``), so a new spec of these families is
picked up without editing this file. Config variants (a field flipped that no shipped file sets) exercise the
branches the shipped files do not: there the spec comes from ``model_from_hf_config`` on the same dict.
Differences are worked out by hand in the reasons below; strict xfails turn into failures once dsdsim counts
the missing weights.
"""
from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _hf_torch_modules import (  # noqa: E402
    BUILDERS, DepthwiseConv1d, Embedding, LayerNorm, Linear, build_meta, param_count, text_config)
from dsdsim.specs.catalog import load_model  # noqa: E402
from dsdsim.specs.hf_config import model_from_hf_config  # noqa: E402

SPECS_DIR = Path(__file__).resolve().parents[1] / "model_specs"

# The 2026 families the skeletons were written for; each must keep at least these shipped models.
REQUIRED = {"qwen3-next-80b-a3b", "qwen3.5-397b-a17b", "qwen3.6-35b-a3b", "nemotron-h-8b", "nemotron-3-nano-30b",
            "nemotron-3-super-120b", "deepseek-v3.2-exp", "glm-5", "glm-5.2", "kimi-k2.6", "gemma-4-31b",
            "gemma-4-31b-assistant", "minimax-m2.5"}

def _raw(name: str) -> dict:
    data = json.loads((SPECS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    data.pop("_dsdsim", None)
    return data


def _has_skeleton(cfg: dict) -> bool:
    return cfg.get("model_type") == "gemma4_assistant" or text_config(cfg).get("model_type") in BUILDERS


def _covered() -> list[str]:
    return sorted(p.stem for p in SPECS_DIR.glob("*.json") if _has_skeleton(_raw(p.stem)))


def _shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def test_light_layers_hold_what_torch_layers_hold():
    """The skeletons' Linear / DepthwiseConv1d / Embedding / LayerNorm skip weight init but allocate exactly the
    parameters of torch.nn's."""
    pairs = [(Linear(7, 5), torch.nn.Linear(7, 5)), (Linear(7, 5, bias=False), torch.nn.Linear(7, 5, bias=False)),
             (DepthwiseConv1d(6, 4, bias=True), torch.nn.Conv1d(6, 6, 4, groups=6, bias=True)),
             (DepthwiseConv1d(6, 4, bias=False), torch.nn.Conv1d(6, 6, 4, groups=6, bias=False)),
             (Embedding(11, 3), torch.nn.Embedding(11, 3)), (LayerNorm(9), torch.nn.LayerNorm(9))]
    for light, reference in pairs:
        assert _shapes(light) == _shapes(reference), type(reference).__name__


def test_the_2026_families_are_covered():
    covered = set(_covered())
    assert REQUIRED <= covered, f"shipped models without a torch skeleton: {sorted(REQUIRED - covered)}"


@pytest.mark.parametrize("name", _covered())
def test_torch_skeleton_has_params_total_parameters(name):
    count, total = param_count(build_meta(_raw(name))), load_model(name).params_total
    assert count == total, f"{name}: torch {count:,} vs params_total {total:,} ({count - total:+,})"


# --- config variants: branches no shipped file takes --------------------------------------------------------


def _variant(name: str, fields: dict) -> dict:
    """The shipped config of ``name`` with ``fields`` set in its decoder config (None deletes the key); a wrapper's
    own tie_word_embeddings follows the text config's."""
    cfg = copy.deepcopy(_raw(name))
    text = text_config(cfg)
    for key, value in fields.items():
        if value is None:
            text.pop(key, None)
        else:
            text[key] = value
    if "tie_word_embeddings" in fields and text is not cfg:
        cfg["tie_word_embeddings"] = fields["tie_word_embeddings"]
    return cfg


# variant -> (shipped model, decoder config fields to set)
VARIANTS: dict[str, tuple[str, dict]] = {
    "qwen3-next-tied": ("qwen3-next-80b-a3b", {"tie_word_embeddings": True}),
    "qwen3-next-attention-bias": ("qwen3-next-80b-a3b", {"attention_bias": True}),
    "qwen3-next-dense-layers-0-1": ("qwen3-next-80b-a3b", {"mlp_only_layers": [0, 1]}),
    "qwen3-next-sparse-step-2": ("qwen3-next-80b-a3b", {"decoder_sparse_step": 2}),
    "qwen3-next-full-every-2nd": ("qwen3-next-80b-a3b", {"full_attention_interval": 2}),
    "qwen3.6-16-v-heads-4-kv-heads": ("qwen3.6-35b-a3b", {"linear_num_value_heads": 16, "num_key_value_heads": 4}),
    "nemotron-nano-no-conv-bias": ("nemotron-3-nano-30b", {"use_conv_bias": False}),
    "nemotron-nano-proj-bias": ("nemotron-3-nano-30b", {"use_bias": True}),
    "nemotron-nano-tied": ("nemotron-3-nano-30b", {"tie_word_embeddings": True}),
    "nemotron-super-no-latent": ("nemotron-3-super-120b", {"moe_latent_size": None}),
    "nemotron-8b-4-groups-64-heads": ("nemotron-h-8b", {"n_groups": 4, "mamba_num_heads": 64}),
    "deepseek-v3-no-q-lora": ("deepseek-v3", {"q_lora_rank": None}),
    "deepseek-v3.2-2-shared-experts": ("deepseek-v3.2-exp", {"n_shared_experts": 2}),
    "deepseek-v3.2-moe-every-2nd": ("deepseek-v3.2-exp", {"moe_layer_freq": 2}),
    "glm-5-index-share": ("glm-5", {"index_topk_freq": 4, "index_skip_topk_offset": 3}),
    "glm-5.2-5-dense": ("glm-5.2", {"mlp_layer_types": None, "first_k_dense_replace": 5}),
    "kimi-k2.6-tied-no-shared": ("kimi-k2.6", {"tie_word_embeddings": True, "n_shared_experts": 0}),
    "gemma-4-kv-shared-last-10": ("gemma-4-31b", {"num_kv_shared_layers": 10}),
    "gemma-4-untied": ("gemma-4-31b", {"tie_word_embeddings": False}),
    "gemma-4-assistant-own-kv": ("gemma-4-31b-assistant", {"num_kv_shared_layers": 0}),
    # without attention_k_eq_v full layers keep num_key_value_heads for k and v (transformers Gemma4TextAttention)
    "gemma-4-k-neq-v": ("gemma-4-31b", {"attention_k_eq_v": False}),
    "minimax-m2.5-tied": ("minimax-m2.5", {"tie_word_embeddings": True}),
}

# Variants where dsdsim's parser leaves out weights the modeling class builds (no shipped config sets the field).
VARIANT_GAPS: dict[str, tuple[str, dict, str]] = {
    "deepseek-v3.2-attention-bias": (
        "deepseek-v3.2-exp", {"attention_bias": True},
        "MLA ignores attention_bias: transformers DeepseekV3Attention / GlmMoeDsaAttention build q_a_proj, "
        "kv_a_proj_with_mqa and o_proj with bias=config.attention_bias, 61 x (1536 + 576 + 7168) = 566,080 "
        "elements here (vLLM DeepseekV2MLAAttention hard-codes bias=False)"),
}


def _both_counts(cfg: dict, name: str) -> tuple[int, int]:
    """(skeleton, spec) for a config dict."""
    return param_count(build_meta(cfg)), model_from_hf_config(cfg, name).params_total


@functools.lru_cache(maxsize=None)
def _shipped_counts(name: str) -> tuple[int, int]:
    return _both_counts(_raw(name), name)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_variants_agree(variant):
    shipped, fields = VARIANTS[variant]
    count, total = _both_counts(_variant(shipped, fields), variant)
    base_count, base_total = _shipped_counts(shipped)
    assert count != base_count and total != base_total, f"{variant} leaves a count unchanged: it tests nothing there"
    assert count == total, f"{variant}: torch {count:,} vs params_total {total:,} ({count - total:+,})"


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.xfail(strict=True, reason=r))
                                     for v, (_, _, r) in sorted(VARIANT_GAPS.items())])
def test_config_variants_dsdsim_undercounts(variant):
    shipped, fields, _ = VARIANT_GAPS[variant]
    count, total = _both_counts(_variant(shipped, fields), variant)
    assert count == total, f"{variant}: torch {count:,} vs params_total {total:,} ({count - total:+,})"
