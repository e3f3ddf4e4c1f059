"""K tables in the formats inference engines read (docs/reference/engines.md §1.2, §3, §4, §6).

dsdsim's table is a list of ranges ``(start_bs, end_bs, K)``: inclusive, contiguous, sorted, starting at batch
size 1. K = 0 means plain decoding (no drafts).

How each engine reads a table, and so how each export is checked:

* vLLM ``num_speculative_tokens_per_batch_size`` — list of ``[start, end, K]``; a step function: batch sizes in
  a gap or past the last range inherit the previous K; every K is clamped to ``num_speculative_tokens``
  (``vllm/v1/spec_decode/dynamic/utils.py``, mirrored by ``validate_vllm_schedule`` / ``build_vllm_lookup``).
  The key is the number of requests scheduled in the step, prefills included. DSD is disabled under DP > 1.
* SGLang ``--speculative-adaptive-config`` — keys are batch-size LOWER bounds (integer strings), each holding
  ``{"candidate_steps": [...]}``; a batch uses the largest key ≤ its size after padding to a CUDA-graph batch
  size (``python/sglang/srt/speculative/adaptive_step_router.py``).
* TensorRT-LLM ``draft_len_schedule`` — keys are batch-size UPPER bounds: a key covers batch sizes above the
  previous key up to itself; batch sizes above the largest key get 0 (``get_draft_len_for_batch_size``, PR #10860).
"""
from __future__ import annotations

import csv
import io
import math
from typing import Iterable, Mapping, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, whole_number
from dsdsim.policy.table import Ranges, validate_ranges, validate_vllm_schedule
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.drafters import REGISTRY, is_known


# ---------------------------------------------------------------------------------------------- vLLM

# vLLM method names passed through unchanged (SpeculativeMethod literal, docs/reference/engines.md §2); dsdsim's own
# drafter kinds name their vLLM method in their registry entry (dsdsim.specs.drafters).
_VLLM_NATIVE = {"ngram_gpu", "mlp_speculator", "dspark", "deepseek_mtp", "qwen3_next_mtp"}


def vllm_speculative_config(ranges: Iterable[Sequence[int]], method: str = "eagle3",
                            max_num_seqs: int | None = None, model: str | None = None) -> dict:
    """``--speculative-config`` JSON for vLLM dynamic speculative decoding (docs v0.25.0, DSD page).

    ``{"method", ["model",] "num_speculative_tokens": max K (≥ 1), "num_speculative_tokens_per_batch_size":
    [[s, e, K], ...]}``. ``num_speculative_tokens`` is the startup maximum (buffers, CUDA graphs); the table's K
    are ≤ it. With ``max_num_seqs`` the table is cut or extended to end exactly there. ``method`` is a dsdsim
    drafter label (eagle3, eagle, mtp, medusa, ngram, draft-model:MODEL) or a vLLM method name; ``model`` is the
    draft weights (required by vLLM for eagle/eagle3/medusa/MTP heads that are not in the target checkpoint).
    """
    rows = validate_ranges(ranges)
    if max_num_seqs is not None:
        rows = _fit_to_max(rows, whole_number(max_num_seqs, "max_num_seqs"))
    vllm_method, draft_model, extra = _vllm_method(method)
    config: dict = {"method": vllm_method}
    if draft_model or model:
        config["model"] = model or draft_model
    config.update(extra)
    config["num_speculative_tokens"] = max(1, max(k for _, _, k in rows))
    config["num_speculative_tokens_per_batch_size"] = [[s, e, k] for s, e, k in rows]
    return config


