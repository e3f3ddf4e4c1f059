"""A Prediction in every output format: JSON contract, CSV, and the engine tables.

With a draft tree the K axis holds two choices, plain decoding (K = 0) and the tree (K = the tree's steps):
JSON carries ``draft_tree`` {steps, topk, tokens, verify_tokens_per_sequence} and a ``draft`` of "tree" or "plain"
per row, CSV the same ``draft`` column. SGLang takes a tree (``--speculative-num-steps``, ``-eagle-topk``,
``-num-draft-tokens``); vLLM's and TensorRT-LLM's dynamic-K tables are chains of K tokens and cannot carry one.
"""
from __future__ import annotations

import json
import math
from enum import Enum
from typing import TYPE_CHECKING

from dsdsim.errors import DsdsimError

if TYPE_CHECKING:
    from dsdsim.policy.predict import Prediction


class PredictFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    vllm = "vllm"
    vllm_batch_stats = "vllm-batch-stats"
    sglang = "sglang"
    trtllm = "trtllm"


def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def prediction_dict(p: "Prediction") -> dict:
    """The documented JSON contract (downstream tools and notebooks rely on these keys)."""
    from dsdsim.report import deployment_dict

    s = p.setup
    dep = s.deployment
    rows = [_row_dict(p, r) for r in p.rows]
    step_ms = [[_num(float(p.step_s[i, j] * 1e3)) if p.feasible[i, j] else None for j in range(len(p.batch_sizes))]
               for i in range(len(p.k_values))]
    out = {
        "model": s.model.name, "hardware": s.hardware.name,
        "engine": {"name": s.engine.name if s.engine is not None else None, "source": s.engine_source},
        "deployment": deployment_dict(s.model, dep),
        "drafter": s.drafter.label,
        "acceptance": _acceptance_dict(p),
        "draft_tree": None if p.tree is None else {
            "steps": p.tree.steps, "topk": p.tree.topk, "tokens": p.tree.tokens,
            "verify_tokens_per_sequence": p.tree.tokens + 1, "k_in_rows": p.tree.steps},
        "context": p.context, "fixed_k": p.fixed_k,
        "rows": rows,
        "table": {"ranges": [list(r) for r in p.ranges()], "distinct_k": list(p.table.k_set),
                  "mean_goodput_loss": p.table.mean_goodput_loss, "max_goodput_loss": p.table.max_goodput_loss},
        "grid": {"k_values": [int(k) for k in p.k_values], "batch_sizes": [int(b) for b in p.batch_sizes],
                 "tau": [float(t) for t in p.tau], "step_ms": step_ms},
        "notes": p.notes,
    }
    if p.robust is not None:
        out["robust"] = {"k_per_batch": [int(k) for k in p.robust.k_per_batch],
                         "band": list(p.robust.band),
                         "regret_low_edge_max": _num(float(_nanmax(p.robust.regret_low))),
                         "regret_high_edge_max": _num(float(_nanmax(p.robust.regret_high)))}
    return out


def _row_dict(p: "Prediction", r) -> dict:
    out = {k: _num(v) for k, v in r.__dict__.items()}
    if p.tree is not None:
        out["draft"] = None if r.k is None else ("tree" if r.k > 0 else "plain")
    return out


def _acceptance_dict(p: "Prediction") -> dict:
    k_max = int(p.k_values.max())
    a = p.acceptance
    if p.tree is not None:      # a TreeAcceptance: one measured length, no per-position chain alpha
        return {"alpha": [], "measured_positions": 0, "mean_acceptance_length": a.length, "source": a.source,
                "description": a.describe(k_max)}
    return {"alpha": [float(x) for x in a.alpha_at(k_max)], "measured_positions": len(a.alpha),
            "source": a.source, "description": a.describe(k_max)}


def _nanmax(a):
    import numpy as np

    a = np.asarray(a, dtype=float)
    return float(np.nanmax(a)) if np.isfinite(a).any() else float("nan")


def prediction_csv(p: "Prediction") -> str:
    from dsdsim.export.engines import table_csv

    return table_csv([_row_dict(p, r) for r in p.rows])


def render(p: "Prediction", fmt: PredictFormat) -> str:
    """Text for every non-table format."""
    from dsdsim.export import engines

    if fmt is PredictFormat.json:
        return json.dumps(prediction_dict(p), indent=2)
    if fmt is PredictFormat.csv:
        return prediction_csv(p)
    ranges = p.ranges()
    if not ranges:
        raise DsdsimError(f"no batch size fits in memory at context {p.context} ({p.setup.model.name} on "
                          f"{p.setup.deployment.tp} x {p.setup.hardware.name}): there is no K table to export")
    max_bs = ranges[-1][1]
    if p.tree is not None:
        return _tree_export(p, fmt, ranges)
    if fmt is PredictFormat.vllm:
        cfg = engines.vllm_speculative_config(ranges, method=p.setup.drafter.label, max_num_seqs=max_bs)
        return json.dumps(cfg, indent=2)
    if fmt is PredictFormat.sglang:
        return json.dumps(engines.sglang_adaptive_config(ranges), indent=2)
    if fmt is PredictFormat.trtllm:
        sched = engines.trtllm_draft_len_schedule(ranges)
        return json.dumps({"draft_len_schedule": {str(k): v for k, v in sched.items()}}, indent=2)
    if fmt is PredictFormat.vllm_batch_stats:
        # vLLM's DSD design scores K by (1 + sum a_i) / ITL with ITL measured by `vllm bench` between streamed
        # chunks: one chunk per step, so its "ITL" is the step time, not step time / tau.
        step_ms = [[float(p.step_s[i, j] * 1e3) if p.feasible[i, j] else float("nan")
                    for j in range(len(p.batch_sizes))] for i in range(len(p.k_values))]
        rates = [float(r) for r in p.acceptance.unconditional(int(p.k_values.max()))]
        data = engines.vllm_batch_stats([int(b) for b in p.batch_sizes], [int(k) for k in p.k_values], step_ms,
                                        rates, int(p.k_values.max()))
        return json.dumps(data, indent=2)
    raise ValueError(f"no text renderer for {fmt}")


def _tree_export(p: "Prediction", fmt: PredictFormat, ranges) -> str:
    """A draft tree for SGLang; one clear refusal for the chain-only formats."""
    from dsdsim.export import engines

    if fmt is not PredictFormat.sglang:
        raise DsdsimError(f"the {fmt.value} format is a table of chain lengths K and cannot carry a draft tree "
                          f"({p.tree.label}); export it as sglang, json or csv")
    return json.dumps(engines.sglang_tree_config(p.setup.drafter.kind.value, p.tree, ranges), indent=2)
