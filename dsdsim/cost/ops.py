"""One cost primitive per operator kind: a frozen class holding the operator's static shape (``Gemm``,
``Attention``, ``MoEExperts``, ...), whose ``demand`` at given sizes is its formula (FLOPs and bytes split by kind,
what its time depends on) and whose ``record`` is the same figures as an OpCost. ``gemm``, ``attention``, ... build
one record directly.

Sizes broadcast: any size may be a numpy array (batch sizes, draft lengths, contexts), so one call
evaluates a whole grid. FLOPs count multiply and add separately (a GEMM m x k @ k x n costs 2*m*k*n).
Bytes are DRAM traffic per GPU: weights, activations in/out, KV cache read/write; communication bytes are
what one rank sends over the scale-up link.
"""
from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import ClassVar, NamedTuple, Optional, Union

import numpy as np

from dsdsim.cost.num import maximum, minimum, num, rint, where
from dsdsim.records import frozen
from dsdsim.specs.hardware import GROUPED_GEMM_LAUNCHES
from dsdsim.specs.model import mlp_bias_params, mlp_matrix_params, swiglu_bias_params, swiglu_matrix_params
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
    send = "send"               # point-to-point send between pipeline stages
    host = "host"               # CPU-side work (n-gram lookup, scheduling)
    recurrent = "recurrent"     # linear-attention / state-space layers: short convolution, state scan


class KernelClass(str, Enum):
    """Which kernel family runs an operator: it decides how time follows the shape (cost/timing.py)."""

    dense = "dense"                # cuBLAS/CUTLASS GEMMs, vector kernels, gathers: the generic model
    flash_decode = "flash-decode"  # paged decode attention (FlashAttention / FlashInfer)
    flash_decode_fp8 = "flash-decode-fp8"   # the same over an 8-bit cache, dequantised in the kernel
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


class ExpertsTouched(NamedTuple):
    """Distinct routed experts a MoE layer reads at one occurrence (reported, and one expert's weight bytes follow
    from it: ``dsdsim.cost.timing.record_rates``)."""

    rank: np.ndarray | float                  # on this rank (the busiest one under expert parallelism)
    total: np.ndarray | float | None = None   # by all ranks together


@frozen(init=False)
class OpCost:
    """Cost of ONE occurrence of an operator (its ``demand``: FLOPs, bytes by kind, launches, what its time depends
    on); ``count`` occurrences per step (layers x passes). The figures read as attributes (``op.flops``,
    ``op.weight_bytes``, ``op.bytes``) come from the demand."""

    name: str
    kind: OpKind
    demand: "Demand"
    dtype: DType = DType.bf16                  # whose peak FLOP/s the op runs at (GEMMs: the weight format;
                                               # the hardware falls back to bf16 where it has no such peak)
    kernel: KernelClass = KernelClass.dense
    comm_group: int = 1                        # ranks taking part in the collective
    count: np.ndarray | float = 1              # occurrences per step
    experts: Optional[ExpertsTouched] = None   # MoE only
    kv_bytes_per_token: float = 0.0            # attention: cached bytes per token of one sequence (this rank)
    shape: Optional[OpShape] = field(default=None, compare=False)   # what a torch bench builds the kernel from

    def __init__(self, name: str, kind: OpKind, demand: "Demand", dtype: DType = DType.bf16,
                 kernel: KernelClass = KernelClass.dense, comm_group: int = 1, count=1,
                 experts: Optional[ExpertsTouched] = None, kv_bytes_per_token: float = 0.0,
                 shape: Optional[OpShape] = None):
        # the fields written in one step: a frozen dataclass's own __init__ sets them one object.__setattr__ at a
        # time, which is most of the cost of building a step's ~40 operators at one point
        _set_fields(self, {"name": name, "kind": kind, "demand": demand, "dtype": dtype, "kernel": kernel,
                           "comm_group": comm_group, "count": count, "experts": experts,
                           "kv_bytes_per_token": kv_bytes_per_token, "shape": shape})

    @property
    def flops(self) -> np.ndarray | float:
        """Useful FLOPs."""
        return self.demand.flops

    @property
    def flops_padded(self) -> np.ndarray | float:
        """FLOPs the kernel executes after padding m to the tile."""
        return self.demand.flops_padded

    @property
    def weight_bytes(self) -> np.ndarray | float:
        return self.demand.weight_bytes

    @property
    def act_in_bytes(self) -> np.ndarray | float:
        return self.demand.act_in_bytes

    @property
    def act_out_bytes(self) -> np.ndarray | float:
        return self.demand.act_out_bytes

    @property
    def kv_read_bytes(self) -> np.ndarray | float:
        return self.demand.kv_read_bytes

    @property
    def kv_write_bytes(self) -> np.ndarray | float:
        return self.demand.kv_write_bytes

    @property
    def comm_bytes(self) -> np.ndarray | float:
        """Bytes this rank sends."""
        return self.demand.comm_bytes

    @property
    def host_s(self) -> np.ndarray | float:
        return self.demand.host_s

    @property
    def launches(self) -> np.ndarray | float:
        """Kernels per occurrence."""
        return self.demand.launches

    @property
    def sequences(self) -> np.ndarray | float:
        """Attention: sequences whose KV cache one call reads."""
        return self.demand.sequences

    @property
    def experts_touched(self) -> np.ndarray | float | None:
        """MoE only: distinct routed experts read on this rank."""
        return None if self.experts is None else self.experts.rank

    @property
    def experts_touched_total(self) -> np.ndarray | float | None:
        """MoE only: distinct routed experts read by all ranks."""
        return None if self.experts is None else self.experts.total

    @property
    def bytes(self) -> np.ndarray | float:
        """DRAM bytes moved by one occurrence (communication excluded)."""
        d = self.demand
        return d.weight_bytes + d.act_in_bytes + d.act_out_bytes + d.kv_read_bytes + d.kv_write_bytes

    def times(self, count) -> "OpCost":
        """The operator occurring ``count`` times as often: a copy of the fields (valid already) with the new count,
        without re-running ``__init__``."""
        new = object.__new__(OpCost)
        _set_fields(new, {**self.__dict__, "count": self.count * count})
        return new


