"""A mixed step of a continuously batching server: prefill chunks and decode / verify tokens in one pass.

A server's step runs every scheduled request at once: decoding requests bring q = K + 1 tokens (a tree's tokens + 1;
1 without speculation), prefilling requests a chunk of their prompt. One forward pass runs them together (vLLM V1
flattens every request's new tokens into one batch of T tokens):

* every operator but the sequence-wise ones (GEMMs, norms, activations, collectives, the routed experts, the
  embedding) runs over all T tokens, as ``dsdsim.cost.layers`` plans it for T rows;
* the lm_head and sampling run over the rows whose logits are computed: every verified token of a decoding request
  and the last position of each prefill chunk (vLLM ``logits_indices``);
* the sequence-wise operators (attention over the KV cache, a linear-attention or state-space layer's convolution
  and scan, a sparse-attention indexer; kinds ``attention`` and ``recurrent``) run each request over its own
  context: one varlen kernel per layer whose FLOPs and bytes are the sum of every request's (``Demand`` fields are
  sums over sequences), timed once on those sums.

The draft passes run for every scheduled request (vLLM proposes for the whole batch and drops the drafts of requests
still prefilling): each pass's token-wise operators over its rows, its sequence-wise ones per request. The first
pass also reads each prefill chunk's tokens (EAGLE consumes the target's hidden states of every new token); its
attention is priced at K + 1 queries per request, the chunk's attention in the draft layer is not counted.

The engine terms are those of ``dsdsim.cost.engine`` at B = the scheduled requests and B*q = T tokens. CUDA graphs:
a step of decoding requests only has the steady step's shape (``dsdsim.cost.program.step_shape``); a step with
prefill pads T to the next capture size (piecewise graphs, attention outside them) and runs eagerly past the largest.

Nothing walks the operator list per step: the token-wise operators of each pass are evaluated once over every
token count as numpy arrays (``dsdsim.cost.rowtable.RowTable``, grown on demand), so a step costs a table lookup per
pass plus the few sequence-wise operators over the step's requests.

MoE routed experts under an expert overlap (one sequence's tokens reuse experts: ``dsdsim.cost.experts``) depend on
how the tokens split into sequences, not on their count alone. An expert stays untouched by one sequence of q tokens
with probability (1 - p)(1 - f)^(q-1), so by S sequences of Q tokens in all with (1 - p)^S (1 - f)^(Q - S): whatever
the split, the step touches what S sequences of Q / S tokens each touch. Those operators are priced per step at
(S, Q / S), S the scheduled requests (a prefill chunk is one sequence) and Q the pass's token rows, padding included
(the steady model spreads the padding over the sequences, so a decode-only step is priced exactly as it is).

Not modelled: prefix caching, a prefill chunk's own causal mask (a chunk attends to c + q keys, as a verify pass
does).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dsdsim.cost.engine import graphs_of, largest_capture, next_capture_size
from dsdsim.cost.kvpool import MIB, sglang_pool_rule, sglang_pool_tokens
from dsdsim.cost.memory import profile_peak_bytes
from dsdsim.cost.ops import OpKind
from dsdsim.cost.plan import PassPoint, PlanOp
from dsdsim.cost.program import engine_seconds, setup_figures, step_shape
from dsdsim.cost.rowtable import RowTable
from dsdsim.cost.step import Timed, setup_plan
from dsdsim.cost.timing import launch_overhead, seconds
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.specs.setup import Setup

SEQUENCE_KINDS = (OpKind.attention, OpKind.recurrent)   # operators that read each sequence's own context or state
_ROUTED_MEMO_MAX = 65536        # (pass, requests, rows, graphed) shapes a pricer keeps the routed experts' seconds of


@frozen
class _PassOps:
    """One pass's operators split by what their size reads: all tokens, the logits rows, or each sequence."""

    tokens: list[Timed]          # sizes from the pass's tokens (rank rows; experts touched under independent routing)
    head: list[Timed]            # sizes from the rows through the lm_head (final norm, lm_head, sampling)
    sequences: list[Timed]       # attention / recurrent: each request over its own context
    routed: list[Timed]          # sizes from the tokens and how many sequences hold them (experts under overlap)


