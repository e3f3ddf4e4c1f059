"""Measuring a validation run with torch (loop 1 of ``dsdsim validate``): each distinct operator shape alone,
whole passes through a torch decoder (one layer per kind; the EAGLE-3 head's first and later passes), and whole
speculative steps on the full layer stack, each a ``Point`` with the prediction of the same operators. One
failing item records its error and the run moves on; a time budget skips what is left past it; a partial
report.json is written after each stage."""
from __future__ import annotations

import datetime as _dt
import json
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from dsdsim.bench.grid import Grid
from dsdsim.bench.reduce import slice_model
from dsdsim.cost.drafters.base import eagle_layer
from dsdsim.cost.drafts import draft_ops
from dsdsim.cost.layers import PassContext, pass_ops
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.cost.timing import op_time
from dsdsim.export.validation import write_json
from dsdsim.fit.calibrate import OpRecord, Point, op_features
from dsdsim.fit.validation import SKIP_KINDS, clean_name, error_record, spec_step_ops, vocab_for
from dsdsim.specs.drafter import DrafterKind, DrafterSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec
from dsdsim.units import DType

ProgressFn = Callable[[int, int, str], None]      # (done, total, what)


def measure_ops(unique: dict[str, OpCost], model: ModelSpec, drafter, hw: HardwareSpec, act_dtype: DType,
                device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]) -> dict[str, Point]:
    """Each distinct operator shape, timed alone: as a CUDA-graph replay over rotated inputs on a GPU (kernel
    time), eagerly on a CPU. A shape that fails records its error and the run moves on."""
    from dsdsim.bench.shapes import TensorPool, build_bench, measured_experts_touched, not_benched
    from dsdsim.bench.timing import count_kernels, last_level_cache_bytes, rotation_sets, time_kernels

    llc = last_level_cache_bytes(device)
    pool = TensorPool(device, seed=0, cache_bytes=llc)
    moe = model.moe_ffn
    graphs = grid.graphs and device.startswith("cuda")
    out: dict[str, Point] = {}
    unbenched: set[str] = set()
    # a stable shuffle (by a hash of the shape key): a run cut short by its time budget still covers every kind
    for key, op in sorted(unique.items(), key=lambda kv: zlib.crc32(kv[0].encode())):
        name = clean_name(op.name)
        if not tick(name):
            continue
        why = not_benched(op)
        if why is not None:
            if name not in unbenched:             # said once per operator, not per shape
                unbenched.add(name)
                errors.append({"what": f"operator {name}", "error": f"not timed alone: {why}"})
            continue
        try:
            bench = build_bench(op, pool, act_dtype, num_experts=moe.num_experts if moe else None,
                                vocab=vocab_for(op, model, drafter), hidden=model.hidden_size)
            if bench is None:
                continue
            rotate = rotation_sets(bench.bytes_per_set, llc, grid.max_rotate, 1.5e9)
            t = time_kernels(bench.fn, bench.make_inputs, device, rotate=rotate, repeats=grid.repeats,
                             warmup=grid.warmup, warmup_s=grid.warmup_s, budget_s=grid.budget_s, graphs=graphs)
            shape = dict(bench.shape)
            if op.kind is OpKind.moe_experts:
                shape["experts_touched_measured"] = measured_experts_touched(bench, rotate)
            graphed = t.mode == "graph"
            pred = float(np.asarray(op_time(op, hw, cuda_graphs=graphed).time_s))
            out[key] = Point(kind=op.kind.value, name=name, shape=shape, measured_s=t.median_s,
                             predicted_s=pred, components=[op_features(op, hw)], ops=[OpRecord.from_op(op)],
                             p10_s=t.p10_s, p90_s=t.p90_s,
                             kernels=count_kernels(bench.fn, bench.make_inputs(0), device), measured_as="operator",
                             timing_mode=t.mode)
        except Exception as exc:                      # one shape must not end the run
            errors.append(error_record(f"operator {name} {json.loads(key)[3]}", exc))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        if device.startswith("cuda") and pool.nbytes > 40e9:
            pool.clear()
            torch.cuda.empty_cache()
    pool.clear()
    return out




