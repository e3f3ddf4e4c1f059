"""Gated DeltaNet (linear-attention) layers and gated attention, Qwen3-Next-80B-A3B, against hand counts.

Ground truth: the published config (model_specs/qwen3-next-80b-a3b.json: hidden 2048; DeltaNet 16 q/k heads and
32 v heads of 128, conv kernel 4; gated attention 16 q / 2 kv heads of 256; 512 experts of 512, top-10, one gated
shared expert of 512; vocab 151936; 48 layers, every 4th full) and the module shapes of transformers /
vLLM ``Qwen3NextGatedDeltaNet`` and ``Qwen3NextAttention``. Every figure below is written out from the formula, not
read back from the code.
"""
from __future__ import annotations

import pytest

from dsdsim.cost.layers import attention_ops, layer_ops, pass_ops
from dsdsim.cost.memory import memory_figures, memory_use
from dsdsim.errors import SpecError
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.specs.model import AttentionKind
from dsdsim.units import DType

from _ops_helpers import by_name, ctx, f

H = 2048
NK, NV, DK, DV, CONV = 16, 32, 128, 128, 4
CONV_CH = 2 * NK * DK + NV * DV                 # 8192 channels: q, k, v
QKVZ = 2 * NK * DK + 2 * NV * DV                # 12288 outputs: q, k, v, z


@pytest.fixture(scope="module")
def model():
    return load_model("qwen3-next-80b-a3b")


def linear_attn(model):
    return model.layers[0].attention


def full_attn(model):
    return model.layers[3].attention


# --- the spec ---------------------------------------------------------------------------------------------------


def test_every_fourth_layer_is_gated_attention_the_rest_gated_deltanet(model):
    kinds = [layer.attention.kind for layer in model.layers]
    assert kinds == ([AttentionKind.linear] * 3 + [AttentionKind.full]) * 12
    assert model.layer_pattern() == {"full": 12, "sliding": 0, "chunked": 0, "mla": 0, "linear": 36,
                                     "moe": 48, "dense_ffn": 0}
    full = full_attn(model)
    assert full.output_gate and full.qk_norm and (full.num_heads, full.num_kv_heads, full.head_dim) == (16, 2, 256)


def test_layer_parameters_by_hand(model):
    # DeltaNet: in_proj_qkvz 2048 x 12288, in_proj_ba 2048 x 64, conv1d 8192 x 4, dt_bias and A_log 32 each,
    # gated-norm weight 128, out_proj 4096 x 2048
    linear = 2048 * 12288 + 2048 * 64 + 8192 * 4 + 32 + 32 + 128 + 4096 * 2048
    assert linear == 33_718_464
    assert linear_attn(model).params(H) == linear
    # gated attention: q_proj 2048 x (16*256*2), k_proj and v_proj 2048 x 512, o_proj 4096 x 2048, q/k norms 256 each
    full = 2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 256
    assert full == 27_263_488
    assert full_attn(model).params(H) == full
    # MoE: router 2048 x 512, 512 experts of 3 x 2048 x 512, shared expert 3 x 2048 x 512 and its gate 2048 -> 1
    moe = 2048 * 512 + 512 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048
    embed = 151936 * 2048
    total = 36 * (linear + moe + 2 * 2048) + 12 * (full + moe + 2 * 2048) + 2 * embed + 2048
    assert total == 79_674_391_296
    assert model.params_total == total
    active_moe = 2048 * 512 + 10 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048
    active = 36 * (linear + active_moe + 2 * 2048) + 12 * (full + active_moe + 2 * 2048) + 2 * embed + 2048
    assert model.params_active == active == 3_874_929_408


def test_recurrent_state_per_sequence_and_kv_per_token(model):
    # per DeltaNet layer: 32 x 128 x 128 fp32 state + 8192 x 3 bf16 conv state; 36 layers
    state = 36 * (32 * 128 * 128 * 4 + 8192 * 3 * 2)
    assert state == 77_266_944
    assert model.state_bytes_per_sequence(DType.bf16) == state
    # only the 12 full layers cache per token: 2 (k, v) x 2 heads x 256 x 2 bytes
    assert model.kv_bytes_per_token(DType.bf16) == 12 * 2 * 2 * 256 * 2


# --- the operators ----------------------------------------------------------------------------------------------

B, Q, C = 8, 4, 8192
N = B * Q