def _set_fields(op: OpCost, values: dict) -> None:
    object.__setattr__(op, "__dict__", values)


def pad_rows(m, tile: int):
    """Rows a GEMM kernel computes: at least one M tile (a decode/verify GEMM with m=4 still runs a 64-row
    tile on Hopper). Above one tile, libraries choose among tile shapes, so finer quantisation is not modelled
    (it would make cost jump non-monotonically with m). m = 0 (an absent op) stays 0."""
    if tile <= 1:
        return num(m)
    if type(m) is float:
        return (m if m >= tile else float(tile)) if m > 0 else 0.0
    m = num(m)
    if isinstance(m, np.ndarray) and m.size and m.min() > 0:
        return np.maximum(m, tile)      # no absent op among them: the same values, two grid passes fewer
    return where(m > 0, maximum(m, tile), 0.0)


# --- the operators -------------------------------------------------------------------------------------------
#
# Each operator kind is one frozen class: its static shape (widths, formats, group) fixed when a pass is planned,
# and its size (rows, tokens, context) given per point. ``demand`` is the operator's formula, written once: its
# FLOPs and its traffic split by kind at those sizes (``Demand``), plain float arithmetic at one point, so a step
# costs no record. ``record`` is derived from it (``Operator.record``): the same figures as an OpCost, with the
# operator's kind, format, kernel class and shape.


class Demand(NamedTuple):
    """One occurrence of an operator at given sizes: what it counts (the figures of its OpCost) and all that its
    time depends on (``dsdsim.cost.timing``: ``flops_padded``, ``bytes``, ``launches``, ``sequences``,
    ``collective_bytes``, ``host_s``)."""

    flops: np.ndarray | float                 # useful FLOPs
    flops_padded: np.ndarray | float          # FLOPs the kernel executes after padding m to the tile
    weight_bytes: np.ndarray | float = 0.0
    act_in_bytes: np.ndarray | float = 0.0
    act_out_bytes: np.ndarray | float = 0.0
    kv_read_bytes: np.ndarray | float = 0.0
    kv_write_bytes: np.ndarray | float = 0.0
    comm_bytes: np.ndarray | float = 0.0      # bytes this rank sends
    collective_bytes: np.ndarray | float = 0.0   # what a collective is timed on: an all-reduce's payload, else
                                                 # the bytes a rank sends
    launches: np.ndarray | float = 1          # kernels per occurrence
    sequences: np.ndarray | float = 0.0       # attention: sequences whose KV cache one call reads
    host_s: np.ndarray | float = 0.0

    @property
    def bytes(self) -> np.ndarray | float:
        """DRAM bytes (``OpCost.bytes``): weights + activations in and out + KV read and written, the terms that are
        zero for this operator left out (the same sum, no grid-sized additions of 0)."""
        w, a_in, a_out, kv_in, kv_out = self[2:7]
        if type(w) is float and type(a_in) is float and type(a_out) is float and type(kv_in) is float and \
                type(kv_out) is float:
            return w + a_in + a_out + kv_in + kv_out       # one point: five floats
        total = w
        for part in (a_in, a_out, kv_in, kv_out):
            if type(part) is not float or part != 0.0:
                total = part if type(total) is float and total == 0.0 else total + part
        return total


def _frozen_init(obj, **derived) -> None:
    for key, value in derived.items():
        object.__setattr__(obj, key, value)


