"""A small torch decoder built from a ModelSpec: the real layer stack that step points and the spec loop run.

Supported: full / sliding GQA attention with RoPE (and Qwen3's q/k norms), dense SwiGLU, MoE (router, top-k
routing, grouped expert loop, shared experts), RMSNorm, a batched KV cache with per-sequence lengths (a
rollback is a length update), and the EAGLE-3 head's draft layer (q/k/v over 2h = embedding ++ hidden). MLA
is not built here (step points are skipped for MLA models; its operators are still timed one by one).
Weights are random (seeded); nothing is loaded.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from dsdsim.bench.shapes import attend, attend_decode, grouped_linear, grouped_mm_available
from dsdsim.specs.model import AttentionKind, FFNKind, Layer, ModelSpec


class UnsupportedSpec(ValueError):
    """The spec uses a layer kind this torch decoder does not build (MLA)."""


class KVCache:
    """Per-layer K and V, laid out (B, T, kv_heads, d); ``lengths[b]`` tokens of sequence b are valid."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    lengths: torch.Tensor          # (B,) long, on the cache's device

    @classmethod
    def empty(cls, layers: list["DecoderLayer"], batch: int, max_len: int, dtype, device,
              head_major: bool = False) -> "KVCache":
        """``head_major``: lay K/V out (B, kv_heads, T, d), as decode kernels read them (timing mode)."""
        ks, vs = [], []
        for layer in layers:
            a = layer.attn
            shape = (batch, a.kv_heads, max_len, a.head_dim) if head_major else (batch, max_len, a.kv_heads, a.head_dim)
            ks.append(torch.zeros(shape, dtype=dtype, device=device))
            vs.append(torch.zeros(shape, dtype=dtype, device=device))
        return cls(ks, vs, torch.zeros(batch, dtype=torch.long, device=device), head_major)

    def __init__(self, k, v, lengths, head_major: bool = False):
        self.k, self.v, self.lengths, self.head_major = k, v, lengths, head_major

    def fill_random(self, length: int, seed: int = 0) -> None:
        """Pretend every sequence already holds ``length`` cached tokens (random K/V made on the cache's own
        device: a GPU fills gigabytes in milliseconds; for timing only). On a CPU the first sequence's cache is drawn
        and copied to the others: drawing every element costs seconds per gigabyte on two cores, a copy streams."""
        for i, t in enumerate((*self.k, *self.v)):
            gen = torch.Generator(device=t.device).manual_seed(seed + i)
            held = t[:, :, :length] if self.head_major else t[:, :length]
            if held.device.type == "cpu" and held.shape[0] > 1:
                held[0].normal_(generator=gen)
                held[1:].copy_(held[0].expand_as(held[1:]))
            else:
                held.normal_(generator=gen)
        self.lengths.fill_(length)


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x (B, q, heads, d) at integer positions (B, q)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = positions.to(torch.float32).unsqueeze(-1) * inv                     # (B, q, d/2)
    cos = torch.cat((ang.cos(), ang.cos()), -1).unsqueeze(2).to(x.dtype)     # (B, q, 1, d)
    sin = torch.cat((ang.sin(), ang.sin()), -1).unsqueeze(2).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class RMSNorm(nn.Module):
    def __init__(self, width: int, dtype, device):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype, device=device))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-6)


