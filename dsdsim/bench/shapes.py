"""Torch implementations of the cost model's operator kinds, built from an OpCost's own shape.

``build_bench(op, ...)`` returns an OpBench (a function, a maker of rotated input sets, and the bytes of one
set) that runs the operator the OpCost describes, in the dtypes it names:

    gemm         x[m, k] @ W[n, k]^T (F.linear), weights in the op's dtype; fp32 output when the op writes
                 4-byte elements (the lm_head's logits); per-head weight stacks (MLA absorption) as a bmm
    attention    new K/V written into a cache of `context` tokens, then decode-style attention of q new tokens
                 per sequence over context + q keys (query heads packed per KV head, each KV head read once:
                 ``attend_decode``); MLA in the latent space with explicit matmuls
    elementwise  by name: residual add + RMSNorm, SiLU-and-mul, rotary, else RMSNorm
    moe_experts  random top-k routing of `tokens` over the model's experts (planned on the host), then one
                 grouped GEMM per projection (torch._grouped_mm; a loop over touched experts where it is
                 missing): gather, gate_up, SiLU-mul, down, weighted scatter-add
    router       as gemm
    logits       softmax (+ the rejection sampler's residual max(0, p - q)) and argmax over fp32 logits
    embedding    a row gather
Communication and host kinds have no single-device kernel: ``build_bench`` returns None for them.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

from dsdsim.bench.timing import random_tensor, torch_dtype
from dsdsim.cost.ops import OpCost, OpKind
from dsdsim.records import frozen
from dsdsim.specs.model import swiglu_matrix_params
from dsdsim.units import DType

_SKIPPED = (OpKind.all_reduce, OpKind.all_to_all, OpKind.gather, OpKind.host)

# operators engines run as fused kernels this validation cannot load (an eager torch emulation would time another
# kernel than the one predicted): why each is not timed alone
_NO_BENCH = {
    OpKind.recurrent: "engines run it as a fused kernel (fla's gated delta rule, mamba_ssm's selective_state_update, "
                      "causal_conv1d_update) that torch does not ship",
    OpKind.attention: "engines run it as a fused kernel (FlashMLA sparse decoding, DeepGEMM's fp8_mqa_logits) that "
                      "torch does not ship",
}


def not_benched(op: OpCost) -> Optional[str]:
    """Why ``op`` has no torch bench of its own (None: it has one, or it is communication / host work, which a
    one-device run does not time)."""
    if op.kind in _SKIPPED:
        return None
    if op.kind is OpKind.recurrent or (op.kind is OpKind.attention and op.shape is None):
        return _NO_BENCH[op.kind]
    return None


@dataclass
class OpBench:
    """One runnable operator: ``fn(*make_inputs(i))`` runs it once on input set i."""

    name: str
    kind: OpKind
    fn: Callable
    make_inputs: Callable[[int], tuple]
    bytes_per_set: float
    shape: dict = field(default_factory=dict)


class TensorPool:
    """Random read-only tensors for the benches of one run, keyed by (role, shape, dtype, set index).

    Tensors up to a quarter of the arena are views into one large random buffer per dtype (the arena, >= 4x
    the last-level cache): input set i+1 lies right after set i, so cycling through enough sets streams the
    whole working set from DRAM, as a model's weights are, at no cost to make. Larger tensors are made once
    and cached. Views may alias one another: benches only read them or copy bounded values into them.
    """

    def __init__(self, device: str, seed: int = 0, cache_bytes: float = 32 * 2 ** 20):
        self.device = device
        self._gen = torch.Generator().manual_seed(seed)
        self._store: dict[tuple, torch.Tensor] = {}
        self._arena: dict[torch.dtype, torch.Tensor] = {}
        self.arena_bytes = int(min(max(4 * cache_bytes, 256 * 2 ** 20), 2 * 2 ** 30))

    def _arena_for(self, dtype: torch.dtype) -> torch.Tensor:
        a = self._arena.get(dtype)
        if a is None:
            n = self.arena_bytes // torch.empty((), dtype=dtype).element_size()
            a = random_tensor((n,), dtype, self.device, self._gen)
            self._arena[dtype] = a
        return a

    def get(self, role: str, shape: tuple[int, ...], dtype: torch.dtype, index: int = 0, scale: float = 1.0):
        shape = tuple(int(s) for s in shape)
        numel = int(np.prod(shape)) if shape else 1
        itemsize = torch.empty((), dtype=dtype).element_size()
        if numel * itemsize * 4 <= self.arena_bytes:
            arena = self._arena_for(dtype)
            span = arena.numel() - numel
            stride = -(-numel // 64) * 64                                     # 64-element aligned sets
            base = (zlib.crc32(f"{role}{shape}".encode()) * 64) % max(span, 1)
            off = (base + index * stride) % max(span, 1)
            off -= off % 64
            view = arena[off:off + numel].view(*shape)
            return view                     # (scale applies to privately made tensors only)
        key = (role, shape, dtype, index)
        t = self._store.get(key)
        if t is None:
            t = random_tensor(shape, dtype, self.device, self._gen, scale)
            self._store[key] = t
        return t

    def fresh(self, shape: tuple[int, ...], dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
        return random_tensor(tuple(int(s) for s in shape), dtype, self.device, self._gen, scale)

    @property
    def generator(self) -> torch.Generator:
        return self._gen

    def clear(self) -> None:
        self._store.clear()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self._store.values(), *self._arena.values()))


def _i(x) -> int:
    return int(round(float(np.asarray(x))))


def runnable_dtype(dtype: DType, fallback: DType) -> torch.dtype:
    try:
        return torch_dtype(dtype)
    except ValueError:
        return torch_dtype(fallback)


def build_bench(op: OpCost, pool: TensorPool, act_dtype: DType, *, num_experts: Optional[int] = None,
                vocab: Optional[int] = None, hidden: Optional[int] = None) -> Optional[OpBench]:
    """A torch bench of ``op`` (count ignored: one occurrence). Hints give what the OpCost does not carry:
    num_experts (moe_experts), vocab (logits), hidden (embedding). None for communication / host kinds."""
    if op.kind in _SKIPPED or not_benched(op) is not None:
        return None
    act = torch_dtype(act_dtype)
    if op.kind in (OpKind.gemm, OpKind.router):
        return _gemm(op, pool, act)
    if op.kind is OpKind.attention:
        return _attention(op, pool, act)
    if op.kind is OpKind.elementwise:
        return _elementwise(op, pool, act)
    if op.kind is OpKind.moe_experts:
        if num_experts is None:
            raise ValueError(f"{op.name}: moe_experts needs num_experts to route tokens")
        return _moe(op, pool, act, num_experts)
    if op.kind is OpKind.logits:
        if vocab is None:
            raise ValueError(f"{op.name}: sampling needs the vocabulary size")
        return _sampling(op, pool, vocab)
    if op.kind is OpKind.embedding:
        if hidden is None:
            raise ValueError(f"{op.name}: embedding needs the hidden size")
        return _embedding(op, pool, act, hidden)
    return None


# --- GEMM -------------------------------------------------------------------------------------------------


def _gemm(op: OpCost, pool: TensorPool, act: torch.dtype) -> OpBench:
    s = op.shape
    m, k, n = _i(s.m), _i(s.k), _i(s.n)
    wdt = runnable_dtype(op.dtype, DType.bf16) if op.dtype.bytes_per_element >= 2 else act
    wb = op.dtype.bytes_per_element
    groups = max(1, int(round(float(op.weight_bytes) / (k * n * wb)))) if op.weight_bytes else 1
    fp32_out = float(np.asarray(op.act_out_bytes)) >= 0.99 * m * n * 4.0 and act.itemsize < 4
    shape = {"m": m, "k": k, "n": n, "groups": groups}
    if groups > 1 and m % groups == 0:
        rows = m // groups

        def make(i: int):
            return (pool.get("x", (groups, rows, k), act, i), pool.get(f"w:{op.name}", (groups, k, n), wdt, i))

        fn = torch.bmm
        per_set = groups * (rows * k * act.itemsize + k * n * wdt.itemsize)
    else:
        def make(i: int):
            return (pool.get("x", (m, k), act, i), pool.get("w", (n, k), wdt, i, scale=k ** -0.5))

        if fp32_out:
            def fn(x, w):
                return F.linear(x, w).float()
        else:
            fn = F.linear if wdt == act else (lambda x, w: F.linear(x, w.to(act)))
        per_set = m * k * act.itemsize + k * n * wdt.itemsize
    return OpBench(op.name, op.kind, fn, make, per_set, shape)


# --- attention --------------------------------------------------------------------------------------------


def _attention(op: OpCost, pool: TensorPool, act: torch.dtype) -> OpBench:
    s = op.shape
    b, q, c = _i(s.batch), _i(s.q), _i(s.context)
    heads, dqk, dv, kvpt = int(s.heads), int(s.qk_dim), int(s.v_dim), int(s.kv_elements_per_token)
    total = c + q
    shape = {"batch": b, "q": q, "context": c, "heads": heads, "qk_dim": dqk, "v_dim": dv,
             "kv_elements_per_token": kvpt}
    if kvpt == dqk and dv <= dqk:           # MLA: one latent per token, keys = latent, values = its first dv dims
        def make(i: int):
            return (pool.get("q", (b, heads, q, dqk), act, i), pool.get("lat_new", (b, q, dqk), act, i),
                    pool.get("latent", (b, total, dqk), act, i))

        mask = _lower_right_bool(q, total, pool.device)
        scale = dqk ** -0.5

        def fn(qt, new, cache):
            cache[:, c:] = new                                         # write the q new latents
            scores = torch.matmul(qt, cache.unsqueeze(1).transpose(-1, -2)) * scale   # (B, H, q, c+q)
            if q > 1:
                scores = scores.masked_fill(~mask, float("-inf"))
            p = torch.softmax(scores.float(), dim=-1).to(act)
            return torch.matmul(p, cache[..., :dv].unsqueeze(1))      # (B, H, q, dv)

        per_set = (b * heads * q * dqk + b * q * dqk + b * total * dqk) * act.itemsize
        return OpBench(op.name, op.kind, fn, make, per_set, shape)
    kv_heads = max(1, kvpt // (2 * dqk))
    shape["kv_heads"] = kv_heads
    shape["backend"] = decode_backend(pool.device, act)

    def make(i: int):
        return (pool.get("q", (b, heads, q, dqk), act, i), pool.get("k_new", (b, kv_heads, q, dqk), act, i),
                pool.get("v_new", (b, kv_heads, q, dv), act, i), pool.get("k_cache", (b, kv_heads, total, dqk), act, i),
                pool.get("v_cache", (b, kv_heads, total, dv), act, i))

    def fn(qt, k_new, v_new, k_cache, v_cache):
        k_cache[:, :, c:] = k_new                                        # append the q new tokens' K and V
        v_cache[:, :, c:] = v_new
        return attend_decode(qt, k_cache, v_cache)

    per_set = (b * heads * q * dqk + 2 * b * kv_heads * (q + total) * dqk) * act.itemsize
    return OpBench(op.name, op.kind, fn, make, per_set, shape)


# --- decode-style attention -------------------------------------------------------------------------------

_FLASH_FIRST = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")   # never MATH on a GPU
_backend_cache: dict[tuple[str, torch.dtype], str] = {}


def attend_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode / verify attention as serving kernels run it: q (B, H, q_len, d) over k, v (B, H_kv, T, d), the
    q_len new tokens already at the end of k, v.

    The query heads that share a KV head are packed into the row dimension (B, H_kv, g*q_len, d), so each KV
    head is read once per sequence by one kernel whose row tile holds g*q_len real rows (FlashAttention-3 /
    FlashInfer "pack GQA"). For q_len = 1 on a GPU, SDPA's own GQA path runs (FA2 packs and splits the KV). Timing-faithful simplification: the q_len x q_len
    causal block among the new tokens is not masked (it moves no extra bytes and is q_len/(T) of the FLOPs);
    use ``attend`` where exact outputs matter (the speculative loop). On CUDA the math backend is forbidden."""
    b, h, ql, d = q.shape
    kvh = k.shape[1]
    g = h // kvh
    if ql == 1 and q.device.type == "cuda" and g > 1:
        # one query per sequence: FlashAttention-2 packs the groups and splits the KV itself (measured on an
        # H200: 16.7 us against 20.0 us for the packed call at 8 x 1024 tokens, 76 vs 105 us at 8 x 8192)
        return _sdpa_no_math(q, k, v, enable_gqa=True)
    qp = q.reshape(b, kvh, g * ql, d)
    out = _sdpa_no_math(qp, k, v)
    return out.reshape(b, h, ql, v.shape[-1])


