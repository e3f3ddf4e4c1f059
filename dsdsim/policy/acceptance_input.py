"""Acceptance from what users have: command-line strings, vLLM Prometheus text, vLLM per-request metrics JSON.

Ingestion only; the model these build (conditional α, τ(K), the Beta spread across requests) lives in
``dsdsim.policy.acceptance``; this module builds on it, never the other way round.

* ``parse_acceptance(text)`` — one string: a constant α, per-position α, ``unconditional:...``, ``al=2.79@3``,
  ``al=2.55@tree``, ``beta:MEAN:KAPPA``, ``default``, or a file path (``ACCEPTANCE_FORMS``).
* ``from_vllm_prometheus(text)`` — ``/metrics`` counters ``vllm:spec_decode_num_accepted_tokens_per_pos`` and
  ``vllm:spec_decode_num_drafts`` (docs/reference/engines.md §2).
* ``from_vllm_request_metrics(obj)`` — per-request ``metrics.speculative_decoding`` histograms.
"""
from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from dsdsim.errors import DsdsimError, kind_of, whole_number
from dsdsim.policy.acceptance import (DEFAULT_ACCEPTANCE, Acceptance, _conditional_from_unconditional,
                                      constant, from_list, from_mean_acceptance_length,
                                      from_unconditional_rates, TreeAcceptance)

# ---------------------------------------------------------------------------------------------- vLLM ingestion

_PROM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_per_pos"
_PROM_DRAFTS = "vllm:spec_decode_num_drafts"
_PROM_LINE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*'
    r'(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?\s+'
    r'(?P<value>\S+)(?:\s+-?\d+)?\s*(?:#.*)?$')
_PROM_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def from_vllm_prometheus(text: str, source: str | None = None) -> Acceptance:
    """Conditional α from a vLLM ``/metrics`` scrape (Prometheus text exposition format).

    Reads ``vllm:spec_decode_num_accepted_tokens_per_pos{position="i"}`` and ``vllm:spec_decode_num_drafts``
    (with or without the ``_total`` suffix), summing over every other label (model_name, engine, ...).
    position="0" is the first draft token: p_{i+1} = accepted_per_pos[i] / num_drafts (unconditional), then
    α_1 = p_1 and α_i = p_i / p_{i−1}. Under dynamic K (DSD) steps with fewer drafts still count in num_drafts,
    so later positions read low; scrape a static-K run.
    """
    samples = _parse_prometheus(text)
    accepted = _summed_counter(samples, _PROM_ACCEPTED, by_position=True)
    drafts = _summed_counter(samples, _PROM_DRAFTS, by_position=False)
    if not accepted:
        raise DsdsimError(f"no {_PROM_ACCEPTED}{{position=...}} samples found; scrape /metrics of a vLLM server "
                          "running speculative decoding")
    if drafts is None or drafts[None] <= 0:
        raise DsdsimError(f"{_PROM_DRAFTS} is missing or 0; scrape /metrics after the server has served requests")
    n_drafts = drafts[None]
    positions = sorted(accepted)
    if positions != list(range(len(positions))):
        raise DsdsimError(f"{_PROM_ACCEPTED} positions must run 0, 1, 2, ... without gaps; got {positions}")
    counts = np.array([accepted[i] for i in positions])
    if counts[0] > n_drafts or np.any(np.diff(counts) > 0):
        raise DsdsimError(f"inconsistent counters: accepted per position {counts.tolist()} must be non-increasing and "
                          f"≤ num_drafts={n_drafts:g}; use one scrape of one server")
    alphas, note = _conditional_from_unconditional(counts / n_drafts)
    what = source or "vLLM Prometheus metrics"
    return Acceptance(alphas, f"{what} ({n_drafts:g} drafts, {len(positions)} positions){note}")


