"""Validate the cost model against torch timings on a real device (``dsdsim validate``).

Loop 1, operators and steps. For a grid of batch size B, draft length K (verify q = K + 1) and context c,
the cost model's own OpCosts of a verify pass (pass_ops) and of the drafter's step (draft_ops) are each run
in torch (dsdsim.bench.shapes) and timed (dsdsim.bench.timing); every distinct shape is one point,
predicted = op_time of the same OpCost on the given spec (eager launches: cuda_graphs=False, as torch runs).
Whole passes are timed too ("step" points): a real torch decoder with one layer of each distinct kind plus
embedding, final norm, lm_head and sampling, and the EAGLE-3 draft head's first and later passes. Points
are split into interleaved train / held-out halves; efficiencies fitted on the train half
(dsdsim.fit.calibrate) are scored on the held-out half.

Loop 2, tables. Measured step times T(B, K) = sum over the step's operators of count x measured time give the
measured best K per batch under an acceptance model; regret = 1 - G(K_predicted) / G(K_best).

When the real layer does not fit the device or the time budget, every dimension is divided by a factor
(hidden, heads, FFN and expert widths, vocabularies; head_dim, experts and top_k kept) and the prediction is
made for THAT reduced spec; the report records the factor and the dimensions used.
"""
from __future__ import annotations

import datetime as _dt
import json
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from dsdsim.fit.summary import TableCheck, ValidationSummary
from dsdsim.fit.calibrate import (Calibrator, OpRecord, Point, calibrate_points, error_summary,
                                    op_features, split_points)
from dsdsim.cost.drafts import draft_ops, eagle_layer
from dsdsim.cost.layers import PassContext, pass_ops
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.cost.step import Setup, simulate_step
from dsdsim.cost.timing import op_time
from dsdsim.specs.catalog import load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, parse_drafter
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import Attention, FFN, Layer, ModelSpec
from dsdsim.units import DType

ProgressFn = Callable[[int, int, str], None]      # (done, total, what)

_SKIP_KINDS = (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather, OpKind.host)


@dataclass(frozen=True)
class Grid:
    """What to measure. ``contexts[0]`` is the operators' table context; later contexts vary attention only.
    ``spec_*``: the whole speculative steps (draft passes + verify pass + rejection sampling, the full layer
    stack) that the K table is checked on."""

    batches: tuple[int, ...]
    ks: tuple[int, ...]
    contexts: tuple[int, ...]
    step_batches: tuple[int, ...]
    step_ks: tuple[int, ...]
    warmup: int
    repeats: int
    budget_s: float
    max_rotate: int = 64
    spec_batches: tuple[int, ...] = ()
    spec_ks: tuple[int, ...] = ()
    spec_contexts: tuple[int, ...] = ()
    warmup_s: float = 0.0          # warm-up wall time per timed thing (GPU clocks ramp from idle)
    graphs: bool = True            # CUDA: time kernels as CUDA-graph replays (no host dispatch)


QUICK_GRID = Grid(batches=(1, 4, 16), ks=(0, 1, 2, 3), contexts=(512, 2048), step_batches=(1, 16), step_ks=(0, 3),
                  warmup=1, repeats=5, budget_s=0.3, spec_batches=(1, 4, 16), spec_ks=(0, 1, 2, 3),
                  spec_contexts=(512,))
FULL_GRID = Grid(batches=(1, 2, 4, 8, 16, 32, 64), ks=(0, 1, 2, 3, 4, 5, 6), contexts=(1024, 4096),
                 step_batches=(1, 4, 16, 64), step_ks=(0, 1, 3, 6), warmup=2, repeats=9, budget_s=1.0,
                 spec_batches=(1, 2, 4, 8, 16, 32, 64), spec_ks=(0, 1, 2, 3, 4, 5, 6), spec_contexts=(1024,))
GPU_GRID = Grid(batches=(1, 2, 4, 8, 16, 32, 64, 128), ks=(0, 1, 2, 3, 4, 5, 6), contexts=(1024, 8192),
                step_batches=(1, 8, 64), step_ks=(0, 3, 6), warmup=3, repeats=15, budget_s=0.05,
                spec_batches=(1, 2, 4, 8, 16, 32, 64, 128), spec_ks=(0, 1, 2, 3, 4, 5, 6), spec_contexts=(1024, 8192),
                warmup_s=0.025)
TINY_GRID = Grid(batches=(1, 2), ks=(0, 2), contexts=(64, 128), step_batches=(2,), step_ks=(0, 2), warmup=1,
                 repeats=2, budget_s=0.05, spec_batches=(1, 2), spec_ks=(0, 1, 2), spec_contexts=(64,))
GRIDS = {"quick": QUICK_GRID, "full": FULL_GRID, "gpu": GPU_GRID, "tiny": TINY_GRID}


@dataclass
class ValidationReport:
    """Everything ``validate`` measured and concluded; ``data`` is the report.json content."""

    data: dict
    points: list[Point]
    calibrated_hardware: HardwareSpec
    paths: dict[str, Path] = field(default_factory=dict)

    @property
    def summary(self) -> ValidationSummary:
        return ValidationSummary.from_json(self.data["summary"])

    @property
    def table_check(self) -> TableCheck:
        return TableCheck.from_json(self.data["table_check"])

    @property
    def errors(self) -> list[dict]:
        """What failed or was skipped: {"what", "error"} per item, as report.json lists them."""
        return list(self.data.get("errors") or [])


# --- size reduction -------------------------------------------------------------------------------------


