"""Mamba-2 hybrids (Nemotron-H, Nemotron 3): blocks with one part, the Mamba-2 mixer's operators, parameters, memory.

Ground truth: the module shapes of transformers ``NemotronHMamba2Mixer`` / ``NemotronHMLP`` / ``NemotronHMoE`` /
``NemotronHAttention`` (in_proj h -> 2 d_inner + 2 G N + H with d_inner = H x P, a biased depthwise conv1d over
d_inner + 2 G N channels, dt_bias / A_log / D per head, a gated RMSNorm of d_inner, out_proj; ReLU^2 MLPs and experts
of two matrices; one RMSNorm per block), the FLOP count of mamba_ssm ``selective_state_update`` (5 per state element
+ N + 2 P per head), and the published configs in model_specs/ (Nemotron-H-8B-Base-8K, Nemotron 3 Nano 30B-A3B,
Nemotron 3 Super 120B-A12B). Every figure below is written out from those shapes, not read back from the code.
"""
from __future__ import annotations

import json

import pytest

from dsdsim.cost.layers import layer_ops, pass_ops
from dsdsim.cost.memory import memory_figures, memory_use, weight_bytes_per_gpu
from dsdsim.errors import DsdsimError, SpecError
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.specs.model import FFNKind, Layer

from _ops_helpers import by_name, ctx, f

# --- a small config, every figure by hand -------------------------------------------------------------------------

H, V = 64, 256
MH, MP, MN, MG, MK = 4, 8, 16, 2, 4          # Mamba-2: heads, head dim, state, groups, conv taps
INNER = MH * MP                               # 32
CONV_CH = INNER + 2 * MG * MN                 # 96: x, B, C
IN_PROJ = 2 * INNER + 2 * MG * MN + MH        # 132: z, x, B, C, dt
NQ, NKV, D = 4, 2, 16                         # attention
I_MLP = 96
E, TOPK, I_E, I_S = 8, 2, 32, 48              # MoE


def _tiny(**over) -> dict:
    cfg = {"model_type": "nemotron_h", "hidden_size": H, "num_hidden_layers": 4, "vocab_size": V,
           "hybrid_override_pattern": "M*-E", "mamba_num_heads": MH, "mamba_head_dim": MP, "ssm_state_size": MN,
           "n_groups": MG, "conv_kernel": MK, "num_attention_heads": NQ, "num_key_value_heads": NKV, "head_dim": D,
           "intermediate_size": I_MLP, "n_routed_experts": E, "num_experts_per_tok": TOPK,
           "moe_intermediate_size": I_E, "moe_shared_expert_intermediate_size": I_S, "n_shared_experts": 1}
    cfg.update(over)
    return cfg


@pytest.fixture(scope="module")
def tiny():
    return model_from_hf_config(_tiny(), "tiny-nemotron")


def test_each_block_has_one_part_and_one_norm(tiny):
    m, a, mlp, moe = tiny.layers
    assert m.mamba is not None and m.attention is None and m.ffn is None
    assert a.attention is not None and a.mamba is None and a.ffn is None
    assert mlp.ffn.kind is FFNKind.dense and not mlp.ffn.gated and mlp.mixer is None
    assert moe.ffn.kind is FFNKind.moe and moe.ffn.router_bias and moe.mixer is None
    assert all(layer.norms == 1 for layer in tiny.layers)
    assert tiny.layer_pattern() == {"full": 1, "sliding": 0, "chunked": 0, "mla": 0, "linear": 0, "mamba2": 1,
                                    "moe": 1, "dense_ffn": 1}
    assert tiny.attention_pattern() == "1 mamba2 + 1 full"


