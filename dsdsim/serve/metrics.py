"""What a simulated run reports, computed as ``vllm bench serve`` computes it (``vllm/benchmarks/serve.py``,
``calculate_metrics``):

* TTFT: first token time − the time the request was sent; e2e latency: last token − sent.
* TPOT per request: (e2e − TTFT) / (output_len − 1), over requests with more than one output token (for goodput a
  request of one token counts TPOT 0, as vLLM does).
* ITL: the gaps between successive emissions of one request, one per step that emitted tokens for it. vLLM's client
  appends one ITL per streamed chunk and a step's tokens stream as one chunk, so under speculation an ITL spans a
  whole step (several tokens); the first emission (the first token) opens no gap. A preempted request's gap holds
  its recompute.
* Percentiles: numpy's default (linear), as vLLM's; p50 is the median.
* Throughput: output tokens and completed requests over the duration, from the first send to the last token.
* Goodput (``--goodput ttft:MS tpot:MS``): requests whose every given SLO holds (value <= SLO), over the duration.
"""
from __future__ import annotations

from dataclasses import field
from typing import Optional

import numpy as np

from dsdsim.records import frozen
from dsdsim.units import median_abs


@frozen
class Slo:
    """Service-level objectives in milliseconds (None: not checked), vLLM bench's ``--goodput`` keys."""

    ttft_ms: Optional[float] = None
    tpot_ms: Optional[float] = None
    e2el_ms: Optional[float] = None


