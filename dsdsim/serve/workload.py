"""Workloads: when requests arrive and how many a client keeps in flight.

A workload is arrival times plus an optional client-side concurrency limit, as ``vllm bench serve`` drives a server
(``vllm/benchmarks/serve.py``: ``get_request`` draws the send times, an ``asyncio.Semaphore(max_concurrency)`` holds
back a request until one in flight finishes; a request's latencies are measured from when it is sent):

* ``closed:C``      C requests in flight (``--max-concurrency C --request-rate inf``): all want to go at t = 0, a new
                    one is sent when one finishes;
* ``poisson:QPS``   exponential inter-arrival times at QPS requests/s (``--request-rate QPS``, burstiness 1);
* ``gamma:QPS:CV``  gamma inter-arrival times with mean 1/QPS and coefficient of variation CV: vLLM's ``--burstiness``
                    is the gamma shape, ``burstiness = 1 / CV²`` (CV > 1 is burstier than Poisson);
* ``rollout``       every request at t = 0 with no client limit: the server admits up to ``max_num_seqs`` and the
                    batch drains as requests finish (an RL rollout's generation phase);
* ``trace:FILE``    per-request arrival times and lengths from a file (``read_trace``).

An open loop or a trace may also hold at most C requests in flight (``limit_concurrency``: ``vllm bench serve
--request-rate QPS --max-concurrency C``, SGLang's ``bench_serving`` alike): a request whose time has come waits for
one in flight to finish, and its latencies count from when it is sent, as the clients measure them.

Unlike vLLM's sender, the gamma / Poisson arrivals are not rescaled so that their total equals n / QPS exactly.
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from dsdsim.errors import DsdsimError, kind_of, whole_number
from dsdsim.records import frozen
from dsdsim.serve.lengths import NUMBER, LengthDist
from dsdsim.serve.prefix import MultiTurn, SharedPrefix, assign_groups
from dsdsim.specs.io import read_text

WORKLOAD_FORMS = ("closed:C", "poisson:QPS", "gamma:QPS:CV", "rollout", "trace:FILE")
MAX_CONCURRENCY = 1 << 20

# column names accepted in a trace file (lower case), first the canonical one
ARRIVAL_KEYS = ("arrival_s", "arrival", "arrival_time", "timestamp", "time", "time_s", "start_time")
INPUT_KEYS = ("input_len", "prompt_len", "input_tokens", "prompt_tokens", "input_length", "prompt_length",
              "contexttokens", "context_tokens")
OUTPUT_KEYS = ("output_len", "output_tokens", "completion_tokens", "generated_tokens", "output_length",
               "generatedtokens", "response_tokens")


@frozen
class Trace:
    """Requests read from a file: arrival seconds (from 0), input and output tokens, all shape (n,); ``concurrency``
    the client's limit the file records (a vLLM bench result's ``max_concurrency``), None when none."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    source: str
    concurrency: Optional[int] = None
    # a vllm bench serve result without per-request submit times: its request_rate and burstiness, whose arrival
    # process build_requests draws again (None: the arrival times as read)
    rate: Optional[float] = None
    burstiness: float = 1.0
    measured: Optional["MeasuredRun"] = None       # a run's own latencies, request by request (a vllm result)


@frozen
class MeasuredRun:
    """What a benchmark measured for each request of a trace, in the trace's order: seconds to the first token and
    to the last (``ttfts``; ``request_complete_times - request_submit_times``, else ``ttft + sum(itls)``)."""

    ttft_s: np.ndarray
    e2e_s: np.ndarray