def measure_passes(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, hw: HardwareSpec,
                   act_dtype: DType, device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]
                   ) -> list[Point]:
    """Whole passes through the torch decoder (dsdsim.bench.model): verify with one layer per kind, and the
    EAGLE-3 head's first / later passes."""
    from dsdsim.bench.model import Eagle3Head, TorchDecoder, UnsupportedSpec, set_timing_mode
    from dsdsim.bench.timing import count_kernels, time_kernels, torch_dtype

    dt = torch_dtype(act_dtype)
    sliced = slice_model(model)
    c = grid.contexts[0]
    qmax = max(grid.step_ks) + 1
    graphs = grid.graphs and device.startswith("cuda")
    try:
        decoder = TorchDecoder(sliced, dtype=dt, device=device, seed=1, timing=True)
    except UnsupportedSpec as exc:
        errors.append(error_record("whole passes", exc))
        return []
    head = None
    if drafter is not None and drafter.kind is DrafterKind.eagle3:
        head = set_timing_mode(Eagle3Head(eagle_layer(model, drafter), model.hidden_size, drafter.draft_vocab_size,
                                          dt, device))
    gen = torch.Generator(device=device).manual_seed(3)
    points: list[Point] = []

    def timed(fn, make):
        return time_kernels(fn, make, device, rotate=2, repeats=grid.repeats, warmup=grid.warmup,
                            warmup_s=grid.warmup_s, budget_s=2 * grid.budget_s, graphs=graphs)

    for b in grid.step_batches:
        try:
            cache, dcache = _filled_caches(decoder, head, b, c, qmax, seed=10)
        except Exception as exc:
            errors.append(error_record(f"pass caches B={b}", exc))
            continue
        for k in grid.step_ks:
            q = k + 1
            if not tick(f"pass B={b} K={k}"):
                continue
            try:
                tokens = [torch.randint(0, model.vocab_size, (b, q), generator=gen, device=device) for _ in range(2)]
                draft_probs = torch.rand(b * q, model.vocab_size, generator=gen, device=device)

                def verify(tok, rejection=k > 0):
                    logits = decoder.logits(decoder.hidden(tok, cache, uniform=c)).view(b * q, -1)
                    p = torch.softmax(logits, dim=-1)
                    if rejection:
                        p = (p - draft_probs).clamp_(min=0.0)
                    return torch.argmax(p, dim=-1)

                t = timed(verify, lambda i: (tokens[i % 2],))
                ops = [o for o in pass_ops(sliced, pc, b, q, c, sampling_passes=2.0 if k > 0 else 1.0)
                       if o.kind not in SKIP_KINDS]
                points.append(_step_point("verify", {"batch": b, "q": q, "context": c, "layers": sliced.num_layers},
                                          t, ops, hw, count_kernels(verify, (tokens[0],), device)))
            except Exception as exc:
                errors.append(error_record(f"verify pass B={b} K={k}", exc))
                continue
            if head is None or k == 0:
                continue
            h = model.hidden_size
            if not tick(f"draft B={b} K={k}"):
                continue
            try:
                feats = [torch.randn(b, q, 3 * h, generator=gen, device=device).to(dt) for _ in range(2)]
                first = timed(lambda tok, f: head.step(tok, f, dcache, c, True), lambda i: (tokens[i % 2], feats[i % 2]))
                one_tok = [tt[:, :1] for tt in tokens]
                hid = [torch.randn(b, 1, h, generator=gen, device=device).to(dt) for _ in range(2)]
                later = timed(lambda tok, f: head.step(tok, f, dcache, c + q, False), lambda i: (one_tok[i % 2], hid[i % 2]))
                d_ops = [o for o in draft_ops(model, drafter, pc, b, max(k, 2), c) if o.kind not in SKIP_KINDS]
                p1 = [replace(o, count=1) for o in d_ops if o.name.startswith("pass1.")]
                pn = [replace(o, count=1) for o in d_ops if o.name.startswith("passN.")]
                if k != max(k, 2):   # K = 1: the first pass is over q = 2 tokens; recompute it at this K
                    p1 = [replace(o, count=1) for o in draft_ops(model, drafter, pc, b, k, c)
                          if o.name.startswith("pass1.") and o.kind not in SKIP_KINDS]
                k1 = count_kernels(lambda tok, f: head.step(tok, f, dcache, c, True), (tokens[0], feats[0]), device)
                kn = count_kernels(lambda tok, f: head.step(tok, f, dcache, c + q, False), (one_tok[0], hid[0]), device)
                points.append(_step_point("draft_first", {"batch": b, "q": q, "context": c}, first, p1, hw, k1))
                points.append(_step_point("draft_next", {"batch": b, "q": 1, "context": c + q}, later, pn, hw, kn))
            except Exception as exc:
                errors.append(error_record(f"draft passes B={b} K={k}", exc))
        cache = dcache = None            # free this batch's caches before the next
    return points