def test_block_parameters_by_hand(tiny):
    m, a, mlp, moe = tiny.layers
    # in_proj 64 x 132, conv1d 96 x 4 taps + 96 biases, dt_bias / A_log / D 4 each, gated norm 32, out_proj 32 x 64,
    # the block's RMSNorm 64
    assert m.params(H) == 64 * 132 + 96 * 4 + 96 + 3 * 4 + 32 + 32 * 64 + 64 == 11_084
    # q 64 x 64, k and v 64 x 32 each, o 64 x 64 (no biases, no q/k norms), norm 64
    assert a.params(H) == 64 * 64 + 2 * 64 * 32 + 64 * 64 + 64 == 12_352
    # ReLU^2 MLP: up 64 x 96 and down 96 x 64 (no gate), norm 64
    assert mlp.params(H) == 2 * 64 * 96 + 64 == 12_352
    # router 64 x 8 + its 8-wide correction bias, 8 experts of up 64 x 32 and down 32 x 64, shared 2 x 64 x 48, norm
    assert moe.params(H) == 64 * 8 + 8 + 8 * 2 * 64 * 32 + 2 * 64 * 48 + 64 == 39_496
    assert moe.active_params(H) == 64 * 8 + 8 + 2 * 2 * 64 * 32 + 2 * 64 * 48 + 64
    total = 11_084 + 12_352 + 12_352 + 39_496 + 2 * 256 * 64 + 64
    assert tiny.params_total == total


B, Q = 3, 2
N = B * Q


def test_mamba2_operators_by_hand(tiny):
    ops_ = by_name(layer_ops(tiny.layers[0], H, B, Q, 1000, ctx()))
    assert list(ops_) == ["input_norm+residual", "mamba.in_proj", "mamba.conv1d", "mamba.ssm", "mamba.norm_gate",
                          "mamba.out_proj"]
    inp = ops_["mamba.in_proj"]
    assert f(inp.flops) == 2 * N * 64 * 132
    assert f(inp.weight_bytes) == 64 * 132 * 2
    conv = ops_["mamba.conv1d"]
    assert f(conv.flops) == N * (2 * 4 * 96 + 96)                    # a multiply-add per tap and channel, the bias
    assert f(conv.weight_bytes) == (96 * 4 + 96) * 2
    assert f(conv.act_in_bytes) == f(conv.act_out_bytes) == N * 96 * 2
    assert f(conv.kv_read_bytes) == B * 96 * 3 * 2                    # each sequence's window read once
    assert f(conv.kv_write_bytes) == N * 96 * 3 * 2                   # a window after every token
    ssm = ops_["mamba.ssm"]
    # per head: dB = B dt (16), S = S dA + dB x (3 x 8 x 16), y = S C (2 x 8 x 16), y += D x (2 x 8)
    assert f(ssm.flops) == N * 4 * (16 + 3 * 8 * 16 + 2 * 8 * 16 + 2 * 8) == N * 2688
    assert f(ssm.act_in_bytes) == N * (4 * 8 + 2 * 2 * 16 + 4) * 2   # x, B and C, dt
    assert f(ssm.act_out_bytes) == N * 4 * 8 * 2                     # y
    assert f(ssm.kv_read_bytes) == B * 4 * 8 * 16 * 4                # the fp32 state, once per sequence
    assert f(ssm.kv_write_bytes) == N * 4 * 8 * 16 * 4               # a state per verified position
    assert f(ssm.weight_bytes) == 0
    gate = ops_["mamba.norm_gate"]
    assert f(gate.flops) == N * 32 * 9
    assert f(gate.weight_bytes) == 32 * 2
    assert f(gate.act_in_bytes) == N * 32 * 2 * 2 and f(gate.act_out_bytes) == N * 32 * 2
    out = ops_["mamba.out_proj"]
    assert f(out.flops) == 2 * N * 32 * 64 and f(out.weight_bytes) == 32 * 64 * 2


def test_mamba2_cost_does_not_grow_with_the_context(tiny):
    short = layer_ops(tiny.layers[0], H, B, Q, 16, ctx())
    long = layer_ops(tiny.layers[0], H, B, Q, 1_000_000, ctx())
    for a, b in zip(short, long):
        assert (f(a.flops), f(a.bytes)) == (f(b.flops), f(b.bytes)), a.name