def _parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample line; comment and blank lines skipped. Malformed → DsdsimError."""
    if not isinstance(text, str):
        raise DsdsimError("Prometheus metrics must be text (the body of GET /metrics)")
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line)
        value = _prom_value(match.group("value")) if match else None
        labels = _prom_labels(match.group("labels") or "") if match else None
        if match is None or value is None or labels is None:
            raise DsdsimError(f"malformed Prometheus line {number}: {line[:120]!r}; "
                              "expected 'name{label=\"v\"} value'")
        samples.append((match.group("name"), labels, value))
    return samples


def _prom_value(token: str) -> float | None:
    try:
        return float(token)   # also accepts NaN, +Inf, -Inf as Prometheus writes them
    except ValueError:
        return None


def _prom_labels(body: str) -> dict[str, str] | None:
    labels, pos = {}, 0
    body = body.strip()
    while pos < len(body):
        match = _PROM_LABEL.match(body, pos)
        if match is None:
            return None
        labels[match.group(1)] = match.group(2)
        pos = match.end()
    return labels


def _summed_counter(samples, base: str, by_position: bool) -> dict | None:
    """Sum a counter over label sets; keyed by int position, or by None. Prefers the ``_total`` samples."""
    for name in (base + "_total", base):
        rows = [(labels, value) for n, labels, value in samples if n == name]
        if not rows:
            continue
        out: dict = {}
        for labels, value in rows:
            if not math.isfinite(value) or value < 0:
                raise DsdsimError(f"{name} has a negative or non-finite count {value!r}; counters are ≥ 0")
            key = None
            if by_position:
                pos = labels.get("position", "")
                if not pos.isdigit():
                    raise DsdsimError(f"{name} sample without an integer position label: {labels}")
                key = int(pos)
            out[key] = out.get(key, 0.0) + value
        return out
    return None


def from_vllm_request_metrics(obj, source: str | None = None) -> Acceptance:
    """Conditional α from vLLM per-request metrics (``--per-request-spec-decode-metrics summary|detailed``).

    ``obj``: one response / ``metrics`` / ``metrics.speculative_decoding`` object, or a list of them. Each holds
    ``acceptance_histogram_by_draft_length`` {"k": [steps that accepted 0..k drafts]} or ``acceptance_histogram``
    (length k + 1), or the detailed ``per_step_accepted`` / ``per_step_drafted`` arrays.

    Pooled over requests and draft lengths, per position i (only steps that drafted ≥ i tokens):
    α_i = #(accepted ≥ i) / #(accepted ≥ i − 1), i.e. α_i = P(≥ i) / P(≥ i − 1) for one draft length.
    """
    records = obj if isinstance(obj, list) else [obj]
    if not records:
        raise DsdsimError("no request metrics given: pass a response object or a non-empty list of them")
    hists: dict[int, np.ndarray] = {}   # draft length k → steps that accepted 0..k, shape (k + 1,)
    for number, record in enumerate(records, start=1):
        for k, h in _request_histograms(record, number):
            hists[k] = hists.get(k, np.zeros(k + 1)) + h
    hists = {k: h for k, h in hists.items() if k >= 1 and h.sum() > 0}
    if not hists:
        raise DsdsimError("the request metrics hold no speculative steps with draft length ≥ 1")
    k_max = max(hists)
    reached = np.zeros(k_max + 1)   # reached[i]: drafted ≥ i tokens and accepted ≥ i − 1 of them
    passed = np.zeros(k_max + 1)    # passed[i]: drafted ≥ i tokens and accepted ≥ i
    for k, h in hists.items():
        at_least = np.cumsum(h[::-1])[::-1]            # at_least[j] = steps that accepted ≥ j, j = 0..k
        reached[1:k + 1] += at_least[:k]
        passed[1:k + 1] += at_least[1:]
    alphas, unreached = [], None
    for i in range(1, k_max + 1):
        if reached[i] > 0:
            alphas.append(passed[i] / reached[i])
        else:
            alphas.append(0.0)
            unreached = unreached or i
    note = f"; positions ≥ {unreached} never reached, α=0 there" if unreached else ""
    steps = int(sum(h.sum() for h in hists.values()))
    what = source or "vLLM per-request metrics"
    return Acceptance(tuple(alphas), f"{what} ({len(records)} requests, {steps} steps){note}")


def _request_histograms(record, number: int) -> list[tuple[int, np.ndarray]]:
    """[(draft length k, histogram over accepted 0..k)] from one request's metrics object."""
    if not isinstance(record, dict):
        raise DsdsimError(f"request {number}: expected a JSON object with metrics.speculative_decoding, "
                          f"got {kind_of(record)}")
    spec = record
    if isinstance(spec.get("metrics"), dict):
        spec = spec["metrics"]
    if isinstance(spec.get("speculative_decoding"), dict):
        spec = spec["speculative_decoding"]
    by_length = spec.get("acceptance_histogram_by_draft_length")
    if by_length:
        if not isinstance(by_length, dict):
            raise DsdsimError(f"request {number}: acceptance_histogram_by_draft_length must map 'k' "
                              "to a list of counts")
        out = []
        for key, counts in by_length.items():
            k = whole_number(key, f"request {number}: draft length key")
            h = _counts(counts, f"request {number}: acceptance_histogram_by_draft_length[{key!r}]")
            if h.size != k + 1:
                raise DsdsimError(f"request {number}: histogram for draft length {k} has {h.size} entries; "
                                  f"expected {k + 1} (steps that accepted 0..{k})")
            out.append((k, h))
        return out
    hist = spec.get("acceptance_histogram")
    if hist is not None:
        h = _counts(hist, f"request {number}: acceptance_histogram")
        return [(h.size - 1, h)]
    acc, drafted = spec.get("per_step_accepted"), spec.get("per_step_drafted")
    if acc is not None and drafted is not None:
        a = _counts(acc, f"request {number}: per_step_accepted", allow_empty=True)
        d = _counts(drafted, f"request {number}: per_step_drafted", allow_empty=True)
        if a.size != d.size or np.any(a > d):
            raise DsdsimError(f"request {number}: per_step_accepted and per_step_drafted must have equal length "
                              "and accepted ≤ drafted at every step")
        out = []
        for k in np.unique(d).astype(int):
            out.append((int(k), np.bincount(a[d == k].astype(int), minlength=int(k) + 1).astype(float)))
        return out
    raise DsdsimError(f"request {number}: no acceptance_histogram_by_draft_length, acceptance_histogram or "
                      "per_step_* arrays; start vLLM with --per-request-spec-decode-metrics summary")