def _vllm_method(method) -> tuple[str, str | None, dict]:
    """(vLLM method, draft model, extra config keys) for a drafter (spec or label) or a vLLM method name; the kind's
    refusal where vLLM cannot run its table."""
    from dsdsim.specs.drafter import parse_drafter

    label = str(getattr(method, "label", method)).strip()
    head = label.partition(":")[0].strip().lower()
    if head in _VLLM_NATIVE and not isinstance(method, DrafterSpec):
        return head, None, {}
    if not isinstance(method, DrafterSpec) and not is_known(head.replace("_", "-")):
        known = ", ".join([i.form for i in REGISTRY.values() if i.on("vllm").method] + sorted(_VLLM_NATIVE))
        raise DsdsimError(f"no vLLM method for drafter {label!r}; use one of: {known}")
    spec = method if isinstance(method, DrafterSpec) else parse_drafter(label.replace("draft_model", "draft-model", 1))
    run = spec.info.on("vllm")
    if run.refusal:
        raise DsdsimError(run.refusal)
    return run.method, (spec.model if spec.info.loads_model else None), dict(run.extra)


def engine_refusal(drafter, engine: str) -> str | None:
    """Why ``engine`` (vllm, sglang, trtllm) cannot run a K table for ``drafter`` (a DrafterSpec), or None."""
    return None if drafter is None else drafter.info.on(engine).refusal


def _fit_to_max(rows: Ranges, max_bs: int) -> Ranges:
    """Drop ranges past ``max_bs`` and make the last range end exactly at it."""
    if max_bs < 1:
        raise DsdsimError(f"max_num_seqs must be ≥ 1, got {max_bs}")
    kept = [r for r in rows if r[0] <= max_bs]
    start, _, k = kept[-1]
    return kept[:-1] + [(start, max_bs, k)]


def build_vllm_lookup(schedule, max_batch_size: int, num_speculative_tokens: int) -> list[int]:
    """Mirror of vLLM ``build_dynamic_sd_schedule_lookup``: K for batch sizes 0..max_batch_size.

    Dense list of length max_batch_size + 1, index 0 unused (0). A step function: batch sizes in a gap take the
    previous range's K, sizes past the last range take the last K, ranges past max_batch_size are ignored; every
    K is clamped to ``num_speculative_tokens``.
    """
    max_bs = whole_number(max_batch_size, "max batch size")
    cap = whole_number(num_speculative_tokens, "num_speculative_tokens")
    if max_bs < 1 or cap < 1:
        raise DsdsimError(f"max batch size and num_speculative_tokens must be ≥ 1, got {max_bs} and {cap}")
    rows = validate_vllm_schedule(schedule)
    lookup = [0] * (max_bs + 1)
    starts = [s for s, _, _ in rows]
    for bs in range(1, max_bs + 1):
        idx = int(np.searchsorted(starts, bs, side="right")) - 1      # last range starting at or before bs
        lookup[bs] = min(cap, rows[idx][2])
    return lookup