def _step_point(name: str, shape: dict, t, ops: Sequence[OpCost], hw: HardwareSpec, kernels: int) -> Point:
    graphed = t.mode == "graph"
    pred = float(sum(np.asarray(op_time(o, hw, cuda_graphs=graphed).time_s) for o in ops))
    whole = name == "spec_step"            # only a whole speculative step carries the per-step overhead
    return Point(kind="step", name=name, shape=shape, measured_s=t.median_s, predicted_s=pred,
                 components=[op_features(o, hw) for o in ops], ops=[OpRecord.from_op(o) for o in ops], is_step=whole,
                 p10_s=t.p10_s, p90_s=t.p90_s,
                 kernels=kernels, measured_as="pass", timing_mode=t.mode)



def measure_spec_steps(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, hw: HardwareSpec,
                       act_dtype: DType, device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]
                        ) -> list[Point]:
    """Whole speculative steps on the full layer stack, timed end to end: the EAGLE-3 head's first pass over
    K + 1 tokens and K - 1 single-token passes (each with its lm_head and greedy pick), then the target's
    verify pass over K + 1 tokens with rejection sampling (softmax, max(0, p - q), pick). K = 0 is a plain
    decoding step. On a GPU the whole step is one CUDA graph (as serving engines capture decode steps)."""
    from dsdsim.bench.model import Eagle3Head, TorchDecoder, UnsupportedSpec, set_timing_mode
    from dsdsim.bench.timing import count_kernels, time_kernels, torch_dtype

    if not grid.spec_batches or not grid.spec_ks or not grid.spec_contexts:
        return []
    dt = torch_dtype(act_dtype)
    cuda = device.startswith("cuda")
    graphs = grid.graphs and cuda
    try:
        decoder = TorchDecoder(model, dtype=dt, device=device, seed=5, timing=True)
    except UnsupportedSpec as exc:
        errors.append(error_record("whole steps", exc))
        return []
    head = None
    if drafter is not None and drafter.kind is DrafterKind.eagle3:
        head = set_timing_mode(Eagle3Head(eagle_layer(model, drafter), model.hidden_size, drafter.draft_vocab_size,
                                          dt, device))
    h, vocab = model.hidden_size, model.vocab_size
    qmax = max(grid.spec_ks) + 1
    kv_bytes_per_token = sum(2 * l.attention.num_kv_heads * l.attention.head_dim for l in model.layers) * dt.itemsize
    gen = torch.Generator(device=device).manual_seed(7)
    points: list[Point] = []
    for c in grid.spec_contexts:
        batches = [b for b in grid.spec_batches if _cache_fits(b, c + qmax + 1, kv_bytes_per_token, device)]
        for b in sorted(set(grid.spec_batches) - set(batches)):
            errors.append({"what": f"whole step B={b} c={c}", "error": "skipped: the KV cache does not fit"})
        if not batches:
            continue
        bmax = max(batches)
        try:
            cache_all, dcache_all = _filled_caches(decoder, head, bmax, c, qmax, seed=30)
        except Exception as exc:
            errors.append(error_record(f"whole-step caches c={c} B={bmax}", exc))
            continue
        for b in batches:
            cache = _batch_view(cache_all, b)
            dcache = _batch_view(dcache_all, b) if dcache_all is not None else None
            for k in grid.spec_ks:
                q = k + 1
                if not tick(f"whole step B={b} K={k} c={c}"):
                    continue
                try:
                    tokens = torch.randint(0, vocab, (b, q), generator=gen, device=device)
                    feats = torch.randn(b, q, 3 * h, generator=gen, device=device).to(dt)
                    draft_probs = torch.rand(b * q, vocab, generator=gen, device=device)
                    use_head = head is not None and k > 0

                    def step(tok=tokens, f=feats, k=k, q=q, b=b, cache=cache, dcache=dcache, use_head=use_head):
                        if use_head:
                            d = head.step(tok, f, dcache, c, True)                     # first pass, q tokens
                            x = f[:, :1, :h]
                            for i in range(1, k):                                       # K - 1 later passes
                                d = head.step(d.unsqueeze(1), x, dcache, c + q + i - 1, False)
                        logits = decoder.logits(decoder.hidden(tok, cache, uniform=c)).view(b * q, -1)
                        p = torch.softmax(logits, dim=-1)
                        if k > 0:
                            p = (p - draft_probs).clamp_(min=0.0)                       # rejection residual
                        return torch.argmax(p, dim=-1)

                    t = time_kernels(step, lambda i: (), device, rotate=1, repeats=grid.repeats, warmup=grid.warmup,
                                     warmup_s=grid.warmup_s, budget_s=4 * grid.budget_s, graphs=graphs)
                    ops = spec_step_ops(model, drafter, pc, b, k, c)
                    kernels = count_kernels(step, (), device)
                    pt = _step_point("spec_step", {"batch": b, "k": k, "context": c, "layers": model.num_layers},
                                     t, ops, hw, kernels)
                    pt.kind, pt.measured_as = "spec_step", "spec_step"
                    points.append(pt)
                except Exception as exc:
                    errors.append(error_record(f"whole step B={b} K={k} c={c}", exc))
                    if cuda:
                        torch.cuda.synchronize()
        del cache_all, dcache_all
        if cuda:
            torch.cuda.empty_cache()
    return points