def test_mamba2_heads_groups_and_state_split_over_tp(tiny):
    two = by_name(layer_ops(tiny.layers[0], H, B, Q, 0, ctx(2)))
    # a rank: z and x of 2 heads x 8, B and C of 1 group x 16, dt of 2 heads
    assert f(two["mamba.in_proj"].weight_bytes) == 64 * (2 * 16 + 2 * 16 + 2) * 2
    assert f(two["mamba.conv1d"].kv_read_bytes) == B * (16 + 32) * 3 * 2
    assert f(two["mamba.ssm"].kv_read_bytes) == B * 2 * 8 * 16 * 4
    assert "mamba.all_reduce" in two                                 # out_proj is row-parallel


def test_an_ffn_only_and_an_attention_only_block(tiny):
    mlp = by_name(layer_ops(tiny.layers[2], H, B, Q, 0, ctx()))
    assert list(mlp) == ["input_norm+residual", "ffn.mlp.up", "ffn.mlp.act", "ffn.mlp.down"]
    assert f(mlp["ffn.mlp.up"].flops) == 2 * N * 64 * 96 and f(mlp["ffn.mlp.up"].weight_bytes) == 64 * 96 * 2
    assert f(mlp["ffn.mlp.act"].flops) == N * 96                     # the square of ReLU^2
    moe = by_name(layer_ops(tiny.layers[3], H, B, Q, 0, ctx()))
    assert list(moe) == ["input_norm+residual", "ffn.router", "ffn.experts", "ffn.shared.up", "ffn.shared.act",
                         "ffn.shared.down"]
    experts = moe["ffn.experts"]
    assert f(experts.flops) == 2 * N * TOPK * (2 * 64 * 32)           # up and down, no gate
    assert f(experts.weight_bytes) == pytest.approx(f(experts.experts_touched) * 2 * 64 * 32 * 2)
    assert f(experts.act_in_bytes) == N * TOPK * (64 + 32) * 2
    attn = by_name(layer_ops(tiny.layers[1], H, B, Q, 1000, ctx()))
    # no rotary: vLLM NemotronHAttention.forward passes q and k from qkv_proj straight to attention (no positions)
    assert tiny.layers[1].attention.rotary_dim == 0
    assert list(attn) == ["input_norm+residual", "attn.qkv", "attn.attn", "attn.o"]
    assert f(attn["attn.attn"].kv_read_bytes) == B * 1000 * 2 * 2 * 16 * 2


def test_a_pass_groups_the_blocks_by_their_part(tiny):
    names = {o.name for o in pass_ops(tiny, ctx(), B, Q, 100)}
    assert {"L(mamba2).mamba.ssm", "L(full).attn.attn", "L(dense).ffn.mlp.up", "L(moe).ffn.experts"} <= names


def test_latent_moe_runs_its_experts_in_the_latent_space():
    m = model_from_hf_config(_tiny(moe_latent_size=16), "tiny-latent")
    ffn = m.layers[3].ffn
    # fc1_latent_proj 64 x 16 and fc2_latent_proj 16 x 64 beside the router and shared expert; experts 16 <-> 32
    assert m.layers[3].params(H) == 64 * 8 + 8 + 8 * 2 * 16 * 32 + 2 * 64 * 48 + 2 * 64 * 16 + 64
    assert ffn.replicated_params(H) == 2 * 64 * 16
    ops_ = by_name(layer_ops(m.layers[3], H, B, Q, 0, ctx()))
    assert list(ops_)[:5] == ["input_norm+residual", "ffn.router", "ffn.latent_in", "ffn.experts", "ffn.latent_out"]
    assert f(ops_["ffn.experts"].flops) == 2 * N * TOPK * (2 * 16 * 32)
    assert f(ops_["ffn.latent_in"].weight_bytes) == 64 * 16 * 2
    # tensor parallelism splits the experts and the shared expert but not the latent projections
    two = by_name(layer_ops(m.layers[3], H, B, Q, 0, ctx(2)))
    assert f(two["ffn.latent_in"].weight_bytes) == 64 * 16 * 2
    whole = 2 * 64 * 16 * 2
    assert weight_bytes_per_gpu(m, Deployment(tp=2)) == pytest.approx((m.params_total * 2 - whole) / 2 + whole)