def _counts(values, what: str, allow_empty: bool = False) -> np.ndarray:
    if not isinstance(values, (list, tuple)) or (not values and not allow_empty):
        raise DsdsimError(f"{what} must be a non-empty list of step counts")
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must hold numbers, got {values!r:.80}") from None
    if arr.ndim != 1 or not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
        raise DsdsimError(f"{what} must hold whole counts ≥ 0, got {list(values)!r:.80}")
    return arr


# ---------------------------------------------------------------------------------------------- parsing

ACCEPTANCE_FORMS = ("0.8 (constant α)", "0.8,0.7,0.6 (conditional α per position)",
                    "unconditional:0.68,0.39,0.20 (vLLM per-position rates)",
                    "al=2.79@3 (mean acceptance length at K=3)",
                    "al=2.55@tree (mean acceptance length measured with a draft tree)",
                    "beta:0.8:20 (mean α 0.8, Beta concentration 20)", "default",
                    "a file: .json/.jsonl vLLM request metrics, otherwise a vLLM /metrics scrape")

_NUMBER = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"      # ASCII digits only


def parse_acceptance(text: str) -> Acceptance | TreeAcceptance:
    """Build an ``Acceptance`` (a ``TreeAcceptance`` for ``al=X@tree``) from a string; the forms are listed in
    ``ACCEPTANCE_FORMS``."""
    raw = str(text).strip()
    lower = raw.lower().replace(" ", "")
    if lower == "default":
        return DEFAULT_ACCEPTANCE
    if re.fullmatch(_NUMBER, lower):
        value = float(lower)
        if not math.isfinite(value):
            raise DsdsimError(f"acceptance {raw!r} is not a finite number; write a probability in [0, 1] such as 0.8")
        if value > 1.0:
            raise DsdsimError(f"acceptance {value:g} is not a probability in [0, 1]; for a mean acceptance length "
                              f"write al={value:g}@K (K it was measured at)")
        if value < 0.0:
            raise DsdsimError(f"acceptance {value:g} is not a probability in [0, 1]; write a conditional α such as "
                              "0.8")
        return constant(value)
    if re.fullmatch(rf"{_NUMBER}(,{_NUMBER})+,?", lower):
        return from_list(_probabilities([float(v) for v in lower.rstrip(",").split(",")], raw,
                                        "per-position α are probabilities"))
    if lower.startswith("unconditional:"):
        return _unconditional(_numbers(lower.partition(":")[2], raw), raw)
    match = re.fullmatch(rf"al=({_NUMBER})@tree", lower)
    if match:
        return TreeAcceptance(float(match.group(1)))
    if lower.startswith("al=") and "@" not in lower:
        raise DsdsimError(f"acceptance {raw!r} needs what it was measured with: al=2.79@3 (a chain of K=3 draft "
                          "tokens) or al=2.55@tree (a draft tree)")
    match = re.fullmatch(rf"al=({_NUMBER})@(?:k=)?([0-9]+)", lower)
    if match:
        return from_mean_acceptance_length(float(match.group(1)), int(match.group(2)))
    if lower.startswith("al="):
        raise DsdsimError(f"cannot read acceptance {raw!r}; write the mean acceptance length and what it was "
                          "measured with: al=2.79@3 (K=3 draft tokens) or al=2.55@tree (a draft tree)")
    if lower.startswith("beta:"):
        return _beta(lower, raw)
    if os.path.isfile(raw):
        return _from_file(raw)
    if os.path.isdir(raw):
        raise DsdsimError(f"acceptance {raw!r} is a directory; give a file (vLLM metrics text or request metrics "
                          "JSON) or one of the inline forms")
    if not raw.isascii() and any(ch.isdigit() for ch in raw):
        raise DsdsimError(f"acceptance {raw!r} has non-ASCII digits; write the numbers with 0-9")
    if raw.lower().endswith((".json", ".jsonl", ".txt", ".prom")) or os.sep in raw:
        raise DsdsimError(f"acceptance file {raw!r} not found; give an existing path or one of the inline forms")
    if "," in lower and re.fullmatch(r"[-+0-9.,e]+", lower):
        raise DsdsimError(f"cannot read numbers in {raw!r}; write comma-separated values like 0.8,0.7,0.6")
    raise DsdsimError(f"unknown acceptance {raw!r}; use one of: " + "; ".join(ACCEPTANCE_FORMS))