def reduce_model(model: ModelSpec, factor: int) -> tuple[ModelSpec, dict]:
    """Divide widths by ``factor`` (head_dim, layer count, experts and top_k kept). Returns the spec and a
    record of what changed."""
    if factor <= 1:
        return model, {"factor": 1}

    def div(n: int, minimum: int = 1) -> int:
        return max(minimum, int(n // factor))

    def attn(a: Attention) -> Attention:
        heads = div(a.num_heads)
        kv = max(1, min(heads, div(a.num_kv_heads)))
        while heads % kv:
            kv -= 1
        upd = {"num_heads": heads, "num_kv_heads": kv}
        if a.q_lora_rank:
            upd["q_lora_rank"] = div(a.q_lora_rank, 16)
        if a.kv_lora_rank:
            upd["kv_lora_rank"] = div(a.kv_lora_rank, 16)
        if a.window:
            upd["window"] = a.window
        return a.model_copy(update=upd)

    def ffn(f: FFN) -> FFN:
        upd = {}
        if f.intermediate_size:
            upd["intermediate_size"] = div(f.intermediate_size, 8)
        if f.expert_intermediate_size:
            upd["expert_intermediate_size"] = div(f.expert_intermediate_size, 8)
        if f.shared_intermediate_size:
            upd["shared_intermediate_size"] = div(f.shared_intermediate_size, 8)
        return f.model_copy(update=upd)

    def layer(l: Layer) -> Layer:
        return l.model_copy(update={"attention": attn(l.attention), "ffn": ffn(l.ffn)})

    layers = [layer(l) for l in model.layers]
    reduced = model.model_copy(update={
        "name": f"{model.name}/{factor}", "hidden_size": div(model.hidden_size, 64), "vocab_size": div(model.vocab_size, 256),
        "layers": tuple(layers), "mtp_layer": layer(model.mtp_layer) if model.mtp_layer else None})
    first = reduced.layers[0]
    record = {"factor": factor, "hidden_size": [model.hidden_size, reduced.hidden_size],
              "vocab_size": [model.vocab_size, reduced.vocab_size],
              "num_heads": [model.layers[0].attention.num_heads, first.attention.num_heads],
              "num_kv_heads": [model.layers[0].attention.num_kv_heads, first.attention.num_kv_heads],
              "head_dim": first.attention.head_dim, "layers": model.num_layers,
              "note": "widths divided by the factor; head_dim, layer count, experts and top_k kept; predictions use "
                      "this reduced spec"}
    f0 = model.layers[0].ffn
    if f0.intermediate_size:
        record["intermediate_size"] = [f0.intermediate_size, first.ffn.intermediate_size]
    moe = model.moe_ffn
    if moe is not None:
        rmoe = reduced.moe_ffn
        record["expert_intermediate_size"] = [moe.expert_intermediate_size, rmoe.expert_intermediate_size]
        record["num_experts"] = moe.num_experts
        record["top_k"] = moe.top_k
    return reduced, record


def reduce_drafter(drafter: Optional[DrafterSpec], factor: int) -> Optional[DrafterSpec]:
    if drafter is None or factor <= 1:
        return drafter
    upd = {"draft_vocab_size": max(256, drafter.draft_vocab_size // factor)}
    if drafter.intermediate_size:
        upd["intermediate_size"] = max(8, drafter.intermediate_size // factor)
    return drafter.model_copy(update=upd)


def auto_reduction(device: str, quick: bool) -> int:
    """Real dimensions on a GPU; on a CPU divide widths so the run fits the time budget."""
    return 1 if device.startswith("cuda") else (4 if quick else 2)


# --- the operator grid ----------------------------------------------------------------------------------


def _key(op: OpCost, vocab: Optional[int]) -> str:
    shape = {k: float(np.asarray(v)) for k, v in (op.shape._asdict() if op.shape is not None else {}).items()}
    impl = ""
    if op.kind is OpKind.elementwise:
        n = op.name.lower()
        impl = "rotary" if "rotary" in n else "act" if ".act" in n else "norm"
    return json.dumps([op.kind.value, op.dtype.value, impl, shape, round(float(np.asarray(op.bytes))),
                       round(float(np.asarray(op.flops))), vocab], sort_keys=True)


def _vocab_for(op: OpCost, model: ModelSpec, drafter: Optional[DrafterSpec]) -> Optional[int]:
    if op.kind is not OpKind.logits:
        return None
    if drafter is not None and drafter.kind is DrafterKind.eagle3 and "eagle3." in op.name:
        return drafter.draft_vocab_size
    return model.vocab_size


def _clean_name(name: str) -> str:
    for prefix in ("pass1.", "passN."):
        name = name.replace(prefix, "")
    if name.startswith("L(") and ")." in name:
        name = "L." + name.split(").", 1)[1]
    return name


@dataclass
class StepOps:
    """The operators of one (B, K) step with their per-step counts (comm / host kinds dropped)."""

    batch: int
    k: int
    ops: list[tuple[str, OpCost, float]]       # (key, one-occurrence op, count)


def step_ops(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, batch: int, k: int, context: int
             ) -> StepOps:
    """Verify pass (q = K + 1, rejection sampling when K > 0) and the draft phase, as keyed single occurrences."""
    q = k + 1
    ops = list(pass_ops(model, pc, batch, q, context, sampling_passes=2.0 if k > 0 else 1.0))
    if drafter is not None and k > 0:
        ops += draft_ops(model, drafter, pc, batch, k, context)
    out = []
    for op in ops:
        count = float(np.asarray(op.count))
        if op.kind in _SKIP_KINDS or count <= 0:
            continue
        single = replace(op, count=1)
        out.append((_key(single, _vocab_for(single, model, drafter)), single, count))
    return StepOps(batch, k, out)


# --- measuring ------------------------------------------------------------------------------------------


def _measure_ops(unique: dict[str, OpCost], model: ModelSpec, drafter, hw: HardwareSpec, act_dtype: DType,
                 device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]) -> dict[str, Point]:
    """Each distinct operator shape, timed alone: as a CUDA-graph replay over rotated inputs on a GPU (kernel
    time), eagerly on a CPU. A shape that fails records its error and the run moves on."""
    import torch

    from dsdsim.bench.shapes import TensorPool, build_bench, measured_experts_touched
    from dsdsim.bench.timing import count_kernels, last_level_cache_bytes, rotation_sets, time_kernels

    llc = last_level_cache_bytes(device)
    pool = TensorPool(device, seed=0, cache_bytes=llc)
    moe = model.moe_ffn
    graphs = grid.graphs and device.startswith("cuda")
    out: dict[str, Point] = {}
    # a stable shuffle (by a hash of the shape key): a run cut short by its time budget still covers every kind
    for key, op in sorted(unique.items(), key=lambda kv: zlib.crc32(kv[0].encode())):
        name = _clean_name(op.name)
        if not tick(name):
            continue
        try:
            bench = build_bench(op, pool, act_dtype, num_experts=moe.num_experts if moe else None,
                                vocab=_vocab_for(op, model, drafter), hidden=model.hidden_size)
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
            errors.append(_error(f"operator {name} {json.loads(key)[3]}", exc))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        if device.startswith("cuda") and pool.nbytes > 40e9:
            pool.clear()
            torch.cuda.empty_cache()
    pool.clear()
    return out


def _error(what: str, exc: BaseException) -> dict:
    return {"what": what, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]}


def _slice_model(model: ModelSpec) -> ModelSpec:
    """One layer of each distinct kind (the stack a step point runs)."""
    layers = tuple(layer for layer, _ in model.layer_groups())
    return model.model_copy(update={"layers": layers, "name": f"{model.name}[{len(layers)} layers]"})


def _measure_steps(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, hw: HardwareSpec,
                   act_dtype: DType, device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]
                   ) -> list[Point]:
    """Whole passes through the torch decoder (dsdsim.bench.model): verify with one layer per kind, and the
    EAGLE-3 head's first / later passes."""
    import torch

    from dsdsim.bench.model import Eagle3Head, TorchDecoder, UnsupportedSpec, set_timing_mode
    from dsdsim.bench.timing import count_kernels, time_kernels, torch_dtype

    dt = torch_dtype(act_dtype)
    sliced = _slice_model(model)
    c = grid.contexts[0]
    qmax = max(grid.step_ks) + 1
    graphs = grid.graphs and device.startswith("cuda")
    try:
        decoder = TorchDecoder(sliced, dtype=dt, device=device, seed=1, timing=True)
    except UnsupportedSpec:
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
            errors.append(_error(f"pass caches B={b}", exc))
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
                       if o.kind not in _SKIP_KINDS]
                points.append(_step_point("verify", {"batch": b, "q": q, "context": c, "layers": sliced.num_layers},
                                          t, ops, hw, count_kernels(verify, (tokens[0],), device)))
            except Exception as exc:
                errors.append(_error(f"verify pass B={b} K={k}", exc))
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
                d_ops = [o for o in draft_ops(model, drafter, pc, b, max(k, 2), c) if o.kind not in _SKIP_KINDS]
                p1 = [replace(o, count=1) for o in d_ops if o.name.startswith("pass1.")]
                pn = [replace(o, count=1) for o in d_ops if o.name.startswith("passN.")]
                if k != max(k, 2):   # K = 1: the first pass is over q = 2 tokens; recompute it at this K
                    p1 = [replace(o, count=1) for o in draft_ops(model, drafter, pc, b, k, c)
                          if o.name.startswith("pass1.") and o.kind not in _SKIP_KINDS]
                k1 = count_kernels(lambda tok, f: head.step(tok, f, dcache, c, True), (tokens[0], feats[0]), device)
                kn = count_kernels(lambda tok, f: head.step(tok, f, dcache, c + q, False), (one_tok[0], hid[0]), device)
                points.append(_step_point("draft_first", {"batch": b, "q": q, "context": c}, first, p1, hw, k1))
                points.append(_step_point("draft_next", {"batch": b, "q": 1, "context": c + q}, later, pn, hw, kn))
            except Exception as exc:
                errors.append(_error(f"draft passes B={b} K={k}", exc))
        del cache, dcache
    return points


def _step_point(name: str, shape: dict, t, ops: Sequence[OpCost], hw: HardwareSpec, kernels: int) -> Point:
    graphed = t.mode == "graph"
    pred = float(sum(np.asarray(op_time(o, hw, cuda_graphs=graphed).time_s) for o in ops))
    whole = name == "spec_step"            # only a whole speculative step carries the per-step overhead
    return Point(kind="step", name=name, shape=shape, measured_s=t.median_s, predicted_s=pred,
                 components=[op_features(o, hw) for o in ops], ops=[OpRecord.from_op(o) for o in ops], is_step=whole,
                 p10_s=t.p10_s, p90_s=t.p90_s,
                 kernels=kernels, measured_as="pass", timing_mode=t.mode)


# --- whole speculative steps ----------------------------------------------------------------------------


def spec_step_ops(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, batch: int, k: int,
                  context: int) -> list[OpCost]:
    """The operators of one whole speculative step as the torch step runs them (comm / host kinds dropped)."""
    so = step_ops(model, drafter, pc, batch, k, context)
    return [replace(op, count=cnt) for _, op, cnt in so.ops]


def _measure_spec_steps(model: ModelSpec, drafter: Optional[DrafterSpec], pc: PassContext, hw: HardwareSpec,
                        act_dtype: DType, device: str, grid: Grid, tick: Callable[[str], None], errors: list[dict]
                        ) -> list[Point]:
    """Whole speculative steps on the full layer stack, timed end to end: the EAGLE-3 head's first pass over
    K + 1 tokens and K - 1 single-token passes (each with its lm_head and greedy pick), then the target's
    verify pass over K + 1 tokens with rejection sampling (softmax, max(0, p - q), pick). K = 0 is a plain
    decoding step. On a GPU the whole step is one CUDA graph (as serving engines capture decode steps)."""
    import torch

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
        errors.append(_error("whole steps", exc))
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
            errors.append(_error(f"whole-step caches c={c} B={bmax}", exc))
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
                    errors.append(_error(f"whole step B={b} K={k} c={c}", exc))
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
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return batch * tokens * kv_bytes_per_token < headroom * free


# --- the table check ------------------------------------------------------------------------------------


def table_check(batches: Sequence[int], ks: Sequence[int], measured_s: np.ndarray, predicted_s: np.ndarray,
                acceptance, calibrated_s: Optional[np.ndarray] = None) -> dict:
    """Measured vs predicted best K per batch. measured_s / predicted_s: step seconds shaped (B, K).

    goodput G = B * tau(K) / T; K_best = argmax of measured G; regret = 1 - G_meas(K_pred) / G_meas(K_best)."""
    b = np.asarray(batches, dtype=float)[:, None]
    kv = np.asarray(ks, dtype=int)
    tau = np.asarray(acceptance.tau(kv), dtype=float)[None, :]
    g_meas = b * tau / np.asarray(measured_s, dtype=float)
    rows = []
    regrets, regrets_cal = [], []
    for i, bb in enumerate(batches):
        best = int(np.argmax(g_meas[i]))
        row = {"batch": int(bb), "k_best_measured": int(kv[best])}
        for label, pred in (("uncalibrated", predicted_s), ("calibrated", calibrated_s)):
            if pred is None:
                continue
            g_pred = b[i] * tau[0] / np.asarray(pred, dtype=float)[i]
            kp = int(np.argmax(g_pred))
            regret = float(1.0 - g_meas[i, kp] / g_meas[i, best])
            row[f"k_predicted_{label}"] = int(kv[kp])
            row[f"regret_{label}"] = regret
            (regrets if label == "uncalibrated" else regrets_cal).append(regret)
        rows.append(row)
    out = {"acceptance": acceptance.describe(int(max(ks))), "k_values": [int(k) for k in ks], "per_batch": rows,
           "mean_regret": float(np.mean(regrets)), "max_regret": float(np.max(regrets)),
           "measured_step_s": np.asarray(measured_s).tolist(), "predicted_step_s": np.asarray(predicted_s).tolist()}
    if regrets_cal:
        out.update(mean_regret_calibrated=float(np.mean(regrets_cal)), max_regret_calibrated=float(np.max(regrets_cal)),
                   calibrated_step_s=np.asarray(calibrated_s).tolist())
    return out


def _default_acceptance():
    from dsdsim.policy.acceptance import constant

    return constant(0.7)


# --- the whole run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValidateConfig:
    """What one validation run measures and against what. ``reduce`` None: 1 on a GPU, 2 (4 with ``quick``)
    on a CPU; ``grid`` None: GPU_GRID on a GPU, else QUICK_GRID or FULL_GRID; ``layers``: keep only the first
    N layers (real widths); ``time_budget_s``: skip what is left past it, and still report."""

    model: object
    hardware: object
    device: str = "cpu"
    quick: bool = True
    output_dir: Optional[str | Path] = None
    drafter: Optional[str | DrafterSpec] = "eagle3"
    reduce: Optional[int] = None
    grid: Optional[Grid] = None
    dtype: Optional[DType] = None
    acceptance: object = None
    steps: bool = True
    threads: Optional[int] = 1
    layers: Optional[int] = None
    time_budget_s: Optional[float] = None


def validate(model, hardware, device: str = "cpu", quick: bool = True, output_dir: Optional[str | Path] = None,
             progress: Optional[ProgressFn] = None, **options) -> ValidationReport:
    """Measure the model's operator shapes, passes and whole speculative steps on ``device``, compare with the
    prediction on ``hardware``, calibrate on half the points, check the K table on the whole steps. Writes
    report.json, summary.md, a plot and the calibrated spec to ``output_dir`` when given. ``options``: the other
    fields of ValidateConfig. On a CPU, torch runs ``threads`` threads (as ``probe`` measured with)."""
    return run_config(ValidateConfig(model, hardware, device, quick, output_dir, **options), progress)


def run_config(cfg: ValidateConfig, progress: Optional[ProgressFn] = None) -> ValidationReport:
    from dsdsim.bench.timing import cpu_threads, on_device

    run = _resolve(cfg)
    with cpu_threads(cfg.device, cfg.threads), on_device(run.device):
        points, errors, clocks = _measure(run, cfg, progress)
    if progress is not None:
        progress(len(points), len(points), "calibrating")
    return _analyse(run, cfg, points, errors, clocks)


@dataclass
class _Run:
    """A validation run's resolved inputs."""

    model_full: ModelSpec
    model: ModelSpec
    reduced: dict
    hw: HardwareSpec
    device: str
    drafter: Optional[DrafterSpec]
    grid: Grid
    graphs: bool
    dtype: DType
    deployment: Deployment
    pc: PassContext
    acceptance: object
    steps_bk: dict = field(default_factory=dict)
    unique: dict = field(default_factory=dict)
    op_points: dict = field(default_factory=dict)        # filled by _measure
    header: dict = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


def _resolve(cfg: ValidateConfig) -> _Run:
    """Load and reduce the model, pick the grid and dtype, and list the distinct operator shapes to time."""
    import torch

    model_full = load_model(cfg.model)
    hw = load_hardware(cfg.hardware)
    dev = str(torch.device(cfg.device))
    factor = auto_reduction(dev, cfg.quick) if cfg.reduce is None else int(cfg.reduce)
    m, reduced = reduce_model(model_full, factor)
    if cfg.layers is not None and cfg.layers < m.num_layers:
        m = m.model_copy(update={"layers": m.layers[:cfg.layers], "name": f"{m.name}[{cfg.layers} layers]"})
        reduced = {**reduced, "layers_kept": [model_full.num_layers, cfg.layers]}
    d = parse_drafter(cfg.drafter) if isinstance(cfg.drafter, str) else cfg.drafter
    d = reduce_drafter(d, factor)
    if d is not None and d.kind is not DrafterKind.eagle3:
        raise ValueError("validate times the EAGLE-3 drafter's shapes; pass drafter='eagle3' or None")
    cuda = dev.startswith("cuda")
    grid = cfg.grid or (GPU_GRID if cuda and not cfg.quick else QUICK_GRID if cfg.quick else FULL_GRID)
    graphs = grid.graphs and cuda
    wdt = cfg.dtype or (m.default_dtype if m.default_dtype in (DType.bf16, DType.fp16, DType.fp32) else DType.bf16)
    dep = Deployment(dtype=wdt, expert_dtype=wdt, act_dtype=wdt, kv_dtype=wdt, cuda_graphs=graphs)
    run = _Run(model_full, m, reduced, hw, dev, d, grid, graphs, wdt, dep, PassContext.build(m, hw, dep),
               cfg.acceptance or _default_acceptance())
    run.steps_bk, run.unique = _operator_shapes(run)
    return run


def _operator_shapes(run: _Run) -> tuple[dict, dict[str, OpCost]]:
    """Each (B, K) step's operators at the table context, and every distinct operator shape to time (attention
    also at the grid's longer contexts)."""
    g, m, d, pc = run.grid, run.model, run.drafter, run.pc
    steps_bk = {(b, k): step_ops(m, d, pc, b, k, g.contexts[0]) for b in g.batches for k in g.ks}
    unique: dict[str, OpCost] = {}
    for so in steps_bk.values():
        for key, op, _ in so.ops:
            unique.setdefault(key, op)
    for c in g.contexts[1:]:
        for b in g.batches:
            for k in g.ks:
                for op in pass_ops(m, pc, b, k + 1, c):
                    if op.kind is OpKind.attention:
                        single = replace(op, count=1)
                        unique.setdefault(_key(single, None), single)
    return steps_bk, unique


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


def _header(run: _Run, cfg: ValidateConfig) -> dict:
    import torch

    g, dev = run.grid, run.device
    header = {
        "model": run.model_full.name, "model_measured": run.model.name, "hardware": run.hw.name, "device": dev,
        "device_name": _device_name(dev), "date": _dt.date.today().isoformat(), "torch_version": torch.__version__,
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


def _measure(run: _Run, cfg: ValidateConfig, progress: Optional[ProgressFn]) -> tuple[list[Point], list[dict], dict]:
    """The three stages (operators, passes, whole steps), a partial report written after each."""
    import torch

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
            _write_json(out / "report.json", {**header, "partial": True, "stage": stage, "errors": track.errors,
                                              "clocks": clocks, "points": [p.to_json() for p in pts]})

    args = (run.model, run.drafter, run.hw, run.dtype, run.device, run.grid, track.tick, track.errors)
    track.budget.stage(0.45 if cfg.steps else 1.0)
    op_points = _measure_ops(run.unique, *args)
    run.op_points = op_points
    checkpoint("operators", list(op_points.values()))
    track.budget.stage(0.10)
    m, d, hw, wdt, dev, grid, tick, errors = args
    pass_points = _measure_steps(m, d, run.pc, hw, wdt, dev, grid, tick, errors) if cfg.steps else []
    checkpoint("passes", list(op_points.values()) + pass_points)
    if run.cuda:
        torch.cuda.empty_cache()
    track.budget.stage(1.0)
    spec_points = _measure_spec_steps(m, d, run.pc, hw, wdt, dev, grid, tick, errors) if cfg.steps else []
    points = list(op_points.values()) + pass_points + spec_points
    checkpoint("whole steps", points)
    clocks["sm_mhz_end"] = sm_clock_mhz(run.device)
    run.header = header
    return points, track.errors, clocks


def _calibrate(run: _Run, points: list[Point], errors: list[dict]) -> tuple[dict, HardwareSpec, dict]:
    """Fit on the train half, fill every point's calibrated time; too few points: report them uncalibrated."""
    split_points(points)
    try:
        cal, summary = calibrate_points(points, run.hw, cuda_graphs=run.graphs)
        return (summary, cal.calibrated_spec(run.hw, what=f"dsdsim validate {run.model.name} on {run.device}",
                                             cuda_graphs=run.graphs), cal.fitted())
    except ValueError as exc:
        errors.append(_error("calibration", exc))
        for p in points:
            p.calibrated_s = p.predicted_s
        halves = (("uncalibrated", points), ("uncalibrated_test", [p for p in points if p.split == "test"]),
                  ("calibrated", [p for p in points if p.split == "test"]),
                  ("calibrated_train", [p for p in points if p.split == "train"]))
        summary = {key: error_summary([p.measured_s for p in pts], [p.predicted_s for p in pts]) for key, pts in halves}
        return summary, run.hw, {"error": str(exc),
                                 "note": "not calibrated: calibrated values are the uncalibrated prediction"}


def _analyse(run: _Run, cfg: ValidateConfig, points: list[Point], errors: list[dict], clocks: dict
             ) -> ValidationReport:
    summary, cal_hw, fitted = _calibrate(run, points, errors)
    summary["by_kind"] = _by_kind(points)
    summary["by_measurement"] = _by_measurement(points)
    spec_points = [p for p in points if p.measured_as == "spec_step"]
    pass_points = [p for p in points if p.measured_as == "pass"]
    op_points = run.op_points
    tc = _table_from_whole_steps(spec_points, run.acceptance, run.grid)
    if tc is None and op_points:                   # no whole steps: the older sum-of-operators check, labelled
        tc = _table_from_operator_sums(run.steps_bk, op_points, run.grid, run.model, run.hw, cal_hw,
                                       run.deployment, run.drafter, run.acceptance)
    tc = tc or {"measured_from": "nothing (no whole steps or operators measured)", "per_batch": [],
                "acceptance": run.acceptance.describe(int(max(run.grid.ks))), "context": run.grid.contexts[0],
                "mean_regret": float("nan"), "max_regret": float("nan")}
    tc["composition"] = _composition(pass_points, op_points, run.model, run.drafter, run.pc)
    data = {**run.header, "partial": False, "errors": errors, "clocks": clocks,
            "points": [p.to_json() for p in points], "summary": summary, "calibration": fitted,
            "calibrated_hardware": cal_hw.model_dump(mode="json", exclude_none=True), "table_check": tc}
    report = ValidationReport(data=data, points=points, calibrated_hardware=cal_hw)
    if cfg.output_dir is not None:
        report.paths = write_report(report, cfg.output_dir)
    return report


def _table_from_whole_steps(spec_points: Sequence[Point], acc, grid: Grid) -> Optional[dict]:
    """The K table check on measured whole speculative steps, one table per context."""
    if not spec_points:
        return None
    tables = []
    for c in grid.spec_contexts:
        pts = {(p.shape["batch"], p.shape["k"]): p for p in spec_points if p.shape["context"] == c}
        batches = [b for b in grid.spec_batches if all((b, k) in pts for k in grid.spec_ks)]
        if not batches or len(grid.spec_ks) < 2:
            continue
        meas = np.array([[pts[(b, k)].measured_s for k in grid.spec_ks] for b in batches])
        pred = np.array([[pts[(b, k)].predicted_s for k in grid.spec_ks] for b in batches])
        cal = np.array([[pts[(b, k)].calibrated_s for k in grid.spec_ks] for b in batches])
        t = table_check(batches, grid.spec_ks, meas, pred, acc, cal)
        t["context"] = c
        t["held_out_batches"] = sorted({b for (b, k), p in pts.items() if p.split == "test"})
        tables.append(t)
    if not tables:
        return None
    out = dict(tables[0])
    out["measured_from"] = ("whole speculative steps timed end to end (draft passes + verify pass + rejection "
                            "sampling on the full layer stack)")
    regrets = [r["regret_uncalibrated"] for t in tables for r in t["per_batch"]]
    regrets_cal = [r["regret_calibrated"] for t in tables for r in t["per_batch"]]
    out.update(mean_regret=float(np.mean(regrets)), max_regret=float(np.max(regrets)),
               mean_regret_calibrated=float(np.mean(regrets_cal)), max_regret_calibrated=float(np.max(regrets_cal)),
               contexts=tables)
    return out


def _table_from_operator_sums(steps_bk, op_points, grid, m, hw, cal_hw, dep, d, acc) -> Optional[dict]:
    batches = [b for b in grid.batches if all(key in op_points for k in grid.ks for key, _, _ in steps_bk[(b, k)].ops)]
    if not batches:
        return None
    meas = np.array([[sum(cnt * op_points[key].measured_s for key, _, cnt in steps_bk[(b, k)].ops)
                      for k in grid.ks] for b in batches])
    b_arr = np.asarray(batches, dtype=float)[:, None]
    k_arr = np.asarray(grid.ks, dtype=float)[None, :]
    pred = np.asarray(simulate_step(None, None, batch=b_arr, k=k_arr, context=grid.contexts[0],
                                    setup=Setup(m, hw, dep, d, None)).step_time_s, dtype=float)
    pred_cal = np.asarray(simulate_step(None, None, batch=b_arr, k=k_arr, context=grid.contexts[0],
                                        setup=Setup(m, cal_hw, dep, d, None)).step_time_s, dtype=float)
    tc = table_check(batches, grid.ks, meas, pred, acc, pred_cal)
    tc["context"] = grid.contexts[0]
    tc["measured_from"] = "sum over each step's operators of count x measured operator time (no whole steps)"
    return tc


def _by_measurement(points: Sequence[Point]) -> dict:
    """Errors by how a point was measured: operator, whole pass, whole speculative step."""
    out = {}
    for how in ("operator", "pass", "spec_step"):
        ps = [p for p in points if p.measured_as == how]
        if not ps:
            continue
        test = [p for p in ps if p.split == "test"]
        out[how] = {"uncalibrated": error_summary([p.measured_s for p in ps], [p.predicted_s for p in ps]),
                    "calibrated_test": error_summary([p.measured_s for p in test], [p.calibrated_s for p in test])}
    return out


def _write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename): a reader never sees half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_json_default) + "\n")
    tmp.replace(path)