class Attention(nn.Module):
    def __init__(self, layer: Layer, hidden: int, dtype, device, qkv_in: Optional[int] = None, theta: float = 1e4):
        super().__init__()
        a = layer.attention
        if a.kind is AttentionKind.mla:
            raise UnsupportedSpec("MLA attention has no torch step module here")
        if a.kind is AttentionKind.linear:     # softmax attention in its place would time another model
            raise UnsupportedSpec("linear attention (gated DeltaNet) has no torch step module here")
        self.heads, self.kv_heads, self.head_dim = a.num_heads, a.num_kv_heads, a.head_dim
        self.window = a.window if a.kind in (AttentionKind.sliding, AttentionKind.chunked) else None
        self.theta = theta
        self.decode_kernel = False     # timing mode: decode-style kernel (see TorchDecoder(timing=True))
        kin = qkv_in or hidden
        out = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.qkv = nn.Linear(kin, out, bias=a.qkv_bias, dtype=dtype, device=device)
        self.o = nn.Linear(self.heads * self.head_dim, hidden, bias=a.o_bias, dtype=dtype, device=device)
        self.q_norm = RMSNorm(self.head_dim, dtype, device) if a.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, dtype, device) if a.qk_norm else None

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                uniform: Optional[int]) -> torch.Tensor:
        """x (B, q, kin); writes the q new K/V at lengths + i; attends causally over the cache."""
        b, q, _ = x.shape
        d = self.head_dim
        qkv = self.qkv(x)
        qh, kh, vh = qkv.split([self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        qh = qh.view(b, q, self.heads, d)
        kh = kh.view(b, q, self.kv_heads, d)
        vh = vh.view(b, q, self.kv_heads, d)
        if self.q_norm is not None:
            qh, kh = self.q_norm(qh), self.k_norm(kh)
        pos = lengths.unsqueeze(1) + torch.arange(q, device=x.device)              # (B, q)
        qh, kh = _rope(qh, pos, self.theta), _rope(kh, pos, self.theta)
        if uniform is not None and self.decode_kernel:                             # timing: serving kernel
            total = uniform + q
            first = 0 if self.window is None else max(0, total - q - self.window)  # what a window kernel reads
            if k_cache.shape[1] == self.kv_heads and k_cache.shape[2] != self.kv_heads:   # head-major cache
                k_cache[:, :, uniform:total] = kh.transpose(1, 2)
                v_cache[:, :, uniform:total] = vh.transpose(1, 2)
                keys, vals = k_cache[:, :, first:total], v_cache[:, :, first:total]
            else:
                k_cache[:, uniform:total] = kh
                v_cache[:, uniform:total] = vh
                keys, vals = k_cache[:, first:total].transpose(1, 2), v_cache[:, first:total].transpose(1, 2)
            out = attend_decode(qh.transpose(1, 2), keys, vals)
            return self.o(out.transpose(1, 2).reshape(b, q, self.heads * d))
        if uniform is not None:                                                    # every sequence at one length
            k_cache[:, uniform:uniform + q] = kh
            v_cache[:, uniform:uniform + q] = vh
            total = uniform + q
            keys, vals = k_cache[:, :total].transpose(1, 2), v_cache[:, :total].transpose(1, 2)
            mask = None
            if self.window is not None and total > self.window:
                mask = _window_mask(pos, total, self.window, x.device)
        else:
            rows = torch.arange(b, device=x.device).unsqueeze(1)
            k_cache[rows, pos] = kh
            v_cache[rows, pos] = vh
            total = int(lengths.max()) + q
            keys, vals = k_cache[:, :total].transpose(1, 2), v_cache[:, :total].transpose(1, 2)
            mask = _window_mask(pos, total, self.window, x.device)
        out = attend(qh.transpose(1, 2), keys, vals, q, x.device.type == "cuda", mask)   # (B, H, q, d)
        return self.o(out.transpose(1, 2).reshape(b, q, self.heads * d))


def _window_mask(pos: torch.Tensor, total: int, window: Optional[int], device) -> torch.Tensor:
    """(B, 1, q, total) boolean: key j visible to the query at position p when p - window < j <= p."""
    keys = torch.arange(total, device=device).view(1, 1, 1, total)
    p = pos.unsqueeze(1).unsqueeze(-1)                                              # (B, 1, q, 1)
    ok = keys <= p
    if window is not None:
        ok = ok & (keys > p - window)
    return ok


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, width: int, bias: bool, dtype, device):
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * width, bias=bias, dtype=dtype, device=device)
        self.down = nn.Linear(width, hidden, bias=bias, dtype=dtype, device=device)

    def forward(self, x):
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(g) * u)