def _split(plan: list[PlanOp], timed: list[Timed]) -> _PassOps:
    tokens, head, sequences, routed = [], [], [], []
    a = PassPoint(4.0, 1.0, 0.0, head_rows=2.0)
    b = PassPoint(4.0, 1.0, 0.0, head_rows=3.0)
    c = PassPoint(2.0, 2.0, 0.0, head_rows=2.0)      # a's tokens in fewer, longer sequences
    for e, t in zip(plan, timed):
        if e.op.kind in SEQUENCE_KINDS:
            sequences.append((e.op, t))
        elif t.size(a) != t.size(b):
            head.append(t)
        elif t.size(a) != t.size(c):
            routed.append(t)
        else:
            tokens.append(t)
    return _PassOps(tokens, head, _merged(sequences), routed)


def _merged(ops: list[tuple]) -> list[Timed]:
    """Equal sequence-wise operators sized alike (one attention operator in two layer groups: the dense and the MoE
    layers of DeepSeek-V3) as one operator occurring as often as both: evaluated once per step."""
    probes = (PassPoint(3.0, 2.0, 700.0), PassPoint(5.0, 1.0, 90000.0))
    out: list[tuple] = []
    for op, t in ops:
        sizes = tuple(t.size(p) for p in probes)
        for i, (other, ot, other_sizes) in enumerate(out):
            if other == op and ot.rates == t.rates and other_sizes == sizes:
                out[i] = (other, ot._replace(count=ot.count + t.count), other_sizes)
                break
        else:
            out.append((op, t, sizes))
    return [t for _, t, _ in out]


def _linear_in_context(ops: list[Timed]) -> bool:
    """Whether every operator's demand is affine in each request's context (full attention, an indexer over the whole
    cache, a recurrent layer that reads none): then the requests of one q sum to B requests at their mean context,
    one evaluation in floats. A window or a top-k bound (min(c, limit)) is not."""
    for t in ops:
        for q in (1.0, 4.0):
            d0, d1, d2 = (t.demand(*t.size(PassPoint(1.0, q, c))) for c in (0.0, 3000.0, 300000.0))
            for f0, f1, f2 in zip(d0, d1, d2):
                f0, f1, f2 = float(f0), float(f1), float(f2)
                if abs((f2 - f0) - 100.0 * (f1 - f0)) > 1e-9 * max(abs(f2), abs(f0), 1e-300):
                    return False
    return True


def _once_fields(t: Timed) -> tuple[int, ...]:
    """The Demand fields of an operator that do not grow with its requests (its launches, weights read once per
    kernel): kept once when groups of requests are summed into one kernel."""
    one, two = (t.demand(*t.size(PassPoint(b, 2.0, 1000.0))) for b in (1.0, 2.0))
    return tuple(i for i, (x, y) in enumerate(zip(one, two)) if float(x) == float(y))


def _grouped_seconds(ops: list[tuple[Timed, tuple]], groups: list[tuple[float, float, float]], gap: float) -> float:
    """Sequence-wise operators affine in the context (``_linear_in_context``) over groups of (requests, q, mean
    context): each group's demand in floats, summed field by field (the fields that do not grow with the requests
    kept once: one varlen kernel), timed once per operator."""
    total = 0.0
    for t, once in ops:
        summed = None
        for b, q, c in groups:
            d = t.demand(*t.size(PassPoint(b, q, c)))
            summed = d if summed is None else type(d)(*[x if i in once else x + y
                                                         for i, (x, y) in enumerate(zip(summed, d))])
        total += seconds(t.rates, summed, gap) * t.count
    return total


def _token_table(ops: list[Timed], hw, dp_ranks: int, head: bool, sampling_passes: float = 1.0) -> RowTable:
    """The seconds of a list of token-wise operators at every row count (``RowTable``): sized as the pass sizes
    them at B = rows sequences of one token each (verify and draft tokens), or at ``rows`` lm_head rows (``head``)."""
    if head:
        def demand_at(t: Timed, rows: np.ndarray):
            return t.demand(*t.size(PassPoint(np.ones_like(rows), 1.0, 0.0, head_rows=rows,
                                              sampling_passes=sampling_passes)))
    else:
        def demand_at(t: Timed, rows: np.ndarray):
            return t.demand(*t.size(PassPoint(rows, 1.0, 0.0, dp_ranks=dp_ranks)))
    return RowTable(hw, [(t, t.count) for t in ops], demand_at, empty_free=True)