def reanalyse(report: str | Path, hardware, output_dir: Optional[str | Path] = None, acceptance=None
              ) -> ValidationReport:
    """Re-analyse a report's measurements with the current cost model, no re-measuring: every point is
    re-predicted from its operator records on ``hardware``, the same train / held-out halves are re-calibrated,
    and the K table is checked again on the measured whole steps. Writes report.json, summary.md, the plot and
    the calibrated spec to ``output_dir`` (the original report is left as it is)."""
    from dsdsim.fit.calibrate import Evaluator

    src = Path(report)
    data = json.loads(src.read_text(encoding="utf-8"))
    points = [Point.from_json(p) for p in data.get("points", [])]
    if not points or not all(p.ops for p in points):
        raise ValueError(f"{src}: its points carry no operator records (a report from an older dsdsim); "
                         "re-run dsdsim validate to measure them again")
    hw = load_hardware(hardware)
    graphs = bool(data.get("cuda_graphs", False))
    start = Calibrator.for_spec(hw, graphs).start
    for p, t in zip(points, Evaluator(points, hw, graphs).times(replace(start, step_overhead_s=0.0),
                                                               extra_kernels=False)):
        p.predicted_s = float(t)
    cal, summary = calibrate_points(points, hw, cuda_graphs=graphs)
    cal_hw = cal.calibrated_spec(hw, what=f"dsdsim validate --reanalyse {src.parent.name}", cuda_graphs=graphs)
    summary["by_kind"] = _by_kind(points)
    summary["by_measurement"] = _by_measurement(points)
    g = data["grid"]
    grid = replace(TINY_GRID, batches=tuple(g["batches"]), ks=tuple(g["ks"]), contexts=tuple(g["contexts"]),
                   spec_batches=tuple(g.get("spec_batches", ())), spec_ks=tuple(g.get("spec_ks", ())),
                   spec_contexts=tuple(g.get("spec_contexts", ())))
    acc = acceptance or _default_acceptance()
    tc = _table_from_whole_steps([p for p in points if p.measured_as == "spec_step"], acc, grid) or {
        "measured_from": "nothing (no whole steps in the report)", "per_batch": [], "acceptance": acc.describe(1),
        "context": grid.contexts[0], "mean_regret": float("nan"), "max_regret": float("nan")}
    tc["composition"] = data.get("table_check", {}).get("composition", {"n": 0})
    out = {**data, "hardware": hw.name, "points": [p.to_json() for p in points], "summary": summary,
           "calibration": cal.fitted(), "calibrated_hardware": cal_hw.model_dump(mode="json", exclude_none=True),
           "table_check": tc,
           "reanalysed": {"date": _dt.date.today().isoformat(), "from": str(src),
                          "measured_on": data.get("date"), "note": "measurements unchanged; predictions, "
                          "calibration and the table check recomputed with the current cost model"}}
    rep = ValidationReport(data=out, points=points, calibrated_hardware=cal_hw)
    if output_dir is not None:
        rep.paths = write_report(rep, output_dir)
    return rep


