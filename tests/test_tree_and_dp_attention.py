"""Draft trees (--draft-tree, al=X@tree) and data-parallel attention (--dp-attention) from the API to the CLI.

Trees: the policy's step times are the cost layer's (a tree step is STEPS draft passes and a verify of TOKENS + 1
tokens per sequence, whatever K >= 1), tau of the tree is the measured mean acceptance length, and chain and tree
acceptance never stand in for each other. DP attention: DeepSeek-V3's memory per GPU at tp 8 by hand from its
config.json (hidden 7168, 61 layers of which 3 dense with I = 18432, 256 routed + 1 shared experts of width 2048,
MLA q_lora 1536, kv_lora 512, 128 heads, qk_nope 128, rope 64, v 128; fp8 weights).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dsdsim.cost.step import simulate_step
from dsdsim.errors import DsdsimError
from dsdsim.policy.acceptance import TreeAcceptance
from dsdsim.policy.acceptance_input import parse_acceptance
from dsdsim.policy.predict import acceptance_for, predict
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DraftTree, parse_draft_tree, parse_drafter, with_tree

TREE = DraftTree(steps=4, topk=4, tokens=16)


def eagle3_tree(tree: DraftTree = TREE):
    return with_tree(parse_drafter("eagle3"), tree)


def one_line_error(result) -> str:
    code, out, err = result
    assert code == 2, (out, err)
    text = err.strip()
    assert "\n" not in text and "Traceback" not in text, text
    return text


def ok(result) -> str:
    code, out, err = result
    assert code == 0, err
    return out


# --- the tree in the cost layer and the policy --------------------------------------------------------------


def test_predict_with_a_tree_uses_the_cost_layers_tree_step_and_plain_decoding():
    b = [1, 8, 64]
    # an engine version without dynamic tables: its K = 0 rows are plain decoding (vllm@0.24+ would make them the
    # table's off tier, tests/test_policy.py)
    p = predict(drafter=eagle3_tree(), acceptance="al=3.2@tree", batch_sizes=b, engine="vllm@0.20")
    assert p.tree == TREE and list(p.k_values) == [0, TREE.steps]
    np.testing.assert_allclose(p.tau, [1.0, 3.2])
    for j, batch in enumerate(b):
        tree_step = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), eagle3_tree(), batch, 1, 1024,
                                  engine="vllm@0.20")
        plain = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), None, batch, 0, 1024, engine="vllm@0.20")
        assert p.step_s[1, j] == pytest.approx(float(tree_step.step_time_s), rel=1e-12)
        assert p.step_s[0, j] == pytest.approx(float(plain.step_time_s), rel=1e-12)
        assert float(tree_step.verify_tokens) == TREE.tokens + 1


def test_a_tree_step_differs_from_a_chain_of_its_depth_and_grows_with_its_tokens():
    chain = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), "eagle3", 64, TREE.steps, 1024, engine="ideal")
    tree = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), eagle3_tree(), 64, 1, 1024, engine="ideal")
    wide = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), eagle3_tree(DraftTree(steps=4, topk=4, tokens=48)),
                         64, 1, 1024, engine="ideal")
    assert float(tree.step_time_s) > float(chain.step_time_s)      # 17 verify tokens and 4-wide drafts vs 5 and 1
    assert float(wide.verify.time_s) > float(tree.verify.time_s)
    assert float(wide.draft.time_s) == pytest.approx(float(tree.draft.time_s), rel=1e-12)   # same passes


def test_tree_memory_holds_the_verify_tokens_of_the_tree():
    # llama-3.1-8b: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes per token; c + tokens + 1 per sequence
    B, c = 4, 1000
    s = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(), eagle3_tree(), B, 1, c, engine="ideal")
    assert float(s.memory.kv_bytes) == B * (c + TREE.tokens + 1) * 32 * 8 * 128 * 2 * 2


# --- al=X@tree ----------------------------------------------------------------------------------------------


def test_al_at_tree_parses_to_the_measured_length():
    acc = parse_acceptance("al=2.55@tree")
    assert isinstance(acc, TreeAcceptance) and acc.length == 2.55
    assert acc.tau(0) == 1.0 and acc.tau(4) == 2.55
    np.testing.assert_allclose(acc.tau(np.array([0, 1, 4])), [1.0, 2.55, 2.55])
    assert parse_acceptance(" AL=3@Tree ").length == 3.0


@pytest.mark.parametrize("text, needle", [
    ("al=0.5@tree", "must be >= 1"),
    ("al=2.5", "al=2.55@tree"),
])
def test_bad_tree_acceptance_is_one_clear_error(text, needle):
    with pytest.raises(DsdsimError, match=needle.replace(".", r"\.")):
        parse_acceptance(text)


def test_chain_and_tree_acceptance_do_not_stand_in_for_each_other():
    with pytest.raises(DsdsimError, match="drafts a chain"):
        acceptance_for("al=2.55@tree", None)
    for chain in ("al=2.79@3", "0.8", "0.8,0.7"):
        with pytest.raises(DsdsimError, match="describes a chain"):
            acceptance_for(chain, TREE)
    with pytest.raises(DsdsimError, match="no default acceptance for trees"):
        acceptance_for(None, TREE)
    with pytest.raises(DsdsimError, match="4 draft steps \\+ 1 bonus token = 5"):
        acceptance_for("al=5.5@tree", TREE)
    assert acceptance_for("al=5@tree", TREE).length == 5.0


# --- tree shapes and drafters -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["4,4", "4,4,16,1", "a,4,16", "4;4;16", "0,4,16", "4,0,16", "4,4,0", "4,1,5",
                                  "65,4,16", "4,4,-1", "４,4,16"])
def test_bad_tree_shapes_are_refused(text):
    with pytest.raises(DsdsimError, match="draft tree"):
        parse_draft_tree(text)


def test_tree_shape_bound_is_the_candidates_the_passes_produce():
    assert parse_draft_tree("4,4,52").candidates == 4 + 3 * 16
    with pytest.raises(DsdsimError, match="at most 52"):
        parse_draft_tree("4,4,53")
    assert parse_draft_tree("3,1,3") == DraftTree(steps=3, topk=1, tokens=3)


@pytest.mark.parametrize("kind", ["ngram", "medusa", "self-spec:512"])
def test_chain_only_drafters_refuse_a_tree(kind):
    with pytest.raises(DsdsimError, match="chain only"):
        with_tree(parse_drafter(kind), TREE)


# --- the CLI -------------------------------------------------------------------------------------------------


def test_cli_tree_table_and_exports(cli):
    base = ("predict", "--draft-tree", "4,4,16", "-a", "al=3.2@tree", "-b", "1,8,64,256")
    out = ok(cli(*base))
    assert "Draft tree 4,4,16 or plain decoding" in out and "tree" in out
    data = json.loads(ok(cli(*base, "-f", "json")))
    assert data["draft_tree"] == {"steps": 4, "topk": 4, "tokens": 16, "verify_tokens_per_sequence": 17,
                                  "k_in_rows": 4}
    assert data["acceptance"]["mean_acceptance_length"] == 3.2
    assert {row["draft"] for row in data["rows"]} <= {"tree", "plain"}
    assert all((row["k"] == 4) == (row["draft"] == "tree") for row in data["rows"])
    csv = ok(cli(*base, "-f", "csv"))
    assert "draft" in csv.splitlines()[0].split(",")
    sg = json.loads(ok(cli(*base, "-f", "sglang")))
    assert sg["server_args"] == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 4,
                                 "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 17}
    for fmt in ("vllm", "trtllm", "vllm-batch-stats"):
        assert "cannot carry a draft tree" in one_line_error(cli(*base, "-f", fmt))


@pytest.mark.parametrize("args, needle", [
    (("predict", "--draft-tree", "4,4"), "STEPS,TOPK,TOKENS"),
    (("predict", "--draft-tree", "4,4,16"), "al=2.55@tree"),
    (("predict", "--draft-tree", "4,4,16", "-a", "0.8"), "describes a chain"),
    (("predict", "-a", "al=2.5@tree"), "drafts a chain"),
    (("predict", "--draft-tree", "4,4,16", "-a", "al=3@tree", "--max-k", "3"), "replaces the K axis"),
    (("predict", "--draft-tree", "4,4,16", "-a", "al=3@tree", "-d", "ngram"), "chain only"),
    (("explain", "--draft-tree", "9,9"), "STEPS,TOPK,TOKENS"),
    (("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "50", "--draft-tree", "4,4,16"), "al=2.55@tree"),
])
def test_cli_tree_refusals_are_one_line(args, needle, cli):
    assert needle in one_line_error(cli(*args))


def test_cli_explain_and_plan_run_a_tree(cli):
    assert json.loads(ok(cli("explain", "--draft-tree", "4,4,16", "-b", "8", "-f", "json")))["k"] == 4
    out = ok(cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "50", "--draft-tree", "4,4,16",
            "-a", "al=3@tree", "-b", "1,8,64", "-f", "json"))
    row = json.loads(out)["candidates"][0]
    assert row["k_dsd"] in (0, 4)


# --- data-parallel attention ---------------------------------------------------------------------------------


def _deepseek_v3_whole_params() -> int:
    """Weights a rank holds whole under DP attention, from DeepSeek-V3's config.json by hand."""
    h = 7168
    attention = (h * 1536 + 1536                       # q_a_proj + q_a_layernorm
                 + 1536 * 128 * (128 + 64)             # q_b_proj
                 + h * (512 + 64) + 512                # kv_a_proj_with_mqa + kv_a_layernorm
                 + 512 * 128 * (128 + 128)             # kv_b_proj
                 + 128 * 128 * h)                      # o_proj
    norms = 2 * h
    dense_mlp = 3 * h * 18432
    moe_whole = h * 256 + 256 + 3 * h * 2048           # router (+ e_score_correction_bias) + 1 shared expert
    return 61 * (attention + norms) + 3 * dense_mlp + 58 * moe_whole