@frozen
class Workload:
    """kind: closed, poisson, gamma, rollout or trace; text: what was parsed. concurrency: the client's limit on
    requests in flight (closed; a trace that records one), None for none. qps, cv: the arrival process."""

    kind: str
    text: str
    concurrency: Optional[int] = None
    qps: Optional[float] = None
    cv: Optional[float] = None
    trace: Optional[Trace] = field(default=None, compare=False)

    def describe(self) -> str:
        if self.kind == "closed":
            return f"closed loop, {self.concurrency} requests in flight"
        limit = f", at most {self.concurrency} in flight" if self.concurrency else ""     # the client's limit
        if self.kind == "poisson":
            return f"Poisson arrivals at {self.qps:g} requests/s{limit}"
        if self.kind == "gamma":
            return f"gamma arrivals at {self.qps:g} requests/s, CV {self.cv:g}{limit}"
        if self.kind == "rollout":
            return "rollout: every request at t = 0, the batch drains"
        rate = f", arrivals drawn at the run's {self.trace.rate:g} requests/s" if self.trace.rate is not None else ""
        return f"trace {self.trace.source} ({self.trace.input_len.size} requests{limit}{rate})"


@frozen
class Request:
    """One request: when the client wants to send it (s; a conversation's later turns: inf, they follow the replies),
    its prompt and output lengths (tokens), its index, the shared prefix its prompt begins with (-1: none), and the
    turn before it in its conversation (-1: none; ``dsdsim.serve.prefix``)."""

    arrival_s: float
    input_len: int
    output_len: int
    id: int
    prefix: int = -1
    after: int = -1


def parse_workload(text) -> Workload:
    """A Workload from ``closed:C``, ``poisson:QPS``, ``gamma:QPS:CV``, ``rollout`` or ``trace:FILE``."""
    if isinstance(text, Workload):
        return text
    raw = str(text).strip()
    head, _, rest = raw.partition(":")
    kind = head.strip().lower()
    if kind == "trace":
        if not rest.strip():
            raise DsdsimError("workload trace: needs a file: trace:FILE (CSV, JSONL or a vllm bench serve result)")
        tr = read_trace(rest.strip())
        return Workload("trace", raw, concurrency=tr.concurrency, trace=tr)
    parts = [p.strip() for p in rest.split(":")] if rest else []
    if kind == "rollout":
        if parts:
            raise DsdsimError(f"workload {raw!r}: rollout takes no figures (every request arrives at t = 0)")
        return Workload("rollout", raw)
    if kind == "closed":
        if len(parts) != 1 or not re.fullmatch(r"[0-9]+", parts[0]):
            raise DsdsimError(f"workload {raw!r}: write closed:C with C a whole number >= 1 (requests in flight)")
        c = int(parts[0])
        if not 1 <= c <= MAX_CONCURRENCY:
            raise DsdsimError(f"workload {raw!r}: the concurrency C must be in 1..{MAX_CONCURRENCY}, got {c}")
        return Workload("closed", raw, concurrency=c)
    if kind in ("poisson", "gamma"):
        want = 1 if kind == "poisson" else 2
        if len(parts) != want or not all(re.fullmatch(NUMBER, p.lower()) for p in parts):
            form = "poisson:QPS" if kind == "poisson" else "gamma:QPS:CV"
            example = form.replace("QPS", "8").replace("CV", "2")
            raise DsdsimError(f"workload {raw!r}: write {form} with numbers (e.g. {example})")
        qps = float(parts[0])
        if not (math.isfinite(qps) and qps > 0):
            raise DsdsimError(f"workload {raw!r}: the request rate QPS must be > 0, got {parts[0]}")
        cv = 1.0 if kind == "poisson" else float(parts[1])
        if not (math.isfinite(cv) and cv > 0):
            raise DsdsimError(f"workload {raw!r}: the coefficient of variation CV must be > 0, got {parts[1]}")
        return Workload(kind, raw, qps=qps, cv=None if kind == "poisson" else cv)
    raise DsdsimError(f"unknown workload {raw!r}; use one of: {', '.join(WORKLOAD_FORMS)}")