_BETA_FORM = "beta:MEAN:KAPPA (mean α in [0, 1], Beta concentration κ > 0), e.g. beta:0.8:20"


def _beta(lower: str, raw: str) -> Acceptance:
    """``beta:MEAN:KAPPA``: a constant mean α with a Beta spread across requests of concentration κ."""
    match = re.fullmatch(rf"beta:({_NUMBER}):({_NUMBER})", lower)
    if match is None:
        raise DsdsimError(f"cannot read acceptance {raw!r}; write {_BETA_FORM}")
    mean, kappa = float(match.group(1)), float(match.group(2))
    if not (math.isfinite(mean) and 0.0 <= mean <= 1.0):
        raise DsdsimError(f"acceptance {raw!r}: the mean α {match.group(1)} is outside [0, 1]; write {_BETA_FORM}")
    if not (math.isfinite(kappa) and kappa > 0.0):
        raise DsdsimError(f"acceptance {raw!r}: the Beta concentration κ {match.group(2)} must be a finite number "
                          f"> 0; write {_BETA_FORM}")
    return constant(mean).with_spread(kappa)


def _unconditional(rates: list[float], raw: str) -> Acceptance:
    """``unconditional:p1,p2,...``: vLLM's per-position rates, checked in the words the user wrote them."""
    p = _probabilities(rates, raw, "unconditional rates are probabilities")
    for i in range(1, len(p)):
        if p[i] > p[i - 1]:
            conditional = ",".join(f"{v:g}" for v in p)
            raise DsdsimError(f"acceptance {raw!r}: unconditional rates must be non-increasing (position {i + 1}: "
                              f"{p[i]:g} > {p[i - 1]:g}), as all of drafts 1..i accepted implies drafts 1..i-1 "
                              f"were; if these are conditional α per position, write {conditional} "
                              "(without 'unconditional:')")
    return from_unconditional_rates(p)


