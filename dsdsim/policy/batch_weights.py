"""How much serving time falls at each batch size: the weights a range budget spends its ranges on.

A histogram comes from a file of the user's: a CSV of ``batch_size,weight`` rows (a header optional), a JSON
mapping ``{"batch size": weight}`` or the JSON of ``dsdsim simulate`` (its policies' ``batch_seconds``, summed), a
Prometheus text scrape with ``vllm:num_requests_running`` samples (one observed batch size each, as
``curl -s http://HOST:8000/metrics`` prints them, appended over time), or one observed batch size per line.
Evaluated batch sizes take the weight of the sizes they stand for under vLLM's step rule: an evaluated size b_i
stands for b_i .. b_(i+1) - 1, the last one for everything above it.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError

_PROMETHEUS = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+(\S+)")
FORMS = ("CSV batch_size,weight", "JSON {batch: weight}", "dsdsim simulate JSON",
         "vllm:num_requests_running scrapes", "one batch size per line")


def read_batch_weights(path: Path | str) -> dict[int, float]:
    """batch size -> weight (>= 0, not all 0) from a file in one of ``FORMS``; one clear line if it is none."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise DsdsimError(f"cannot read the batch weights {p}: {exc.strerror or exc}") from None
    hist = _parse(text, p)
    return check_histogram(hist, str(p))


def check_histogram(hist: Mapping, where: str = "the batch weights") -> dict[int, float]:
    """Whole batch sizes >= 1 with finite weights >= 0, not all zero."""
    out: dict[int, float] = {}
    for b, w in hist.items():
        try:
            bf, wf = float(b), float(w)
        except (TypeError, ValueError):
            raise DsdsimError(f"{where}: {b!r}: {w!r} is not a batch size and a weight") from None
        if not (bf >= 1 and bf == int(bf)):
            raise DsdsimError(f"{where}: batch size {b!r} is not a whole number >= 1")
        if not (math.isfinite(wf) and wf >= 0):
            raise DsdsimError(f"{where}: the weight of batch size {int(bf)} is {w!r}; weights are numbers >= 0")
        out[int(bf)] = out.get(int(bf), 0.0) + wf
    if not out or sum(out.values()) <= 0:
        raise DsdsimError(f"{where}: no batch size has a weight above 0")
    return out


def weights_for(batch_sizes: Sequence[int], hist: Mapping[int, float]) -> np.ndarray:
    """One weight per evaluated batch size: the histogram's weight over the sizes it stands for (step rule)."""
    b = np.asarray(batch_sizes, dtype=int)
    out = np.zeros(b.size)
    for size, w in hist.items():
        i = int(np.searchsorted(b, size, side="right")) - 1     # the evaluated size at or below
        out[max(i, 0)] += w
    if out.sum() <= 0:
        raise DsdsimError("the batch weights give no weight to the evaluated batch sizes")
    return out / out.sum()


def _parse(text: str, p: Path) -> dict:
    stripped = text.strip()
    if not stripped:
        raise DsdsimError(f"the batch weights {p} are empty; give one of: {', '.join(FORMS)}")
    if stripped[0] in "{[":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"the batch weights {p} are not valid JSON (line {exc.lineno}): {exc.msg}") from None
        return _from_json(data, p)
    samples = [m.group(1) for m in map(_PROMETHEUS.match, stripped.splitlines()) if m]
    if samples:
        return _count(samples, p)
    rows = [r for r in csv.reader(io.StringIO(stripped)) if r and not r[0].lstrip().startswith("#")]
    if all(len(r) == 1 for r in rows):
        return _count([r[0] for r in rows], p)
    if rows and not _number(rows[0][0]):
        rows = rows[1:]                                          # a header
    hist: dict = {}
    for i, r in enumerate(rows, 1):
        if len(r) != 2:
            raise DsdsimError(f"the batch weights {p}: row {i} has {len(r)} fields; write batch_size,weight")
        hist[r[0].strip()] = hist.get(r[0].strip(), 0.0) + _float(r[1], p, i)
    return hist


def _from_json(data, p: Path) -> dict:
    if isinstance(data, dict) and isinstance(data.get("policies"), list):      # dsdsim simulate --format json
        hist: dict = {}
        for pol in data["policies"]:
            for b, w in (pol.get("batch_seconds") or {}).items():
                hist[b] = hist.get(b, 0.0) + float(w)
        if not hist:
            raise DsdsimError(f"the batch weights {p}: this simulate JSON has no batch_seconds (rerun simulate "
                              "with this dsdsim)")
        return hist
    if isinstance(data, dict):
        return data
    raise DsdsimError(f"the batch weights {p}: JSON must map batch sizes to weights, e.g. {{\"1\": 0.2, \"64\": 0.8}}")


def _count(samples: list, p: Path) -> dict:
    hist: dict = {}
    for s in samples:
        v = _float(s, p, None)
        if v < 1:          # an idle server (0 requests) runs no step: it gives no K a weight
            continue
        key = int(round(v))
        hist[key] = hist.get(key, 0.0) + 1.0
    return hist


def _number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _float(s: str, p: Path, row: Optional[int]) -> float:
    try:
        return float(s)
    except ValueError:
        where = f" row {row}" if row is not None else ""
        raise DsdsimError(f"the batch weights {p}{where}: {s.strip()!r} is not a number") from None