class MoE(nn.Module):
    """Router + top-k routed SwiGLU experts (grouped loop over the touched experts) + shared experts."""

    def __init__(self, ffn, hidden: int, dtype, device):
        super().__init__()
        self.top_k, self.experts = ffn.top_k, ffn.num_experts
        w = ffn.expert_intermediate_size
        self.router = nn.Linear(hidden, ffn.num_experts, bias=ffn.router_bias, dtype=dtype, device=device)
        self.w13 = nn.Parameter(torch.randn(ffn.num_experts, 2 * w, hidden, dtype=dtype, device=device) * hidden ** -0.5)
        self.w2 = nn.Parameter(torch.randn(ffn.num_experts, hidden, w, dtype=dtype, device=device) * w ** -0.5)
        self.shared = (SwiGLU(hidden, ffn.num_shared_experts * ffn.shared_intermediate_size, ffn.bias, dtype, device)
                       if ffn.num_shared_experts else None)
        self.last_touched = 0
        self.grouped = False           # timing mode: grouped GEMMs with device-side offsets (no host sync)

    def _route(self, x2):
        """Top-k routing: (weights of the assignments sorted by expert, expert of each assignment, the sort
        order, the token of each sorted assignment)."""
        top = torch.topk(self.router(x2).float(), self.top_k, dim=-1)
        weights = torch.softmax(top.values, dim=-1).to(x2.dtype).flatten()
        flat = top.indices.flatten()
        order = torch.argsort(flat, stable=True)
        return weights[order].unsqueeze(1), flat, order, order // self.top_k

    def _combine(self, x2, token_of, out, weights, shape):
        y = torch.zeros_like(x2).index_add_(0, token_of, out * weights)
        if self.shared is not None:
            y = y + self.shared(x2)
        return y.view(shape)

    def forward(self, x):
        if self.grouped:
            return self._forward_grouped(x)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        weights, flat, order, token_of = self._route(x2)
        counts = torch.bincount(flat, minlength=self.experts).tolist()            # host sync: the group sizes
        xs = x2.index_select(0, token_of)
        out = torch.empty_like(xs)
        start, touched = 0, 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            touched += 1
            g, u = F.linear(xs[start:start + n], self.w13[e]).chunk(2, dim=-1)
            out[start:start + n] = F.linear(F.silu(g) * u, self.w2[e])
            start += n
        self.last_touched = touched
        return self._combine(x2, token_of, out, weights, shape)

    def _forward_grouped(self, x):
        """The fused-MoE shape of serving engines: route, sort assignments by expert, one grouped GEMM per
        projection. Group sizes stay on the device, so the pass can be captured in a CUDA graph."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        weights, flat, order, token_of = self._route(x2)
        counts = torch.zeros(self.experts, dtype=torch.int64, device=x.device).scatter_add_(
            0, flat, torch.ones_like(flat))
        offsets = counts.cumsum(0).to(torch.int32)
        xs = x2.index_select(0, token_of)
        g, u = grouped_linear(xs, self.w13, offsets).chunk(2, dim=-1)
        out = grouped_linear(F.silu(g) * u, self.w2, offsets)
        return self._combine(x2, token_of, out, weights, shape)


class DecoderLayer(nn.Module):
    def __init__(self, layer: Layer, hidden: int, dtype, device, qkv_in: Optional[int] = None):
        super().__init__()
        if layer.attention is None or layer.ffn is None:
            raise UnsupportedSpec("a block with one part (Mamba-2, attention-only or FFN-only) has no torch step "
                                  "module here")
        self.input_norm = RMSNorm(hidden, dtype, device)
        self.attn = Attention(layer, hidden, dtype, device, qkv_in=qkv_in)
        self.post_norm = RMSNorm(hidden, dtype, device)
        ffn = layer.ffn
        if ffn.kind is FFNKind.dense:
            self.ffn = SwiGLU(hidden, ffn.intermediate_size, ffn.bias, dtype, device)
        else:
            self.ffn = MoE(ffn, hidden, dtype, device)
        self.qkv_in = qkv_in

    def forward(self, x, k_cache, v_cache, lengths, uniform, extra_in: Optional[torch.Tensor] = None):
        """extra_in: the EAGLE-3 layer's second input (token embeddings), concatenated before q/k/v."""
        h = self.input_norm(x)
        if extra_in is not None:
            h = torch.cat((extra_in, h), dim=-1)
        x = x + self.attn(h, k_cache, v_cache, lengths, uniform)
        return x + self.ffn(self.post_norm(x))


