"""Calibrating through the serving simulation: each measured run replayed, its mean TPOT against the simulated one.

A serving benchmark's mean TPOT is not one steady step. The batch ramps up at the start and drains at the end, the
prefills of new requests land in some steps and not others, the K table (or a fixed K) is looked up by the requests
each step schedules. The steady fit (``dsdsim.fit.shape``) prices the average prefill load of a closed loop at the
point's batch; a run saved with its requests (``vllm bench serve --save-result --save-detailed``: ``input_lens``,
``output_lens``, its client limit and its arrivals) can be replayed through the simulator (``dsdsim.serve``)
instead, at the figures being fitted.

The fit stays the MAP fit of the five figures on the steady model; the replay corrects what it is fitted to. At
figures f, a run's replay gives a mean TPOT S(f) where the steady model gives M(f); the next fit targets the
measured TPOT m x M(f) / S(f), so that at its figures f' the replay gives S(f') = M(f') S(f) / M(f) = m wherever
the ratio S / M moves less than the figures do (it is the run's shape: ramp, drain, prefill mix) and the steady
model can meet every corrected target. ``ITERATIONS`` such rounds; each round's replays are reported
(``ReplayFit.rounds``), and the figures kept are those of ``KEEP_RULE`` (the steady fit's where no round beats it:
five figures cannot always meet the corrected targets together).

Where the runs report their TTFT, the same replays give the request overhead (``fit_request_overhead``): the time a
request spends outside the GPU steps, which the simulation adds to its way to the scheduler
(``SchedulerConfig.request_overhead_s``), read at the runs of the lowest client concurrency (``OVERHEAD_RULE``).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.fit.points import MeasuredPoint, point_from_result
from dsdsim.records import frozen
from dsdsim.units import median_abs

ITERATIONS = 2       # replay rounds after the steady fit (the ratio S / M is the run's shape: it settles at once)


@frozen
class ReplayedRun:
    """One measured run that can be replayed: its file, the point it measures (its mean TPOT, ms) and its TTFT p50
    (ms; None where the result holds neither ``median_ttft_ms`` nor ``ttfts``)."""

    path: str
    point: MeasuredPoint
    ttft_p50_ms: Optional[float] = None

    @property
    def name(self) -> str:
        return Path(self.path).name


def replayable_runs(paths: Sequence[str | Path], context: int) -> list[ReplayedRun]:
    """The runs among ``paths`` saved with their requests (a ``vllm bench serve --save-detailed`` result: one JSON
    object with ``input_lens`` and ``output_lens``); CSV rows and SGLang's JSON lines hold no requests."""
    out = []
    for raw in paths:
        path = Path(raw)
        if path.suffix.lower() == ".csv":
            continue
        try:
            obj = json.loads(path.read_text(encoding="utf-8-sig"))
        except (OSError, ValueError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("input_lens"), list) and isinstance(obj.get("output_lens"),
                                                                                               list):
            out.append(ReplayedRun(str(path), point_from_result(path, obj, context), _ttft_p50_ms(obj)))
    return out


def _ttft_p50_ms(obj: dict) -> Optional[float]:
    """A result's TTFT p50 in ms: ``median_ttft_ms`` (vllm bench serve), else the median of ``ttfts`` (seconds, per
    request, --save-detailed); None where neither is a finite number."""
    v = obj.get("median_ttft_ms")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
        return float(v)
    t = obj.get("ttfts")
    if isinstance(t, list) and t and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                                         for x in t):
        return 1e3 * float(np.median(t))
    return None


def replayed(setup, run: ReplayedRun, seed: int = 0, request_overhead_s: float = 0.0):
    """``run`` replayed on ``setup`` (its ``PolicyResult``): its requests, client limit and arrivals, at its K
    (``none`` at K = 0) with its measured acceptance length, each request reaching the scheduler
    ``request_overhead_s`` after it is sent."""
    from dsdsim.serve.simulate import default_scheduler, simulate

    p = run.point
    acceptance = f"al={p.acceptance_length:g}@{p.k}" if p.k > 0 else None
    res = simulate(setup, f"trace:{run.path}", "none" if p.k == 0 else f"fixed:{p.k}", requests=None,
                   acceptance=acceptance, seed=seed,
                   scheduler=default_scheduler(setup, request_overhead_s=request_overhead_s))
    return res.policies[0]


def simulated_itl_ms(setup, run: ReplayedRun, seed: int = 0, request_overhead_s: float = 0.0) -> float:
    """The mean TPOT (ms, as vllm bench serve counts it) of ``run`` replayed on ``setup`` (``replayed``)."""
    return float(replayed(setup, run, seed, request_overhead_s).tpot_ms.mean)


OVERHEAD_ROUNDS = 2   # the request overhead: estimated at none, then again at the first estimate


@frozen
class RequestOverheadFit:
    """The request overhead (``SchedulerConfig.request_overhead_s``) the runs' TTFT p50 imply, read at the lightest
    load they measured (``OVERHEAD_RULE``); each run's measured TTFT p50 and its replays' without and with the
    overhead (ms), and which runs it was read from."""

    overhead_ms: float
    runs: tuple[ReplayedRun, ...]
    without_ms: tuple[float, ...]
    with_ms: tuple[float, ...]
    read_from: tuple[bool, ...]


OVERHEAD_RULE = ("the median, over the runs at the lowest client concurrency, of measured minus replayed TTFT p50, "
                 "re-estimated once replayed with it; 0 where the replays are already slower (a light load's TTFT is "
                 "the overhead and one prefill: under load it also holds queueing, which the step figures, fitted "
                 "to decode steps, price less surely)")


