"""Weight and memory figures of a set of deployments, as plain data (shared by the test and its golden file)."""
from __future__ import annotations

import numpy as np

from dsdsim.cost.drafts import drafter_weight_params, drafter_whole_params
from dsdsim.cost.memory import weight_bytes_per_gpu, whole_params
from dsdsim.cost.step import simulate_step
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.setup import resolve

# (model, hardware, deployment, drafter, B, K, context)
CASES = [
    ("llama-3.1-8b", "h100-sxm", {}, "eagle3", 8, 3, 2048),
    ("llama-3.1-70b", "h100-sxm", {"tp": 8}, "eagle", 16, 2, 4096),
    ("qwen3-30b-a3b", "h200-sxm", {"tp": 2, "ep": 2}, "eagle3", 32, 3, 8192),
    ("deepseek-v3", "h200-sxm", {"tp": 8, "ep": 8, "dp_attention": True}, "mtp", 64, 2, 4096),
    ("deepseek-v3", "h200-sxm", {"tp": 8}, "mtp", 8, 1, 1024),
    ("gpt-oss-120b", "h200-sxm", {}, "eagle3", 4, 3, 1024),
    ("qwen2-57b-a14b", "h200-sxm", {"tp": 4}, "medusa", 8, 3, 1024),
    ("qwen3-32b", "h100-sxm", {"tp": 2}, "draft-model:qwen3-0.6b", 8, 3, 1024),
    ("gemma-3-27b", "h100-sxm", {"tp": 2, "dtype": "fp8"}, "eagle", 8, 2, 1024),
    ("llama-4-scout", "h200-sxm", {"tp": 4, "ep": 4, "expert_dtype": "fp8"}, "eagle3", 8, 2, 1024),
]


def _f(x) -> float:
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def snapshot() -> dict:
    out = {}
    for model, hw, dep, drafter, b, k, c in CASES:
        s = resolve(model, hw, Deployment(**dep), drafter)
        step = simulate_step(None, None, batch=b, k=k, context=c, setup=s)
        m, d = step.model, step.deployment
        mem = step.memory
        key = f"{model}|{hw}|{dep}|{drafter}|{b},{k},{c}"
        out[key] = {
            "weight_bytes_per_gpu": weight_bytes_per_gpu(m, d),
            "whole_params": whole_params(m, d),
            "drafter_weight_params": drafter_weight_params(m, s.drafter, s.draft_model),
            "drafter_whole_params": drafter_whole_params(m, step.drafter),
            "memory": [mem.weights_bytes, _f(mem.kv_bytes), _f(mem.activation_bytes), _f(mem.draft_bytes)],
            "verify_weight_bytes": {t.op.name: _f(t.op.weight_bytes) for t in step.verify.op_times},
            "draft_weight_bytes": {t.op.name: _f(t.op.weight_bytes) for t in step.draft.op_times},
            "flops": [_f(step.verify.flops), _f(step.draft.flops)],
        }
    return out
