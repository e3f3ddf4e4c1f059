"""The 2026 model specs and what their configs brought to the parser: Qwen3-Next's MTP layer, Qwen3.5 / Qwen3.6
(qwen3_5_moe), Kimi-K2.6 (kimi_k25), GLM-5 (glm_moe_dsa without IndexShare), MiniMax-M2.5 (minimax_m2) and partial
rotary embedding.

Ground truth: the published configs in model_specs/ (their ``_dsdsim`` blocks name the public copies) and the module
shapes of vLLM ``qwen3_next_mtp.py`` / ``qwen3_5_mtp.py`` (the MTP module: pre_fc_norm_embedding, pre_fc_norm_hidden,
fc 2h -> h, one decoder layer built as layer_type "full_attention", a norm; embedding and lm_head shared) and
``get_rope`` (rotary_dim = int(head_dim x partial_rotary_factor)). Every figure is written out from the formula.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsdsim.cost.layers import PassContext, attention_ops
from dsdsim.errors import DsdsimError, SpecError
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.specs.model import AttentionKind, FFNKind
from dsdsim.units import DType

from _ops_helpers import by_name, ctx, f

SPECS = Path(__file__).resolve().parents[1] / "model_specs"
B, Q, C = 4, 3, 1000          # sequences, tokens a step, cached tokens
N = B * Q


def _raw(name: str) -> dict:
    return json.loads((SPECS / f"{name}.json").read_text(encoding="utf-8"))


def _moe_params(h: int, experts: int, width: int, shared: int) -> int:
    """Router, routed SwiGLU experts, the shared expert and its sigmoid gate (h -> 1)."""
    return h * experts + experts * 3 * h * width + 3 * h * shared + h


def _gated_attention_params(h: int, heads: int, kv_heads: int, d: int) -> int:
    """q_proj (q and gate), k_proj, v_proj, o_proj and the q/k norms."""
    return h * (2 * heads * d + 2 * kv_heads * d) + heads * d * h + 2 * d


def _deltanet_params(h: int, nk: int, nv: int, dk: int, dv: int, conv: int) -> int:
    """in_proj q, k, v, z; in_proj b, a; the conv1d over q, k, v; dt_bias and A_log; the gated norm; out_proj."""
    return (h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + (2 * nk * dk + nv * dv) * conv + 2 * nv + dv
            + nv * dv * h)


def _mtp_params(h: int, layer: int) -> int:
    """enorm and hnorm, fc (2h -> h), the layer, the final norm (embedding and lm_head are the model's)."""
    return 2 * h + 2 * h * h + layer + h


# --- Qwen3-Next: its MTP layer -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen3_next():
    return load_model("qwen3-next-80b-a3b")


def test_qwen3_next_declares_one_mtp_layer_of_gated_attention_and_moe(qwen3_next):
    m = qwen3_next
    assert _raw("qwen3-next-80b-a3b")["num_nextn_predict_layers"] == 1
    assert m.mtp_layers == 1
    layer = m.mtp_layer
    a = layer.attention
    assert a.kind is AttentionKind.full and a.output_gate and a.qk_norm         # never a DeltaNet layer
    assert (a.num_heads, a.num_kv_heads, a.head_dim, a.rotary_dim) == (16, 2, 256, 64)
    assert layer.ffn.kind is FFNKind.moe
    assert (layer.ffn.num_experts, layer.ffn.top_k, layer.ffn.expert_intermediate_size) == (512, 10, 512)
    assert layer.ffn.shared_gate and layer.ffn.shared_intermediate_size == 512
    one_layer = _gated_attention_params(2048, 16, 2, 256) + _moe_params(2048, 512, 512, 512) + 2 * 2048
    assert one_layer == 1_642_076_672
    assert m.params_mtp == _mtp_params(2048, one_layer) == 1_650_471_424
    # the main model is what it was: MTP weights are counted apart
    assert m.params_total == 79_674_391_296


def test_qwen3_next_mtp_draft_pass_runs_one_full_attention_layer(qwen3_next):
    from dsdsim.cost.step import simulate_step

    s = simulate_step("qwen3-next-80b-a3b", "h200-sxm", Deployment(tp=2), "mtp", batch=8, k=2, context=1024)
    names = [t.op.name for t in s.draft.op_times]
    first = [n for n in names if n.startswith("pass1.")]
    # one layer: one q/k/v projection, one attention core, one MoE block
    assert sum(n.endswith(".attn.qkv") for n in first) == 1
    assert sum(n.endswith(".attn.attn") for n in first) == 1
    assert sum(n.endswith(".ffn.experts") for n in first) == 1
    assert "pass1.mtp.attn.output_gate" in first and "pass1.mtp.eh_proj" in first
    assert not any(part in n for n in names for part in ("qkvz", "delta_rule", "conv"))    # no DeltaNet op
    assert float(s.step_time_s) > float(s.verify.time_s) > 0


def test_predict_with_the_mtp_drafter_runs_on_qwen3_next(cli):
    code, out, err = cli("predict", "-m", "qwen3-next-80b-a3b", "-g", "h200-sxm", "--tp", "2", "-d", "mtp",
                         "-b", "1-16", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["rows"]


# --- partial rotary embedding ----------------------------------------------------------------------------------------


def test_rotary_counts_only_the_rotated_part_of_each_head(qwen3_next):
    full = qwen3_next.layers[3].attention
    ops_ = by_name(attention_ops(full, 2048, B, Q, C, ctx()))
    # 16 q heads and 2 new k heads, 64 of 256 elements each: read and written once, 3 FLOPs an element
    assert f(ops_["rotary"].flops) == N * (16 + 2) * 64 * 3
    assert f(ops_["rotary"].act_in_bytes) == N * (16 + 2) * 64 * 2
    whole = by_name(attention_ops(full.model_copy(update={"rotary_dim": None}), 2048, B, Q, C, ctx()))
    assert f(whole["rotary"].flops) == 4 * f(ops_["rotary"].flops)
    for name in ("qkv", "attn", "output_gate", "o"):             # nothing else moves
        assert (f(ops_[name].flops), f(ops_[name].bytes)) == (f(whole[name].flops), f(whole[name].bytes))


@pytest.mark.parametrize("name,rotary", [("qwen3-next-80b-a3b", 64), ("glm-4.5", 64), ("qwen3.5-397b-a17b", 64),
                                         ("minimax-m2.5", 64),
                                         ("qwen3.6-35b-a3b", 64), ("llama-3.1-8b", None), ("qwen3-30b-a3b", None),
                                         ("gemma-3-27b", None)])
def test_rotary_dim_follows_partial_rotary_factor(name, rotary):
    m = load_model(name)
    dims = {layer.attention.rotary_dim for layer in m.layers if layer.attention.kind is AttentionKind.full
            or layer.attention.kind is AttentionKind.sliding}
    assert dims == {rotary}


def _tiny_q35(**over) -> dict:
    text = {"model_type": "qwen3_5_moe_text", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 256,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 32}
    text.update(over)
    return {"model_type": "qwen3_5_moe", "text_config": text}


def test_partial_rotary_factor_is_read_where_each_release_puts_it():
    full = lambda cfg: model_from_hf_config(cfg, "t").layers[3].attention.rotary_dim  # noqa: E731
    assert full(_tiny_q35()) == 8                                   # Qwen3_5MoeTextConfig's default, 0.25
    assert full(_tiny_q35(rope_parameters={"rope_theta": 1e7, "partial_rotary_factor": 0.5})) == 16
    assert full(_tiny_q35(partial_rotary_factor=0.75, rope_parameters={"partial_rotary_factor": 0.5})) == 24
    assert full(_tiny_q35(partial_rotary_factor=1.0)) is None       # the whole head
    with pytest.raises(SpecError, match="partial_rotary_factor"):
        model_from_hf_config(_tiny_q35(partial_rotary_factor=0), "t")
    with pytest.raises(SpecError, match="partial_rotary_factor"):
        model_from_hf_config(_tiny_q35(rope_parameters={"partial_rotary_factor": "a quarter"}), "t")


# --- Qwen3.5 / Qwen3.6 -----------------------------------------------------------------------------------------------


def test_qwen3_5_397b_layers_by_hand():
    m = load_model("qwen3.5-397b-a17b")
    assert m.family == "qwen3_5_moe_text" and not m.tie_word_embeddings
    assert [layer.attention.kind for layer in m.layers] == ([AttentionKind.linear] * 3 + [AttentionKind.full]) * 15
    linear, full = m.layers[0].attention, m.layers[3].attention
    assert (linear.num_heads, linear.num_kv_heads, linear.head_dim, linear.v_head_dim) == (64, 16, 128, 128)
    assert linear.state_dtype is DType.fp32                         # mamba_ssm_dtype float32
    assert (full.num_heads, full.num_kv_heads, full.head_dim, full.output_gate) == (32, 2, 256, True)
    h, v = 4096, 248320
    gdn = _deltanet_params(h, 16, 64, 128, 128, 4)
    attn = _gated_attention_params(h, 32, 2, 256)
    moe = _moe_params(h, 512, 1024, 1024)
    assert m.layers[0].attention.params(h) == gdn
    assert m.layers[3].attention.params(h) == attn
    total = 45 * (gdn + moe + 2 * h) + 15 * (attn + moe + 2 * h) + 2 * v * h + h
    assert m.params_total == total
    active_moe = h * 512 + 10 * 3 * h * 1024 + 3 * h * 1024 + h     # the whole router, 10 routed + the shared expert
    assert m.params_active == 45 * (gdn + active_moe + 2 * h) + 15 * (attn + active_moe + 2 * h) + 2 * v * h + h
    # the MTP module of mtp_num_hidden_layers: gated attention and the MoE block
    assert m.mtp_layers == 1 and m.mtp_layer.attention == full and m.mtp_layer.ffn == m.layers[0].ffn
    assert m.params_mtp == _mtp_params(h, attn + moe + 2 * h)


def test_qwen3_6_35b_is_the_qwen3_5_35b_architecture():
    m = load_model("qwen3.6-35b-a3b")
    assert m.layer_pattern() == {"full": 10, "sliding": 0, "chunked": 0, "mla": 0, "linear": 30, "moe": 40,
                                 "dense_ffn": 0}
    h = 2048
    gdn = _deltanet_params(h, 16, 32, 128, 128, 4)
    attn = _gated_attention_params(h, 16, 2, 256)
    moe = _moe_params(h, 256, 512, 512)
    assert m.params_total == 30 * (gdn + moe + 2 * h) + 10 * (attn + moe + 2 * h) + 2 * 248320 * h + h
    assert m.mtp_layers == 1 and m.mtp_layer.attention.kind is AttentionKind.full


def test_qwen3_5_dense_mtp_layer_keeps_the_dense_mlp():
    text = _tiny_q35(model_type="qwen3_5_text", intermediate_size=96, mtp_num_hidden_layers=1)
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
        text["text_config"].pop(key)
    text["model_type"] = "qwen3_5"
    m = model_from_hf_config(text, "q35")
    assert m.mtp_layers == 1 and m.mtp_layer.ffn.kind is FFNKind.dense and m.mtp_layer.ffn.intermediate_size == 96
    assert m.mtp_layer.attention.kind is AttentionKind.full


def test_an_mtp_module_with_its_own_embedding_is_refused():
    with pytest.raises(SpecError, match="mtp_use_dedicated_embeddings"):
        model_from_hf_config(_tiny_q35(mtp_num_hidden_layers=1, mtp_use_dedicated_embeddings=True), "t")
    assert model_from_hf_config(_tiny_q35(mtp_num_hidden_layers=0), "t").mtp_layers == 0


# --- Kimi-K2.6 -------------------------------------------------------------------------------------------------------


def test_kimi_k2_6_is_kimi_k2s_decoder_in_a_multimodal_wrapper():
    k26, k2 = load_model("kimi-k2.6"), load_model("kimi-k2")
    assert _raw("kimi-k2.6")["model_type"] == "kimi_k25" and k26.family == "kimi_k2"
    assert k26.layers == k2.layers and k26.params_total == k2.params_total == 1_026_408_232_448
    assert k26.max_position_embeddings == 262144 and k2.max_position_embeddings == 131072
    assert k26.mtp_layers == 0


def test_kimi_k2_6_reads_int4_routed_experts_and_bf16_elsewhere():
    k26 = load_model("kimi-k2.6")
    assert (k26.default_dtype, k26.default_expert_dtype) == (DType.bf16, DType.int4_g32)
    pc = PassContext.build(k26, load_hardware("h200-sxm"), Deployment(tp=8))
    assert (pc.w_dtype, pc.expert_dtype) == (DType.bf16, DType.int4_g32)
    # compressed-tensors pack-quantized, group_size 32, symmetric: 4 bits and one bf16 scale per 32 weights
    assert DType.int4_g32.bytes_per_element == (4 + 16 / 32) / 8 == 0.5625
    # the int4 kernels run it (Marlin W4A16 on Hopper), as int4 without its scales would
    hw = load_hardware("h200-sxm")
    assert hw.kernels.moe_family(None, DType.int4_g32) == hw.kernels.moe_family(None, DType.int4)
    assert hw.peak(DType.int4_g32) == hw.peak(DType.int4)
    assert load_model("kimi-k2").default_dtype is DType.fp8           # K2-Instruct: FP8 everywhere


def test_kimi_k25_needs_its_text_config_and_other_quant_schemes_stay_in_the_torch_dtype():
    raw = _raw("kimi-k2.6")
    with pytest.raises(SpecError, match="text_config"):
        model_from_hf_config({k: v for k, v in raw.items() if k != "text_config"}, "k")
    eight = json.loads(json.dumps(raw))
    eight["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8
    assert model_from_hf_config(eight, "k").default_expert_dtype is None
    other = json.loads(json.dumps(raw))          # another group size: the 4 bits only (scales not counted)
    other["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 128
    assert model_from_hf_config(other, "k").default_expert_dtype is DType.int4


# --- GLM-5 -----------------------------------------------------------------------------------------------------------


def test_glm_5_runs_the_indexer_in_every_layer_and_is_glm_5_2_otherwise():
    g5, g52 = load_model("glm-5"), load_model("glm-5.2")
    assert all(layer.attention.runs_indexer for layer in g5.layers)
    assert sum(layer.attention.runs_indexer for layer in g52.layers) == 21
    indexer = 2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32     # wq_b, wk, k_norm, weights_proj
    assert g5.layers[0].attention.indexer_params(6144) == indexer == 9_371_904
    assert g5.params_total - g52.params_total == (78 - 21) * indexer
    assert g5.params_mtp == g52.params_mtp and g5.mtp_layer.attention.runs_indexer
    assert g5.max_position_embeddings == 202752
    assert [layer.ffn.kind for layer in g5.layers] == [layer.ffn.kind for layer in g52.layers]


# --- MiniMax-M2.5 ----------------------------------------------------------------------------------------------------


def test_minimax_m2_5_layers_by_hand():
    """transformers MiniMaxM2Config's defaults (the released model): 62 layers of GQA 48 / 8 heads of 128 with q / k
    norms over the whole projections, and a routed-only MoE of 256 experts, top 8, width 1536, sigmoid scores with a
    correction bias; an FP8 checkpoint (the model doc: 230 B parameters)."""
    m = load_model("minimax-m2.5")
    h, d = 3072, 128
    assert m.family == "minimax_m2" and len(m.layers) == 62 and m.mtp_layers == 0
    attn, ffn = m.layers[0].attention, m.layers[0].ffn
    assert {layer.attention for layer in m.layers} == {attn} and {layer.ffn for layer in m.layers} == {ffn}
    assert (attn.kind, attn.num_heads, attn.num_kv_heads, attn.head_dim) == (AttentionKind.full, 48, 8, d)
    assert attn.qk_norm and attn.qk_norm_per_layer and attn.rotary_dim == 64
    assert attn.params(h) == h * (48 + 2 * 8) * d + 48 * d * h + (48 + 8) * d
    assert (ffn.kind, ffn.num_experts, ffn.top_k, ffn.expert_intermediate_size) == (FFNKind.moe, 256, 8, 1536)
    assert ffn.num_shared_experts == 0 and ffn.router_bias
    assert m.default_dtype is DType.fp8 and not m.tie_word_embeddings
    assert abs(m.params_total / 230e9 - 1) < 0.01                   # "230 billion total parameters"
    assert m.kv_bytes_per_token(DType.bf16) == 62 * 2 * 8 * d * 2
    from dsdsim.specs.setup import resolve                            # use_mtp names modules the release lacks
    with pytest.raises(DsdsimError, match="no MTP module"):
        resolve("minimax-m2.5", "h200-sxm", Deployment(tp=4), "mtp")


@pytest.mark.parametrize("types, words", [([1] * 61 + [0], "lightning"), ([1] * 61, "one type per layer")])
def test_minimax_lightning_attention_layers_are_refused_in_one_line(types, words):
    raw = _raw("minimax-m2.5")
    raw["attn_type_list"] = types
    with pytest.raises(SpecError, match=words) as err:
        model_from_hf_config(raw, "mm")
    assert "\n" not in str(err.value)


def test_minimax_m2_5_predicts_on_four_mi355x(cli):
    code, out, err = cli("predict", "-m", "minimax-m2.5", "-g", "mi355x", "--tp", "4", "--ep", "4", "-b", "1-64",
                         "--format", "json")
    assert code == 0, err
    assert json.loads(out)["rows"]


def test_the_readme_figures_of_a_many_expert_models_k_are_what_the_model_gives():
    """The README's MoE paragraph quotes MiniMax-M2.5 on 4 H200s: the experts a layer touches and the step at batch 8
    and 64, K = 0 and 4, and the table's K at those batch sizes. Recomputed here, formatted as the README writes
    them, so the paragraph fails this test when a model change moves them."""
    import re

    import dsdsim
    from dsdsim.cost.step import simulate_step

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    said = re.search(r"touches (\d+) of its 256 experts a layer at batch 8 without speculation and (\d+) at K = 4 "
                     r"\(step ([\d.]+) -> ([\d.]+) ms\), but (\d+) at batch 64 already and (\d+) at K = 4 "
                     r"\(([\d.]+) -> ([\d.]+) ms\), so its table runs K = (\d) at batch 8 and K = (\d) at batch 64",
                     readme)
    assert said, "the README's MoE paragraph no longer quotes MiniMax-M2.5's experts"
    got = []
    for b, k in ((8, 0), (8, 4), (64, 0), (64, 4)):
        s = simulate_step("minimax-m2.5", "h200-sxm", Deployment(tp=4), "eagle3", batch=b, k=k, context=1024)
        got.append((f"{float(s.experts_touched):.0f}", float(s.step_time_s) * 1e3))
    ks = dict(zip([1, 8, 64, 256], dsdsim.predict("minimax-m2.5", "h200-sxm", Deployment(tp=4),
                                                   batch_sizes="1,8,64,256").table.k_per_batch.tolist()))
    assert said.groups() == (got[0][0], got[1][0], f"{got[0][1]:.2f}", f"{got[1][1]:.1f}", got[2][0], got[3][0],
                             f"{got[2][1]:.1f}", f"{got[3][1]:.1f}", str(ks[8]), str(ks[64]))