def fit_request_overhead(setups: tuple, runs: Sequence[ReplayedRun], rounds: int = OVERHEAD_ROUNDS
                         ) -> Optional[RequestOverheadFit]:
    """``RequestOverheadFit`` (``OVERHEAD_RULE``) over the runs that report a TTFT, replayed on ``setups`` (the
    speculative setup for K > 0 runs, the plain one for K = 0: ``ShapeCalibration.fitted_setups``); the second round
    replays at the first estimate (a closed loop's client waits that much longer between requests, so the load
    moves a little). None where no run reports a TTFT."""
    timed = sorted((r for r in runs if r.ttft_p50_ms is not None), key=lambda r: r.point.batch)
    if not timed:
        return None
    lightest = [r.point.batch == timed[0].point.batch for r in timed]

    def ttfts(overhead_s: float, which: Sequence[bool]) -> list[Optional[float]]:
        return [float(replayed(setups[0] if r.point.k > 0 else setups[1], r, request_overhead_s=overhead_s)
                      .ttft_ms.p50) if w else None for r, w in zip(timed, which)]

    overhead_s, first = 0.0, None
    for _ in range(rounds):
        sim = ttfts(overhead_s, lightest if first is not None else [True] * len(timed))
        first = sim if first is None else first
        gap_ms = float(np.median([r.ttft_p50_ms - s for r, s, w in zip(timed, sim, lightest) if w]))
        overhead_s = max(0.0, overhead_s + gap_ms / 1e3)
    return RequestOverheadFit(round(1e3 * overhead_s, 3), tuple(timed), tuple(first),
                              tuple(ttfts(overhead_s, [True] * len(timed))), tuple(lightest))


@frozen
class ReplayRound:
    """One round: each run's simulated mean TPOT (ms) at the round's figures, beside the steady model's."""

    factors: tuple[float, ...]
    simulated_ms: tuple[float, ...]
    steady_ms: tuple[float, ...]


@frozen
class ReplayFit:
    """The calibration through the replays: the runs, the rounds (round 0 at the steady fit's figures, each next
    one at the figures fitted to the targets the round before corrected), the round kept (``KEEP_RULE``) and its
    ShapeCalibration (round 0: the steady fit; else fitted to that round's corrected targets)."""

    runs: tuple[ReplayedRun, ...]
    rounds: tuple[ReplayRound, ...]
    kept: int
    calibration: object

    @property
    def final(self) -> ReplayRound:
        return self.rounds[self.kept]

    def errors(self, i: Optional[int] = None) -> list[float]:
        """Each run's replayed mean TPOT against its measured one, at round ``i`` (None: the round kept)."""
        r = self.rounds[self.kept if i is None else i]
        return [s / run.point.itl_ms - 1.0 for s, run in zip(r.simulated_ms, self.runs)]


KEEP_RULE = "the round whose replays have the smallest median |error| against the measured mean TPOT"


def fit_through_replay(cal, points: Sequence[MeasuredPoint], runs: Sequence[ReplayedRun],
                       iterations: int = ITERATIONS, progress=None, request_overhead_s: float = 0.0) -> ReplayFit:
    """Refit ``cal`` (a fitted ``ShapeCalibration``) with the targets of the runs it can replay corrected by their
    replays (module docstring). ``points``: every point fitted (the runs' among them, matched by batch, K and
    context); ``request_overhead_s``: the runs' request overhead, replayed with them (a closed loop's server holds
    fewer requests while its clients' requests are on their way). Returns the rounds and the final calibration."""
    from dsdsim.fit.shape import ShapeCalibration

    if not runs:
        raise DsdsimError("--replay needs runs saved with their requests: vllm bench serve --save-result "
                          "--save-detailed (input_lens and output_lens in the JSON)")
    key = {(p.batch, p.k, p.context): i for i, p in enumerate(points)}
    at = [key.get((r.point.batch, r.point.k, r.point.context)) for r in runs]
    if any(i is None for i in at):
        raise DsdsimError("a replayed run is not among the fitted points")   # read from the same files: a bug
    rounds, targets_of = [], [None]
    current = cal
    total = iterations + 1
    for n in range(total):
        setups = current.fitted_setups()
        sim = []
        for j, r in enumerate(runs):
            if progress is not None:
                progress(n * len(runs) + j, total * len(runs))
            sim.append(simulated_itl_ms(setups[0] if r.point.k > 0 else setups[1], r,
                                        request_overhead_s=request_overhead_s))
        steady = [float(v) for v in current.predict_ms([r.point for r in runs])]
        rounds.append(ReplayRound(tuple(float(v) for v in current.factors_), tuple(sim), tuple(steady)))
        if n == total - 1:
            break
        ratio: dict[int, list[float]] = {}
        for i, s, m in zip(at, sim, steady):
            ratio.setdefault(i, []).append(m / s)
        targets = [replace(p, itl_ms=p.itl_ms * float(np.mean(ratio[i]))) if i in ratio else p
                   for i, p in enumerate(points)]
        targets_of.append(targets)
        current = ShapeCalibration(cal.setup, cal.async_scheduling, cal.engine_method).fit(targets,
                                                                                         leave_one_out=False)
    score = [median_abs([s / r.point.itl_ms - 1.0 for s, r in zip(rd.simulated_ms, runs)]) for rd in rounds]
    kept = min(range(total), key=lambda i: (score[i], -i))       # ties: the later round
    final = cal if kept == 0 else ShapeCalibration(cal.setup, cal.async_scheduling, cal.engine_method).fit(
        targets_of[kept])                                          # with its leave-one-out errors
    return ReplayFit(tuple(runs), tuple(rounds), kept, final)