def test_dp_attention_memory_of_deepseek_v3_at_tp8_by_hand():
    B, c, k = 60, 4095, 0                              # ceil(60 / 8) = 8 sequences on the busiest rank
    tp = simulate_step("deepseek-v3", "h200-sxm", Deployment(tp=8, ep=8), None, B, k, c)
    dp = simulate_step("deepseek-v3", "h200-sxm", Deployment(tp=8, ep=8, dp_attention=True), None, B, k, c)
    whole = _deepseek_v3_whole_params()
    # fp8 weights: 1 byte each. TP splits everything 8 ways; DP keeps `whole` on every rank.
    assert dp.memory.weights_bytes - tp.memory.weights_bytes == pytest.approx(whole * (1 - 1 / 8), rel=1e-12)
    # bf16 KV: the MLA latent (512 + 64) per token per layer, replicated on every rank under TP
    per_seq = (c + 1) * 61 * (512 + 64) * 2
    assert float(tp.memory.kv_bytes) == B * per_seq
    assert float(dp.memory.kv_bytes) == math.ceil(B / 8) * per_seq


def test_dp_attention_lets_more_deepseek_sequences_fit():
    # at 8k context one sequence's latent cache is 8193 x 61 x 576 x 2 B = 0.58 GB on EVERY rank under TP
    b = np.array([32, 128, 256])
    tp = simulate_step("deepseek-v3", "h200-sxm", Deployment(tp=8, ep=8), None, b, 0, 8192)
    dp = simulate_step("deepseek-v3", "h200-sxm", Deployment(tp=8, ep=8, dp_attention=True), None, b, 0, 8192)
    assert tp.feasible.tolist() == [True, False, False] and dp.feasible.tolist() == [True, True, True]


