"""The drafter registry and the parallel / host-side kinds (DFlash, PARD, suffix decoding).

FLOPs and bytes are written out from the formulas (FLOPs, not MACs; bf16 = 2 bytes) for llama-3.1-8b (h 4096, 32
query / 8 KV heads of 128, FFN 14336, vocabulary 128256) and llama-3.2-1b (h 2048, 32 / 8 heads of 64, FFN 8192,
16 layers), at B = 2 sequences, K = 3 draft tokens, context c = 1024.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from dsdsim import load_hardware, load_model
from dsdsim.cost.drafters import COSTS
from dsdsim.cost.drafts import draft_ops, drafter_weight_params, drafter_whole_params
from dsdsim.cost.layers import PassContext
from dsdsim.cost.memory import memory_use
from dsdsim.cost.step import simulate_step
from dsdsim.errors import DsdsimError
from dsdsim.export.engines import sglang_adaptive_config, vllm_speculative_config
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, parse_drafter
from dsdsim.specs.drafters import REGISTRY, DraftPasses

B, K, C = 2, 3, 1024
BF16 = 2
H, V = 4096, 128256              # llama-3.1-8b
KV = 2 * 8 * 128                 # k and v elements per token per layer


def _ops(drafter: str, k=K, draft: str | None = None) -> dict:
    target, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    pc = PassContext.build(target, hw, Deployment())
    small = load_model(draft) if draft else None
    return {o.name: o for o in draft_ops(target, parse_drafter(drafter), pc, B, k, C, small)}


def _gemm(m, k, n):
    """(FLOPs, bytes) of Y[m, n] = X[m, k] W[k, n] in bf16: weights read once, X read, Y written."""
    return 2 * m * k * n, (k * n + m * k + m * n) * BF16


def _check(op, flops, nbytes, count=1):
    assert float(op.flops) == pytest.approx(flops, rel=1e-12)
    assert float(op.bytes) == pytest.approx(nbytes, rel=1e-12)
    assert float(op.count) == count


# --- the registry ----------------------------------------------------------------------------------------------


def test_every_kind_has_one_entry_and_one_cost():
    assert set(REGISTRY) == set(DrafterKind) == set(COSTS)
    for info in REGISTRY.values():
        assert set(info.engines) == {"vllm", "sglang", "trtllm"}, info.name
        for run in info.engines.values():
            assert run.method or run.refusal or run.source, info.name


def test_unknown_drafter_names_the_close_ones():
    with pytest.raises(DsdsimError, match="did you mean dflash"):
        parse_drafter("dflsh")


@pytest.mark.parametrize("text,fields", [
    ("dflash", dict(layers=5, taps=5, max_k=15)),
    ("dflash:6,8", dict(layers=6, taps=8, max_k=15)),
    ("dflash:3,5,9", dict(layers=3, taps=5, max_k=8)),
    ("dspark", dict(layers=5, taps=5, max_k=7, markov_rank=256)),
    ("dspark:4,3,5,128", dict(layers=4, taps=3, max_k=5, markov_rank=128)),
    ("pard:llama-3.2-1b", dict(model="llama-3.2-1b", max_k=16)),
    ("suffix", dict(host_s_per_step=20e-6, host_s_per_sequence=2e-6, max_k=24)),
    ("suffix:30,3", dict(host_s_per_step=30e-6, host_s_per_sequence=3e-6)),
])
def test_parse_new_kinds(text, fields):
    d = parse_drafter(text)
    for key, value in fields.items():
        assert getattr(d, key) == value, key
    assert parse_drafter(d.label) == d           # the label reads back as the same drafter


@pytest.mark.parametrize("text,message", [
    ("dflash:x", "whole numbers"), ("dflash:5,5,1", "block size must be >= 2"), ("dflash:1,2,3,4", "whole numbers"),
    ("pard", "pard needs a model"), ("pard:", "pard needs a model"), ("suffix:-1", "whole numbers"),
    ("dspark:5,5,7,256,1", "whole numbers"), ("dspark:5,5,0", "whole numbers"), ("dspark:5,5,65", "<= 64"),
])
def test_bad_arguments_are_one_line(text, message):
    with pytest.raises(DsdsimError, match=message) as err:
        parse_drafter(text)
    assert "\n" not in str(err.value)


# --- DFlash: one pass of LAYERS layers over the K + 1 block, fed by TAPS target layers -------------------------


def test_dflash_passes_by_hand():
    ops = _ops("dflash")
    rows, head = B * (K + 1), B * K              # 8 block / context rows, 6 drafted positions
    _check(ops["dflash.embed"], 0, rows * H * BF16 * 2)
    _check(ops["dflash.fc"], *_gemm(rows, 5 * H, H))
    _check(ops["dflash.hidden_norm"], rows * H * 4, rows * H * BF16 * 2)
    _check(ops["dflash.ctx_kv"], *_gemm(rows, H, KV), count=5)
    _check(ops["dflash.attn.qkv"], *_gemm(rows, H, 32 * 128 + KV), count=5)
    _check(ops["dflash.attn.o"], *_gemm(rows, 32 * 128, H), count=5)
    _check(ops["dflash.ffn.mlp.gate_up"], *_gemm(rows, H, 2 * 14336), count=5)
    _check(ops["dflash.ffn.mlp.down"], *_gemm(rows, 14336, H), count=5)
    # attention: the K + 1 queries see the cache c, the K + 1 new context positions and the block itself
    seen = C + (K + 1)
    attn_flops = 2 * rows * 32 * (128 + 128) * (seen + (K + 1))
    attn_bytes = rows * 32 * 128 * BF16 * 2 + B * seen * KV * BF16 + rows * KV * BF16
    _check(ops["dflash.attn.attn"], attn_flops, attn_bytes, count=5)
    _check(ops["dflash.lm_head"], *_gemm(head, H, V))       # the target's lm_head, full vocabulary
    _check(ops["dflash.sampling"], head * V * 5, head * V * 4 * 2)
    assert not any(name.startswith(("pass1.", "passN.")) for name in ops)      # no sequential passes


def test_dflash_runs_once_per_step_and_not_at_k0():
    ops = _ops("dflash", k=np.array([0.0, 1.0, 7.0]))
    np.testing.assert_array_equal(np.asarray(ops["dflash.fc"].count), [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(ops["dflash.ctx_kv"].count), [0.0, 5.0, 5.0])


def test_dflash_k0_is_plain_decoding_and_time_grows_with_k():
    dep = Deployment()
    plain = simulate_step("llama-3.1-8b", "h100-sxm", dep, None, batch=8, k=0, context=C)
    zero = simulate_step("llama-3.1-8b", "h100-sxm", dep, parse_drafter("dflash"), batch=8, k=0, context=C)
    assert float(zero.step_time_s) == pytest.approx(float(plain.step_time_s), rel=1e-12)
    times = [float(simulate_step("llama-3.1-8b", "h100-sxm", dep, parse_drafter("dflash"), batch=8, k=k,
                                 context=C).step_time_s) for k in range(1, 16)]
    assert all(b >= a for a, b in zip(times, times[1:]))


def test_dflash_weights_and_cache():
    target = load_model("llama-3.1-8b")
    layer = H * (32 * 128) + H * KV + (32 * 128) * H + 3 * H * 14336 + 2 * H     # q, k/v, o, SwiGLU, 2 norms
    d = parse_drafter("dflash")
    assert drafter_weight_params(target, d, None) == 5 * H * H + 5 * layer + 2 * H   # fc + layers + 2 norms
    assert drafter_whole_params(target, d) == 5 * layer
    grow = [memory_use(target, load_hardware("h100-sxm"), Deployment(), d, B, K, c).draft_bytes for c in (C, 2 * C)]
    assert float(grow[1] - grow[0]) == B * C * 5 * KV * BF16       # 5 layers of K/V per cached token


# --- DSpark: a DFlash-style pass over K block slots, then K sequential Markov steps --------------------------


def test_dspark_passes_by_hand():
    """The block holds K slots (the token sampled last step + K - 1 masks; vLLM DSparkProposer.set_inputs_first_pass),
    the context the K + 1 tokens verified last step; each Markov step adds W2(W1[x]) to one position's logits."""
    ops = _ops("dspark")
    ctx, block = B * (K + 1), B * K              # 8 context rows, 6 block rows (= drafted positions)
    r = 256
    _check(ops["dspark.embed"], 0, block * H * BF16 * 2)
    _check(ops["dspark.fc"], *_gemm(ctx, 5 * H, H))
    _check(ops["dspark.hidden_norm"], ctx * H * 4, ctx * H * BF16 * 2)
    _check(ops["dspark.ctx_kv"], *_gemm(ctx, H, KV), count=5)
    _check(ops["dspark.attn.qkv"], *_gemm(block, H, 32 * 128 + KV), count=5)
    _check(ops["dspark.ffn.mlp.down"], *_gemm(block, 14336, H), count=5)
    # attention: the K block queries see the cache c, the K + 1 new context positions and the block's K slots
    seen = C + (K + 1)
    attn_flops = 2 * block * 32 * (128 + 128) * (seen + K)
    attn_bytes = block * 32 * 128 * BF16 * 2 + B * seen * KV * BF16 + block * KV * BF16
    _check(ops["dspark.attn.attn"], attn_flops, attn_bytes, count=5)
    _check(ops["dspark.lm_head"], *_gemm(block, H, V))        # the base logits of all K slots, once
    # K Markov steps over the B sequences: W1 row lookup, W2 (r -> V), logits + bias, sampling
    _check(ops["dspark.markov_w1"], 0, B * r * BF16 * 2, count=K)
    _check(ops["dspark.markov_w2"], *_gemm(B, r, V), count=K)
    _check(ops["dspark.bias_add"], B * V, B * V * BF16 * 3, count=K)
    _check(ops["dspark.sampling"], B * V * 5, B * V * 4 * 2, count=K)
    assert not any(name.startswith(("pass1.", "passN.")) for name in ops)


