"""GLM-5.2 DeepSeek Sparse Attention with IndexShare against hand counts.

Ground truth: the published config (model_specs/glm-5.2.json: hidden 6144, 64 heads, q_lora_rank 2048, kv_lora_rank
512, rope 64; indexer index_n_heads 32, index_head_dim 128, index_topk 2048; index_topk_freq 4,
index_skip_topk_offset 3 and the 78-entry indexer_types) and transformers ``GlmMoeDsaConfig`` (a "full" layer runs
the indexer; a "shared" one reuses the previous full layer's top-k and owns no indexer: mlx-lm's
``GlmMoeDsaAttention`` sets ``self.indexer = None`` there). Every figure is written out from the formula.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdsim.cost.layers import attention_ops
from dsdsim.errors import SpecError
from dsdsim.specs.catalog import load_model
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.units import DType

from _ops_helpers import by_name, ctx, f

H, HEADS, Q_LORA, KV_LORA, ROPE = 6144, 64, 2048, 512, 64
LATENT = KV_LORA + ROPE                                      # 576 cached elements per token
N_I, D_I, TOPK = 32, 128, 2048
INDEXER_KEY_BYTES = D_I * 1 + (D_I // 128) * 4               # fp8 key + one fp32 scale per 128: 132
INDEXER_PARAMS = Q_LORA * N_I * D_I + H * D_I + 2 * D_I + H * N_I   # wq_b, wk, k_norm (w, b), weights_proj
LAYERS = 78
FULL = [0, 1, 2, *range(6, 75, 4)]                           # max(i - 3 + 1, 0) % 4 == 0
SPEC = Path(__file__).resolve().parents[1] / "model_specs" / "glm-5.2.json"


@pytest.fixture(scope="module")
def model():
    return load_model("glm-5.2")


def _cfg(**changes) -> dict:
    cfg = json.loads(SPEC.read_text(encoding="utf-8"))
    cfg.pop("_dsdsim")
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


def test_21_layers_run_the_indexer_and_57_share_its_top_k(model):
    assert len(FULL) == 21
    runs = [i for i, layer in enumerate(model.layers) if layer.attention.runs_indexer]
    assert runs == FULL
    assert all(layer.attention.sparse for layer in model.layers)          # every layer attends to the top-k
    assert sum(layer.attention.index_shared for layer in model.layers) == LAYERS - 21
    assert model.attention_pattern() == "21 mla-top2048 + 57 mla-top2048-shared"


def test_only_full_layers_carry_indexer_weights(model):
    assert INDEXER_PARAMS == 9_371_904
    full, shared = model.layers[0].attention, model.layers[3].attention
    assert full.indexer_params(H) == INDEXER_PARAMS
    assert shared.indexer_params(H) == 0
    # the same model with every layer full (GLM-5's layout) holds 57 more indexers
    every = model_from_hf_config(_cfg(indexer_types=["full"] * LAYERS), "all-full")
    assert every.params_total - model.params_total == 57 * INDEXER_PARAMS      # 534,198,528
    assert every.params_active - model.params_active == 57 * INDEXER_PARAMS


def test_the_mtp_layer_keeps_its_own_indexer(model):
    assert model.layers[-1].attention.index_shared                 # layer 77 shares layer 74's top-k
    assert model.mtp_layer.attention.runs_indexer                  # layer 78 (MTP) owns one


def test_kv_bytes_per_token_count_21_indexer_caches(model):
    assert model.kv_bytes_per_token(DType.bf16) == LAYERS * LATENT * 2 + 21 * INDEXER_KEY_BYTES   # 92,628
    assert model.kv_bytes_per_token(DType.fp8) == LAYERS * LATENT * 1 + 21 * INDEXER_KEY_BYTES


def test_a_shared_layer_runs_no_indexer_operators(model):
    b, q, c = 2.0, 4.0, 65536.0
    full = by_name(attention_ops(model.layers[0].attention, H, b, q, c, ctx(tp=8)))
    shared = by_name(attention_ops(model.layers[3].attention, H, b, q, c, ctx(tp=8)))
    assert {"indexer.q", "indexer.k", "indexer.weights", "indexer"} <= set(full)
    assert not any(n.startswith("indexer") for n in shared)
    assert set(full) - set(shared) == {"indexer.q", "indexer.k", "indexer.weights", "indexer"}
    # the rest is the same sparse MLA: attention over the top-k keys only
    heads = HEADS // 8
    assert f(shared["attn"].flops) == b * q * 2 * heads * (LATENT + KV_LORA) * TOPK
    for name in shared:
        assert f(shared[name].flops) == f(full[name].flops)
        assert f(shared[name].bytes) == f(full[name].bytes)
    rows = b * q
    queries, keys = b * q, c + q
    indexer_flops = (2 * rows * (Q_LORA * N_I * D_I + H * D_I + H * N_I)
                     + queries * 2 * N_I * (D_I + 1) * keys)
    total = lambda ops: sum(f(o.flops) for o in ops.values())        # noqa: E731
    assert total(full) - total(shared) == indexer_flops


def test_the_schedule_follows_index_topk_freq_and_offset():
    types = model_from_hf_config(_cfg(indexer_types=None), "derived")
    assert [i for i, layer in enumerate(types.layers) if layer.attention.runs_indexer] == FULL
    every_other = model_from_hf_config(_cfg(indexer_types=None, index_topk_freq=2, index_skip_topk_offset=1), "x")
    assert [i for i, layer in enumerate(every_other.layers) if layer.attention.runs_indexer] == list(range(0, 78, 2))
    plain = model_from_hf_config(_cfg(indexer_types=None, index_topk_freq=None, index_skip_topk_offset=None), "x")
    assert all(layer.attention.runs_indexer for layer in plain.layers)     # freq 1: GLM-5 / GLM-5.1


def test_an_index_topk_pattern_sets_the_layers():
    pattern = "F" + "S" * 76 + "F"
    m = model_from_hf_config(_cfg(indexer_types=None, index_topk_pattern=pattern), "x")
    assert [i for i, layer in enumerate(m.layers) if layer.attention.runs_indexer] == [0, 77]


@pytest.mark.parametrize("changes, match", [
    ({"indexer_types": ["shared"] + ["full"] * 77}, "layer 0"),
    ({"indexer_types": ["full"] * 77}, "indexer_types"),
    ({"indexer_types": ["full"] * 77 + ["half"]}, "indexer_types"),
    ({"indexer_types": None, "index_topk_pattern": "FX" + "S" * 76}, "index_topk_pattern"),
    ({"mlp_layer_types": ["dense"] * 77}, "mlp_layer_types"),
    ({"index_topk": None}, "index_topk"),
])
def test_bad_index_share_fields_are_one_line(changes, match):
    with pytest.raises(SpecError, match=match) as e:
        model_from_hf_config(_cfg(**changes), "x")
    assert "\n" not in str(e.value)


def test_a_shared_layer_needs_an_indexer_configuration():
    from pydantic import ValidationError
    from dsdsim.specs.model import Attention, AttentionKind
    with pytest.raises(ValidationError, match="index_shared"):
        Attention(kind=AttentionKind.mla, num_heads=4, num_kv_heads=4, head_dim=24, q_lora_rank=16,
                  kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, index_shared=True)


def test_show_model_says_which_layers_run_the_indexer(model):
    """``show model`` words IndexShare as it is: every sparse layer attends to the top-k keys, 21 run the indexer,
    57 reuse it; a model without shared layers (DeepSeek-V3.2-Exp) keeps the one-line form."""
    from dsdsim.export.views import model_summary

    text = model_summary(model)["sparse_attention"]
    assert text == (f"{LAYERS} layers attend to the top-{TOPK} keys per query; {len(FULL)} run an indexer of {N_I} "
                    f"heads x {D_I}, {LAYERS - len(FULL)} reuse the top-k of the indexer layer before them")
    assert model_summary(load_model("deepseek-v3.2-exp"))["sparse_attention"] == \
        "61 layers: indexer 64 heads x 128, top-2048 keys per query"