def _sequence_seconds(ops: list[Timed], p: PassPoint, gap: float) -> float:
    """The sequence-wise operators at ``p`` (arrays over the requests): each operator's demand summed over the
    requests (one varlen kernel per occurrence: its launches are not multiplied), timed once."""
    total = 0.0
    for t in ops:
        d = t.demand(*t.size(p))
        if type(p.batch) is not float:     # the array fields summed over the requests in one reduction
            at = [i for i, f in enumerate(d) if type(f) is np.ndarray]
            values = [float(f) if type(f) is not np.ndarray else 0.0 for f in d]
            if at:
                arrays = [d[i] for i in at]
                shape = arrays[0].shape
                if any(a.shape != shape for a in arrays):
                    arrays = np.broadcast_arrays(*arrays)
                for i, v in zip(at, np.add.reduce(np.array(arrays), axis=1).tolist()):
                    values[i] = v
            d = type(d)(*values)
        total += seconds(t.rates, d, gap) * t.count
    return total


def _routed_seconds(ops: list[Timed], sequences: float, rows: float, dp_ranks: int, gap: float) -> float:
    """The operators sized by how the step's ``rows`` tokens split into ``sequences`` (routed experts under an expert
    overlap): priced as that many sequences of rows / sequences tokens each (module docstring)."""
    if not ops or rows <= 0.0:
        return 0.0
    p = PassPoint(sequences, rows / sequences, 0.0, dp_ranks=dp_ranks)
    return sum(seconds(t.rates, t.demand(*t.size(p)), gap) * t.count for t in ops)


def _decode_groups(q: np.ndarray, c: np.ndarray) -> list[tuple[float, float, float]]:
    """(requests, q, mean context) of the decoders verifying each distinct number of tokens q."""
    out = []
    for qv in np.unique(q).tolist():
        at = q == qv
        out.append((float(np.count_nonzero(at)), qv, float(c[at].mean())))
    return out


def _requests(q: np.ndarray, c: np.ndarray) -> PassPoint:
    """The requests of a step as one pass point: arrays over them, or Python floats for a single request."""
    if q.size == 1:
        return PassPoint(1.0, float(q[0]), float(c[0]))
    return PassPoint(np.ones(q.size), q, c)


# where each engine's server reports the KV cache it sized, by the name a pool rule's text begins with
KV_LOG_LINES = {"vLLM": "vLLM's log line 'GPU KV cache size'", "SGLang": "SGLang's 'KV Cache is allocated. #tokens'",
                "TensorRT-LLM": "TensorRT-LLM's 'Allocated ... for max tokens in paged KV cache (N)'"}


@frozen
class KvPool:
    """A server's KV cache: its tokens, the share of the GPU's memory that sized it, and the rule in words (beginning
    with the engine's name as ``KV_LOG_LINES`` knows it)."""

    tokens: int
    fraction: float
    rule: str