class Operator:
    """An operator kind: ``kind``, the ``kernel`` class that runs it (dense unless it says otherwise), the ``dtype``
    whose peak FLOP/s it runs at; ``demand(*size)`` -> Demand, its formula, and ``record(name, *size)`` -> OpCost."""

    kernel: ClassVar[KernelClass] = KernelClass.dense

    @property
    def dtype(self) -> DType:
        """The format whose peak FLOP/s it runs at: the activations' unless the operator says otherwise."""
        return self.act_dtype

    def record(self, name: str, *size) -> OpCost:
        """The OpCost of one occurrence at ``size``: ``demand`` with the operator's kind, format and kernel class,
        the ranks of its collective, the cache bytes per token of an attention layer, and the shape a bench runs."""
        size = [s if s is None else num(s) for s in size]
        return OpCost(name, self.kind, self.demand(*size), self.dtype, self.kernel, getattr(self, "group", 1),
                      experts=self.touched(*size), kv_bytes_per_token=getattr(self, "kv_bytes_per_token", 0.0),
                      shape=self.shape(*size))

    def shape(self, *size) -> Optional[OpShape]:
        """What a torch bench builds the kernel from (None: the operator is not benched by shape)."""
        return None

    def touched(self, *size) -> Optional[ExpertsTouched]:
        """The routed experts an occurrence reads (MoE only)."""
        return None


@frozen
class Gemm(Operator):
    """Y[m, n] = X[m, k] @ W[k, n] (+ b). Weights are read once; X read, Y written. ``weight_sets`` distinct
    weight matrices serve the m rows (a batched GEMM with one matrix per head: MLA's absorbed projections)."""

    kind: ClassVar[OpKind] = OpKind.gemm

    k: int
    n: int
    w_dtype: DType
    act_dtype: DType
    tile_m: int = 1
    bias: bool = False
    out_bytes_per_element: float | None = None
    weight_sets: int = 1

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        out = a if self.out_bytes_per_element is None else self.out_bytes_per_element
        weights = self.k * self.n * self.w_dtype.bytes_per_element + (self.n * a if self.bias else 0.0)
        _frozen_init(self, _flops_per_row=2.0 * self.k * self.n, _weight_bytes=weights * self.weight_sets,
                     _in_per_row=self.k * a, _out_per_row=self.n * out)

    @property
    def dtype(self) -> DType:
        """The format whose peak FLOP/s it runs at."""
        return self.w_dtype

    def demand(self, m) -> Demand:
        # scalar factors first, one multiply over the (possibly large) m grid each; the fields in order (flops,
        # flops_padded, weight, activations in, out): positional arguments are the cheaper call
        return Demand(m * self._flops_per_row, pad_rows(m, self.tile_m) * self._flops_per_row, self._weight_bytes,
                      m * self._in_per_row, m * self._out_per_row)

    def shape(self, m) -> GemmShape:
        return GemmShape(m, self.k, self.n)


@frozen
class Attention(Operator):
    """Scores and weighted values for q new tokens per sequence against context + q keys.

    FLOPs = 2*B*q*n_q*(d_qk + d_v)*(c + q)  (= 4*B*q*n_q*d*(c + q) when d_qk = d_v).
    KV: each sequence's cache is read ONCE for all its q queries (why verify amortises KV reads),
    and the q new tokens' K/V are written. MLA: qk_dim = kv_lora + rope, v_dim = kv_lora (absorbed).
    Two launches where the layer writes its cache: the write is a kernel of its own before the attention kernel
    (vLLM ``reshape_and_cache_flash`` / ``concat_and_cache_mla``, SGLang ``set_kv_buffer``); one where it reads a
    cache another layer wrote.
    """

    kind: ClassVar[OpKind] = OpKind.attention

    heads: int
    qk_dim: int
    v_dim: int
    kv_elements_per_token: int
    kv_dtype: DType
    act_dtype: DType
    kernel: KernelClass = KernelClass.flash_decode
    writes_kv: bool = True                  # False where the layer reads a cache another layer wrote

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        kv = self.kv_elements_per_token * self.kv_dtype.bytes_per_element
        _frozen_init(self, _flops_per_query_key=2.0 * self.heads * (self.qk_dim + self.v_dim),
                     _in_per_query=self.heads * self.qk_dim * a, _out_per_query=self.heads * self.v_dim * a,
                     kv_bytes_per_token=kv, _kv_write_per_query=kv if self.writes_kv else 0.0)

    def demand(self, b, q, c) -> Demand:
        queries = b * q                     # scalar factors grouped: one multiply over the grid per term
        flops = queries * self._flops_per_query_key * (c + q)
        return Demand(flops, flops, act_in_bytes=queries * self._in_per_query,
                      act_out_bytes=queries * self._out_per_query, kv_read_bytes=b * c * self.kv_bytes_per_token,
                      kv_write_bytes=queries * self._kv_write_per_query, sequences=b,
                      launches=2 if self.writes_kv else 1)

    def shape(self, b, q, c) -> AttentionShape:
        return AttentionShape(b, q, c, self.heads, self.qk_dim, self.v_dim, self.kv_elements_per_token)


