"""One cost primitive per operator kind. Each returns an OpCost: FLOPs and bytes split by kind.

Shapes broadcast: any argument may be a numpy array (batch sizes, draft lengths, contexts), so one call
evaluates a whole grid. FLOPs count multiply and add separately (a GEMM m x k @ k x n costs 2*m*k*n).
Bytes are DRAM traffic per GPU: weights, activations in/out, KV cache read/write; communication bytes are
what one rank sends over the scale-up link.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple, Optional, Union

import numpy as np

from dsdsim.cost.num import maximum, num, rint, where
from dsdsim.specs.model import swiglu_bias_params, swiglu_matrix_params
from dsdsim.units import DType

ArrayLike = "float | np.ndarray"


class OpKind(str, Enum):
    gemm = "gemm"
    attention = "attention"
    moe_experts = "moe_experts"
    router = "router"
    elementwise = "elementwise"
    embedding = "embedding"
    logits = "logits"           # sampling / rejection sampling over the vocabulary
    all_reduce = "all_reduce"
    all_to_all = "all_to_all"
    gather = "gather"
    host = "host"               # CPU-side work (n-gram lookup, scheduling)


class KernelClass(str, Enum):
    """Which kernel family runs an operator: it decides how time follows the shape (cost/timing.py)."""

    dense = "dense"                # cuBLAS/CUTLASS GEMMs, vector kernels, gathers: the generic model
    flash_decode = "flash-decode"  # paged decode attention (FlashAttention / FlashInfer)
    mla_decode = "mla-decode"      # MLA decode over the latent cache (FlashMLA)
    fused_moe = "fused-moe"        # routed experts as grouped GEMMs (fused-MoE kernels)


class Bound(str, Enum):
    compute = "compute"
    memory = "memory"
    communication = "communication"
    overhead = "overhead"


class GemmShape(NamedTuple):
    """Y[m, n] = X[m, k] @ W[k, n]: the shape a GEMM operator runs (m rows may be a grid)."""

    m: np.ndarray | float
    k: int
    n: int


class AttentionShape(NamedTuple):
    """q new tokens per sequence for ``batch`` sequences against ``context`` cached tokens."""

    batch: np.ndarray | float
    q: np.ndarray | float
    context: np.ndarray | float
    heads: int
    qk_dim: int
    v_dim: int
    kv_elements_per_token: int


class MoEShape(NamedTuple):
    """Routed SwiGLU experts: ``tokens`` rows, each routed to ``top_k`` of the experts (``width`` per rank)."""

    tokens: np.ndarray | float
    top_k: int
    hidden: int
    width: int
    experts_touched: np.ndarray | float      # distinct routed experts this rank reads
    token_share: np.ndarray | float          # fraction of all token-expert rows this rank computes


class ElementwiseShape(NamedTuple):
    """``reads`` input and ``writes`` output vectors of ``width`` per row."""

    rows: np.ndarray | float
    width: int
    reads: float
    writes: float


OpShape = Union[GemmShape, AttentionShape, MoEShape, ElementwiseShape]


@dataclass(frozen=True, init=False)
class OpCost:
    """Cost of ONE occurrence of an operator; ``count`` occurrences per step (layers x passes)."""

    name: str
    kind: OpKind
    dtype: DType = DType.bf16                  # whose peak FLOP/s the op runs at (GEMMs: the weight format;
                                               # the hardware falls back to bf16 where it has no such peak)
    flops: np.ndarray | float = 0.0            # useful FLOPs
    flops_padded: np.ndarray | float = 0.0     # FLOPs the kernel executes after padding m to the tile
    weight_bytes: np.ndarray | float = 0.0
    act_in_bytes: np.ndarray | float = 0.0
    act_out_bytes: np.ndarray | float = 0.0
    kv_read_bytes: np.ndarray | float = 0.0
    kv_write_bytes: np.ndarray | float = 0.0
    comm_bytes: np.ndarray | float = 0.0       # bytes this rank sends
    comm_group: int = 1                        # ranks taking part in the collective
    host_s: np.ndarray | float = 0.0
    launches: np.ndarray | float = 1           # kernels per occurrence
    count: np.ndarray | float = 1              # occurrences per step
    experts_touched: np.ndarray | float | None = None        # MoE only: distinct routed experts read (this rank)
    experts_touched_total: np.ndarray | float | None = None  # MoE only: distinct routed experts read by all ranks
    kernel: KernelClass = KernelClass.dense
    sequences: np.ndarray | float = 0.0        # attention: sequences whose KV cache one call reads
    kv_bytes_per_token: float = 0.0            # attention: cached bytes per token of one sequence (this rank)
    shape: Optional[OpShape] = field(default=None, compare=False)   # what a torch bench builds the kernel from

    def __init__(self, name: str, kind: OpKind, dtype: DType = DType.bf16, flops=0.0, flops_padded=0.0,
                 weight_bytes=0.0, act_in_bytes=0.0, act_out_bytes=0.0, kv_read_bytes=0.0, kv_write_bytes=0.0,
                 comm_bytes=0.0, comm_group: int = 1, host_s=0.0, launches=1, count=1, experts_touched=None,
                 experts_touched_total=None, kernel: KernelClass = KernelClass.dense, sequences=0.0,
                 kv_bytes_per_token: float = 0.0, shape: Optional[OpShape] = None):
        # the fields written in one step: a frozen dataclass's own __init__ sets them one object.__setattr__ at a
        # time, which is most of the cost of building a step's ~40 operators at one point
        _set_fields(self, {
            "name": name, "kind": kind, "dtype": dtype, "flops": flops, "flops_padded": flops_padded,
            "weight_bytes": weight_bytes, "act_in_bytes": act_in_bytes, "act_out_bytes": act_out_bytes,
            "kv_read_bytes": kv_read_bytes, "kv_write_bytes": kv_write_bytes, "comm_bytes": comm_bytes,
            "comm_group": comm_group, "host_s": host_s, "launches": launches, "count": count,
            "experts_touched": experts_touched, "experts_touched_total": experts_touched_total, "kernel": kernel,
            "sequences": sequences, "kv_bytes_per_token": kv_bytes_per_token, "shape": shape})

    @property
    def bytes(self) -> np.ndarray | float:
        """DRAM bytes moved by one occurrence (communication excluded)."""
        total, fresh = self.weight_bytes, False
        for part in (self.act_in_bytes, self.act_out_bytes, self.kv_read_bytes, self.kv_write_bytes):
            if (type(part) is float or np.ndim(part) == 0) and part == 0:          # adding an exact scalar zero changes nothing: skip it
                continue
            total, fresh = _accumulate(total, part, fresh), True
        return total

    def times(self, count) -> "OpCost":
        return self._with(count=self.count * count)

    def renamed(self, prefix: str, times=None) -> "OpCost":
        """The operator under ``prefix + name``; with ``times``, also occurring ``times`` as often."""
        if times is None:
            return self._with(name=f"{prefix}{self.name}")
        return self._with(name=f"{prefix}{self.name}", count=self.count * times)

    def _with(self, **changes) -> "OpCost":
        """``dataclasses.replace`` without re-running ``__init__``: a copy of the fields with ``changes`` applied
        (every field is already valid; a step builds ~100 such copies, where replace costs ~40% of a point)."""
        new = object.__new__(OpCost)
        _set_fields(new, {**self.__dict__, **changes})
        return new


def _set_fields(op: OpCost, values: dict) -> None:
    object.__setattr__(op, "__dict__", values)


def _accumulate(total, part, fresh: bool):
    """total + part, in place when `total` is an array this code made and already has the result's shape
    (the same sum, without allocating a new grid-sized array per term)."""
    if fresh and isinstance(total, np.ndarray) and total.shape == np.broadcast_shapes(total.shape, np.shape(part)):
        total += part
        return total
    return total + part


def pad_rows(m, tile: int):
    """Rows a GEMM kernel computes: at least one M tile (a decode/verify GEMM with m=4 still runs a 64-row
    tile on Hopper). Above one tile, libraries choose among tile shapes, so finer quantisation is not modelled
    (it would make cost jump non-monotonically with m). m = 0 (an absent op) stays 0."""
    m = num(m)
    if tile <= 1:
        return m
    if isinstance(m, np.ndarray) and m.size and m.min() > 0:
        return np.maximum(m, tile)      # no absent op among them: the same values, two grid passes fewer
    return where(m > 0, maximum(m, tile), 0.0)


def gemm(name: str, m, k: int, n: int, w_dtype: DType, act_dtype: DType, tile_m: int = 1,
         bias: bool = False, out_bytes_per_element: float | None = None) -> OpCost:
    """Y[m, n] = X[m, k] @ W[k, n] (+ b). Weights are read once; X read, Y written."""
    a = act_dtype.bytes_per_element
    out = a if out_bytes_per_element is None else out_bytes_per_element
    m = num(m)
    weights = k * n * w_dtype.bytes_per_element + (n * a if bias else 0.0)
    return OpCost(
        name=name, kind=OpKind.gemm, dtype=w_dtype,
        # scalar factors first, one multiply over the (possibly large) m grid each
        flops=m * (2.0 * k * n), flops_padded=pad_rows(m, tile_m) * (2.0 * k * n),
        weight_bytes=weights, act_in_bytes=m * (k * a), act_out_bytes=m * (n * out),
        shape=GemmShape(m, k, n),
    )


def attention(name: str, batch, q, context, num_heads: int, qk_dim: int, v_dim: int,
              kv_elements_per_token: int, kv_dtype: DType, act_dtype: DType,
              kernel: KernelClass = KernelClass.flash_decode) -> OpCost:
    """Scores and weighted values for q new tokens per sequence against context + q keys.

    FLOPs = 2*B*q*n_q*(d_qk + d_v)*(c + q)  (= 4*B*q*n_q*d*(c + q) when d_qk = d_v).
    KV: each sequence's cache is read ONCE for all its q queries (why verify amortises KV reads),
    and the q new tokens' K/V are written. MLA: qk_dim = kv_lora + rope, v_dim = kv_lora (absorbed).
    """
    a = act_dtype.bytes_per_element
    kvb = kv_dtype.bytes_per_element
    b = num(batch)
    q = num(q)
    c = num(context)
    queries = b * q                     # scalar factors grouped: one multiply over the grid per term
    flops = queries * (2.0 * num_heads * (qk_dim + v_dim)) * (c + q)
    return OpCost(
        name=name, kind=OpKind.attention, dtype=act_dtype, flops=flops, flops_padded=flops,
        act_in_bytes=queries * (num_heads * qk_dim * a), act_out_bytes=queries * (num_heads * v_dim * a),
        kv_read_bytes=b * c * (kv_elements_per_token * kvb), kv_write_bytes=queries * (kv_elements_per_token * kvb),
        kernel=kernel, sequences=b, kv_bytes_per_token=kv_elements_per_token * kvb,
        shape=AttentionShape(b, q, c, num_heads, qk_dim, v_dim, kv_elements_per_token),
    )


def moe_experts(name: str, tokens, top_k: int, hidden: int, expert_width: int, experts_touched,
                token_share, w_dtype: DType, act_dtype: DType, tile_m: int = 1, bias: bool = False,
                experts_touched_total=None) -> OpCost:
    """Routed SwiGLU experts as one grouped GEMM (gate_up then down).

    FLOPs = 2 * (tokens*top_k*share) * 3*h*I_e on this rank; weight bytes = experts_touched * 3*h*I_e.
    ``token_share`` is the fraction of all token->expert assignments this rank computes (1/ep if balanced).
    Padding: each touched expert's rows are padded to the M tile. ``experts_touched_total``: the distinct experts
    all ranks read (reported, not timed).
    """
    a = act_dtype.bytes_per_element
    assignments = num(tokens) * top_k * token_share      # (token, expert) pairs here
    touched = maximum(num(experts_touched), 1e-12)
    per_expert_m = assignments / touched
    padded = touched * pad_rows(per_expert_m, tile_m)
    per_row_flops = 2.0 * swiglu_matrix_params(hidden, expert_width)
    per_expert_w = swiglu_matrix_params(hidden, expert_width) * w_dtype.bytes_per_element
    if bias:
        per_expert_w += swiglu_bias_params(hidden, expert_width) * a
    return OpCost(
        name=name, kind=OpKind.moe_experts, dtype=w_dtype,
        flops=assignments * per_row_flops, flops_padded=padded * per_row_flops,
        weight_bytes=num(experts_touched) * per_expert_w,
        # gather the routed rows in, write gate_up out and read it back, scatter the results out
        act_in_bytes=assignments * (hidden + 2 * expert_width) * a,
        act_out_bytes=assignments * (hidden + 2 * expert_width) * a,
        launches=2, experts_touched=experts_touched, experts_touched_total=experts_touched_total,
        kernel=KernelClass.fused_moe,
        shape=MoEShape(num(tokens), top_k, hidden, expert_width, experts_touched, token_share),
    )


def elementwise(name: str, rows, width: int, reads: float, writes: float, act_dtype: DType,
                flops_per_element: float = 1.0, weight_elements: int = 0) -> OpCost:
    """Norms, residual adds, rotary, activations: `reads`/`writes` vectors of `width` per row."""
    a = act_dtype.bytes_per_element
    rows = num(rows)
    f = rows * (width * flops_per_element)
    return OpCost(name=name, kind=OpKind.elementwise, dtype=act_dtype, flops=f, flops_padded=f,
                  weight_bytes=weight_elements * a, act_in_bytes=rows * (width * reads * a),
                  act_out_bytes=rows * (width * writes * a),
                  shape=ElementwiseShape(rows, width, reads, writes))


def embedding(name: str, tokens, hidden: int, w_dtype: DType, act_dtype: DType) -> OpCost:
    """Gather one row of the table per token."""
    t = num(tokens)
    return OpCost(name=name, kind=OpKind.embedding, dtype=act_dtype,
                  weight_bytes=t * (hidden * w_dtype.bytes_per_element),
                  act_out_bytes=t * (hidden * act_dtype.bytes_per_element))


def sampling(name: str, rows, vocab: int, passes: float) -> OpCost:
    """fp32 logits over the vocabulary read `passes` times and probabilities written once per row.

    Sampling reads the logits (softmax, top-p) and writes probabilities; rejection sampling reads target and
    draft probabilities. At large B*q these N*V*4-byte sweeps are not small.
    """
    rows = num(rows)
    sweep = rows * (vocab * 4.0)
    f = rows * (vocab * 5.0) * passes
    return OpCost(name=name, kind=OpKind.logits, dtype=DType.fp32, flops=f, flops_padded=f,
                  act_in_bytes=sweep * passes, act_out_bytes=sweep, launches=maximum(1.0, rint(num(passes))))


def all_reduce(name: str, rows, width: int, act_dtype: DType, group: int) -> OpCost:
    """Ring all-reduce of rows x width activations across `group` ranks; a rank sends 2(n-1)/n of the buffer."""
    payload = num(rows) * (width * act_dtype.bytes_per_element)
    sent = 2.0 * (group - 1) / group * payload if group > 1 else 0.0 * payload
    return OpCost(name=name, kind=OpKind.all_reduce, dtype=act_dtype, comm_bytes=sent, comm_group=group,
                  act_in_bytes=payload, act_out_bytes=payload)


def all_to_all(name: str, assignments, hidden: int, act_dtype: DType, group: int) -> OpCost:
    """Expert-parallel dispatch or combine: a rank sends the (n-1)/n of its token-expert rows that live elsewhere."""
    rows_here = num(assignments) / group
    sent = rows_here * hidden * act_dtype.bytes_per_element * (group - 1) / group
    return OpCost(name=name, kind=OpKind.all_to_all, dtype=act_dtype, comm_bytes=sent, comm_group=group)


def gather(name: str, rows, width: int, bytes_per_element: float, group: int) -> OpCost:
    """All-gather of a vocab-parallel logits shard: a rank sends its rows x width/n slice to n-1 peers."""
    shard = num(rows) * width * bytes_per_element
    return OpCost(name=name, kind=OpKind.gather, dtype=DType.fp32, comm_bytes=shard * (group - 1) / group,
                  comm_group=group)


def host(name: str, seconds) -> OpCost:
    """CPU-side work with no device traffic (n-gram lookup, per-step bookkeeping)."""
    return OpCost(name=name, kind=OpKind.host, host_s=num(seconds), launches=0)

