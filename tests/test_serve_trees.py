"""Draft trees in the serving simulation: a tree server verifies its whole tree every speculative step."""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.serve.scheduler import Scheduler, SchedulerConfig
from dsdsim.serve.simulate import simulate
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DraftTree, parse_drafter, with_tree
from dsdsim.specs.setup import resolve


@pytest.fixture(scope="module")
def tree_setup():
    drafter = with_tree(parse_drafter("eagle3"), DraftTree(steps=3, topk=2, tokens=8))
    return resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), drafter, engine="sglang")


def test_a_tree_server_budgets_and_caches_its_tree_tokens():
    """A decoding request of a tree server brings 1 + tokens to the step (not 1 + K) and reserves the tree's tokens
    of KV lookahead (SGLang allocates num_draft_tokens slots); K = 0 brings 1."""
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, block_size=16)
    sch = Scheduler(np.zeros(4), np.full(4, 10), np.full(4, 50), cfg, 1000, 3, draft_tokens=[0, 8, 8, 8])
    sch.release(0.0)
    plan = sch.schedule(0)                       # the four prompts: 40 tokens, no decode yet
    sch.commit(plan, 0)
    sch.finish(plan, 0.01, np.zeros(0, dtype=np.int64))
    plan = sch.schedule(3)
    assert plan.dec_ids.size == 4 and plan.k_cap == 3      # 4 x (1 + 8) = 36 tokens fit 64
    assert sch.kv_lookahead == 8
    tight = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=30, block_size=16)
    small = Scheduler(np.zeros(4), np.full(4, 5), np.full(4, 50), tight, 1000, 3, draft_tokens=[0, 8, 8, 8])
    small.release(0.0)
    p = small.schedule(0)
    small.commit(p, 0)
    small.finish(p, 0.01, np.zeros(0, dtype=np.int64))
    assert small.schedule(3).k_cap == 0                # 4 x 9 = 36 > 30: the tree does not fit, K = 0 does


def test_a_tree_run_accepts_its_measured_length(tree_setup):
    r = simulate(tree_setup, "closed:16", "none,fixed:3", requests=200, acceptance="al=2.6@tree")
    tree = r.policy("fixed:3")
    assert tree.mean_acceptance_length == pytest.approx(2.6, abs=0.08)
    assert set(tree.k_histogram) == {3}
    assert tree.tpot_ms.p50 < r.policy("none").tpot_ms.p50


@pytest.mark.parametrize("policies", ["dsd", "fixed:2", "oracle", "adaptive"])
def test_a_tree_runs_its_tree_or_nothing(tree_setup, policies):
    with pytest.raises(DsdsimError, match=r"draft tree \(tree 3,2,8\).*none and fixed:3"):
        simulate(tree_setup, "closed:4", policies, requests=8, acceptance="al=2.6@tree")


def test_the_command_simulates_a_tree(cli):
    code, out, err = cli("simulate", "--requests", "30", "--workload", "closed:8", "-e", "sglang", "--draft-tree",
                         "3,2,8", "-a", "al=2.6@tree", "--executor", "local")
    assert code == 0, err
    text = " ".join(out.split())
    assert "drafter eagle3 (tree 3,2,8)" in text and "fixed:3" in text
    assert "drafts chains" not in text                    # SGLang runs trees
    code, out, err = cli("simulate", "--requests", "20", "--workload", "closed:4", "-e", "trtllm", "--draft-tree",
                         "3,2,8", "-a", "al=2.6@tree", "--executor", "local")
    assert code == 0, err                                 # as predict says it: a chain engine's terms price the tree
    assert "draft tree: the trtllm >=0.20 spec drafts chains" in " ".join(out.split())
    code, out, err = cli("simulate", "--requests", "10", "-e", "sglang", "--draft-tree", "3,2,8")
    assert code != 0 and "needs the mean acceptance length measured with it" in err


def test_plan_simulates_a_tree_candidate(cli):
    code, out, err = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "-e", "sglang",
                         "--draft-tree", "3,2,8", "-a", "al=2.6@tree", "--simulate", "--workload", "poisson:8",
                         "--slo", "ttft=300,tpot=20", "--requests", "40", "--executor", "local", "-f", "json")
    assert code == 0, err
    import json

    cand = json.loads(out)["candidates"][0]
    assert {"max_qps_none", "max_qps_fixed:3"} <= set(cand)