def limit_concurrency(workload: Workload, max_concurrency) -> Workload:
    """``workload`` with its client holding at most ``max_concurrency`` requests in flight (``vllm bench serve
    --max-concurrency``): an open loop's or a trace's arrivals wait for a free slot (a trace's own recorded limit is
    replaced). None: ``workload`` as it is. A closed loop is its own limit, and a rollout with one is a closed loop:
    both are refused with the form to write instead."""
    if max_concurrency is None:
        return workload
    c = whole_number(max_concurrency, "max concurrency", allow_negative=True)
    if not 1 <= c <= MAX_CONCURRENCY:
        raise DsdsimError(f"max concurrency must be in 1..{MAX_CONCURRENCY}, got {c}")
    if workload.kind == "closed":
        raise DsdsimError(f"a closed loop is its own limit on requests in flight (workload {workload.text!r}); a max "
                          "concurrency is for poisson, gamma and trace workloads (vllm bench serve --request-rate "
                          "QPS --max-concurrency C): drop it")
    if workload.kind == "rollout":
        raise DsdsimError(f"a rollout sends every request at t = 0, and with at most {c} in flight that is "
                          f"closed:{c}: write the workload closed:{c}")
    return replace(workload, concurrency=c)


def build_requests(workload: Workload, n: Optional[int], input_len: LengthDist, output_len: LengthDist,
                   rng: np.random.Generator, shared: Optional[SharedPrefix] = None,
                   rng_prefix: Optional[np.random.Generator] = None,
                   turns: Optional[MultiTurn] = None) -> list[Request]:
    """``n`` requests of the workload, sorted by arrival. Lengths come from the distributions (a trace gives its own,
    and n = None takes all its rows). Draw order: input lengths, output lengths, then inter-arrival times.

    With ``shared`` prefixes each prompt is its prefix's tokens followed by the input length drawn for it, the
    prefixes dealt out from their own stream ``rng_prefix`` (``assign_groups``), so the draws above do not move. With
    ``turns``, the requests are conversations of that many turns (the last one shorter where n is not a multiple),
    numbered turn by turn: the workload's arrivals are the conversations' first turns (``closed:C`` holds C
    conversations), each later turn's prompt is the one before, its reply and a new message of the drawn input
    length, sent when that reply has arrived (arrival inf here); a conversation's turns share its prefix."""
    if shared is not None or turns is not None:
        if workload.kind == "trace":
            raise DsdsimError("a trace gives each request's whole prompt length; shared prefixes and conversations "
                              "are for generated workloads (closed, poisson, gamma, rollout)")
        if n is None:
            raise DsdsimError("give the number of requests to simulate")
        per = turns.turns if turns is not None else 1
        firsts = -(-n // per)                                   # conversations (single turns without ``turns``)
        ins = input_len.sample(rng, n)
        outs = output_len.sample(rng, n)
        arrival = _arrivals(workload, firsts, rng)
        groups = (assign_groups(firsts, shared, rng_prefix if rng_prefix is not None else rng)
                  if shared is not None else np.full(firsts, -1, dtype=np.int64))
        base = shared.tokens if shared is not None else 0
        out, before = [], 0
        for i in range(n):
            c, t = divmod(i, per)
            prompt = base + int(ins[i]) if t == 0 else before + int(outs[i - 1]) + int(ins[i])
            out.append(Request(float(arrival[c]) if t == 0 else math.inf, prompt, int(outs[i]), i, int(groups[c]),
                               -1 if t == 0 else i - 1))
            before = prompt
        return out
    if workload.kind == "trace":
        tr = workload.trace
        rows = tr.input_len.size
        if n is None:
            n = rows
        if n > rows:
            raise DsdsimError(f"the trace {tr.source} has {rows} requests; ask for at most {rows}")
        arrival = tr.arrival_s
        if tr.rate is not None:         # the run's arrival process (vLLM's get_request: gamma gaps, first at 0)
            gaps = rng.gamma(tr.burstiness, 1.0 / (tr.rate * tr.burstiness), size=rows)
            arrival = np.cumsum(gaps) - gaps[0]
        return [Request(float(arrival[i]), int(tr.input_len[i]), int(tr.output_len[i]), i) for i in range(n)]
    if n is None:
        raise DsdsimError("give the number of requests to simulate")
    ins = input_len.sample(rng, n)
    outs = output_len.sample(rng, n)
    arrival = _arrivals(workload, n, rng)
    return [Request(float(arrival[i]), int(ins[i]), int(outs[i]), i) for i in range(n)]


def _arrivals(workload: Workload, n: int, rng: np.random.Generator) -> np.ndarray:
    """When the client wants to send each of ``n`` requests: gamma (Poisson) gaps at the workload's rate, the first
    at t = 0, or all at t = 0 (closed, rollout)."""
    if workload.kind in ("poisson", "gamma"):
        shape = 1.0 / (workload.cv or 1.0) ** 2          # vLLM's burstiness
        gaps = rng.gamma(shape, 1.0 / (workload.qps * shape), size=n)
        return np.cumsum(gaps) - gaps[0]                  # the first request at t = 0
    return np.zeros(n)


# ---------------------------------------------------------------------------------------------- trace files


def read_trace(path) -> Trace:
    """Requests from a trace file: CSV with a header (``arrival_s,input_len,output_len``; aliases ``ARRIVAL_KEYS``,
    ``INPUT_KEYS``, ``OUTPUT_KEYS``, any case), JSONL with those keys, or a ``vllm bench serve`` result JSON saved
    with ``--save-detailed`` (its ``input_lens`` and ``output_lens``; vLLM records no arrival times: every request is
    taken at t = 0, with the run's ``max_concurrency`` as the client's limit when it has one). Arrivals are shifted
    so the first is 0 and sorted; a file that lacks a column is refused in one line."""
    p, text = read_text(path, "trace file")
    stripped = text.lstrip()
    if stripped.startswith("{") and p.suffix.lower() != ".jsonl":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            return _vllm_result(obj, p)
    if p.suffix.lower() in (".jsonl", ".ndjson") or stripped.startswith("{"):
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DsdsimError(f"trace {p.name} line {i} is not JSON: {exc.msg}") from None
            if not isinstance(row, dict):
                raise DsdsimError(f"trace {p.name} line {i} holds {kind_of(row)}; each line must be one object "
                                  "with arrival_s, input_len and output_len")
            rows.append({str(k).strip().lower(): v for k, v in row.items()})
        return _from_rows(rows, p)
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise DsdsimError(f"trace {p.name} is empty; write a header arrival_s,input_len,output_len and one row per "
                          "request")
    rows = [{str(k).strip().lower(): v for k, v in row.items() if k is not None} for row in reader]
    return _from_rows(rows, p)


def _column(rows: list[dict], keys: tuple[str, ...], what: str, p: Path) -> np.ndarray:
    if not rows:
        raise DsdsimError(f"trace {p.name} has no requests")
    present = [k for k in keys if k in rows[0]]
    if not present:
        raise DsdsimError(f"trace {p.name} has no {what} column; name it {keys[0]} (or one of "
                          f"{', '.join(keys[1:])})")
    key = present[0]
    values = []
    for i, row in enumerate(rows, start=1):
        v = row.get(key)
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise DsdsimError(f"trace {p.name} request {i}: {key} must be a number, got {kind_of(v)}") from None
        if not math.isfinite(x):
            raise DsdsimError(f"trace {p.name} request {i}: {key} must be finite, got {v!r}")
        values.append(x)
    return np.asarray(values, dtype=float)


def _lengths(x: np.ndarray, key: str, p: Path) -> np.ndarray:
    bad = np.flatnonzero((x < 1) | (x != np.round(x)))
    if bad.size:
        raise DsdsimError(f"trace {p.name} request {bad[0] + 1}: {key} must be a whole number of tokens >= 1, got "
                          f"{x[bad[0]]:g}")
    return x.astype(np.int64)


def _from_rows(rows: list[dict], p: Path) -> Trace:
    arrival = _column(rows, ARRIVAL_KEYS, "arrival time", p)
    ins = _lengths(_column(rows, INPUT_KEYS, "input length", p), "input_len", p)
    outs = _lengths(_column(rows, OUTPUT_KEYS, "output length", p), "output_len", p)
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order] - arrival[order][0]
    return Trace(arrival, ins[order], outs[order], p.name)