def _filled_caches(decoder, head, batch: int, context: int, qmax: int, seed: int):
    """KV caches of the target and the draft head holding ``context`` random tokens per sequence, with room for
    the verify tokens (and the head's later passes)."""
    cache = decoder.new_cache(batch, context + qmax + 1)
    cache.fill_random(context, seed=seed)
    dcache = head.new_cache(batch, context + 2 * qmax + 1) if head is not None else None
    if dcache is not None:
        dcache.fill_random(context, seed=seed + 10)
    return cache, dcache


def _batch_view(cache, b: int):
    """The first ``b`` sequences of a cache made for more (a view: no copy)."""
    from dsdsim.bench.model import KVCache

    return KVCache([t[:b] for t in cache.k], [t[:b] for t in cache.v], cache.lengths[:b], cache.head_major)


def _cache_fits(batch: int, tokens: int, kv_bytes_per_token: float, device: str, headroom: float = 0.8) -> bool:
    """Whether a KV cache of batch x tokens fits in what the device has free (CPU: always)."""
    if not device.startswith("cuda"):
        return True
    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return batch * tokens * kv_bytes_per_token < headroom * free



class StageBudget:
    """A wall-time budget shared by the stages of a run: each stage may use up to its share of what is left
    (the last stage everything), so a cut-short stage leaves time for the next ones. None: unlimited."""

    def __init__(self, total_s: Optional[float]):
        import time

        self._now = time.perf_counter
        self.end = None if total_s is None else self._now() + float(total_s)
        self.stage_end = self.end

    def stage(self, share: float) -> None:
        if self.end is not None:
            self.stage_end = self._now() + share * max(0.0, self.end - self._now())

    def exhausted(self) -> bool:
        return self.stage_end is not None and self._now() > self.stage_end


class _Tracker:
    """Progress, the time budget and the list of what failed or was skipped, shared by the stages."""

    def __init__(self, total: int, progress: Optional[ProgressFn], budget_s: Optional[float]):
        self.total, self.progress, self.done = total, progress, 0
        self.budget = StageBudget(budget_s)
        self.errors: list[dict] = []

    def tick(self, what: str) -> bool:
        """Report progress; False once the stage's share of the time budget is spent (the item is skipped)."""
        if self.progress is not None:
            self.progress(self.done, self.total, what)
        self.done += 1
        if self.budget.exhausted():
            self.errors.append({"what": what, "error": "skipped: time budget spent"})
            return False
        return True