@frozen
class SparseAttention(Operator):
    """MLA decode over the keys an indexer selected (DeepSeek Sparse Attention): each of the q new tokens per
    sequence attends to s = min(c + q, topk) keys, gathered from the cache by its own indices (FlashMLA sparse
    decoding takes indices of shape (batch, s_q, topk): each query reads its rows, none are shared between queries).

    FLOPs = 2*B*q*n_q*(d_qk + d_v)*min(c + q, topk)  (the dense operator's count with c + q capped at topk).
    KV read = B*q*min(c, topk) cached rows (as the dense operator, the pass's own new keys are not counted as read);
    the q new tokens' latents are written. Activations in and out as ``Attention``. At long context the bytes stop
    growing with c: they are bounded by topk rows per query.
    """

    kind: ClassVar[OpKind] = OpKind.attention
    kernel: ClassVar[KernelClass] = KernelClass.mla_decode

    heads: int
    qk_dim: int
    v_dim: int
    kv_elements_per_token: int
    kv_dtype: DType
    act_dtype: DType
    topk: int

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        kv = self.kv_elements_per_token * self.kv_dtype.bytes_per_element
        _frozen_init(self, _flops_per_query_key=2.0 * self.heads * (self.qk_dim + self.v_dim),
                     _in_per_query=self.heads * self.qk_dim * a, _out_per_query=self.heads * self.v_dim * a,
                     kv_bytes_per_token=kv, _topk=float(self.topk))

    def demand(self, b, q, c) -> Demand:
        queries = b * q
        flops = queries * self._flops_per_query_key * minimum(c + q, self._topk)
        return Demand(flops, flops, act_in_bytes=queries * self._in_per_query,
                      act_out_bytes=queries * self._out_per_query,
                      kv_read_bytes=queries * minimum(c, self._topk) * self.kv_bytes_per_token,
                      kv_write_bytes=queries * self.kv_bytes_per_token, sequences=b, launches=2)


@frozen
class IndexerScores(Operator):
    """The lightning indexer of DeepSeek Sparse Attention scoring every cached token for each of q new tokens per
    sequence (DeepSeek-V3.2-Exp inference/model.py ``Indexer.forward``, kernel.py ``fp8_index``): per query and
    key, index_score = sum over heads of w_h * ReLU(q_h . k), then the top-k of the scores.

    FLOPs = 2*B*q*n_i*(d_i + 1)*(c + q): a d_i-long dot product per head (2 d_i), the weight multiply and the head
    sum (2 per head); ReLU, a comparison, is not counted, nor is the top-k selection.
    KV: the indexer's own K cache (``key_bytes_per_token``: fp8 keys and their fp32 scales) read once per sequence
    for its q queries, the q new keys written. Activations in: each query's fp8 q (n_i x d_i, one byte each) and its
    fp32 head weights (n_i x 4, q's scale folded in); out: the fp32 scores, c + q per query (``fp8_index`` returns
    them; the top-k reads them back, counted in as well). The selected indices (at most topk per query) are not
    counted.
    """

    kind: ClassVar[OpKind] = OpKind.attention
    # one cached key shared by all indexer heads, as MLA decode's one latent (DeepGEMM fp8_paged_mqa_logits)
    kernel: ClassVar[KernelClass] = KernelClass.mla_decode
    dtype: ClassVar[DType] = DType.fp8     # q and k are fp8 (``act_quant``) and scored in fp8 (``fp8_index``)

    heads: int
    head_dim: int
    key_bytes_per_token: float
    act_dtype: DType

    def __post_init__(self):
        _frozen_init(self, _flops_per_query_key=2.0 * self.heads * (self.head_dim + 1),
                     _in_per_query=self.heads * self.head_dim * DType.fp8.bytes_per_element
                     + self.heads * DType.fp32.bytes_per_element,
                     kv_bytes_per_token=float(self.key_bytes_per_token))

    def demand(self, b, q, c) -> Demand:
        queries = b * q
        keys = c + q
        scores = queries * keys * DType.fp32.bytes_per_element     # written, then read back by the top-k
        flops = queries * self._flops_per_query_key * keys
        return Demand(flops, flops, act_in_bytes=queries * self._in_per_query + scores, act_out_bytes=scores,
                      kv_read_bytes=b * c * self.kv_bytes_per_token,
                      kv_write_bytes=queries * self.kv_bytes_per_token, sequences=b, launches=2)