def _vllm_result(obj: dict, p: Path) -> Trace:
    """A ``vllm bench serve --save-result --save-detailed`` JSON (vllm/benchmarks/serve.py: ``input_lens`` is each
    request's prompt_len, ``output_lens`` the tokens it generated, ``max_concurrency`` the client's limit)."""
    missing = [k for k in ("input_lens", "output_lens") if k not in obj]
    if missing:
        raise DsdsimError(f"trace {p.name} is a JSON object without {' and '.join(missing)}: give a vllm bench "
                          "serve result saved with --save-result --save-detailed, or a CSV / JSONL trace")
    ins, outs = obj["input_lens"], obj["output_lens"]
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) or not ins:
        raise DsdsimError(f"trace {p.name}: input_lens and output_lens must be two lists of the same, non-zero length")
    errors = obj.get("errors")
    keep = [i for i in range(len(ins)) if not (isinstance(errors, list) and i < len(errors) and errors[i])]
    ins_a = _lengths(np.asarray([_number(ins[i], "input_lens", i, p) for i in keep]), "input_lens", p)
    outs_a = _lengths(np.asarray([_number(outs[i], "output_lens", i, p) for i in keep]), "output_lens", p)
    conc = obj.get("max_concurrency")
    if conc is not None:
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise DsdsimError(f"trace {p.name}: max_concurrency must be a whole number >= 1 or null, got "
                              f"{kind_of(conc)}")
    submit = _per_request(obj, "request_submit_times", keep, p)
    complete = _per_request(obj, "request_complete_times", keep, p)
    rate, burstiness = None, 1.0
    if submit is not None:
        arrival = submit - submit.min()
    else:
        arrival = np.zeros(ins_a.size)
        rate = _rate(obj, p)
        if rate is not None:
            burstiness = _positive(obj.get("burstiness", 1.0), "burstiness", p)
    order = np.argsort(arrival, kind="stable")
    measured = _measured(obj, keep, submit, complete, p)
    if measured is not None:
        measured = MeasuredRun(measured.ttft_s[order], measured.e2e_s[order])
    return Trace(arrival[order], ins_a[order], outs_a[order], p.name, conc, rate, burstiness, measured)