def _device_name(dev: str) -> str:
    from dsdsim.bench.timing import device_name

    return device_name(dev)


def _by_kind(points: Sequence[Point]) -> dict:
    out = {}
    for kind in sorted({p.kind for p in points}):
        ps = [p for p in points if p.kind == kind]
        test = [p for p in ps if p.split == "test"]
        out[kind] = {"uncalibrated": error_summary([p.measured_s for p in ps], [p.predicted_s for p in ps]),
                     "calibrated_test": error_summary([p.measured_s for p in test], [p.calibrated_s for p in test])}
    return out


def _composition(step_points: Sequence[Point], op_points: dict[str, Point], m, d, pc) -> dict:
    """How the sum of separately timed operators compares with the whole pass timed at once."""
    ratios = []
    for sp in step_points:
        if sp.name != "verify":
            continue
        b, q, c = sp.shape["batch"], sp.shape["q"], sp.shape["context"]
        ops = [replace(o, count=1) for o in pass_ops(_slice_model(m), pc, b, q, c,
                                                     sampling_passes=2.0 if q > 1 else 1.0)
               if o.kind not in _SKIP_KINDS]
        keys = [_key(o, _vocab_for(o, m, d)) for o in ops]
        if all(k in op_points for k in keys):
            ratios.append(sum(op_points[k].measured_s for k in keys) / sp.measured_s)
    if not ratios:
        return {"n": 0}
    return {"n": len(ratios), "median_sum_of_ops_over_step": float(np.median(ratios)),
            "min": float(np.min(ratios)), "max": float(np.max(ratios))}