def test_deltanet_operators_by_hand(model):
    ops_ = by_name(attention_ops(linear_attn(model), H, B, Q, C, ctx()))
    assert list(ops_) == ["qkvz", "ba", "conv1d", "delta_rule", "norm_gate", "out"]
    qkvz = ops_["qkvz"]
    assert f(qkvz.flops) == 2 * N * 2048 * 12288
    assert f(qkvz.weight_bytes) == 2048 * 12288 * 2
    assert f(ops_["ba"].flops) == 2 * N * 2048 * 64
    conv = ops_["conv1d"]
    assert f(conv.flops) == N * 2 * 4 * 8192
    assert f(conv.weight_bytes) == 8192 * 4 * 2
    assert f(conv.act_in_bytes) == f(conv.act_out_bytes) == N * 8192 * 2
    assert f(conv.kv_read_bytes) == B * 8192 * 3 * 2               # each sequence's window read once
    assert f(conv.kv_write_bytes) == N * 8192 * 3 * 2              # a window after every verified token
    scan = ops_["delta_rule"]
    assert f(scan.flops) == N * 32 * (7 * 128 * 128 + 2 * 128)
    assert f(scan.act_in_bytes) == N * (2 * 16 * 128 + 32 * 128 + 2 * 32) * 2
    assert f(scan.act_out_bytes) == N * 32 * 128 * 2
    assert f(scan.kv_read_bytes) == B * 32 * 128 * 128 * 4          # the fp32 state, once per sequence
    assert f(scan.kv_write_bytes) == N * 32 * 128 * 128 * 4         # one snapshot per position (rollback)
    assert f(scan.weight_bytes) == 0
    gate = ops_["norm_gate"]
    assert f(gate.flops) == N * 4096 * 9
    assert f(gate.act_in_bytes) == N * 4096 * 2 * 2 and f(gate.act_out_bytes) == N * 4096 * 2
    assert f(ops_["out"].flops) == 2 * N * 4096 * 2048


def test_deltanet_cost_does_not_grow_with_the_context(model):
    short = attention_ops(linear_attn(model), H, B, Q, 128, ctx())
    long = attention_ops(linear_attn(model), H, B, Q, 1_000_000, ctx())
    for a, b in zip(short, long):
        assert (f(a.flops), f(a.bytes)) == (f(b.flops), f(b.bytes)), a.name


def test_deltanet_heads_and_state_split_over_tp(model):
    one = by_name(attention_ops(linear_attn(model), H, B, Q, C, ctx(1)))
    two = by_name(attention_ops(linear_attn(model), H, B, Q, C, ctx(2)))
    assert f(two["delta_rule"].kv_read_bytes) == B * 16 * 128 * 128 * 4
    assert f(two["qkvz"].weight_bytes) == 2048 * 6144 * 2
    assert f(two["delta_rule"].flops) * 2 == f(one["delta_rule"].flops)


def test_gated_attention_projects_and_applies_its_gate(model):
    ops_ = by_name(attention_ops(full_attn(model), H, B, Q, C, ctx()))
    assert list(ops_) == ["qkv", "qk_norm", "rotary", "attn", "output_gate", "o"]
    # q (16 x 256) + gate (16 x 256) + k and v (2 x 2 x 256)
    assert f(ops_["qkv"].weight_bytes) == 2048 * (4096 + 4096 + 1024) * 2
    gate = ops_["output_gate"]
    assert f(gate.flops) == N * 4096 * 4
    assert f(gate.bytes) == N * 4096 * 3 * 2
    # the attention core as for any GQA layer: 4 B q n_q d (c + q), the cache read once per sequence
    assert f(ops_["attn"].flops) == 4 * B * Q * 16 * 256 * (C + Q)
    assert f(ops_["attn"].kv_read_bytes) == B * C * 2 * 2 * 256 * 2


def test_layers_without_output_gate_are_unchanged():
    m = load_model("qwen3-30b-a3b")
    names = [o.name for o in attention_ops(m.layers[0].attention, m.hidden_size, B, Q, C, ctx())]
    assert names == ["qkv", "qk_norm", "rotary", "attn", "o"]


def test_a_whole_pass_counts_36_deltanet_and_12_attention_layers(model):
    ops_ = by_name(pass_ops(model, ctx(), B, Q, C))
    assert f(ops_["L(linear,moe).attn.delta_rule"].count) == 36
    assert f(ops_["L(full,moe).attn.attn"].count) == 12
    one_layer = by_name(layer_ops(model.layers[0], H, B, Q, C, ctx()))
    assert f(ops_["L(linear,moe).attn.delta_rule"].flops) == f(one_layer["attn.delta_rule"].flops)


# --- memory -----------------------------------------------------------------------------------------------------


