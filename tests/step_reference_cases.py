"""Setups and points whose step costs are pinned in tests/data/step_reference.json (see test_step_reference.py).

    PYTHONPATH=. python3 tests/step_reference_cases.py    # rewrite the reference (only when a change is meant)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DraftTree, parse_drafter, with_tree

REFERENCE = Path(__file__).parent / "data" / "step_reference.json"

# (label, model, hardware, deployment, drafter, engine)
CASES = [
    ("dense-eagle3-vllm", "llama-3.1-8b", "h100-sxm", Deployment(), "eagle3", "vllm"),
    ("dense-eagle3-kernels", "llama-3.1-8b", "h100-sxm", Deployment(), "eagle3", None),
    ("dense-tp2-eagle-sglang", "llama-3.1-70b", "h200-sxm", Deployment(tp=2), "eagle", "sglang"),
    ("dense-eager-ideal", "qwen3-8b", "a100-sxm-80gb", Deployment(cuda_graphs=False), "eagle3", "ideal"),
    ("moe-ep-eagle3-vllm", "qwen3-30b-a3b", "h100-sxm", Deployment(tp=2, ep=2), "eagle3", "vllm"),
    ("moe-mixtral-medusa", "mixtral-8x7b", "h100-sxm", Deployment(tp=2, expert_overlap=0.3), "medusa", "vllm"),
    ("mla-dp-mtp-sglang", "deepseek-v3", "h200-sxm", Deployment(tp=8, ep=8, dp_attention=True), "mtp", "sglang"),
    ("mla-mtp-vllm", "deepseek-v3", "h200-sxm", Deployment(tp=8), "mtp", "vllm"),
    ("dense-medusa-ideal", "llama-3.1-8b", "h100-sxm", Deployment(), "medusa", "ideal"),
    ("dense-ngram-vllm", "llama-3.1-8b", "h100-sxm", Deployment(), "ngram", "vllm"),
    ("dense-ngram-kernels", "llama-3.1-8b", "l40s", Deployment(), "ngram", None),
    ("draft-model-vllm", "llama-3.1-70b", "h100-sxm", Deployment(tp=4), "draft-model:llama-3.2-1b", "vllm"),
    ("self-spec-sglang", "llama-3.1-8b", "h100-sxm", Deployment(), "self-spec:512", "sglang"),
    ("tree-eagle3-vllm", "llama-3.1-8b", "h100-sxm", Deployment(),
     with_tree(parse_drafter("eagle3"), DraftTree(steps=4, topk=4, tokens=16)), "vllm"),
    ("no-drafter-trtllm", "gemma-3-27b", "h100-sxm", Deployment(), None, "trtllm"),
    ("multinode-moe", "deepseek-v3", "h100-sxm", Deployment(tp=16, ep=16), "mtp", "vllm"),
]

BATCHES = [1, 3, 8, 64, 200, 1024]
CONTEXTS = [0, 1000, 8192]


def k_values(drafter) -> list[int]:
    if drafter is None:
        return [0]
    d = parse_drafter(drafter) if isinstance(drafter, str) else drafter
    return [k for k in (0, 1, 3, 5) if k <= d.max_k]


def setup_of(case):
    from dsdsim.specs.setup import resolve

    _, model, hw, dep, drafter, engine = case
    return resolve(model, hw, dep, drafter, engine)


def point_values(step, with_ops: bool) -> dict:
    """Figures of one scalar simulate_step result (with each operator's time when ``with_ops``)."""
    out = {"step": float(step.step_time_s), "verify": float(step.verify.time_s), "draft": float(step.draft.time_s),
           "verify_flops": float(step.verify.flops), "verify_bytes": float(step.verify.bytes),
           "draft_bytes": float(step.draft.bytes), "feasible": bool(step.feasible)}
    if with_ops:
        out["ops"] = [float(np.asarray(t.time_s)) for t in step.verify.op_times + step.draft.op_times]
    if step.experts_touched is not None:
        out["touched"] = float(step.experts_touched)
    return out


def compute() -> dict:
    from dsdsim.cost.step import simulate_step, step_time_grid

    ref = {}
    for case in CASES:
        s = setup_of(case)
        ks = k_values(case[4])
        points = {}
        for b in BATCHES:
            for k in ks:
                for c in CONTEXTS:
                    step = simulate_step(None, None, setup=s, batch=b, k=k, context=c)
                    points[f"{b},{k},{c}"] = point_values(step, with_ops=b in (8, 200) and c == 1000)
        t, ok = step_time_grid(None, None, batch_sizes=BATCHES, k_values=ks, contexts=CONTEXTS, setup=s)
        ref[case[0]] = {"points": points, "grid": np.asarray(t).tolist(), "grid_ok": np.asarray(ok).tolist()}
    return ref


if __name__ == "__main__":
    REFERENCE.write_text(json.dumps(compute(), sort_keys=True))
    print(f"wrote {REFERENCE}")