def vllm_batch_stats(batch_sizes: Sequence[int], k_values: Sequence[int], itl_ms_grid,
                     acceptance_rate_per_pos: Sequence[float], max_num_speculative_tokens: int,
                     max_num_seqs: int | None = None) -> dict:
    """``dynamic_speculative_config.json`` of the vLLM DSD PR #32374 design (``DynamicSpeculativeConfig``).

    ``{"is_online": false, "max_num_speculative_tokens": n, "acceptance_rate_per_pos": [p_1..p_n],
    "batch_stats": {"<bs>": {"<k>": itl_ms}}}``; k = 0 is plain decoding. ``itl_ms_grid`` has shape
    (len(k_values), len(batch_sizes)) like every (K, B) grid in dsdsim, in milliseconds. "ITL" here is what
    ``vllm bench serve`` reports under speculation: the time between streamed chunks, one chunk per step, i.e.
    the STEP time T(B, K), not T / τ. The manager scores k by (1 + Σ_{i<k} a_i) / ITL(bs, k), which is tokens
    per second only for step time, and the PR's test data rises with k (bs 64: 8.53 ms at k = 0, 17.54 at
    k = 5). Pass ``step_s * 1e3``. NaN / inf (infeasible) entries are
    omitted, and a batch size without k = 0 and k = 1 is dropped. The PR's manager interpolates ITL linearly and
    needs batch size 1 and the server's max batch size present, k = 0 and 1 for every batch size, and every
    per-position rate in (0, 1); this function enforces those. The rates are UNCONDITIONAL (accepted_per_pos /
    num_drafts, ``Acceptance.unconditional(n)``), so they must be non-increasing.
    """
    bs = [whole_number(b, "batch size") for b in batch_sizes]
    ks = [whole_number(k, "k") for k in k_values]
    grid = np.asarray(itl_ms_grid, dtype=float)
    if grid.shape != (len(ks), len(bs)):
        raise DsdsimError(f"ITL grid has shape {grid.shape}; expected (k values, batch sizes) = ({len(ks)}, {len(bs)})")
    if len(set(bs)) != len(bs) or len(set(ks)) != len(ks) or min(bs, default=0) < 1:
        raise DsdsimError("batch sizes must be distinct and ≥ 1, and k values distinct")
    if 0 not in ks or 1 not in ks:
        raise DsdsimError("the vLLM DSD manager needs k = 0 (plain decoding) and k = 1 for every batch size; add them")
    n = whole_number(max_num_speculative_tokens, "max_num_speculative_tokens")
    if n < 1 or max(ks) > n:
        raise DsdsimError(f"max_num_speculative_tokens={n} must be ≥ 1 and ≥ every k (largest k is {max(ks)})")
    rates = _checked_rates(acceptance_rate_per_pos, n)
    stats: dict[str, dict[str, float]] = {}
    for j, b in sorted(enumerate(bs), key=lambda t: t[1]):
        row = {str(k): float(grid[i, j]) for i, k in sorted(enumerate(ks), key=lambda t: t[1])
               if math.isfinite(grid[i, j]) and grid[i, j] > 0}
        if "0" in row and "1" in row:
            stats[str(b)] = row
    if "1" not in stats:
        raise DsdsimError("batch size 1 has no finite ITL at k = 0 and k = 1; the vLLM DSD manager needs batch size 1")
    if max_num_seqs is not None and str(whole_number(max_num_seqs, "max_num_seqs")) not in stats:
        raise DsdsimError(f"max_num_seqs={max_num_seqs} has no finite ITL at k = 0 and 1 (or was not profiled); the "
                          "manager needs the server's max batch size: lower max_num_seqs to a feasible batch size")
    return {"is_online": False, "max_num_speculative_tokens": n, "acceptance_rate_per_pos": rates,
            "batch_stats": stats}


def _checked_rates(rates: Sequence[float], n: int) -> list[float]:
    values = [float(r) for r in rates]
    if len(values) < n:
        raise DsdsimError(f"acceptance_rate_per_pos has {len(values)} positions; the manager needs at least "
                          f"max_num_speculative_tokens={n} (use Acceptance.unconditional({n}))")
    for i, r in enumerate(values, start=1):
        if not (0.0 < r < 1.0):
            raise DsdsimError(f"acceptance_rate_per_pos[{i - 1}]={r:g} must lie strictly in (0, 1) for the vLLM "
                              "DSD manager; clip it (e.g. to 1e-3 or 0.999)")
    for i in range(1, len(values)):
        if values[i] > values[i - 1]:
            raise DsdsimError(f"acceptance_rate_per_pos must be non-increasing (unconditional rates); position {i} "
                              f"has {values[i]:g} > {values[i - 1]:g}; pass Acceptance.unconditional(n), not α")
    return values


# ---------------------------------------------------------------------------------------------- SGLang


def sglang_adaptive_config(ranges: Iterable[Sequence[int]]) -> dict[str, dict[str, list[int]]]:
    """``--speculative-adaptive-config`` JSON for SGLang: ``{"<start_bs>": {"candidate_steps": [K]}, ...}``.

    Keys are each range's lower bound; one candidate per range pins the step count there (K = 0 switches
    speculation off, newer SGLang). Launch with ``--speculative-adaptive``, ``--speculative-eagle-topk 1``,
    ``--speculative-num-steps`` = max K and ``--speculative-num-draft-tokens`` = max K + 1 (buffers are sized by
    the launch). SGLang pads a batch up to the next CUDA-graph batch size before looking up the key, so a batch
    just below a range start may already use that range's K. EAGLE / EAGLE3 only.
    """
    rows = validate_ranges(ranges)
    return {str(start): {"candidate_steps": [k]} for start, _, k in rows}