# --- config parsing -----------------------------------------------------------------------------------------------


def test_a_malformed_pattern_character_is_one_line():
    with pytest.raises(SpecError) as e:
        model_from_hf_config(_tiny(hybrid_override_pattern="M*-X"), "x")
    msg = str(e.value)
    assert "'X' at layer 3" in msg and "hybrid_override_pattern" in msg and "\n" not in msg


@pytest.mark.parametrize("over, phrase", [
    ({"hybrid_override_pattern": "M*-"}, "has 3 layers but num_hidden_layers is 4"),
    ({"hybrid_override_pattern": 7}, "must be a string of M, *, - and E"),
    ({"hybrid_override_pattern": None}, "required field 'hybrid_override_pattern' is missing"),
    ({"mamba_num_heads": 3}, "not a multiple of n_groups"),
    ({"num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "M*"}, "MTP module"),
])
def test_bad_nemotron_configs_are_refused_in_one_line(over, phrase):
    with pytest.raises(SpecError) as e:
        model_from_hf_config(_tiny(**over), "x")
    assert phrase in str(e.value) and "\n" not in str(e.value)


def test_layers_block_type_reads_as_the_pattern(tiny):
    cfg = _tiny(layers_block_type=["mamba", "attention", "mlp", "moe"])
    del cfg["hybrid_override_pattern"]
    assert model_from_hf_config(cfg, "tiny-nemotron").layers == tiny.layers
    cfg["layers_block_type"] = ["linear_attention", "full_attention", "mlp", "moe"]     # current names
    assert model_from_hf_config(cfg, "tiny-nemotron").layers == tiny.layers


def test_the_mtp_module_is_one_attention_and_one_moe_block():
    m = model_from_hf_config(_tiny(num_nextn_predict_layers=1, mtp_hybrid_override_pattern="*E"), "x")
    layer = m.mtp_layer
    assert layer.attention is not None and layer.ffn.kind is FFNKind.moe and layer.norms == 2
    # enorm, hnorm, eh_proj 128 x 64, the attention and MoE blocks (a norm each), the final norm
    attn = 64 * 64 + 2 * 64 * 32 + 64 * 64
    moe = 64 * 8 + 8 + 8 * 2 * 64 * 32 + 2 * 64 * 48
    assert m.params_mtp == 2 * 64 + 128 * 64 + attn + moe + 2 * 64 + 64


# --- the shipped models -------------------------------------------------------------------------------------------


def _mamba(h, heads, p, n, g, k):
    inner, conv = heads * p, heads * p + 2 * g * n
    return h * (2 * inner + 2 * g * n + heads) + conv * k + conv + 3 * heads + inner + inner * h


def _moe(h, e, k, i_e, shared, latent=0):
    width = latent or h
    return h * e + e + k * 2 * width * i_e + 2 * h * shared + (2 * h * latent if latent else 0)


def _total(pattern, h, v, mamba, attn, mlp, moe):
    blocks = {"M": mamba, "*": attn, "-": mlp, "E": moe}
    return sum(blocks[c] + h for c in pattern) + 2 * v * h + h


P8 = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
P3 = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
PS = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"


def test_nemotron_h_8b_parameters_by_hand_and_published():
    m = load_model("nemotron-h-8b")
    h = 4096
    total = _total(P8, h, 131072, _mamba(h, 128, 64, 128, 8, 4), h * 4096 * 2 + 2 * h * 1024,
                   2 * h * 21504, None)
    assert m.params_total == total == 8_100_852_736
    # https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K: "This model has 8B of model parameters"
    assert abs(total / 8e9 - 1) <= 0.015


def test_nemotron_3_nano_parameters_by_hand_and_published():
    m = load_model("nemotron-3-nano-30b")
    h, v = 2688, 131072
    mamba, attn = _mamba(h, 64, 64, 128, 8, 4), h * 4096 * 2 + 2 * h * 256
    total = _total(P3, h, v, mamba, attn, None, _moe(h, 128, 128, 1856, 3712))
    active = _total(P3, h, v, mamba, attn, None, _moe(h, 128, 6, 1856, 3712))
    assert (m.params_total, m.params_active) == (total, active) == (31_577_940_288, 3_580_076_352)
    # arXiv:2512.20848 / the model card: 31.6B total, 3.6B active with embeddings (3.2B without the input embedding)
    assert abs(total / 31.6e9 - 1) <= 0.015 and abs(active / 3.6e9 - 1) <= 0.015
    assert abs((active - v * h) / 3.2e9 - 1) <= 0.015


def test_nemotron_3_super_parameters_by_hand_and_published():
    m = load_model("nemotron-3-super-120b")
    h, v = 4096, 131072
    mamba, attn = _mamba(h, 128, 64, 128, 8, 4), h * 4096 * 2 + 2 * h * 256
    moe_all, moe_active = _moe(h, 512, 512, 2688, 5376, 1024), _moe(h, 512, 22, 2688, 5376, 1024)
    total = _total(PS, h, v, mamba, attn, None, moe_all)
    assert m.params_total == total == 120_668_707_840
    assert m.params_active == _total(PS, h, v, mamba, attn, None, moe_active)
    assert m.params_mtp == 2 * h + 2 * h * h + attn + moe_all + 2 * h + h
    # arXiv:2604.12374: "a 120 billion (active 12 billion) parameter" model (MTP module not in the 120B)
    assert abs(total / 120e9 - 1) <= 0.015
    assert abs((m.params_active - v * h) / 12e9 - 1) <= 0.02       # 12B: two significant figures


def test_show_model_prints_the_pattern_and_state(cli):
    code, out, err = cli("show", "model", "nemotron-h-8b", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["layer_pattern"] == "4 full, 24 mamba2, 24 dense_ffn"
    assert d["attention"] == "24 mamba2 + 4 full"
    # 24 Mamba-2 layers x (128 x 64 x 128 fp32 state + (8192 + 2 x 8 x 128) x 3 bf16 conv state)
    assert d["recurrent_state_bytes_per_sequence"] == 24 * (128 * 64 * 128 * 4 + 10240 * 3 * 2) == 102_137_856
    assert d["kv_bytes_per_token"] == 4 * 2 * 8 * 128 * 2                # the 4 attention layers only
    code, out, err = cli("show", "model", "nemotron-3-super-120b")
    assert code == 0, err
    assert "40 mamba2 + 8 full" in out


@pytest.mark.parametrize("argv", [
    ("-m", "nemotron-h-8b", "-g", "h100-sxm"),                                         # tp 1 fits
    ("-m", "nemotron-3-nano-30b", "-g", "h200-sxm"),                               # tp 1 fits
    ("-m", "nemotron-3-super-120b", "-g", "h200-sxm", "--tp", "2", "-d", "mtp"),  # 241 GB bf16: tp 2
])
def test_predict_gives_a_table(cli, argv):
    code, out, err = cli("predict", *argv, "-b", "1-16")
    assert code == 0, err
    assert "batch" in out and "tokens/s" in out and "yes" in out


def test_tp_must_split_the_mamba_heads_and_groups(cli):
    code, out, err = cli("predict", "-m", "nemotron-h-8b", "-g", "h100-sxm", "--tp", "3", "-b", "1-4")
    assert code == 2 and "Mamba-2" in err
    with pytest.raises(DsdsimError, match="8 groups"):
        Deployment(tp=16).check(load_model("nemotron-3-super-120b"))


# --- memory and the step -------------------------------------------------------------------------------------------


def test_memory_holds_the_ssm_state_and_its_speculative_snapshots():
    m, hw, dep = load_model("nemotron-h-8b"), load_hardware("h100-sxm"), Deployment(tp=2)
    # a rank: 64 heads x 64 x 128 fp32, conv state of 4096 + 2 x 4 x 128 channels x 3 taps bf16
    per_seq = 24 * (64 * 64 * 128 * 4 + (4096 + 2 * 4 * 128) * 3 * 2)
    assert memory_figures(m, hw, dep, None).state_bytes_per_sequence == per_seq
    plain = memory_use(m, hw, dep, None, 16, 0, 2048)
    spec = memory_use(m, hw, dep, None, 16, 3, 2048)
    assert f(plain.state_bytes) == 16 * per_seq                    # K = 0: the committed state
    assert f(spec.state_bytes) == 16 * (1 + 4) * per_seq           # K = 3: and one snapshot per verified position
    # only the 4 attention layers cache per token: 2 KV heads of 8 on a rank (tp 2) x 128 x 2 (k, v) x 2 bytes
    assert f(plain.kv_bytes) == 16 * (2048 + 1) * 4 * 4 * 128 * 2 * 2


def test_explain_memory_adds_up_with_the_recurrent_state(cli):
    """explain's memory line and JSON name every part, the recurrent state too, and the parts add up to the total."""
    code, out, _ = cli("explain", "-m", "nemotron-h-8b", "-g", "h100-sxm", "-b", "16", "-f", "json")
    mem = json.loads(out)["memory"]
    parts = ("weights_bytes", "kv_bytes", "activation_bytes", "draft_bytes", "state_bytes")
    assert code == 0 and mem["state_bytes"] > 0
    assert mem["used_bytes"] == pytest.approx(sum(mem[p] for p in parts), rel=1e-12)
    code, out, _ = cli("explain", "-m", "nemotron-h-8b", "-g", "h100-sxm", "-b", "16")
    line = [ln for ln in out.splitlines() if ln.startswith("memory per GPU")][0]
    assert "recurrent state" in line and "drafter" in line and "activations" in line


def test_the_step_times_the_scan_through_the_generic_path():
    import dsdsim

    plain = dsdsim.simulate_step("nemotron-h-8b", "h100-sxm", Deployment(), None, batch=8, k=0, context=1024)
    spec = dsdsim.simulate_step("nemotron-h-8b", "h100-sxm", Deployment(), "eagle3", batch=8, k=3, context=1024)
    assert 0 < plain.verify.time_s < spec.verify.time_s and spec.memory.feasible
    scans = [op for op in pass_ops(load_model("nemotron-h-8b"), ctx(), 8, 4, 1024) if op.name.endswith("mamba.ssm")]
    assert len(scans) == 1 and f(scans[0].count) == 24 and scans[0].kind.value == "recurrent"


def test_layer_needs_a_part():
    with pytest.raises(ValueError, match="needs a mixer"):
        Layer()


def test_a_reduced_hybrid_keeps_its_mamba_groups_whole():
    """validate reduces Nemotron-H as any model: Mamba-2 heads divided by the factor, the groups still dividing them,
    and the record names the Mamba-2 widths (torch-free: ``dsdsim.bench.reduce``)."""
    from dsdsim.bench.reduce import reduce_model

    m = load_model("nemotron-h-8b")
    small, record = reduce_model(m, 4)
    mixers = [layer.mamba for layer in small.layers if layer.mamba is not None]
    assert mixers and all(x.num_heads % x.n_groups == 0 for x in mixers)
    assert record["mamba_num_heads"] == [128, 32] and record["mamba_n_groups"] == [8, 2]
    assert [layer.mamba is None for layer in small.layers] == [layer.mamba is None for layer in m.layers]
    assert record["num_heads"] == [32, 8]