def _sdpa_no_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, enable_gqa: bool = False) -> torch.Tensor:
    if q.device.type != "cuda":
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = [getattr(SDPBackend, name) for name in _FLASH_FIRST if hasattr(SDPBackend, name)]
    with sdpa_kernel(backends):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa)


def decode_backend(device, dtype: torch.dtype) -> str:
    """Which SDPA backend runs ``attend_decode`` on this device and dtype (tried once, remembered)."""
    dev = torch.device(device)
    key = (str(dev), dtype)
    if key in _backend_cache:
        return _backend_cache[key]
    if dev.type != "cuda":
        name = "cpu-sdpa (packed GQA)"
    else:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(1, 2, 8, 128, device=dev, dtype=dtype)
        kv = torch.randn(1, 2, 256, 128, device=dev, dtype=dtype)
        name = "none"
        for cand in _FLASH_FIRST:
            if not hasattr(SDPBackend, cand):
                continue
            try:
                with sdpa_kernel([getattr(SDPBackend, cand)]):
                    F.scaled_dot_product_attention(q, kv, kv)
                name = cand.lower().replace("_attention", "") + " (packed GQA)"
                break
            except RuntimeError:
                continue
    _backend_cache[key] = name
    return name


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_len: int, cuda: bool,
           mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Causal GQA attention of the last ``q_len`` positions: q (B, H, q, d) over k, v (B, H_kv, T, d).

    CUDA: scaled_dot_product_attention (flash / memory-efficient / cuDNN kernels, never the math backend),
    bottom-right causal mask; where no fused kernel takes the mask, the explicit matmuls below.
    CPU: explicit matmuls with the query heads of each KV head stacked, so every KV head is read once per
    sequence (the cost model's assumption); on a CPU this beats SDPA's masked path several times over.
    ``mask`` (B, 1, q, T) boolean overrides the causal mask (per-sequence lengths, windows)."""
    b, h, ql, d = q.shape
    kvh, total = k.shape[1], k.shape[2]
    if cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        fast = [getattr(SDPBackend, n) for n in _FLASH_FIRST if hasattr(SDPBackend, n)]
        if mask is None and ql > 1:
            try:                                   # flash / efficient kernels with a bottom-right causal bias
                with sdpa_kernel(fast):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=_lower_right(ql, total),
                                                          enable_gqa=kvh != h)
            except (RuntimeError, TypeError, NotImplementedError):
                mask = _lower_right_bool(ql, total, q.device)
        try:
            with sdpa_kernel(fast):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=kvh != h)
        except RuntimeError:                       # a boolean mask no fused kernel takes: exact matmuls below
            pass
    g = h // kvh
    qg = q.reshape(b, kvh, g * ql, d)                                           # (B, H_kv, g*q, d)
    scores = torch.matmul(qg, k.transpose(-1, -2)) * d ** -0.5                  # (B, H_kv, g*q, T)
    if mask is not None:                           # (B, 1, q, T) per sequence, or (q, T) for all
        keep = mask.view(b if mask.dim() == 4 else 1, 1, 1, ql, total)
    elif ql > 1:
        keep = _lower_right_bool(ql, total, q.device).view(1, 1, 1, ql, total)
    else:
        keep = None
    if keep is not None:
        scores = scores.view(b, kvh, g, ql, total).masked_fill(~keep, float("-inf")).view(b, kvh, g * ql, total)
    p = torch.softmax(scores, dim=-1)
    return torch.matmul(p, v).view(b, h, ql, v.shape[-1])


def _lower_right(q: int, total: int):
    """Query i of q attends to keys 0 .. total - q + i (the cache plus the new tokens up to itself)."""
    from torch.nn.attention.bias import causal_lower_right

    return causal_lower_right(q, total)


def _lower_right_bool(q: int, total: int, device) -> torch.Tensor:
    rows = torch.arange(q, device=device).unsqueeze(1)
    cols = torch.arange(total, device=device).unsqueeze(0)
    return cols <= rows + (total - q)


# --- elementwise ------------------------------------------------------------------------------------------


def _elementwise(op: OpCost, pool: TensorPool, act: torch.dtype) -> OpBench:
    s = op.shape
    rows, width = _i(s.rows), int(s.width)
    reads, writes = float(s.reads), float(s.writes)
    shape = {"rows": rows, "width": width, "reads": reads, "writes": writes}
    name = op.name.lower()
    if "rotary" in name:
        d = 128 if width % 128 == 0 else 64 if width % 64 == 0 else width
        shape["impl"] = "rotary"

        def make(i: int):
            return (pool.get("x", (rows, width // d, d), act, i), pool.get("cos", (rows, 1, d), act, 0),
                    pool.get("sin", (rows, 1, d), act, 0))

        def fn(x, cos, sin):
            x1, x2 = x.chunk(2, dim=-1)
            return x * cos + torch.cat((-x2, x1), dim=-1) * sin

        per_set = rows * width * act.itemsize
    elif reads >= 2 and writes < 2 and ("act" in name or "mlp" in name or "shared" in name):
        shape["impl"] = "silu_mul"

        def make(i: int):
            return (pool.get("gate_up", (rows, 2 * width), act, i),)

        def fn(gu):
            g, u = gu.chunk(2, dim=-1)
            return F.silu(g) * u

        per_set = rows * 2 * width * act.itemsize
    elif reads >= 2:
        shape["impl"] = "add_rmsnorm" if writes >= 2 else "add_rmsnorm_out"

        def make(i: int):
            return (pool.get("x", (rows, width), act, i), pool.get("resid", (rows, width), act, i),
                    pool.get("norm_w", (width,), act, 0))

        def fn(x, r, w):
            r2 = r + x                      # the new residual stream (written), then its norm (written)
            return F.rms_norm(r2, (width,), w, 1e-6)

        per_set = 2 * rows * width * act.itemsize
    else:
        shape["impl"] = "rmsnorm"

        def make(i: int):
            return (pool.get("x", (rows, width), act, i), pool.get("norm_w", (width,), act, 0))

        def fn(x, w):
            return F.rms_norm(x, (width,), w, 1e-6)

        per_set = rows * width * act.itemsize
    return OpBench(op.name, op.kind, fn, make, per_set, shape)


# --- routed experts ---------------------------------------------------------------------------------------


@frozen
class Routing:
    """Token -> expert assignments of one batch, grouped by expert (host-side plan of the grouped GEMMs)."""

    order: torch.Tensor        # (tokens*top_k,) assignment indices sorted by expert
    token_of: torch.Tensor     # (tokens*top_k,) token of each sorted assignment
    weights: torch.Tensor      # (tokens*top_k, 1) routing weights of the sorted assignments
    experts: list[int]         # touched experts, ascending
    counts: list[int]          # assignments per touched expert
    offsets: torch.Tensor      # (num_experts,) int32 cumulative end row of each expert's group, on the device


def random_routing(tokens: int, top_k: int, num_experts: int, device, generator: torch.Generator,
                   dtype: torch.dtype) -> Routing:
    """Uniform random top-k routing (each token picks top_k distinct experts), as independent routing assumes.
    Made on the host once per input set, so the timed grouped GEMMs need no device-to-host sync."""
    scores = torch.rand(tokens, num_experts, generator=generator)
    top = scores.topk(top_k, dim=-1)
    flat = top.indices.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    experts = [e for e in range(num_experts) if counts[e] > 0]
    w = torch.softmax(top.values, dim=-1).flatten()[order].unsqueeze(1)
    return Routing(order=order.to(device), token_of=(order // top_k).to(device), weights=w.to(device, dtype),
                   experts=experts, counts=[int(counts[e]) for e in experts],
                   offsets=counts.cumsum(0).to(torch.int32).to(device))


_grouped_ok: dict[tuple[str, torch.dtype], bool] = {}


def grouped_mm_available(device, dtype: torch.dtype) -> bool:
    """Whether ``torch._grouped_mm`` runs on this device and dtype (one tiny trial, remembered)."""
    key = (str(torch.device(device)), dtype)
    if key not in _grouped_ok:
        try:
            a = torch.ones(4, 32, device=device, dtype=dtype)
            w = torch.ones(2, 16, 32, device=device, dtype=dtype)
            out = torch._grouped_mm(a, w.transpose(-2, -1), offs=torch.tensor([1, 4], device=device,
                                                                                 dtype=torch.int32))
            _grouped_ok[key] = tuple(out.shape) == (4, 16)
        except (AttributeError, RuntimeError, TypeError, NotImplementedError):
            _grouped_ok[key] = False
    return _grouped_ok[key]


def grouped_linear(x: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Rows of x grouped by expert (group e ends at offsets[e]) times that expert's weight w[e] (E, n, k):
    one grouped GEMM (CUTLASS on sm90), every expert's rows in one launch, empty groups free."""
    return torch._grouped_mm(x, w.transpose(-2, -1), offs=offsets)


def _moe(op: OpCost, pool: TensorPool, act: torch.dtype, num_experts: int) -> OpBench:
    s = op.shape
    tokens, top_k, hidden, width = _i(s.tokens), int(s.top_k), int(s.hidden), int(s.width)
    wdt = runnable_dtype(op.dtype, DType.bf16) if op.dtype.bytes_per_element >= 2 else act
    grouped = wdt == act and grouped_mm_available(pool.device, act)
    shape = {"tokens": tokens, "top_k": top_k, "hidden": hidden, "width": width, "num_experts": num_experts,
             "experts_touched_expected": float(np.asarray(s.experts_touched)),
             "impl": "grouped_mm" if grouped else "expert_loop"}
    routings: dict[int, Routing] = {}

    def make(i: int):
        if i not in routings:
            routings[i] = random_routing(tokens, top_k, num_experts, pool.device, pool.generator, act)
        w13 = pool.get("w13", (num_experts, 2 * width, hidden), wdt, i, scale=hidden ** -0.5)
        w2 = pool.get("w2", (num_experts, hidden, width), wdt, i, scale=width ** -0.5)
        return pool.get("x", (tokens, hidden), act, i), w13, w2, routings[i]

    def fn_grouped(x, w13, w2, r: Routing):
        xs = x.index_select(0, r.token_of)                       # (A, h) rows grouped by expert
        g, u = grouped_linear(xs, w13, r.offsets).chunk(2, dim=-1)
        out = grouped_linear(F.silu(g) * u, w2, r.offsets)
        return torch.zeros_like(x).index_add_(0, r.token_of, out * r.weights)

    def fn_loop(x, w13, w2, r: Routing):
        xs = x.index_select(0, r.token_of)
        out = torch.empty_like(xs)
        start = 0
        for e, n in zip(r.experts, r.counts):
            h = F.linear(xs[start:start + n], w13[e])           # (n, 2I)
            g, u = h.chunk(2, dim=-1)
            out[start:start + n] = F.linear(F.silu(g) * u, w2[e])
            start += n
        y = torch.zeros_like(x)
        return y.index_add_(0, r.token_of, out * r.weights)

    touched = min(float(num_experts), float(np.asarray(s.experts_touched)))
    expert_bytes = touched * swiglu_matrix_params(hidden, width) * wdt.itemsize       # touched experts only
    per_set = expert_bytes + tokens * hidden * act.itemsize
    return OpBench(op.name, op.kind, fn_grouped if grouped else fn_loop, make, per_set, shape)


def measured_experts_touched(op_bench: OpBench, sets: int) -> float:
    """Mean distinct experts the bench's routings touched (for comparison with the cost model's expectation)."""
    vals = [len(op_bench.make_inputs(i)[3].experts) for i in range(sets)]
    return float(np.mean(vals))


# --- sampling and embedding -------------------------------------------------------------------------------


def _sampling(op: OpCost, pool: TensorPool, vocab: int) -> OpBench:
    total = float(np.asarray(op.act_out_bytes)) / 4.0               # rows * vocab fp32 elements
    passes = float(np.asarray(op.act_in_bytes)) / max(float(np.asarray(op.act_out_bytes)), 1.0)
    rows = max(1, int(round(total / vocab)))
    shape = {"rows": rows, "vocab": vocab, "passes": passes}
    if passes >= 1.5:
        def make(i: int):
            return (pool.get("logits", (rows, vocab), torch.float32, i),
                    pool.get("draft_probs", (rows, vocab), torch.float32, i).abs())

        def fn(logits, q):
            p = torch.softmax(logits, dim=-1)                        # target probabilities
            residual = (p - q).clamp_(min=0.0)                      # rejection sampler's max(0, p - q)
            return residual.max(dim=-1).indices
    else:
        def make(i: int):
            return (pool.get("logits", (rows, vocab), torch.float32, i),)

        def fn(logits):
            p = torch.softmax(logits, dim=-1)
            return p.max(dim=-1).indices
    per_set = rows * vocab * 4.0 * max(passes, 1.0)
    return OpBench(op.name, op.kind, fn, make, per_set, shape)


def _embedding(op: OpCost, pool: TensorPool, act: torch.dtype, hidden: int) -> OpBench:
    tokens = max(1, int(round(float(np.asarray(op.act_out_bytes)) / (hidden * act.itemsize))))
    table_rows = 32768                                              # only the gathered rows are read
    shape = {"tokens": tokens, "hidden": hidden}
    ids = {}

    def make(i: int):
        if i not in ids:
            ids[i] = torch.randint(0, table_rows, (tokens,), generator=pool.generator).to(pool.device)
        return ids[i], pool.get("embed_table", (table_rows, hidden), act, 0)

    return OpBench(op.name, op.kind, F.embedding, make, tokens * hidden * act.itemsize, shape)