def test_memory_counts_the_state_and_its_speculative_snapshots(model):
    hw, dep = load_hardware("h200-sxm"), Deployment(tp=2)
    per_seq = 36 * (16 * 128 * 128 * 4 + 4096 * 3 * 2)      # tp 2: half the heads and channels on a rank
    figures = memory_figures(model, hw, dep, None)
    assert figures.state_bytes_per_sequence == per_seq
    plain = memory_use(model, hw, dep, None, 64, 0, 1024)
    spec = memory_use(model, hw, dep, None, 64, 3, 1024)
    assert f(plain.state_bytes) == 64 * per_seq                 # K = 0: the committed state only
    assert f(spec.state_bytes) == 64 * (1 + 4) * per_seq        # K = 3: plus a snapshot of each of the q = 4
    assert f(spec.used_bytes) == pytest.approx(
        f(spec.weights_bytes + spec.kv_bytes + spec.activation_bytes + spec.draft_bytes) + 64 * 5 * per_seq)


def test_models_without_linear_layers_hold_no_state():
    m = load_model("qwen3-30b-a3b")
    use = memory_use(m, load_hardware("h200-sxm"), Deployment(), None, 8, 3, 1024)
    assert use.state_bytes == 0.0
    assert m.state_bytes_per_sequence() == 0.0


# --- config parsing ---------------------------------------------------------------------------------------------


def _tiny(**over) -> dict:
    cfg = {"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
           "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
           "linear_conv_kernel_dim": 4, "full_attention_interval": 2, "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 16, "shared_expert_intermediate_size": 32}
    cfg.update(over)
    return cfg


def test_layer_types_and_full_attention_interval_agree():
    a = model_from_hf_config(_tiny(), "a")
    b = model_from_hf_config(_tiny(layer_types=["linear_attention", "full_attention"] * 2), "b")
    assert [layer.attention.kind for layer in a.layers] == [AttentionKind.linear, AttentionKind.full] * 2
    assert a.layers == b.layers


def test_unknown_layer_type_and_state_dtype_are_refused_in_one_line():
    with pytest.raises(SpecError, match="layer type 'mamba'"):
        model_from_hf_config(_tiny(layer_types=["mamba"] * 4), "x")
    with pytest.raises(SpecError, match="mamba_ssm_dtype"):
        model_from_hf_config(_tiny(mamba_ssm_dtype="int3"), "x")


def test_state_dtype_follows_mamba_ssm_dtype():
    m = model_from_hf_config(_tiny(mamba_ssm_dtype="bfloat16"), "x")
    a = m.layers[0].attention
    assert a.state_dtype is DType.bf16
    # 2 linear layers x (4 x 16 x 8 bf16 state + (2*2*16 + 4*8) x 3 bf16 conv state)
    assert m.state_bytes_per_sequence(DType.bf16) == 2 * (4 * 16 * 8 * 2 + 96 * 3 * 2)


def test_qwen3_5_wrapper_with_a_dense_ffn_reads_its_text_config():
    text = _tiny(model_type="qwen3_5_text", intermediate_size=96, attn_output_gate=True)
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
        text.pop(key)
    m = model_from_hf_config({"model_type": "qwen3_5", "text_config": text}, "q35")
    assert m.family == "qwen3_5_text" and not m.is_moe
    assert m.layer_pattern()["linear"] == 2 and m.layers[1].attention.output_gate


def test_show_model_prints_the_layer_pattern_and_state(cli):
    import json

    code, out, err = cli("show", "model", "qwen3-next-80b-a3b", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["layer_pattern"] == "12 full, 36 linear, 48 moe"
    assert d["recurrent_state_bytes_per_sequence"] == 77_266_944
    assert d["kv_bytes_per_token"] == 24576


def test_the_eagle_head_of_a_hybrid_takes_the_shape_of_its_full_attention_layers():
    from dsdsim.cost.drafters.base import eagle_layer
    from dsdsim.specs.catalog import load_model
    from dsdsim.specs.drafter import parse_drafter
    from dsdsim.specs.model import AttentionKind

    m = load_model("qwen3-next-80b-a3b")
    full = next(layer.attention for layer in m.layers if layer.attention.kind is AttentionKind.full)
    head = eagle_layer(m, parse_drafter("eagle3")).attention
    assert head.kind is AttentionKind.full
    assert (head.num_heads, head.num_kv_heads, head.head_dim) == (full.num_heads, full.num_kv_heads, full.head_dim)


def test_show_model_prints_the_state_in_bytes_not_a_rate(cli):
    code, out, err = cli("show", "model", "qwen3-next-80b-a3b")
    assert code == 0, err
    line = next(row for row in out.splitlines() if "recurrent_state_bytes_per_sequence" in row)
    assert "77.3 MB" in line and "MB/s" not in line          # 77,266,944 B per sequence: a size, not a rate