@pytest.mark.parametrize("args, needle", [
    (("explain", "--dp-attention", "--tp", "2"), "MLA"),
    (("explain", "-m", "deepseek-v3", "-g", "h200-sxm", "--dp-attention"), "tp >= 2"),
    (("predict", "-m", "qwen3-30b-a3b", "-g", "h100-sxm", "--tp", "4", "--dp-attention"), "MLA"),
])
def test_dp_attention_refused_where_it_means_nothing(args, needle, cli):
    assert needle in one_line_error(cli(*args))


def test_cli_dp_attention_runs_on_deepseek(cli):
    d = json.loads(ok(cli("explain", "-m", "deepseek-v3", "-g", "h200-sxm", "--tp", "8", "--ep", "8",
                          "--dp-attention", "-d", "mtp", "-b", "64", "-f", "json")))
    assert d["deployment"]["dp_attention"] is True
    out = ok(cli("plan", "-m", "deepseek-v3", "-g", "h200-sxm:tp8:ep8,h200-sxm:tp1", "--dp-attention", "-d", "mtp",
            "-a", "al=2.4@2", "--itl-slo-ms", "50", "-b", "1,64,256", "-f", "json"))
    rows = json.loads(out)["candidates"]
    assert rows[0]["feasible"] and not rows[1]["feasible"] and "tp >= 2" in rows[1]["reason"]