class TorchDecoder(nn.Module):
    """Embedding, the spec's layers (optionally only the first ``num_layers``), final norm, lm_head."""

    def __init__(self, spec: ModelSpec, dtype=torch.float32, device="cpu", num_layers: Optional[int] = None,
                 seed: int = 0, logit_scale: float = 1.0, timing: bool = False):
        """``timing=True`` runs the kernels a serving engine runs where outputs need not be exact: decode-style
        packed-GQA attention (``attend_decode``) on uniform-length batches and grouped-GEMM MoE."""
        super().__init__()
        torch.manual_seed(seed)
        h = spec.hidden_size
        self.spec = spec
        layers = spec.layers[: num_layers or spec.num_layers]
        self.embed = nn.Embedding(spec.vocab_size, h, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(layer, h, dtype, device) for layer in layers)
        self.norm = RMSNorm(h, dtype, device)
        self.lm_head = nn.Linear(h, spec.vocab_size, bias=False, dtype=dtype, device=device)
        with torch.no_grad():
            self.lm_head.weight.mul_(logit_scale)
        self.dtype, self.device = dtype, device
        if timing:
            set_timing_mode(self)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.empty(list(self.layers), batch, max_len, self.dtype, self.device,
                             head_major=getattr(self, "timing", False))

    def hidden(self, tokens: torch.Tensor, cache: KVCache, uniform: Optional[int] = None) -> torch.Tensor:
        """tokens (B, q) at positions cache.lengths + i -> final hidden (B, q, h). Does not advance lengths."""
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache.k[i], cache.v[i], cache.lengths, uniform)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


class Eagle3Head(nn.Module):
    """EAGLE-3 draft head: fc(3h -> h) on fused target features (first pass), one layer whose q/k/v read
    2h (token embedding ++ hidden), final norm, lm_head over a reduced draft vocabulary."""

    def __init__(self, layer: Layer, hidden: int, draft_vocab: int, dtype, device, embed_rows: int = 32768):
        super().__init__()
        self.fc = nn.Linear(3 * hidden, hidden, bias=False, dtype=dtype, device=device)
        self.embed = nn.Embedding(embed_rows, hidden, dtype=dtype, device=device)
        self.layer = DecoderLayer(layer, hidden, dtype, device, qkv_in=2 * hidden)
        self.norm = RMSNorm(hidden, dtype, device)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False, dtype=dtype, device=device)
        self.dtype, self.device = dtype, device

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache.empty([self.layer], batch, max_len, self.dtype, self.device,
                             head_major=getattr(self, "timing", False))

    def step(self, tokens: torch.Tensor, features: torch.Tensor, cache: KVCache, uniform: Optional[int],
             first: bool) -> torch.Tensor:
        """One draft pass: tokens (B, q), features (B, q, 3h) if first else (B, q, h). Returns next-token
        ids (B,) from the last position (greedy over the draft vocabulary)."""
        x = self.fc(features) if first else features
        x = self.layer(x, cache.k[0], cache.v[0], cache.lengths, uniform,
                       extra_in=self.embed(tokens % self.embed.num_embeddings))   # the table's rows are what is read
        logits = self.lm_head(self.norm(x[:, -1])).float()
        return torch.argmax(torch.softmax(logits, dim=-1), dim=-1)


def set_timing_mode(module: nn.Module) -> nn.Module:
    """Switch every attention to the decode-style kernel (head-major KV caches from ``new_cache``) and every MoE
    to grouped GEMMs (when available)."""
    module.timing = True
    for sub in module.modules():
        if isinstance(sub, Attention):
            sub.decode_kernel = True
        elif isinstance(sub, MoE):
            sub.grouped = grouped_mm_available(sub.w13.device, sub.w13.dtype)
    return module


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
