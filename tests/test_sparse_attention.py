"""DeepSeek Sparse Attention (DeepSeek-V3.2-Exp) against hand counts.

Ground truth: the published config (model_specs/deepseek-v3.2-exp.json: DeepSeek-V3's MLA + MoE + MTP, hidden 7168,
128 heads, q_lora_rank 1536, kv_lora_rank 512, rope 64; indexer index_n_heads 64, index_head_dim 128, index_topk
2048) and DeepSeek's reference inference code (DeepSeek-V3.2-Exp inference/model.py ``Indexer``: wq_b from the q
latent, wk from the hidden state, a LayerNorm k_norm, weights_proj; fp8 keys with one fp32 scale per 128 in
k_cache / k_scale_cache). Every figure below is written out from the formula, not read back from the code.
"""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.cost.layers import attention_ops
from dsdsim.cost.memory import kv_bytes_per_gpu
from dsdsim.errors import SpecError
from dsdsim.specs.catalog import load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.units import DType

from _ops_helpers import by_name, ctx, f

H, HEADS, Q_LORA, KV_LORA, ROPE = 7168, 128, 1536, 512, 64
LATENT = KV_LORA + ROPE                        # 576 cached elements per token
N_I, D_I, TOPK = 64, 128, 2048
INDEXER_KEY_BYTES = D_I * 1 + (D_I // 128) * 4  # fp8 key + one fp32 scale per 128 elements: 132
INDEXER_PARAMS = Q_LORA * N_I * D_I + H * D_I + 2 * D_I + H * N_I   # wq_b, wk, k_norm (w, b), weights_proj
LAYERS = 61


@pytest.fixture(scope="module")
def model():
    return load_model("deepseek-v3.2-exp")


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


def attn_of(model):
    return model.layers[0].attention


# --- the spec ---------------------------------------------------------------------------------------------------


def test_every_layer_and_the_mtp_layer_carry_the_indexer(model):
    assert INDEXER_KEY_BYTES == 132
    for a in [layer.attention for layer in model.layers] + [model.mtp_layer.attention]:
        assert (a.index_n_heads, a.index_head_dim, a.index_topk) == (N_I, D_I, TOPK)
    assert model.attention_pattern() == "mla-top2048"


def test_indexer_weights_add_to_deepseek_v3s_counts(model, v3):
    assert INDEXER_PARAMS == 13_959_424
    assert model.params_total - v3.params_total == LAYERS * INDEXER_PARAMS       # 851,524,864
    assert model.params_active - v3.params_active == LAYERS * INDEXER_PARAMS
    assert model.params_mtp - v3.params_mtp == INDEXER_PARAMS


def test_kv_bytes_per_token_count_the_indexer_cache(model):
    assert model.kv_bytes_per_token(DType.bf16) == LAYERS * (LATENT * 2 + INDEXER_KEY_BYTES)    # 78,324
    # the indexer keeps its own fp8 format whatever the latent's
    assert model.kv_bytes_per_token(DType.fp8) == LAYERS * (LATENT * 1 + INDEXER_KEY_BYTES)


# --- the operators ---------------------------------------------------------------------------------------------


def test_indexer_projections_are_whole_on_every_rank(model):
    ops = by_name(attention_ops(attn_of(model), H, 2.0, 4.0, 65536.0, ctx(tp=8)))
    rows = 2 * 4
    q, k, w = ops["indexer.q"], ops["indexer.k"], ops["indexer.weights"]
    assert f(q.flops) == 2 * rows * Q_LORA * N_I * D_I
    assert f(q.weight_bytes) == Q_LORA * N_I * D_I * 2
    assert f(k.flops) == 2 * rows * H * D_I
    assert f(k.weight_bytes) == H * D_I * 2
    assert f(w.flops) == 2 * rows * H * N_I
    assert f(w.weight_bytes) == H * N_I * 2


def test_indexer_scores_the_whole_context(model):
    b, q, c = 2.0, 4.0, 65536.0
    ops = by_name(attention_ops(attn_of(model), H, b, q, c, ctx(tp=8)))
    idx = ops["indexer"]
    queries, keys = b * q, c + q
    assert f(idx.flops) == queries * 2 * N_I * (D_I + 1) * keys            # 4,329,046,016 per sequence pair
    assert f(idx.kv_read_bytes) == b * c * INDEXER_KEY_BYTES                 # 17,301,504
    assert f(idx.kv_write_bytes) == queries * INDEXER_KEY_BYTES
    scores = queries * keys * 4
    assert f(idx.act_in_bytes) == queries * (N_I * D_I * 1 + N_I * 4) + scores
    assert f(idx.act_out_bytes) == scores
    assert idx.dtype is DType.fp8


def test_mla_attends_to_the_top_k_only_at_long_context(model):
    b, q = 2.0, 4.0
    heads = HEADS // 8
    long = by_name(attention_ops(attn_of(model), H, b, q, 65536.0, ctx(tp=8)))["attn"]
    assert f(long.flops) == b * q * 2 * heads * (LATENT + KV_LORA) * TOPK
    assert f(long.kv_read_bytes) == b * q * TOPK * LATENT * 2                 # each query gathers its own top-k
    assert f(long.kv_write_bytes) == b * q * LATENT * 2
    longer = by_name(attention_ops(attn_of(model), H, b, q, 131072.0, ctx(tp=8)))
    assert f(longer["attn"].bytes) == f(long.bytes)                           # bounded by top-k
    assert f(longer["indexer"].kv_read_bytes) == 2 * f(by_name(attention_ops(
        attn_of(model), H, b, q, 65536.0, ctx(tp=8)))["indexer"].kv_read_bytes)   # the indexer is not


def test_short_context_attention_reads_every_token(model):
    b, q, c = 2.0, 4.0, 1000.0
    heads = HEADS // 8
    a = by_name(attention_ops(attn_of(model), H, b, q, c, ctx(tp=8)))["attn"]
    assert f(a.flops) == b * q * 2 * heads * (LATENT + KV_LORA) * (c + q)
    assert f(a.kv_read_bytes) == b * q * c * LATENT * 2


def test_one_query_below_top_k_costs_what_dense_mla_costs(model, v3):
    for c in (1.0, 500.0, 2047.0):
        sparse = by_name(attention_ops(attn_of(model), H, 3.0, 1.0, c, ctx(tp=8)))["attn"]
        dense = by_name(attention_ops(v3.layers[0].attention, H, 3.0, 1.0, c, ctx(tp=8)))["attn"]
        assert f(sparse.flops) == f(dense.flops)
        assert f(sparse.bytes) == f(dense.bytes)


def test_dense_mla_has_no_indexer(v3):
    names = by_name(attention_ops(v3.layers[0].attention, H, 1.0, 1.0, 4096.0, ctx()))
    assert not any(n.startswith("indexer") for n in names)


def test_attention_cost_does_not_fall_with_context(model):
    c = np.array([1.0, 100.0, 2047.0, 2048.0, 2049.0, 10_000.0, 100_000.0])
    ops = by_name(attention_ops(attn_of(model), H, 1.0, 4.0, c, ctx(tp=8)))
    for name in ("attn", "indexer"):
        assert np.all(np.diff(np.asarray(ops[name].flops)) >= 0)
        assert np.all(np.diff(np.asarray(ops[name].bytes)) >= 0)


# --- memory -----------------------------------------------------------------------------------------------------


def test_kv_cache_holds_the_indexer_keys_of_every_token(model, v3):
    dep = Deployment(tp=8, kv_dtype=DType.bf16)
    tokens, batch = 65540.0, 3.0
    extra = f(kv_bytes_per_gpu(model, dep, tokens, batch)) - f(kv_bytes_per_gpu(v3, dep, tokens, batch))
    assert extra == pytest.approx(LAYERS * tokens * INDEXER_KEY_BYTES * batch, rel=1e-12)   # replicated per rank
    assert f(kv_bytes_per_gpu(v3, dep, tokens, batch)) == LAYERS * tokens * LATENT * 2 * batch


# --- parsing ----------------------------------------------------------------------------------------------------


def _cfg(**changes) -> dict:
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "model_specs" / "deepseek-v3.2-exp.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.pop("_dsdsim")
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not None}


def test_a_missing_indexer_field_is_one_line():
    with pytest.raises(SpecError, match="index_topk") as e:
        model_from_hf_config(_cfg(index_topk=None), "x")
    assert "\n" not in str(e.value)


def test_an_indexer_head_dim_off_the_scale_block_is_refused():
    with pytest.raises(SpecError, match="index_head_dim") as e:
        model_from_hf_config(_cfg(index_head_dim=100), "x")
    assert "\n" not in str(e.value)


def test_an_indexer_needs_the_q_latent():
    with pytest.raises(SpecError, match="q_lora_rank") as e:
        model_from_hf_config(_cfg(q_lora_rank=None), "x")
    assert "\n" not in str(e.value)