@frozen
class CausalConv1d(Operator):
    """Causal depthwise convolution of ``taps`` taps over ``channels`` per token, with a rolling state: the short
    convolution of linear-attention layers (vLLM/SGLang ``causal_conv1d_update``, SiLU fused, its arithmetic not
    counted).

    FLOPs = 2*taps*channels per token (one multiply-add per tap and channel). Weights: channels*taps, read once.
    The state, a sequence's last taps - 1 inputs per channel, is the layer's cache (engines keep it in the KV-cache
    pool), so its traffic counts as KV bytes: read once per sequence per pass, written after each of the q tokens
    (decode: once; a verify keeps one snapshot per position for rollback: SGLang ``intermediate_conv_window_cache``,
    one window per draft token).
    """

    kind: ClassVar[OpKind] = OpKind.recurrent

    channels: int
    taps: int
    w_dtype: DType
    act_dtype: DType
    state_dtype: DType

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        _frozen_init(self, _flops_per_token=2.0 * self.taps * self.channels,
                     _weight_bytes=self.channels * self.taps * self.w_dtype.bytes_per_element,
                     _act_per_token=self.channels * a,
                     _state_bytes=self.channels * (self.taps - 1) * self.state_dtype.bytes_per_element)

    def demand(self, b, q) -> Demand:
        tokens = b * q
        return Demand(tokens * self._flops_per_token, tokens * self._flops_per_token, self._weight_bytes,
                      tokens * self._act_per_token, tokens * self._act_per_token,
                      kv_read_bytes=b * self._state_bytes, kv_write_bytes=tokens * self._state_bytes)


@frozen
class CausalConv1dWithBias(CausalConv1d):
    """``CausalConv1d`` with a bias per channel (the Mamba-2 mixer's conv1d, transformers ``use_conv_bias``): the
    channels' biases are read with the filters, and each output adds its bias, one more FLOP per channel a token."""

    def __post_init__(self):
        super().__post_init__()
        _frozen_init(self, _flops_per_token=self._flops_per_token + self.channels,
                     _weight_bytes=self._weight_bytes + self.channels * self.w_dtype.bytes_per_element)


class StateScan(Operator):
    """A recurrent layer's scan over q new tokens per sequence: per-token FLOPs and activations
    (``_flops_per_token``, ``_in_per_token``, ``_out_per_token``, set by each kind), the state (``_state_bytes``,
    the layer's cache) read once per sequence per pass and written after each token."""

    kind: ClassVar[OpKind] = OpKind.recurrent

    def demand(self, b, q) -> Demand:
        tokens = b * q
        return Demand(tokens * self._flops_per_token, tokens * self._flops_per_token,
                      act_in_bytes=tokens * self._in_per_token, act_out_bytes=tokens * self._out_per_token,
                      kv_read_bytes=b * self._state_bytes, kv_write_bytes=tokens * self._state_bytes)


@frozen
class DeltaRuleScan(StateScan):
    """The gated delta rule over q new tokens per sequence (Yang et al., Gated Delta Networks, arXiv:2412.06464),
    as decode and verify run it: token by token on a state S of d_k x d_v per value head (vLLM and SGLang run
    ``fused_recurrent_gated_delta_rule`` over the speculative tokens, writing the state of every position).

    Per token and value head: S <- exp(g) S (d_k d_v), u = S^T k (2 d_k d_v), delta = beta (v - u) (2 d_v),
    S <- S + k delta^T (2 d_k d_v), o = S^T q (2 d_k d_v): FLOPs = 7 d_k d_v + 2 d_v. Activations: q and k
    (``key_heads`` x d_k each), v (heads x d_v) and the two gates g, beta (one per value head) in; o (heads x d_v)
    out. The state (heads x d_k x d_v in ``state_dtype``) is the layer's cache, counted as KV bytes: read once per
    sequence per pass whatever the context, written after each of the q tokens (decode: once; a verify keeps a
    snapshot per position so a rejected suffix rolls back: SGLang ``intermediate_ssm_state_cache``, vLLM one state
    block per speculative token).
    """

    heads: int          # value heads on this rank
    key_heads: int      # q/k heads on this rank
    key_dim: int        # d_k
    value_dim: int      # d_v
    act_dtype: DType
    state_dtype: DType

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        dk, dv = self.key_dim, self.value_dim
        _frozen_init(self, _flops_per_token=self.heads * (7.0 * dk * dv + 2.0 * dv),
                     _in_per_token=(2 * self.key_heads * dk + self.heads * dv + 2 * self.heads) * a,
                     _out_per_token=self.heads * dv * a,
                     _state_bytes=self.heads * dk * dv * self.state_dtype.bytes_per_element)