def sglang_tree_config(drafter_kind: str, tree, ranges: Iterable[Sequence[int]]) -> dict:
    """SGLang launch arguments for a draft tree, and the batch sizes where the tree pays.

    ``server_args``: ``speculative_algorithm``, ``speculative_num_steps`` = steps, ``speculative_eagle_topk`` =
    topk, ``speculative_num_draft_tokens`` = tokens + 1 (SGLang counts the root, the last accepted token). MTP
    modules run as EAGLE in SGLang; a draft model as STANDALONE. SGLang cannot switch a tree off by batch size
    (``--speculative-adaptive`` needs topk 1): where the table says plain decoding is faster, the output says so
    and gives the largest batch size at which the tree still pays, to cap the server's running requests there or
    to serve those loads without speculation.
    """
    rows = validate_ranges(ranges)
    tree_on = [[s, e] for s, e, k in rows if k > 0]
    plain = [[s, e] for s, e, k in rows if k == 0]
    known = {info.name: info.on("sglang").method for info in REGISTRY.values()}
    args = {"speculative_algorithm": known.get(drafter_kind) or drafter_kind.upper(),
            "speculative_num_steps": tree.steps, "speculative_eagle_topk": tree.topk,
            "speculative_num_draft_tokens": tree.tokens + 1}
    if not tree_on:
        note = "the tree never beats plain decoding at these batch sizes: serve without speculative decoding"
    elif not plain:
        note = "the tree beats plain decoding at every evaluated batch size"
    else:
        note = ("SGLang cannot switch a tree off by batch size (--speculative-adaptive needs topk 1); plain decoding "
                f"is faster at batch sizes {plain}: cap --max-running-requests at {tree_on[-1][1]} or serve those "
                "loads without speculation")
    return {"server_args": args, "tree_batch_sizes": tree_on, "plain_batch_sizes": plain, "note": note}


# ---------------------------------------------------------------------------------------------- TensorRT-LLM


def trtllm_draft_len_schedule(ranges: Iterable[Sequence[int]]) -> dict[int, int]:
    """``draft_len_schedule`` for TensorRT-LLM: ``{upper_bs: draft_len}``.

    A key covers batch sizes above the previous key up to itself; sizes above the largest key get 0. So trailing
    K = 0 ranges are dropped, and a K = 0 range in the middle is kept as ``{end: 0}``. TensorRT-LLM requires the
    smallest key's draft length to equal ``max_draft_len`` and none larger (``validate_draft_len_schedule_and_sort``
    in ``llm_args.py``): a table whose largest K is not at batch size 1 cannot be expressed and raises. Set
    ``max_draft_len`` to the value at the smallest key. Older TensorRT-LLM releases read keys as lower bounds.
    """
    rows = validate_ranges(ranges)
    while rows and rows[-1][2] == 0:
        rows = rows[:-1]
    if not rows:
        raise DsdsimError("the table never speculates (K = 0 everywhere); serve without speculative decoding")
    k_max = max(k for _, _, k in rows)
    if rows[0][2] != k_max:
        raise DsdsimError(f"TensorRT-LLM needs the largest draft length at the smallest batch sizes "
                          f"(schedule[first key] == max_draft_len) but this table has K={rows[0][2]} at batch 1 "
                          f"and K={k_max} later; cap K at {rows[0][2]} (predict --max-k {rows[0][2]}) or export for "
                          "vLLM")
    return {end: k for _, end, k in rows}


# ---------------------------------------------------------------------------------------------- CSV


def table_csv(rows: Sequence[Mapping[str, object]]) -> str:
    """Rows of dicts as CSV text; columns in first-seen order, floats to 6 significant digits, None → empty."""
    if not rows:
        raise DsdsimError("no rows to write: the table is empty")
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(str(key))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return out.getvalue()


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return format(float(value), ".6g")
    return str(value)


# ---------------------------------------------------------------------------------------------- helpers