# --- outputs --------------------------------------------------------------------------------------------


def write_report(report: ValidationReport, output_dir: str | Path) -> dict[str, Path]:
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report": out / "report.json", "summary": out / "summary.md", "plot": out / "predicted_vs_measured.png",
             "calibrated_spec": out / "calibrated.yaml"}
    _write_json(paths["report"], report.data)
    paths["summary"].write_text(summary_markdown(report.data))
    plot_points(report.points, paths["plot"], title=f"{report.data['model_measured']} on {report.data['device_name']}")
    from dsdsim.fit.calibrate import write_calibrated_spec

    write_calibrated_spec(report.calibrated_hardware, paths["calibrated_spec"])
    return paths


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _frac(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def summary_markdown(data: dict) -> str:
    """summary.md of a report.json's content."""
    s = ValidationSummary.from_json(data["summary"])
    cal = data["calibration"]
    tc = TableCheck.from_json(data["table_check"])
    lines = [
        f"# dsdsim validation: {data['model']} on {data['device_name']}",
        "",
        f"- date {data['date']}, torch {data['torch_version']}, device `{data['device']}`, dtype {data['dtype']}, "
        f"drafter {data['drafter']}, predicted with hardware spec `{data['hardware']}` "
        f"({'CUDA-graph' if data.get('cuda_graphs') else 'eager'} launches)",
        f"- measured model: `{data['model_measured']}`; reduction: "
        + (", ".join(f"{k} {v}" for k, v in data["reduced"].items() if k != "note") if data["reduced"].get("factor", 1) > 1
           else "none (real layer dimensions)"),
        f"- grid: B {data['grid']['batches']}, K {data['grid']['ks']}, context {data['grid']['contexts']}; "
        f"whole steps B {data['grid'].get('spec_batches')}, K {data['grid'].get('spec_ks')}, context "
        f"{data['grid'].get('spec_contexts')}; {len(data['points'])} points",
        (f"- re-analysed {data['reanalysed']['date']} with the current cost model from measurements of "
         f"{data['reanalysed']['measured_on']} ({data['reanalysed']['note']})\n" if data.get("reanalysed") else "")
        + f"- timing: {data.get('timing', 'eager')}"
        + (f"; attention kernel {data['attention_backend']}" if data.get("attention_backend") else "")
        + (f"; MoE kernel {data['moe_kernel']}" if data.get("moe_kernel") else ""),
        f"- SM clock (MHz) start / end: {data.get('clocks', {}).get('sm_mhz_start')} / "
        f"{data.get('clocks', {}).get('sm_mhz_end')}",
        "",
        "## Errors (|predicted - measured| / measured)",
        "",
        "| set | n | median | mean (MAPE) | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in (("uncalibrated, all points", "uncalibrated"), ("uncalibrated, held-out half", "uncalibrated_test"),
                       ("calibrated, train half", "calibrated_train"), ("calibrated, held-out half", "calibrated")):
        e = getattr(s, key)
        lines.append(f"| {label} | {e.n} | {_pct(e.median_abs_pct_error)} | {_pct(e.mape)} | "
                     f"{_pct(e.max_abs_pct_error)} |")
    lines += ["", "By kind:", "", "| kind | n | uncalibrated median | calibrated held-out median | median pred/meas (uncal.) |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for kind, e in s.by_kind.items():
        u, c = e.uncalibrated, e.calibrated_test
        ratio = u.median_ratio_pred_over_meas
        lines.append(f"| {kind} | {u.n} | {_pct(u.median_abs_pct_error)} | {_pct(c.median_abs_pct_error)} | "
                     f"{float('nan') if ratio is None else ratio:.2f} |")
    lines += ["", "By how it was measured (an operator alone, one whole forward pass, or a whole speculative step):", "",
              "| measured as | n | uncalibrated median | uncalibrated max | calibrated held-out median | "
              "calibrated held-out max |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for how, e in s.by_measurement.items():
        u, c = e.uncalibrated, e.calibrated_test
        lines.append(f"| {how} | {u.n} | {_pct(u.median_abs_pct_error)} | {_pct(u.max_abs_pct_error)} | "
                     f"{_pct(c.median_abs_pct_error)} | {_pct(c.max_abs_pct_error)} |")
    so = cal.get("step_overhead_s")
    if "compute_efficiency" not in cal:
        lines += ["", "## Calibration", "", f"- not calibrated: {cal.get('error')}"]
        cal = {**cal, "compute_efficiency": float("nan"), "memory_efficiency": float("nan"),
               "launch_overhead_s": float("nan"), "gemm_tile_m": "-"}
    lines += ["", "## Calibration (fitted on the train half)", "",
              f"- compute efficiency {cal['compute_efficiency']:.3f}; memory efficiency: GEMM weights "
              f"{cal['memory_efficiency']:.3f}, attention KV {_frac(cal.get('attention_memory_efficiency'))}, "
              f"vector kernels {_frac(cal.get('vector_memory_efficiency'))}",
              f"- launch overhead {cal['launch_overhead_s'] * 1e6:.2f} us per kernel, GEMM tile m {cal['gemm_tile_m']}"
              + (f", step overhead {so * 1e6:.1f} us" if so is not None else "")
              + (f"; per-kernel cost fitted on {cal['per_kernel_cost_fitted_on']}" if cal.get("per_kernel_cost_fitted_on") else ""),
              *(["- kernel figures: " + ", ".join(f"{k} {v:.3g}" for k, v in cal["kernels"].items())]
                if cal.get("kernels") else []),
              "", "## K table check", "",
              f"Acceptance {tc.acceptance}; measured step = {tc.measured_from}.", ""]

    def num(x, spec: str = ".3f") -> str:
        return format(float("nan") if x is None else x, spec)

    for t in tc.tables:
        lines += [f"Context {t.context}:", "",
                  "| B | K best (measured) | K predicted | regret | K predicted (calibrated) | regret (calibrated) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in t.per_batch:
            lines.append(f"| {r.batch} | {r.k_best_measured} | {r.k_predicted_uncalibrated} | "
                         f"{num(r.regret_uncalibrated)} | {'' if r.k_predicted_calibrated is None else r.k_predicted_calibrated} | "
                         f"{num(r.regret_calibrated)} |")
        lines.append("")
    lines += [f"Mean regret {tc.mean_regret:.3f} (max {tc.max_regret:.3f}); calibrated "
              f"{num(tc.mean_regret_calibrated)} (max {num(tc.max_regret_calibrated)})."]
    comp = tc.composition
    if comp is not None and comp.n:
        lines.append(f"Sum of separately timed operators / whole pass timed at once: median "
                     f"{comp.median_sum_of_ops_over_step:.2f} (range {comp.min:.2f}-{comp.max:.2f}).")
    errs = data.get("errors") or []
    if errs:
        lines += ["", f"## Items that failed or were skipped ({len(errs)})", ""]
        lines += [f"- {e['what']}: {e['error']}" for e in errs[:40]]
        if len(errs) > 40:
            lines.append(f"- ... and {len(errs) - 40} more (see report.json)")
    lines.append("")
    return "\n".join(lines)


def plot_points(points: Sequence[Point], path: str | Path, title: str = "") -> Path:
    """Predicted vs measured, log-log: uncalibrated (hollow) and calibrated (filled), one colour per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=110)
    kinds = sorted({p.kind for p in points})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, kind in enumerate(kinds):
        ps = [p for p in points if p.kind == kind]
        meas = np.array([p.measured_s for p in ps])
        ax.scatter(meas, [p.predicted_s for p in ps], s=18, facecolors="none", edgecolors=colors[i % len(colors)],
                   label=f"{kind} (spec)")
        cal = np.array([np.nan if p.calibrated_s is None else p.calibrated_s for p in ps])
        ax.scatter(meas, cal, s=12, color=colors[i % len(colors)], label=f"{kind} (calibrated)")
    allv = [v for p in points for v in (p.measured_s, p.predicted_s, p.calibrated_s or p.predicted_s) if v > 0]
    lo, hi = min(allv) / 1.5, max(allv) * 1.5
    ax.plot([lo, hi], [lo, hi], color="0.3", lw=1)
    for f in (0.75, 1.25):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.6", lw=0.8, ls="--")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured time per call (s)",
           ylabel="predicted time (s)", title=title or "predicted vs measured")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def run_validate(model, hardware, device: str = "cpu", quick: bool = True, output_dir: str | Path = "validation",
                 show_progress: bool = False, progress_lines: bool = False, **kwargs) -> ValidationReport:
    """CLI entry point: validate with a rich progress bar on a terminal, or plain progress lines on stderr
    (``progress_lines``: a log file fills as the run goes); writes the report to ``output_dir``."""
    if not show_progress:
        return validate(model, hardware, device, quick, output_dir,
                        progress=_line_progress() if progress_lines else None, **kwargs)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task("validate", total=None)

        def cb(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what[:28])

        return validate(model, hardware, device, quick, output_dir, progress=cb, **kwargs)


def _line_progress(every_s: float = 5.0) -> ProgressFn:
    """A progress callback printing one line to stderr at most every ``every_s`` seconds, and at each stage."""
    import sys
    import time

    t0 = time.perf_counter()
    last = [-every_s, ""]

    def cb(done: int, total: int, what: str) -> None:
        now = time.perf_counter() - t0
        stage = what.split(" ")[0]
        if now - last[0] >= every_s or stage != last[1] or done >= total:
            print(f"  [{now:6.1f}s] {done}/{total} {what}", file=sys.stderr, flush=True)
            last[0], last[1] = now, stage

    return cb