def _header(run, cfg) -> dict:
    from dsdsim.bench.timing import device_name

    g, dev = run.grid, run.device
    header = {
        "model": run.model_full.name, "model_measured": run.model.name, "hardware": run.hw.name, "device": dev,
        "device_name": device_name(dev), "date": _dt.date.today().isoformat(), "torch_version": torch.__version__,
        "threads": torch.get_num_threads() if dev == "cpu" else None, "dtype": run.dtype.value,
        "drafter": run.drafter.label if run.drafter else None, "cuda_graphs": run.graphs, "quick": cfg.quick,
        "reduced": run.reduced,
        "timing": ("kernel time: each operator, pass and whole step captured in a CUDA graph and replayed "
                   "(no host dispatch); warm-up >= %.0f ms per item" % (g.warmup_s * 1e3)) if run.graphs else
                  "eager: one call between timers (host dispatch included)",
        "grid": {"batches": list(g.batches), "ks": list(g.ks), "contexts": list(g.contexts),
                 "step_batches": list(g.step_batches), "step_ks": list(g.step_ks), "warmup": g.warmup,
                 "repeats": g.repeats, "spec_batches": list(g.spec_batches), "spec_ks": list(g.spec_ks),
                 "spec_contexts": list(g.spec_contexts), "warmup_s": g.warmup_s},
    }
    if run.cuda:
        from dsdsim.bench.shapes import decode_backend, grouped_mm_available
        from dsdsim.bench.timing import torch_dtype

        header["attention_backend"] = decode_backend(dev, torch_dtype(run.dtype))
        header["moe_kernel"] = ("torch._grouped_mm" if grouped_mm_available(dev, torch_dtype(run.dtype))
                                else "loop over touched experts")
    return header


def measure(run, cfg, progress: Optional[ProgressFn]) -> tuple[list[Point], list[dict], dict]:
    """The three stages (operators, passes, whole steps), a partial report written after each. ``run``: the
    resolved inputs (dsdsim.bench.validate); returns (points, errors, clocks)."""
    from dsdsim.bench.timing import sm_clock_mhz

    g, d = run.grid, run.drafter
    n_passes = (len(g.step_batches) * len(g.step_ks) * (1 + 2 * (d is not None))) if cfg.steps else 0
    n_spec = len(g.spec_batches) * len(g.spec_ks) * len(g.spec_contexts) if cfg.steps else 0
    track = _Tracker(len(run.unique) + n_passes + n_spec, progress, cfg.time_budget_s)
    clocks = {"sm_mhz_start": sm_clock_mhz(run.device)}
    header = _header(run, cfg)
    torch.manual_seed(0)

    def checkpoint(stage: str, pts: Sequence[Point]) -> None:
        if cfg.output_dir is not None:
            out = Path(cfg.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "report.json", {**header, "partial": True, "stage": stage, "errors": track.errors,
                                             "clocks": clocks, "points": [p.to_json() for p in pts]})

    args = (run.model, run.drafter, run.hw, run.dtype, run.device, run.grid, track.tick, track.errors)
    track.budget.stage(0.45 if cfg.steps else 1.0)
    op_points = measure_ops(run.unique, *args)
    run.op_points = op_points
    checkpoint("operators", list(op_points.values()))
    track.budget.stage(0.10)
    m, d, hw, wdt, dev, grid, tick, errors = args
    pass_points = measure_passes(m, d, run.pc, hw, wdt, dev, grid, tick, errors) if cfg.steps else []
    checkpoint("passes", list(op_points.values()) + pass_points)
    if run.cuda:
        torch.cuda.empty_cache()
    track.budget.stage(1.0)
    spec_points = measure_spec_steps(m, d, run.pc, hw, wdt, dev, grid, tick, errors) if cfg.steps else []
    points = list(op_points.values()) + pass_points + spec_points
    checkpoint("whole steps", points)
    clocks["sm_mhz_end"] = sm_clock_mhz(run.device)
    run.header = header
    return points, track.errors, clocks