def test_dspark_k0_is_plain_decoding_and_only_the_markov_steps_scale_with_k():
    ops = _ops("dspark", k=np.array([0.0, 1.0, 7.0]))
    np.testing.assert_array_equal(np.asarray(ops["dspark.fc"].count), [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(np.asarray(ops["dspark.markov_w2"].count), [0.0, 1.0, 7.0])
    dep = Deployment()
    plain = simulate_step("llama-3.1-8b", "h100-sxm", dep, None, batch=8, k=0, context=C)
    zero = simulate_step("llama-3.1-8b", "h100-sxm", dep, parse_drafter("dspark"), batch=8, k=0, context=C)
    assert float(zero.step_time_s) == pytest.approx(float(plain.step_time_s), rel=1e-12)


def test_dspark_weights_and_cache():
    target = load_model("llama-3.1-8b")
    layer = H * (32 * 128) + H * KV + (32 * 128) * H + 3 * H * 14336 + 2 * H     # q, k/v, o, SwiGLU, 2 norms
    d = parse_drafter("dspark")
    markov = 2 * V * 256 + (H + 256) + 1            # W1, W2 and the confidence head (h + r -> 1, bias)
    assert drafter_weight_params(target, d, None) == 5 * H * H + 5 * layer + 2 * H + markov
    assert drafter_whole_params(target, d) == 5 * layer
    grow = [memory_use(target, load_hardware("h100-sxm"), Deployment(), d, B, K, c).draft_bytes for c in (C, 2 * C)]
    assert float(grow[1] - grow[0]) == B * C * 5 * KV * BF16


def test_dspark_is_refused_beyond_its_block():
    with pytest.raises(DsdsimError, match="beyond the dspark drafter's limit of 7"):
        from dsdsim.policy.predict import predict
        predict("llama-3.1-8b", "h100-sxm", Deployment(), "dspark", max_k=8, acceptance=0.8)


# --- PARD: the draft model once over 2K tokens per sequence ----------------------------------------------------


def test_pard_one_pass_by_hand():
    ops = _ops("pard:llama-3.2-1b", draft="llama-3.2-1b")
    h, kv, rows, head = 2048, 2 * 8 * 64, B * 2 * K, B * K     # K + 1 verified tokens and K - 1 masks
    _check(ops["pard.L.attn.qkv"], *_gemm(rows, h, 32 * 64 + kv), count=16)
    attn_flops = 2 * rows * 32 * (64 + 64) * (C + 2 * K)
    attn_bytes = rows * 32 * 64 * BF16 * 2 + B * C * kv * BF16 + rows * kv * BF16
    _check(ops["pard.L.attn.attn"], attn_flops, attn_bytes, count=16)
    _check(ops["pard.L.ffn.mlp.down"], *_gemm(rows, 8192, h), count=16)
    _check(ops["pard.lm_head"], *_gemm(head, h, V))
    small = load_model("llama-3.2-1b")
    assert drafter_weight_params(load_model("llama-3.1-8b"), parse_drafter("pard:llama-3.2-1b"), small) == \
        small.params_total


def test_pard_beats_sequential_draft_model_on_passes():
    """The same draft model: one pass (PARD) against K sequential passes (draft-model) at K = 5."""
    dep = Deployment()
    pard = simulate_step("llama-3.1-8b", "h100-sxm", dep, "pard:llama-3.2-1b", batch=1, k=5, context=C)
    chain = simulate_step("llama-3.1-8b", "h100-sxm", dep, "draft-model:llama-3.2-1b", batch=1, k=5, context=C)
    assert float(pard.draft.time_s) < float(chain.draft.time_s)


# --- suffix decoding: a host lookup, no device work ------------------------------------------------------------


def test_suffix_is_a_host_lookup():
    ops = _ops("suffix:30,3")
    assert list(ops) == ["suffix_lookup"]
    assert float(ops["suffix_lookup"].flops) == 0 and float(ops["suffix_lookup"].bytes) == 0
    assert REGISTRY[DrafterKind.suffix].passes is DraftPasses.none
    assert drafter_weight_params(load_model("llama-3.1-8b"), parse_drafter("suffix"), None) == 0
    off = _ops("suffix:30,3", k=0)["suffix_lookup"]
    assert float(ops["suffix_lookup"].demand.host_s) == pytest.approx(30e-6 + 3e-6 * B, rel=1e-12)
    assert float(off.demand.host_s) == 0.0


# --- exports and refusals --------------------------------------------------------------------------------------

TABLE = [(1, 16, 5), (17, 64, 3), (65, 256, 0)]


def test_vllm_names_from_the_registry():
    assert vllm_speculative_config(TABLE, parse_drafter("dflash"))["method"] == "dflash"
    assert vllm_speculative_config([(1, 16, 5), (17, 64, 3)], parse_drafter("dspark"))["method"] == "dspark"
    pard = vllm_speculative_config(TABLE, parse_drafter("pard:llama-3.2-1b"))
    assert (pard["method"], pard["model"], pard["parallel_drafting"]) == ("draft_model", "llama-3.2-1b", True)
    with pytest.raises(DsdsimError, match="conflicts with dynamic speculative decoding"):
        vllm_speculative_config(TABLE, parse_drafter("suffix"))
    assert sglang_adaptive_config(TABLE)["17"] == {"candidate_steps": [3]}


@pytest.mark.parametrize("drafter,fmt,message", [
    ("dflash", "sglang", "supports EAGLE and EAGLE3 only"),
    ("dflash", "trtllm", "no DFlash drafter"),
    ("dspark", "sglang", "cannot run DSpark"),
    ("dspark", "trtllm", "no DSpark drafter"),
    ("pard:llama-3.2-1b", "sglang", "cannot run PARD"),
    ("suffix", "vllm", "conflicts with dynamic speculative decoding"),
    ("suffix", "trtllm", "export csv or json"),
])
def test_engines_refuse_in_one_line(cli, drafter, fmt, message):
    code, out, err = cli("predict", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-d", drafter, "-a", "0.8",
                         "-b", "1,8,64", "--format", fmt)
    assert code != 0 and message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1


@pytest.mark.parametrize("drafter,method", [("dflash", "dflash"), ("dspark", "dspark"),
                                            ("pard:llama-3.2-1b", "draft_model")])
def test_predict_exports_for_vllm(cli, drafter, method):
    code, out, err = cli("predict", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-d", drafter, "-a", "0.8",
                         "-b", "1,8,64", "--format", "vllm")
    assert code == 0, err
    assert json.loads(out)["method"] == method


@pytest.mark.parametrize("drafter,op", [("dflash", "dflash.fc"), ("dspark", "dspark.markov_w2"),
                                        ("pard:llama-3.2-1b", "pard.lm_head"),
                                        ("suffix", "suffix_lookup")])
def test_explain_shows_the_passes(cli, drafter, op):
    code, out, err = cli("explain", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-d", drafter, "-b", "2", "-k", "3")
    assert code == 0, err
    assert op in out


def test_dflash_overlaps_its_host_work_where_vllm_runs_it_as_eagle():
    """vLLM's DFlash proposer is an EagleProposer and ``use_eagle()`` covers it, so from the release with dynamic K
    (0.24) its steps overlap host work as EAGLE-3's do; in an older range the overlap list names EAGLE / MTP only."""
    from dsdsim.specs.catalog import load_engine
    from dsdsim.specs.setup import resolve

    new, old = load_engine("vllm@0.24"), load_engine("vllm@0.20")
    assert new.overlap.speculative_overlaps("dflash") and new.overlap.speculative_overlaps("eagle3")
    assert new.overlap.speculative_overlaps("dspark") and not old.overlap.speculative_overlaps("dspark")
    assert not old.overlap.speculative_overlaps("dflash") and old.overlap.speculative_overlaps("eagle3")
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "dflash", engine="vllm@0.24")
    step = simulate_step(None, None, setup=s, batch=16, k=7, context=2048)
    assert bool(np.all(step.engine_time.overlapped))


def test_validate_reads_the_registry_for_the_kinds_it_builds_in_torch():
    """validate takes the kinds the registry marks ``validated`` (EAGLE-3, with any draft vocabulary) or none, and
    refuses the others in one line naming what it does build, before torch is needed."""
    from dsdsim.cli.bench import _check_validated

    assert [info.name for info in REGISTRY.values() if info.validated] == ["eagle3"]
    for ok in ("eagle3", "eagle3:32000", "none", "None", ""):
        _check_validated(ok)
    for bad in ("mtp", "dspark", "dflash:5,5,8"):
        with pytest.raises(DsdsimError, match="times the drafter passes of eagle3, not") as err:
            _check_validated(bad)
        assert "\n" not in str(err.value)
