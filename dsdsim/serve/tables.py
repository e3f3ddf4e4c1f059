"""K tables read back from the files engines take, as dsdsim's ranges ``(start, end, K)`` contiguous from batch 1.

What each engine's file means (``dsdsim.export.engines`` writes them; docs/reference/engines.md §1.2, §3, §4):

* vLLM ``--speculative-config``: ``num_speculative_tokens_per_batch_size`` ``[[start, end, K], ...]``, checked as vLLM
  checks it (``validate_vllm_schedule``) and read as vLLM's step function: a batch size in a gap takes the previous
  range's K, one past the last range the last K, every K clamped to ``num_speculative_tokens`` when the file gives it.
  The file may be that JSON/YAML object, the bare list, or a config holding it under ``speculative_config``.
* SGLang ``--speculative-adaptive-config``: ``{"<lower bound>": {"candidate_steps": [K]}}`` (or ``{"<lower bound>":
  [K]}``); a key covers batch sizes from itself to the next key. SGLang pads the batch to a CUDA-graph size before the
  lookup; the simulator looks up the unpadded count. A key with several candidates is the adaptive controller's set of
  tiers, not a table, and is refused.
* TensorRT-LLM ``draft_len_schedule``: ``{<upper bound>: draft_len}``; a key covers sizes above the previous key up to
  itself and sizes above the largest key get 0. Bare or under ``draft_len_schedule`` / ``speculative_config``.

``read_table_file`` returns ranges whose last range's K holds for every larger batch (vLLM's reading); for
TensorRT-LLM the ranges end with ``(largest key + 1, largest key + 1, 0)`` so that larger batches get 0.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from dsdsim.errors import DsdsimError, kind_of, whole_number
from dsdsim.policy.table import Ranges, validate_vllm_schedule
from dsdsim.specs.io import read_text

_VLLM_KEY = "num_speculative_tokens_per_batch_size"
_NESTS = ("speculative_config", "speculative-config", "speculative_config_json")


def read_table_file(path) -> Ranges:
    """The K table in a vLLM, SGLang or TensorRT-LLM file (JSON or YAML), as contiguous ranges from batch size 1."""
    return _table(_load(path), Path(str(path)).name)


def table_lookup(ranges: Ranges, num_requests: int) -> int:
    """K of the range holding ``num_requests``; the last range's K past its end (vLLM's step function)."""
    for start, end, k in ranges:
        if start <= num_requests <= end:
            return k
    return ranges[-1][2] if num_requests > ranges[-1][1] else ranges[0][2]


def _load(path):
    p, text = read_text(path, "table file")
    if not text.strip():
        raise DsdsimError(f"table file {p.name} is empty; give a vLLM speculative_config, an SGLang adaptive config or "
                          "a TensorRT-LLM draft_len_schedule")
    if p.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"table file {p.name} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise DsdsimError(f"table file {p.name} is not valid YAML or JSON{where}") from None


def _table(obj, name: str) -> Ranges:
    if isinstance(obj, list):
        return _vllm(obj, None, name)
    if not isinstance(obj, dict):
        raise DsdsimError(f"table file {name} holds {kind_of(obj)}; give a vLLM speculative_config (with "
                          f"{_VLLM_KEY}), an SGLang adaptive config or a TensorRT-LLM draft_len_schedule")
    for nest in _NESTS:
        if nest in obj:
            inner = obj[nest]
            if isinstance(inner, str):
                try:
                    inner = json.loads(inner)
                except json.JSONDecodeError:
                    raise DsdsimError(f"table file {name}: {nest} is text that is not JSON") from None
            return _table(inner, name)
    if _VLLM_KEY in obj:
        cap = obj.get("num_speculative_tokens")
        if cap is not None:
            cap = whole_number(cap, f"table file {name}: num_speculative_tokens")
        return _vllm(obj[_VLLM_KEY], cap, name)
    if "draft_len_schedule" in obj:
        return _trtllm(obj["draft_len_schedule"], name)
    if not obj:
        raise DsdsimError(f"table file {name} holds an empty mapping; it has no K table")
    values = list(obj.values())
    if all(isinstance(v, (dict, list)) for v in values):
        return _sglang(obj, name)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _trtllm(obj, name)
    raise DsdsimError(f"table file {name}: cannot tell the format; give {_VLLM_KEY} (vLLM), keys with "
                      "candidate_steps (SGLang) or draft_len_schedule (TensorRT-LLM)")


def _vllm(schedule, cap, name: str) -> Ranges:
    try:
        rows = validate_vllm_schedule(schedule)
    except DsdsimError as exc:
        raise DsdsimError(f"table file {name}: {exc}") from None
    out: Ranges = []
    for i, (start, end, k) in enumerate(rows):
        end = rows[i + 1][0] - 1 if i + 1 < len(rows) else end          # a gap takes the previous K
        k = min(k, cap) if cap is not None else k
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], end, k)
        else:
            out.append((start, end, k))
    return out


def _int_key(key, name: str, what: str) -> int:
    try:
        v = int(str(key).strip())
    except ValueError:
        raise DsdsimError(f"table file {name}: key {key!r} is not a batch size; {what} keys are whole "
                          "numbers") from None
    if v < 1:
        raise DsdsimError(f"table file {name}: key {v} is not a batch size >= 1")
    return v


def _sglang(obj: dict, name: str) -> Ranges:
    rows = []
    for key, value in obj.items():
        start = _int_key(key, name, "SGLang")
        steps = value.get("candidate_steps") if isinstance(value, dict) else value
        if not isinstance(steps, list) or not steps:
            raise DsdsimError(f"table file {name}: key {key!r} must hold candidate_steps, a list of step counts")
        if len(steps) != 1:
            raise DsdsimError(f"table file {name}: key {key!r} lists {len(steps)} candidate steps {steps}; a K table "
                              "has one K per batch range (several are the adaptive controller's tiers: use adaptive)")
        k = whole_number(steps[0], f"table file {name}: key {key!r} candidate step")
        rows.append((start, k))
    rows.sort()
    if rows[0][0] != 1:
        raise DsdsimError(f"table file {name}: the smallest SGLang key is {rows[0][0]}; it must be 1 (keys are lower "
                          "bounds)")
    for (a, _), (b, _) in zip(rows, rows[1:]):
        if a == b:
            raise DsdsimError(f"table file {name}: batch size {a} is keyed twice")
    return _merge([(s, rows[i + 1][0] - 1 if i + 1 < len(rows) else s, k) for i, (s, k) in enumerate(rows)])


def _trtllm(obj, name: str) -> Ranges:
    if not isinstance(obj, dict) or not obj:
        raise DsdsimError(f"table file {name}: draft_len_schedule must be a non-empty mapping of batch-size upper "
                          "bounds to draft lengths")
    rows = sorted((_int_key(k, name, "TensorRT-LLM"), whole_number(v, f"table file {name}: draft length of key {k!r}"))
                  for k, v in obj.items())
    for (a, _), (b, _) in zip(rows, rows[1:]):
        if a == b:
            raise DsdsimError(f"table file {name}: batch size {a} is keyed twice")
    out, start = [], 1
    for upper, k in rows:
        out.append((start, upper, k))
        start = upper + 1
    out.append((start, start, 0))                  # sizes above the largest key get 0
    return _merge(out)


def _merge(rows) -> Ranges:
    out: Ranges = []
    for start, end, k in rows:
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], end, k)
        else:
            out.append((start, end, k))
    return out