@frozen
class Stats:
    """mean, p50, p90, p99 of one latency, milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, seconds: np.ndarray) -> "Stats":
        x = np.asarray(seconds, dtype=float) * 1e3
        if x.size == 0:
            return cls(0.0, 0.0, 0.0, 0.0)                 # vLLM reports 0 for an empty list
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        return cls(float(x.mean()), float(p50), float(p90), float(p99))

    def to_dict(self) -> dict:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@frozen
class Timeline:
    """One entry per simulated step: when it ended (s), requests scheduled, decoding requests, K, tokens emitted."""

    t_end_s: np.ndarray
    requests: np.ndarray
    decoding: np.ndarray
    k: np.ndarray
    tokens: np.ndarray


@frozen
class PolicyResult:
    """One policy's run. ``to_dict`` gives the documented JSON contract; the per-request arrays and the timeline are
    here for analysis and plots."""

    name: str
    output_tokens_per_s: float
    requests_per_s: float
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    goodput_requests_per_s: Optional[float]
    mean_batch: float
    k_histogram: dict                      # K -> steps that verified at that K (steps with a decoding request)
    preemptions: int
    duration_s: float
    steps: int
    timeline: Timeline = field(repr=False)
    mean_acceptance_length: float = 1.0    # 1 + accepted drafts / verify passes (vLLM's), K > 0 passes only
    k_budget_limited_steps: int = 0        # steps whose K the budget or the free blocks lowered, or trimmed (vLLM)
    # decoding batch size -> seconds of steps at it (what predict --batch-weights reads)
    batch_seconds: dict = field(default_factory=dict)
    kv_cache_tokens: Optional[int] = None  # the KV cache the run had (whole blocks), all requests together
    kv_cache_given: bool = False           # ... as given (SchedulerConfig.kv_cache_tokens), not sized from memory
    kv_cache_rule: Optional[str] = None    # ... and the engine rule that sized it, in words (MixedPricer.kv_pool)
    kv_cache_memory_share: Optional[float] = None   # ... at that share of the GPU's memory
    replicas: tuple = ()                   # a fleet's result: each replica's own (simulate --replicas N > 1)
    # prompt tokens found in the prefix cache over prompt tokens admitted, preemptions' readmissions included (None:
    # no prefix cache hits asked for: SchedulerConfig.prefix_cache_hit 0)
    prefix_cache_hit: Optional[float] = None
    ttft_s: np.ndarray = field(default=None, repr=False)       # per request
    e2e_s: np.ndarray = field(default=None, repr=False)
    sent_s: np.ndarray = field(default=None, repr=False)
    finish_s: np.ndarray = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s,
            "ttft_ms": self.ttft_ms.to_dict(),
            "tpot_ms": self.tpot_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(),
            "e2e_ms": self.e2e_ms.to_dict(),
            "goodput_requests_per_s": self.goodput_requests_per_s,
            "mean_batch": self.mean_batch,
            "mean_acceptance_length": self.mean_acceptance_length,
            "k_histogram": {str(k): int(v) for k, v in sorted(self.k_histogram.items())},
            "k_limited_steps": self.k_budget_limited_steps,
            "batch_seconds": {str(b): round(float(v), 6) for b, v in sorted(self.batch_seconds.items())},
            "preemptions": self.preemptions,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_cache_source": None if self.kv_cache_tokens is None else (
                "given" if self.kv_cache_given else "memory"),
            "kv_cache_rule": None if self.kv_cache_given else self.kv_cache_rule,
            "kv_cache_memory_share": None if self.kv_cache_given else self.kv_cache_memory_share,
            "duration_s": self.duration_s,
            "steps": self.steps,
            **({"prefix_cache_hit": self.prefix_cache_hit} if self.prefix_cache_hit is not None else {}),
            **({"replicas": [r.to_dict() for r in self.replicas]} if self.replicas else {}),
        }


def seconds_at_batch(timeline: Timeline, start_s: float) -> dict:
    """Decoding batch size -> seconds the steps at it took (each step from the end of the one before; the first
    from ``start_s``): the serving time a K table spends at each batch size."""
    ends = np.asarray(timeline.t_end_s, dtype=float)
    if not ends.size:
        return {}
    took = np.diff(ends, prepend=min(start_s, float(ends[0])))
    batch = np.asarray(timeline.decoding, dtype=int)
    keep = batch > 0
    sizes, where = np.unique(batch[keep], return_inverse=True)
    return {int(b): float(v) for b, v in zip(sizes, np.bincount(where, weights=took[keep]))}


def tpot_seconds(ttft_s: np.ndarray, e2e_s: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """Per request (e2e − TTFT) / (output_len − 1); 0 where output_len <= 1 (vLLM's goodput convention)."""
    out = np.asarray(output_len, dtype=float)
    return np.where(out > 1, (e2e_s - ttft_s) / np.maximum(out - 1, 1), 0.0)


def policy_result(name: str, sent_s: np.ndarray, first_s: np.ndarray, finish_s: np.ndarray,
                  output_len: np.ndarray, itl_s: np.ndarray, timeline: Timeline, preemptions: int,
                  slo: Optional[Slo], mean_acceptance_length: float = 1.0,
                  k_budget_limited_steps: int = 0, kv_cache: Optional[tuple] = None,
                  prefix_cache_hit: Optional[float] = None) -> PolicyResult:
    """The figures of one run from its per-request times (seconds) and per-step timeline; ``kv_cache``: (the
    cache's tokens, whether they were given rather than sized from memory[, the rule that sized it, in words, and the
    share of the GPU's memory it took])."""
    ttft = first_s - sent_s
    e2e = finish_s - sent_s
    tpot = tpot_seconds(ttft, e2e, output_len)
    duration = float(np.max(finish_s) - np.min(sent_s)) if finish_s.size else 0.0
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    goodput = None
    if slo is not None:
        good = np.ones(ttft.size, dtype=bool)
        for value, limit in ((ttft, slo.ttft_ms), (tpot, slo.tpot_ms), (e2e, slo.e2el_ms)):
            if limit is not None:
                good &= value * 1e3 <= limit
        goodput = float(rate(int(good.sum())))
    decoding = timeline.decoding > 0
    ks, counts = np.unique(timeline.k[decoding], return_counts=True)
    batch_seconds = seconds_at_batch(timeline, float(np.min(sent_s)) if sent_s.size else 0.0)
    return PolicyResult(
        name=name, output_tokens_per_s=float(rate(float(np.sum(output_len)))),
        requests_per_s=float(rate(float(finish_s.size))), ttft_ms=Stats.of(ttft),
        tpot_ms=Stats.of(tpot[np.asarray(output_len) > 1]), itl_ms=Stats.of(itl_s), e2e_ms=Stats.of(e2e),
        goodput_requests_per_s=goodput,
        mean_batch=float(timeline.requests.mean()) if timeline.requests.size else 0.0,
        k_histogram={int(k): int(c) for k, c in zip(ks, counts)}, preemptions=int(preemptions),
        batch_seconds=batch_seconds,
        duration_s=duration, steps=int(timeline.requests.size), timeline=timeline,
        mean_acceptance_length=float(mean_acceptance_length), k_budget_limited_steps=int(k_budget_limited_steps),
        ttft_s=ttft, e2e_s=e2e, sent_s=sent_s, finish_s=finish_s,
        kv_cache_tokens=None if kv_cache is None else int(kv_cache[0]),
        kv_cache_given=bool(kv_cache is not None and kv_cache[1]),
        kv_cache_rule=kv_cache[2] if kv_cache is not None and len(kv_cache) > 2 else None,
        kv_cache_memory_share=kv_cache[3] if kv_cache is not None and len(kv_cache) > 3 else None,
        prefix_cache_hit=prefix_cache_hit)


# --- a simulated run against the run it replays ---------------------------------------------------------------------


def versus_measured(result: PolicyResult, ttft_s: np.ndarray, e2e_s: np.ndarray, output_len: np.ndarray) -> dict:
    """A policy's simulated latencies against a benchmark's measured ones for the same requests (in request order):
    per quantity (ttft, tpot, e2e; milliseconds) the measured and simulated mean / p50 / p90 / p99, the relative
    error of each (simulated / measured - 1), and the median over requests of |simulated / measured - 1|."""
    out = np.asarray(output_len)
    measured = {"ttft": ttft_s, "e2e": e2e_s, "tpot": tpot_seconds(ttft_s, e2e_s, out)}
    simulated = {"ttft": result.ttft_s, "e2e": result.e2e_s,
                 "tpot": tpot_seconds(result.ttft_s, result.e2e_s, out)}
    report = {}
    for q in ("ttft", "tpot", "e2e"):
        keep = out > 1 if q == "tpot" else np.ones(out.size, dtype=bool)
        m, x = np.asarray(measured[q])[keep], np.asarray(simulated[q])[keep]
        ms, xs = Stats.of(m).to_dict(), Stats.of(x).to_dict()
        errors = {k: (xs[k] / ms[k] - 1.0 if ms[k] > 0 else None) for k in ms}
        positive = m > 0
        per_request = median_abs(x[positive] / m[positive] - 1.0) if positive.any() else None
        report[f"{q}_ms"] = {"measured": ms, "simulated": xs, "rel_error": errors,
                             "per_request_median_abs_rel_error": per_request}
    return report