@frozen
class Mamba2Scan(StateScan):
    """The Mamba-2 selective state update over q new tokens per sequence, token by token (Dao & Gu, Transformers are
    SSMs, arXiv:2405.21060, the SSM recurrence with a scalar decay per head: h_t = exp(dt A) h_{t-1} + dt B_t x_t,
    y_t = C_t h_t + D x_t), as decode and verify run it: mamba_ssm ``ops/triton/selective_state_update.py``
    ``selective_state_update``, which vLLM and SGLang also run over the speculative tokens of a verify, writing the
    state of every position.

    Per token and head, with P = head_dim, N = state_size and the head's group's B_t and C_t (N each), the time step
    dt = softplus(dt + dt_bias) and the decay dA = exp(A dt) are one scalar per head (the kernel's ``TIE_HDIM`` path,
    which transformers and vLLM take: dt, A and dt_bias are broadcast over the head), and the kernel computes
      dB = B_t * dt                 N multiplies
      S  = S * dA + dB x_t^T        3 P N: two multiplies and an add per state element
      y  = sum_N(S * C_t) + D x_t   2 P N for the contraction over N, 2 P for the skip
    FLOPs = H (5 P N + N + 2 P) a token (about 5 per state element); the scalar work per head (the bias add,
    softplus, exp) is not counted, nor the gated norm by z that follows (``z=None`` in the call: its own operator).
    Activations: x (H x P), B and C (G x N each, G = the groups on the rank) and dt (H) in; y (H x P) out. The state
    (H x P x N in ``state_dtype``: mamba_ssm_cache_dtype, fp32 in Nemotron-H configs) is the layer's cache, counted as
    KV bytes: read once per sequence per pass whatever the context, written after each of the q tokens (decode: once;
    a verify keeps one state per position so that a rejected suffix rolls back, as for ``DeltaRuleScan``). A, D and
    dt_bias (H each) are not counted.
    """

    heads: int          # H on this rank
    head_dim: int       # P
    state_size: int     # N
    groups: int         # G on this rank (heads of a group share B and C)
    act_dtype: DType
    state_dtype: DType

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        p, n = self.head_dim, self.state_size
        _frozen_init(self, _flops_per_token=self.heads * (5.0 * p * n + n + 2.0 * p),
                     _in_per_token=(self.heads * p + 2 * self.groups * n + self.heads) * a,
                     _out_per_token=self.heads * p * a,
                     _state_bytes=self.heads * p * n * self.state_dtype.bytes_per_element)



@frozen
class MoEExperts(Operator):
    """Routed SwiGLU experts as one grouped GEMM (gate_up then down).

    FLOPs = 2 * (tokens*top_k*share) * 3*h*I_e on this rank; weight bytes = experts_touched * 3*h*I_e.
    ``token_share`` is the fraction of all token->expert assignments this rank computes (1/ep if balanced).
    Padding: each touched expert's rows are padded to the M tile (the fused-MoE family's, ``MoEFamilyFigures.tile_m``,
    where the plan knows it). ``experts``: the routed experts this rank holds (0: not given), what the per-call
    work of a fused-MoE kernel family may grow with (dsdsim.cost.timing). ``experts_touched_total``: the distinct
    experts all ranks read (reported, not timed).
    """

    kind: ClassVar[OpKind] = OpKind.moe_experts
    kernel: ClassVar[KernelClass] = KernelClass.fused_moe

    top_k: int
    hidden: int
    width: int
    w_dtype: DType
    act_dtype: DType
    tile_m: int = 1
    bias: bool = False
    experts: int = 0

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        per_expert_w = swiglu_matrix_params(self.hidden, self.width) * self.w_dtype.bytes_per_element
        if self.bias:
            per_expert_w += swiglu_bias_params(self.hidden, self.width) * a
        _frozen_init(self, _flops_per_row=2.0 * swiglu_matrix_params(self.hidden, self.width),
                     _weight_bytes_per_expert=per_expert_w,
                     # gather the routed rows in, write gate_up out and read it back, scatter the results out
                     _act_per_row=(self.hidden + 2 * self.width) * a)

    @property
    def expert_weight_bytes(self) -> float:
        """Bytes of one routed expert's weights on this rank (biases included)."""
        return self._weight_bytes_per_expert

    def _padded_rows(self, assignments, touched):
        t = maximum(touched, 1e-12)
        return t * pad_rows(assignments / t, self.tile_m)

    @property
    def dtype(self) -> DType:
        """The format whose peak FLOP/s it runs at."""
        return self.w_dtype

    def demand(self, tokens, experts_touched, token_share, experts_touched_total=None) -> Demand:
        assignments = tokens * self.top_k * token_share      # (token, expert) pairs here
        act = assignments * self._act_per_row
        return Demand(assignments * self._flops_per_row,
                      self._padded_rows(assignments, experts_touched) * self._flops_per_row,
                      experts_touched * self._weight_bytes_per_expert, act, act, launches=GROUPED_GEMM_LAUNCHES)

    def shape(self, tokens, experts_touched, token_share, experts_touched_total=None) -> MoEShape:
        return MoEShape(tokens, self.top_k, self.hidden, self.width, experts_touched, token_share)

    def touched(self, tokens, experts_touched, token_share, experts_touched_total=None) -> ExpertsTouched:
        return ExpertsTouched(experts_touched, experts_touched_total)