def _probabilities(values: list[float], raw: str, what: str) -> list[float]:
    """``values`` when each is a probability in [0, 1]; else an error naming the position in ``raw``."""
    if not values:
        raise DsdsimError(f"acceptance {raw!r} holds no numbers; write comma-separated values like 0.68,0.39,0.20")
    for i, a in enumerate(values, start=1):
        if not (math.isfinite(a) and 0.0 <= a <= 1.0):
            raise DsdsimError(f"acceptance {raw!r}: position {i} has {a:g}, outside [0, 1]; {what} (a mean "
                              "acceptance length is written al=2.8@K)")
    return values


def _numbers(body: str, raw: str) -> list[float]:
    if not body.isascii():
        raise DsdsimError(f"cannot read numbers in {raw!r}; write them with ASCII digits like 0.68,0.39,0.20")
    try:
        return [float(v) for v in body.strip(",").split(",")]
    except ValueError:
        raise DsdsimError(f"cannot read numbers in {raw!r}; write comma-separated values like 0.68,0.39,0.20") from None


def _from_file(path: str) -> Acceptance:
    name = os.path.basename(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise DsdsimError(f"{name}: cannot read ({exc.strerror})") from None
    try:
        body = data.decode("utf-8-sig")        # a leading byte-order mark, as some editors save, is still UTF-8
    except UnicodeDecodeError:
        if b"\x00" in data:
            raise DsdsimError(f"{name}: not a text file (binary content); give vLLM Prometheus metrics text or "
                              "per-request metrics JSON") from None
        raise DsdsimError(f"{name} is not UTF-8 text: save it as UTF-8") from None
    try:
        return _from_text(body, path, name)
    except DsdsimError as exc:
        raise DsdsimError(f"{name}: {exc}") from None
    except RecursionError:
        raise DsdsimError(f"{name}: JSON nested too deeply to be request metrics") from None


def _from_text(body: str, path: str, name: str) -> Acceptance:
    """The acceptance in one file's text: JSON (Lines) request metrics by suffix, else a Prometheus scrape."""
    if path.lower().endswith(".jsonl"):
        try:
            obj = [json.loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"not JSON Lines ({exc.msg} at line {exc.lineno}); "
                              "write one JSON object per line") from None
        return from_vllm_request_metrics(obj, source=f"vLLM per-request metrics (file {name})")
    if path.lower().endswith(".json"):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as exc:
            raise DsdsimError(f"not valid JSON ({exc.msg} at line {exc.lineno}); "
                              "save the response body as-is") from None
        return from_vllm_request_metrics(obj, source=f"vLLM per-request metrics (file {name})")
    return from_vllm_prometheus(body, source=f"vLLM Prometheus metrics (file {name})")