def _per_request(obj: dict, key: str, keep: list[int], p: Path) -> Optional[np.ndarray]:
    values = obj.get(key)
    if values is None:
        return None
    if not isinstance(values, list) or len(values) <= max(keep):
        raise DsdsimError(f"trace {p.name}: {key} must be a list with one number per request")
    return np.asarray([_number(values[i], key, i, p) for i in keep])


def _rate(obj: dict, p: Path) -> Optional[float]:
    """The run's request_rate (vLLM writes "inf" for all at once): None where every request went at t = 0."""
    rate = obj.get("request_rate")
    if rate is None or (isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity")):
        return None
    x = _number(rate, "request_rate", 0, p)
    return None if math.isinf(x) else _positive(x, "request_rate", p)


def _positive(v, key: str, p: Path) -> float:
    x = _number(v, key, 0, p)
    if not (math.isfinite(x) and x > 0):
        raise DsdsimError(f"trace {p.name}: {key} must be a positive number, got {v!r}")
    return x


def _measured(obj: dict, keep: list[int], submit, complete, p: Path) -> Optional[MeasuredRun]:
    """The run's own per-request latencies where it saved them (``ttfts``, with ``itls`` or the complete times)."""
    ttfts = obj.get("ttfts")
    if ttfts is None:
        return None
    ttft = _per_request(obj, "ttfts", keep, p)
    if submit is not None and complete is not None:
        e2e = complete - submit
    else:
        itls = obj.get("itls")
        if not isinstance(itls, list) or len(itls) <= max(keep):
            return None
        e2e = []
        for j, i in enumerate(keep):
            gaps = itls[i]
            if not isinstance(gaps, list):
                raise DsdsimError(f"trace {p.name}: itls[{i}] must be a list of seconds")
            e2e.append(ttft[j] + sum(_number(g, "itls", i, p) for g in gaps))
        e2e = np.asarray(e2e)
    if np.any(ttft < 0) or np.any(e2e < ttft):
        raise DsdsimError(f"trace {p.name}: a request's ttft is negative or after its end; is the file a vllm bench "
                          "serve result?")
    return MeasuredRun(ttft, e2e)


def _number(v, key: str, i: int, p: Path) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DsdsimError(f"trace {p.name}: {key}[{i}] must be a number, got {kind_of(v)}")
    return float(v)