class MixedPricer:
    """Seconds of a server's mixed steps on one Setup (``dsdsim.serve.step.StepPricer``). ``dynamic``: the server
    runs a dynamic K table (its steps pay what the engine version charges such a server; K = 0 is its off tier)."""

    def __init__(self, setup: Setup, dynamic: bool = False):
        s = self._setup = setup
        if s.deployment.pp > 1:
            raise DsdsimError("the serving simulation models pp = 1 only; use --tp")
        self.dynamic = dynamic
        self._plan = plan = setup_plan(s)
        hw = s.hardware
        self.max_k = int(s.drafter.max_k) if s.drafter is not None else 0
        self._split_ops = s.model.graph_split_ops          # the engine's per-layer units
        v = _split(plan.verify, plan.verify_timed)
        self._verify = v
        self._verify_tokens = _token_table(v.tokens, hw, plan.dp_ranks, head=False)
        self._verify_head = {p: _token_table(v.head, hw, 1, head=True, sampling_passes=p) for p in (1.0, 2.0)}
        self._draft = []
        if plan.draft is not None:
            for dp, timed in zip(plan.draft.passes, plan.draft_timed):
                ops = _split(dp.ops, timed)
                self._draft.append((ops, _token_table(ops.tokens, hw, plan.draft.dp_ranks, head=False),
                                    _token_table(ops.head, hw, 1, head=True)))
        seq_ops = list(v.sequences) + [t for ops, _, _ in self._draft for t in ops.sequences]
        self._linear = _linear_in_context(seq_ops)      # requests of one q priced as one group at their mean context
        self._verify_grouped = [(t, _once_fields(t)) for t in v.sequences] if self._linear else None
        self._figures = setup_figures(s, plan)
        self._shapes: dict[tuple[int, float], object] = {}    # (requests, K) -> its StepShape
        self._gaps = (launch_overhead(hw, True), launch_overhead(hw, False))
        self._routed_memo: dict[tuple, float] = {}     # (pass, sequences, rows, graphed) -> routed experts' seconds
        params = self._figures.params
        # the server schedules step n + 1 before step n's acceptance is back (vLLM's async scheduling, SGLang's
        # overlap scheduler): its speculative steps overlap the host (EngineSpec.overlap)
        self.schedules_ahead = bool(params is not None and self.max_k > 0
                                    and (params.dynamic if dynamic else params.speculative).overlaps)

    @property
    def setup(self) -> Setup:
        return self._setup

    def seconds(self, step) -> float:
        """Wall-clock seconds of one ``ScheduledStep`` (``dsdsim.serve.step``), engine terms included."""
        k = int(step.k)
        if k < 0 or k > self.max_k:
            raise DsdsimError(f"K = {k} is outside 0..{self.max_k} for this setup")
        dec_c = np.asarray(step.decode_contexts, dtype=float)
        pre_q = np.asarray(step.prefill_tokens, dtype=float)
        pre_c = np.asarray(step.prefill_contexts, dtype=float)
        n_dec, n_pre = dec_c.size, pre_q.size
        n = n_dec + n_pre
        if n == 0:
            return 0.0
        kk = float(k) if n_dec else 0.0
        f = self._figures
        sh = self._shapes.get((n, kk))
        if sh is None:      # decode only: the steady step's shape (n = n_dec); a few (n, K) pairs recur all run
            sh = self._shapes[(n, kk)] = step_shape(f, float(n), kk, self.dynamic)
        q = sh.q
        prefill_tokens = float(np.add.reduce(pre_q)) if n_pre else 0.0
        dec_sum = float(np.add.reduce(dec_c)) if n_dec else 0.0
        dec_q = None if step.decode_tokens is None or not n_dec else np.asarray(step.decode_tokens, dtype=float)
        dec_tokens = n_dec * q if dec_q is None else float(np.add.reduce(dec_q))
        tokens = dec_tokens + prefill_tokens
        # CUDA graphs: a uniform decode step pads as the steady model does; a mixed one, or one whose decoders the
        # budget trimmed (vLLM: not a uniform decode batch), pads its tokens
        if n_pre == 0 and dec_q is None:   # the padded tokens spread over the sequences, attention included
            q_seq, graphed = sh.q_verify, sh.graphed
            padded = n_dec * q_seq
        else:
            (padded, graphed), q_seq = self._mixed_padding(tokens), q
            sh = sh._replace(piecewise=False)
        gap = self._gaps[0 if graphed else 1]
        # verify pass: tokens, logits rows, each request over its context
        head_rows = padded if n_pre == 0 and dec_q is None else dec_tokens + n_pre   # uniform: every padded row
        passes = 2.0 if kk > 0 else 1.0
        verify = (self._verify_tokens.seconds(int(round(padded)), graphed)
                  + self._verify_head[passes].seconds(int(round(head_rows)), graphed)
                  + self._routed(-1, self._verify.routed, n, padded, self._plan.dp_ranks, graphed))
        if self._verify.sequences and self._linear:
            groups = (_decode_groups(dec_q, dec_c) if dec_q is not None
                      else [(float(n_dec), q_seq, dec_sum / n_dec)] if n_dec else []) + \
                [(1.0, a, b) for a, b in zip(pre_q.tolist(), pre_c.tolist())]
            verify += _grouped_seconds(self._verify_grouped, groups, gap)
        elif self._verify.sequences:
            p = _requests(np.concatenate([np.full(n_dec, q_seq) if dec_q is None else dec_q, pre_q]),
                          np.concatenate([dec_c, pre_c]))
            verify += _sequence_seconds(self._verify.sequences, p, gap)
        if n_pre:      # the drafter reads each prefilling request at its context after this step's chunk
            contexts = np.concatenate([dec_c, pre_c + pre_q])
            mean_context = float(np.add.reduce(contexts)) / n
        else:
            contexts, mean_context = dec_c, dec_sum / n
        # the first draft pass runs over the tokens verified (the prefills' chunks, the trimmed decoders' fewer)
        draft = self._draft_seconds(kk, n, contexts, mean_context,
                                    prefill_tokens - n_pre * (kk + 1) + dec_tokens - n_dec * q, sh)
        device = verify + draft + sh.overhead_s
        et = engine_seconds(f, device, float(n), kk, sh, self._plan.small_kernel_s, self.dynamic, draft, tokens / n)
        return float(device) if et is None else float(device + et.added_s)

    def _routed(self, which: int, ops: list[Timed], sequences, rows, dp_ranks: int, graphed: bool) -> float:
        """``_routed_seconds`` of pass ``which`` (-1 verify, else the draft pass's index), kept by (sequences, rows,
        graphed): a closed loop's steps repeat a few shapes."""
        if not ops:
            return 0.0
        key = (which, sequences, rows, graphed)
        memo = self._routed_memo
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= _ROUTED_MEMO_MAX:     # mixed steps' token counts vary: keep the memo bounded
                memo.clear()
            hit = memo[key] = _routed_seconds(ops, float(sequences), float(rows), dp_ranks,
                                              self._gaps[0 if graphed else 1])
        return hit

    def _mixed_padding(self, tokens: float) -> tuple[float, bool]:
        """(tokens, graphed) of a step mixing prefill chunks with decodes: the token count padded to the next
        capture size (piecewise graphs, attention outside them), eager past the largest."""
        f = self._figures
        if not f.graphs_on:
            return tokens, False
        g = f.graphs
        if g is None or g.capture_sizes is None:
            return tokens, True
        size, ok = next_capture_size(g.capture_sizes, float(tokens))
        return (size, True) if ok else (tokens, False)

    def _draft_seconds(self, kk: float, n: int, contexts: np.ndarray, mean_context: float,
                       extra_first_tokens: float, sh) -> float:
        """The draft passes for the n scheduled requests at their contexts (after this step's chunk for prefills),
        in a step of shape ``sh`` (``step_shape``)."""
        if not self._draft or (kk == 0 and not sh.off_tier):
            return 0.0
        graphed = sh.draft_graphed
        total = 0.0
        if n == 1 or self._linear:     # every request of a draft pass runs the same q: one group at the mean context
            points = self._plan.draft.points(float(n), kk, mean_context, first_at_zero=sh.off_tier)
        else:
            points = self._plan.draft.points(np.ones(n), kk, contexts, first_at_zero=sh.off_tier)
        first = points[0][0]
        for i, ((ops, token_table, head_table), (p, times)) in enumerate(zip(self._draft, points)):
            runs = 1.0 if times is None else times if type(times) is float else float(np.max(times))
            if runs == 0.0:
                continue
            rows = p.tokens if type(p.tokens) is float else float(np.sum(p.tokens))
            g = graphed
            if p is first:
                if extra_first_tokens:
                    rows = max(rows + extra_first_tokens, float(n))
                g = self._first_pass_graphed(rows, sh)
            head_rows = p.head_rows if type(p.head_rows) is float else float(np.sum(p.head_rows))
            one = token_table.seconds(int(round(rows)), g) + head_table.seconds(int(round(head_rows)), g)
            if ops.routed:
                one += self._routed(i, ops.routed, n, round(rows), self._plan.draft.dp_ranks, g)
            if ops.sequences:
                one += _sequence_seconds(ops.sequences, p, self._gaps[0 if g else 1])
            total += one * runs
        return total

    def _first_pass_graphed(self, tokens: float, sh) -> bool:
        """Whether the first draft pass, over ``tokens`` (the decodes' verified tokens and the prefills' chunks),
        replays a graph: as the later passes, or where the engine graphs it by tokens (``draft_first_pass_by_tokens``)
        while they fit its largest capture."""
        f = self._figures
        if not f.first_on:
            return False
        if not f.first_by_tokens or not sh.draft_graphed:
            return sh.draft_graphed
        graphs = graphs_of(f.graphs, self.dynamic, True)
        return graphs is None or graphs.capture_sizes is None or tokens <= largest_capture(graphs, float(sh.q))

    def kv_capacity_tokens(self, memory_utilization: float, max_num_batched_tokens: int = 8192,
                           max_num_seqs: int = 256, lookahead: int = 0,
                           mem_fraction_static: Optional[float] = None) -> int:
        """Tokens of KV cache (all requests together, the busiest rank) as the engine sizes it: ``kv_pool``'s."""
        return self.kv_pool(memory_utilization, max_num_batched_tokens, max_num_seqs, lookahead,
                            mem_fraction_static).tokens

    def kv_pool(self, memory_utilization: float, max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                lookahead: int = 0, mem_fraction_static: Optional[float] = None) -> "KvPool":
        """The KV cache as the engine sizes it, in tokens (the busiest rank), with the rule that sized it.

        vLLM (and an engine that says nothing else): what fits beside the weights, the drafter and the peak of vLLM's
        profile run in ``memory_utilization`` of the GPU's memory as the driver reports it
        (``HardwareSpec.engine_memory_bytes``; vLLM's ``total_gpu_memory``); the drafter's layers share the pool. The
        memory outside PyTorch's allocator that vLLM also subtracts (CUDA context, NCCL and all-reduce buffers: its
        ``non_torch_memory``, 0.2-3.6 GiB in its logs) is not modelled.
        SGLang: ``mem_fraction_static`` (given, else the release's default) of that memory less the weights, over one
        token's cell (``dsdsim.cost.kvpool``); ``max_num_seqs`` and ``lookahead`` size the headroom of releases up to
        0.5.6. An engine whose spec says ``kv_cache_of_free_memory`` (TensorRT-LLM's free_gpu_memory_fraction):
        ``memory_utilization`` of what the weights, the drafter and a warm-up forward over ``max_num_batched_tokens``
        leave. Every layer counts every token (a sliding window's layers too: what a cache without a hybrid
        allocator holds)."""
        if not 0 < memory_utilization <= 1:
            raise DsdsimError(f"memory utilization must be in (0, 1], got {memory_utilization!r}")
        s = self._setup
        figures = self._plan.memory
        target_weights = float(figures.use(0.0, 0.0, 0.0).weights_bytes)
        draft_weights = figures.draft_weights_bytes or 0.0
        cell, draft_cell = float(figures.kv.bytes(1.0, 1.0)), self._draft_cell_bytes()
        memory = s.hardware.engine_memory_bytes
        if s.engine is not None and s.engine.name == "sglang":
            release = s.engine.newest_release or "0.5.12"
            dep = s.deployment
            rule = sglang_pool_rule(release, memory / MIB, dep.tp, dep.pp,
                                    s.drafter.kind.value if s.drafter is not None else None, dep.dp_attention,
                                    mem_fraction_static)
            tokens = sglang_pool_tokens(rule, memory, target_weights, draft_weights, cell, draft_cell, max_num_seqs,
                                        lookahead)
            how = "given" if rule.given else "its default on this GPU"
            return KvPool(tokens, rule.fraction, f"SGLang {release}: that share (mem_fraction_static, {how}) of the "
                          "GPU's memory less the weights" + (", the drafter's too" if rule.draft_in_pool else ""))
        if mem_fraction_static is not None:
            raise DsdsimError("--mem-fraction-static is SGLang's; this engine sizes its cache from "
                              "--memory-utilization (vLLM's gpu_memory_utilization)")
        of_free = getattr(s.engine, "kv_cache_of_free_memory", None)
        if of_free is not None and of_free.value:
            # TensorRT-LLM: its share of what the weights and the warm-up forward over max_num_tokens leave (the
            # warm-up's dummy requests are few, so their logits are counted for one)
            left = (memory - target_weights - draft_weights
                    - profile_peak_bytes(figures, s.model.vocab_size, max_num_batched_tokens, 1))
            per_token = cell + draft_cell
            tokens = 0 if left <= 0 or per_token <= 0 else int(memory_utilization * left // per_token)
            return KvPool(tokens, memory_utilization, "TensorRT-LLM: that share (free_gpu_memory_fraction) of the "
                          "memory the weights, the drafter and the warm-up's peak leave")
        free = (memory * memory_utilization - target_weights - draft_weights
                - profile_peak_bytes(figures, s.model.vocab_size, max_num_batched_tokens, max_num_seqs))
        per_token = cell + draft_cell
        tokens = 0 if free <= 0 or per_token <= 0 else int(free // per_token)
        return KvPool(tokens, memory_utilization, "vLLM: that share (gpu_memory_utilization) of the GPU's memory "
                      "less the weights, the drafter and the profile run's peak")

    def _draft_cell_bytes(self) -> float:
        """One token's cache in the drafter's own layers (a draft model's cache, or an EAGLE / MTP head's)."""
        figures = self._plan.memory
        if figures.draft_kv is not None:
            return float(figures.draft_kv.bytes(1.0, 1.0))
        return float(figures.head_kv_bytes_per_token)