@frozen
class PlainMoEExperts(MoEExperts):
    """Routed experts of a plain two-matrix MLP, up (h -> I_e), an elementwise activation, down (I_e -> h), no gate
    (Nemotron-H's ReLU^2 experts: transformers ``NemotronHExperts``, vLLM FusedMoE with ``is_act_and_mul=False``), as
    one grouped GEMM.

    FLOPs = 2 * (tokens*top_k*share) * 2*h*I_e on this rank; weight bytes = experts_touched * 2*h*I_e. Activations per
    row: the routed row in and the up output read back (h + I_e), the up output written and the result scattered out
    (I_e + h), as ``MoEExperts`` counts its gate_up. ``hidden`` is the width the experts read (LatentMoE: the latent
    size). Padding, touched experts and timing as ``MoEExperts``.
    """

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        per_expert_w = mlp_matrix_params(self.hidden, self.width, gated=False) * self.w_dtype.bytes_per_element
        if self.bias:
            per_expert_w += mlp_bias_params(self.hidden, self.width, gated=False) * a
        _frozen_init(self, _flops_per_row=2.0 * mlp_matrix_params(self.hidden, self.width, gated=False),
                     _weight_bytes_per_expert=per_expert_w, _act_per_row=(self.hidden + self.width) * a)


@frozen
class Elementwise(Operator):
    """Norms, residual adds, rotary, activations: ``reads``/``writes`` vectors of ``width`` per row."""

    kind: ClassVar[OpKind] = OpKind.elementwise

    width: int
    reads: float
    writes: float
    act_dtype: DType
    flops_per_element: float = 1.0
    weight_elements: int = 0

    def __post_init__(self):
        a = self.act_dtype.bytes_per_element
        _frozen_init(self, _flops_per_row=self.width * self.flops_per_element, _weight_bytes=self.weight_elements * a,
                     _in_per_row=self.width * self.reads * a, _out_per_row=self.width * self.writes * a)

    def demand(self, rows) -> Demand:
        f = rows * self._flops_per_row
        return Demand(f, f, self._weight_bytes, rows * self._in_per_row, rows * self._out_per_row)   # as Gemm's

    def shape(self, rows) -> ElementwiseShape:
        return ElementwiseShape(rows, self.width, self.reads, self.writes)


@frozen
class Embedding(Operator):
    """Gather one row of the table per token."""

    kind: ClassVar[OpKind] = OpKind.embedding

    hidden: int
    w_dtype: DType
    act_dtype: DType

    def __post_init__(self):
        _frozen_init(self, _weight_per_token=self.hidden * self.w_dtype.bytes_per_element,
                     _out_per_token=self.hidden * self.act_dtype.bytes_per_element)

    def demand(self, tokens) -> Demand:
        return Demand(0.0, 0.0, weight_bytes=tokens * self._weight_per_token,
                      act_out_bytes=tokens * self._out_per_token)


@frozen
class Sampling(Operator):
    """fp32 logits over the vocabulary read ``passes`` times and probabilities written once per row.

    Sampling reads the logits (softmax, top-p) and writes probabilities; rejection sampling reads target and
    draft probabilities. At large B*q these N*V*4-byte sweeps are not small.
    """

    kind: ClassVar[OpKind] = OpKind.logits
    dtype: ClassVar[DType] = DType.fp32            # the format whose peak FLOP/s it runs at

    vocab: int

    def demand(self, rows, passes) -> Demand:
        sweep = rows * (self.vocab * 4.0)
        f = rows * (self.vocab * 5.0) * passes
        return Demand(f, f, act_in_bytes=sweep * passes, act_out_bytes=sweep, launches=maximum(1.0, rint(passes)))


@frozen
class AllReduce(Operator):
    """Ring all-reduce of rows x width activations across ``group`` ranks; a rank sends 2(n-1)/n of the buffer,
    and the all-reduce is timed on the buffer (its tiers, ``dsdsim.cost.timing``)."""

    kind: ClassVar[OpKind] = OpKind.all_reduce

    width: int
    act_dtype: DType
    group: int

    def demand(self, rows) -> Demand:
        payload = rows * (self.width * self.act_dtype.bytes_per_element)
        g = self.group
        sent = 2.0 * (g - 1) / g * payload if g > 1 else 0.0 * payload
        return Demand(0.0, 0.0, act_in_bytes=payload, act_out_bytes=payload, comm_bytes=sent,
                      collective_bytes=payload)


class _Exchange(Operator):
    """A collective in which a rank sends ``sent_bytes(size)`` to its peers (timed on the link, no DRAM term)."""

    def demand(self, size) -> Demand:
        sent = self.sent_bytes(size)
        return Demand(0.0, 0.0, comm_bytes=sent, collective_bytes=sent)


