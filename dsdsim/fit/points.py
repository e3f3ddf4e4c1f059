"""A user's measured (batch, K) points, read and checked: what ``dsdsim calibrate --measurements`` fits.

Input points come from a CSV ``batch_size,k,context,itl_ms,acceptance_length``, from result JSON files of
``vllm bench serve --save-result``, or from SGLang ``bench_serving`` JSON lines. ``itl_ms`` is the time per
output token of one sequence (vLLM's and SGLang's mean TPOT), so a step takes itl_ms x acceptance_length; a
benchmark result's context is its mean prompt plus half its mean output. The fit is ``dsdsim.fit.shape``.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, finite_number, whole_number
from dsdsim.records import frozen
from dsdsim.units import format_percent

CSV_HEADER = ("batch_size", "k", "context", "itl_ms", "acceptance_length")
CSV_OPTIONAL = ("input_len", "output_len")   # a serving benchmark's mean prompt and output (its prefills priced)
MIN_POINTS = 3
AGREE = 0.2          # rows of one (batch, K) more than 20% apart contradict one another


@frozen
class MeasuredPoint:
    """One measured (batch, K) point. ``input_len`` / ``output_len``: the mean prompt and output of a benchmark run's
    requests (a serving benchmark's TPOT includes the steps that also ran other requests' prefills:
    ``dsdsim.fit.shape`` prices them); None: decode steps alone (a profiler's step time)."""

    batch: int
    k: int
    context: int
    itl_ms: float              # per output token of one sequence
    acceptance_length: float   # tokens per step (1 for k = 0)
    input_len: Optional[float] = None
    output_len: Optional[float] = None

    @property
    def step_ms(self) -> float:
        return self.itl_ms * self.acceptance_length


# --- reading ---------------------------------------------------------------------------------------------------


def _read_csv(path: Path, context: int) -> list[tuple[MeasuredPoint, str]]:
    text = path.read_text(encoding="utf-8-sig")
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise DsdsimError(f"{path}: empty file; expected the header {','.join(CSV_HEADER)}")
    head = [h.strip() for h in rows[0]]
    required = [h for h in CSV_HEADER if h != "context"]
    missing = [h for h in required if h not in head]
    if missing:
        raise DsdsimError(f"{path}: header lacks {', '.join(missing)}; expected {','.join(CSV_HEADER)} "
                          "(context optional)")
    out, seen = [], set()
    for n, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        where = f"{path.name} line {n}"
        if len(row) != len(head):
            raise DsdsimError(f"{where}: {len(row)} fields, the header has {len(head)}")
        rec = dict(zip(head, (c.strip() for c in row)))
        key = tuple(rec.get(h, "") for h in CSV_HEADER + CSV_OPTIONAL)
        if key in seen:
            raise DsdsimError(f"{where}: duplicate row (the same line appears twice); remove one")
        seen.add(key)
        ctx = whole_number(rec["context"], f"{where}: context") if rec.get("context") else context
        lengths = [finite_number(rec[h], f"{where}: {h}") if rec.get(h) else None for h in CSV_OPTIONAL]
        if (lengths[0] is None) != (lengths[1] is None):
            raise DsdsimError(f"{where}: give both input_len and output_len (a benchmark's mean prompt and output), "
                              "or neither (decode steps alone)")
        out.append((MeasuredPoint(whole_number(rec["batch_size"], f"{where}: batch_size"),
                                  whole_number(rec["k"], f"{where}: k"), ctx,
                                  finite_number(rec["itl_ms"], f"{where}: itl_ms"),
                                  finite_number(rec["acceptance_length"], f"{where}: acceptance_length"),
                                  *lengths), where))
    return out


def _k_of(rec: dict, where: str, has_acceptance: bool, name_k: Optional[int] = None) -> int:
    """K of a benchmark result: num_speculative_tokens (vllm bench serve --metadata num_speculative_tokens=K),
    speculative_num_steps (SGLang), or a speculative_config; else the file name's ``-kK`` (SGLang bench_serving
    records no K: ``dsdsim calibrate --plan`` names its files so); none and no acceptance reported: plain decoding."""
    for key in ("num_speculative_tokens", "speculative_num_steps"):
        if key in rec:
            return whole_number(rec[key], f"{where}: {key}")
    cfg = rec.get("speculative_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            cfg = None
    if isinstance(cfg, dict) and "num_speculative_tokens" in cfg:
        return whole_number(cfg["num_speculative_tokens"], f"{where}: speculative_config.num_speculative_tokens")
    if name_k is not None:
        return name_k
    if has_acceptance:
        raise DsdsimError(f"{where}: reports speculative acceptance but not K; add it to the result (vllm bench "
                          "serve --metadata num_speculative_tokens=K) or to the file name (run-k3.jsonl)")
    return 0


# where each client writes a run's mean acceptance length (tokens a request gains per step): vllm bench serve, SGLang
# bench_serving, TensorRT-LLM's benchmark_serving
ACCEPTANCE_KEYS = ("spec_decode_acceptance_length", "accept_length", "mean_avg_decoded_tokens_per_iter")


def _from_result(rec: dict, where: str, context: int, name_k: Optional[int] = None) -> MeasuredPoint:
    """One benchmark result: vLLM (mean_tpot_ms, spec_decode_acceptance_length, max_concurrency), SGLang
    bench_serving (mean_tpot_ms, accept_length, max_concurrency) or TensorRT-LLM's benchmark_serving (its
    acceptance length: mean_avg_decoded_tokens_per_iter, the tokens a request gains per step). A speculative run
    (K > 0) that reports no acceptance length is refused: its TPOT is a step time over that length."""
    if "mean_tpot_ms" not in rec:
        raise DsdsimError(f"{where}: no mean_tpot_ms; expected a vllm bench serve --save-result JSON or an SGLang "
                          "bench_serving JSON line")
    batch = rec.get("max_concurrency")
    if batch is None:
        raise DsdsimError(f"{where}: no max_concurrency; run the benchmark with --max-concurrency B (the batch)")
    al = next((rec[key] for key in ACCEPTANCE_KEYS if rec.get(key) is not None), None)
    has_al = al is not None and finite_number(al, f"{where}: acceptance length") > 1.0
    k = _k_of(rec, where, has_al, name_k)
    if k > 0 and al is None:
        raise DsdsimError(f"{where}: a run at K = {k} reports no acceptance length, and its TPOT is a step time over "
                          f"it; add \"spec_decode_acceptance_length\": AL to the result (the server's own: vLLM's "
                          f"/metrics, SGLang's accept_length, TensorRT-LLM's avg_decoded_tokens_per_iter)")
    acceptance = finite_number(al, f"{where}: acceptance length") if (al is not None and k > 0) else 1.0
    lengths = _run_lengths(rec, where)
    ctx = context if lengths is None else int(round(lengths[0] + lengths[1] / 2))
    return MeasuredPoint(whole_number(batch, f"{where}: max_concurrency"), k, ctx,
                         finite_number(rec["mean_tpot_ms"], f"{where}: mean_tpot_ms"), acceptance,
                         *(lengths or (None, None)))


def point_from_result(path: str | Path, rec: dict, context: int) -> MeasuredPoint:
    """The point one benchmark result file measures (K from the result, else from its name: run-k3.json)."""
    return _from_result(rec, Path(path).name, context, _name_k(Path(path)))


def _name_k(path: Path) -> Optional[int]:
    """K from a result file's name (dsdsim-b64-k3.jsonl: 3), None where the name gives none."""
    m = _NAME_K.search(path.stem)
    return int(m.group(1)) if m else None


def _run_lengths(rec: dict, where: str) -> Optional[tuple[float, float]]:
    """(mean prompt, mean output) of a run's requests (``completed``, ``total_input_tokens``, ``total_output_tokens``
    of a vllm bench serve / SGLang bench_serving result), None where the result does not say: its requests decode at
    a mean context of prompt + output / 2, and its prefills run inside the steps its TPOT measures."""
    n, i, o = rec.get("completed"), rec.get("total_input_tokens"), rec.get("total_output_tokens")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (n, i, o)) or n <= 0 or o <= 0:
        return None
    return (finite_number(i, f"{where}: total_input_tokens") / n, finite_number(o, f"{where}: total_output_tokens") / n)


def _read_json(path: Path, context: int) -> list[tuple[MeasuredPoint, str]]:
    text = path.read_text(encoding="utf-8-sig").strip()
    if not text:
        raise DsdsimError(f"{path}: empty file")
    try:
        data = json.loads(text)
        records = data if isinstance(data, list) else [data]
        wheres = [f"{path.name}" if len(records) == 1 else f"{path.name} item {i + 1}" for i in range(len(records))]
    except ValueError:
        records, wheres = [], []
        for n, line in enumerate(text.splitlines(), start=1):     # JSON lines (SGLang bench_serving)
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    raise DsdsimError(f"{path.name} line {n}: not JSON") from None
                wheres.append(f"{path.name} line {n}")
    name_k = _name_k(path)
    out = []
    for rec, where in zip(records, wheres):
        if not isinstance(rec, dict):
            raise DsdsimError(f"{where}: expected a JSON object (one benchmark result)")
        out.append((_from_result(rec, where, context, name_k), where))
    return out


_NAME_K = re.compile(r"(?:^|[-_.])k(\d+)(?:[-_.]|$)")      # dsdsim-b64-k3.jsonl: K = 3


def read_measurements(paths: Sequence[str | Path], context: int) -> list[MeasuredPoint]:
    """Points from CSV / JSON / JSON-lines files, checked, rows of one (batch, K, context) averaged."""
    rows: list[tuple[MeasuredPoint, str]] = []
    for p in paths:
        path = Path(p).expanduser()
        if not path.is_file():
            raise DsdsimError(f"measurements file {path}: no such file")
        try:
            rows += _read_csv(path, context) if path.suffix.lower() == ".csv" else _read_json(path, context)
        except UnicodeDecodeError:
            raise DsdsimError(f"measurements file {path} is not UTF-8 text: save it as UTF-8") from None
    return merge_points(rows)


def merge_points(rows: list[tuple[MeasuredPoint, str]]) -> list[MeasuredPoint]:
    for pt, where in rows:
        if pt.batch < 1 or pt.k < 0 or pt.context < 0:
            raise DsdsimError(f"{where}: batch_size must be >= 1, k >= 0 and context >= 0")
        if pt.itl_ms <= 0:
            raise DsdsimError(f"{where}: itl_ms must be > 0 (got {pt.itl_ms:g})")
        if not 1.0 <= pt.acceptance_length <= pt.k + 1:
            raise DsdsimError(f"{where}: acceptance_length {pt.acceptance_length:g} is outside [1, K+1] = "
                              f"[1, {pt.k + 1}] (it counts the bonus token; 1 for k = 0)")
    groups: dict[tuple[int, int, int], list[tuple[MeasuredPoint, str]]] = {}
    for pt, where in rows:
        groups.setdefault((pt.batch, pt.k, pt.context), []).append((pt, where))
    out = []
    for (b, k, c), members in sorted(groups.items()):
        steps = [m.step_ms for m, _ in members]
        if max(steps) > (1 + AGREE) * min(steps):
            raise DsdsimError(f"{members[0][1]} and {members[-1][1]}: contradictory rows for batch {b}, K {k} "
                              f"(step times {min(steps):.3g} and {max(steps):.3g} ms differ by more than "
                              f"{format_percent(AGREE, 0)})")
        itl = float(np.mean([m.itl_ms for m, _ in members]))
        al = float(np.mean([m.acceptance_length for m, _ in members]))
        ins = [m.input_len for m, _ in members if m.input_len is not None]
        outs = [m.output_len for m, _ in members if m.output_len is not None]
        lengths = (float(np.mean(ins)), float(np.mean(outs))) if len(ins) == len(members) else (None, None)
        out.append(MeasuredPoint(b, k, c, itl, al, *lengths))
    if len(out) < MIN_POINTS:
        raise DsdsimError(f"{len(out)} distinct (batch, K) point(s); calibrate needs at least {MIN_POINTS} "
                          "(e.g. batch 1, 16, 64 x K 0, 3)")
    if not any(p.k == 0 for p in out):
        raise DsdsimError("no K = 0 point: measure plain decoding at one batch size or more (K = 0 anchors the "
                          "kernel time the engine terms add to)")
    if not any(p.k > 0 for p in out):
        raise DsdsimError("no K > 0 point: measure at least one speculative configuration")
    return out