@frozen
class AllToAll(_Exchange):
    """Expert-parallel dispatch or combine of ``assignments`` token-expert rows: a rank sends the (n-1)/n of its rows
    that live elsewhere."""

    kind: ClassVar[OpKind] = OpKind.all_to_all

    hidden: int
    act_dtype: DType
    group: int

    def sent_bytes(self, assignments):
        g = self.group
        return assignments / g * self.hidden * self.act_dtype.bytes_per_element * (g - 1) / g


@frozen
class Gather(_Exchange):
    """All-gather of a vocab-parallel logits shard of ``rows``: a rank sends its rows x width/n slice to n-1 peers."""

    kind: ClassVar[OpKind] = OpKind.gather
    dtype: ClassVar[DType] = DType.fp32            # the format whose peak FLOP/s it runs at

    width: int
    bytes_per_element: float
    group: int

    def sent_bytes(self, rows):
        return rows * self.width * self.bytes_per_element * (self.group - 1) / self.group


@frozen
class SendRecv(_Exchange):
    """A pipeline stage's point-to-point send of ``rows`` x ``width`` activations to the next stage. Each of the
    stage's ``shards`` ranks sends its 1/shards slice to its peer rank of the next stage, which all-gathers the slices
    (vLLM ``GroupCoordinator.send_tensor_dict`` with ``all_gather_group``: the tp group; the gather is its own
    ``Gather``). ``group``: the nodes the two peers sit on, 1 (the scale-up link) or 2 (the scale-out network)."""

    kind: ClassVar[OpKind] = OpKind.send

    width: int
    act_dtype: DType
    shards: int
    group: int

    def sent_bytes(self, rows):
        return rows * self.width * self.act_dtype.bytes_per_element / self.shards


@frozen
class Host(Operator):
    """CPU-side work with no device traffic (n-gram lookup, per-step bookkeeping)."""

    kind: ClassVar[OpKind] = OpKind.host
    dtype: ClassVar[DType] = DType.bf16            # the format whose peak FLOP/s it runs at

    def demand(self, seconds) -> Demand:
        return Demand(0.0, 0.0, launches=0, host_s=seconds)


# --- one record at given sizes (tests, benches and probes build single operators this way) --------------------


def gemm(name: str, m, k: int, n: int, w_dtype: DType, act_dtype: DType, tile_m: int = 1,
         bias: bool = False, out_bytes_per_element: float | None = None) -> OpCost:
    return Gemm(k, n, w_dtype, act_dtype, tile_m, bias, out_bytes_per_element).record(name, m)


def decode_kernel(kv_dtype: DType) -> KernelClass:
    """The paged decode-attention class over a cache of ``kv_dtype``: a 16-bit cache streams as it is read, an 8-bit
    one is dequantised in the kernel (the hardware spec's fp8-cache figures, where it has them)."""
    return KernelClass.flash_decode_fp8 if kv_dtype.bytes_per_element < 2 else KernelClass.flash_decode


def attention(name: str, batch, q, context, num_heads: int, qk_dim: int, v_dim: int,
              kv_elements_per_token: int, kv_dtype: DType, act_dtype: DType,
              kernel: KernelClass = KernelClass.flash_decode) -> OpCost:
    return Attention(num_heads, qk_dim, v_dim, kv_elements_per_token, kv_dtype, act_dtype, kernel).record(
        name, batch, q, context)


def moe_experts(name: str, tokens, top_k: int, hidden: int, expert_width: int, experts_touched,
                token_share, w_dtype: DType, act_dtype: DType, tile_m: int = 1, bias: bool = False,
                experts_touched_total=None) -> OpCost:
    return MoEExperts(top_k, hidden, expert_width, w_dtype, act_dtype, tile_m, bias).record(
        name, tokens, experts_touched, token_share, experts_touched_total)


def elementwise(name: str, rows, width: int, reads: float, writes: float, act_dtype: DType,
                flops_per_element: float = 1.0, weight_elements: int = 0) -> OpCost:
    return Elementwise(width, reads, writes, act_dtype, flops_per_element, weight_elements).record(name, rows)


def embedding(name: str, tokens, hidden: int, w_dtype: DType, act_dtype: DType) -> OpCost:
    return Embedding(hidden, w_dtype, act_dtype).record(name, tokens)


def all_reduce(name: str, rows, width: int, act_dtype: DType, group: int) -> OpCost:
    return AllReduce(width, act_dtype, group).record(name, rows)


def all_to_all(name: str, assignments, hidden: int, act_dtype: DType, group: int) -> OpCost:
    return AllToAll(hidden, act_dtype, group).record(name, assignments)


def gather(name: str, rows, width: int, bytes_per_element: float, group: int) -> OpCost:
    return Gather(width, bytes_per_element, group).record(name, rows)


def host(name: str, seconds) -> OpCost:
    return Host().record(name, seconds)
