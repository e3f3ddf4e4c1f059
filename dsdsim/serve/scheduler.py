"""vLLM V1's scheduler as a small state machine: which requests run in a step, how many tokens each, which KV blocks.

Mirrors ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``) with its defaults:

1. RUNNING requests first, in admission order. Each asks for the tokens it has not computed: a decoding request its
   last sampled token plus K drafts (speculative tokens count in the token budget, as ``num_tokens_with_spec`` does),
   a request still prefilling the rest of its prompt. Each gets ``min(ask, token budget left)``; the loop stops when
   the budget is spent. Each needs ``ceil((cached + scheduled + lookahead) / block_size)`` KV blocks, the lookahead
   being the server's ``num_speculative_tokens`` for a decoding request (``num_lookahead_tokens``) and 0 for a
   prefill. When the free blocks do not suffice, the most recently admitted running request is preempted
   (``self.running.pop()``): its blocks are freed, it goes to the front of the waiting queue, and it later recomputes
   its prompt and every token it generated as a prefill (vLLM V1 preempts by recompute). If the victim is the request
   being scheduled, scheduling of running requests stops.
2. WAITING requests, FCFS, only when nothing was preempted this step, while fewer than ``max_num_seqs`` run, tokens
   are left and the free blocks hold the first chunk (a prompt is split into chunks under the budget: chunked
   prefill, mixed with the decodes; without chunked prefill a prompt that does not fit whole waits and the next
   request is tried, as vLLM skips it).
3. K. The step's K is decided after the set of requests is known (vLLM looks its dynamic table up by the number of
   requests scheduled, prefills included). Decoding requests were given 1 + K' tokens and blocks while the set was
   built, K' the drafts they bring (under the ``vllm`` rule the K the policy asked for in the previous step: vLLM's
   drafter proposes at the table's K whatever the budget, a completing prompt too, and the next step's running pass
   gives those drafts the budget before any waiting prompt; under the others the previous decode step's K); the
   policy's K is then capped (``Plan.k_cap``) by the tokens left in the budget and the free blocks, so a larger K
   than K' is taken only where it fits for every decoding request.
4. Trimming. Where the decoders' 1 + K' tokens do not all fit the budget, vLLM's running pass gives each
   ``min(1 + K', budget left)`` and trims the speculative tokens of the one at the budget's edge to what it was given
   (``del request.spec_token_ids[num_scheduled_spec_tokens:]`` in ``Scheduler.schedule``); those after it are not
   scheduled. The step then has no single K: ``Plan.dec_drafts`` holds each decoder's drafts, the step is priced
   over their tokens (``ScheduledStep.decode_tokens``) and each accepts at most its own. This is the ``vllm`` rule's
   (a chain's); the ``prefill-first`` rule and trees lower the step's K for every decoder instead.

The rule that builds a step is the one extension point (``SchedulingRule``, registered in ``RULES`` by name):
``vllm`` (the above: running requests, then waiting ones mixed into the same step) and ``prefill-first`` (SGLang
without ``--enable-mixed-chunk``: a prefill batch whenever one can be formed, else the decode batch). A new rule
(priority, a fairness cap) is a class with a ``name`` and ``schedule(scheduler, k_guess) -> Plan`` built from the
Scheduler's own steps (``running_then_waiting``, ``prefill_batch``), passed to ``register_rule``.

Prefix caching is either a hit share of each prompt (``SchedulerConfig.prefix_cache_hit``) or, where the prompts
share prefixes or are turns of conversations (``prompts``), a cache of blocks (``dsdsim.serve.prefix.PrefixCache``):
found on admission, shared by reference, evicted oldest first when allocations need them. A conversation's next turn
is sent by its client when the reply to the turn before has arrived, after the think time.

Not modelled: ``long_prefill_token_threshold`` and partial-prefill limits, priority scheduling, ``max_model_len``
truncation (a request longer than the model's window is refused before the run), async scheduling's lag beyond the
requests it carries a step after they finish (``riding``) and the K policy learning a step's acceptance a step late
(``Server``), structured output, encoder budgets.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Optional, Protocol, Sequence

import numpy as np

from dsdsim.errors import DsdsimError, whole_number
from dsdsim.records import frozen
from dsdsim.serve.prefix import PrefixCache, Prompts


@frozen
class SchedulerConfig:
    """The server's scheduling limits (vLLM engine arguments of the same names).

    max_num_seqs: requests running at once. 256 is vLLM's ``vllm serve`` default on GPUs under 70 GiB and on the A100
        (``EngineArgs.get_batch_defaults`` in ``vllm/engine/arg_utils.py``: ``default_max_num_seqs``); on larger GPUs
        (H100, H200, MI300X) vLLM's default is 1024 since V1. 256 keeps the table and the batches in the range most
        deployments set. None: that default, or the engine's own limit for a speculative server where its spec
        states one (SGLang: 48 running requests, ``EngineSpec.speculative_max_requests``; ``for_server``).
    max_num_batched_tokens: tokens per step. None: the engine's default for the GPU (``default_batched_tokens``):
        vLLM's ``vllm serve`` 8192 on GPUs of >= 70 GiB other than the A100, 2048 on the others (same function), and
        16384 on GPUs of >= 160 GiB from 0.28; SGLang's ``chunked_prefill_size`` for its release and GPU; 8192
        without a GPU to judge by.
    block_size: tokens per KV block (16, vLLM's block size on CUDA GPUs, ``CacheConfig.block_size``).
    memory_utilization: GPU memory share for weights, activations and KV (``gpu_memory_utilization``, default 0.9).
    kv_cache_tokens: the KV cache in tokens, all requests together, as the server reports it (vLLM's log line "GPU KV
        cache size: N tokens"; ``--num-gpu-blocks-override`` x the block size); None: sized from memory_utilization
        of the GPU's memory as the driver reports it, less the weights, the drafter and the peak of vLLM's profile run
        (``MixedPricer.kv_pool``).
    mem_fraction_static: an SGLang server's share of the GPU's memory for weights and KV (``--mem-fraction-static``);
        None: the share SGLang picks for its release and GPU (``dsdsim.cost.kvpool``). Refused for other engines.
    chunked_prefill: split prompts across steps (always on in vLLM V1).
    mixed_prefill: a step runs prefill chunks and decodes together (vLLM V1); False: a step is a prefill batch or a
        decode batch, prefills first whenever one can be formed (SGLang without ``--enable-mixed-chunk``). None: what
        the engine spec says (``EngineSpec.mixed_prefill``; mixed where it says nothing).
    stop_at_unfit_prompt: without chunked prefill, the waiting queue stops at the first prompt that does not fit the
        tokens left (TensorRT-LLM's micro-batch scheduler: ``break``); False: that prompt is skipped this step and the
        next one tried (vLLM).
    reserve_to_completion: a request is admitted only while the free blocks hold its whole sequence (prompt, output
        and twice the drafts' lookahead), which it holds from then on, so none is ever preempted (TensorRT-LLM's
        ``GUARANTEED_NO_EVICT``: admission counts what every running request still needs to finish). The engine spec
        sets both (``EngineSpec.chunked_prefill``, ``reserve_to_completion``; ``engine_prefill_rule``).
    rule: the name of the ``SchedulingRule`` that builds each step (``RULES``); None: ``prefill-first`` where
        ``mixed_prefill`` is False, else ``vllm``.
    prefix_cache_hit: the share of each prompt the server finds in its prefix cache when it admits the request
        (vLLM's automatic prefix caching, on by default in V1; SGLang's radix cache): what the server's metrics
        report as ``vllm:prefix_cache_hits`` over ``vllm:prefix_cache_queries``. The request starts with that share
        of its prompt computed, in whole blocks (``KVCacheManager.get_computed_blocks`` matches full blocks only),
        and always computes its last prompt token (vLLM recomputes it for the logits: ``num_computed_tokens`` at
        most ``num_tokens - 1``); a preempted request finds the same share again. The blocks found are held by the
        request as its own (vLLM shares them by reference count with the requests that wrote them: for prompts
        shared by requests running together the cache's use is an upper bound). 0: no hits (random prompts).
    request_overhead_s: the time a request spends outside the GPU steps between the client sending it and its
        first token reaching the client, less its queueing and prefill: the API server's request handling (chat
        template, tokenisation), the hand-over to the scheduler, detokenisation and streaming. A request reaches the
        scheduler that long after it is sent (its TTFT and latency grow by it, its TPOT does not; a closed loop's
        client waits that much longer between requests). None: the figure ``dsdsim calibrate --measurements
        --replay`` fitted into the engine spec (``EngineCalibration.request_overhead_ms``), else 0: the shipped
        specs price none (no source the fits may read measures it; the corpus's test runs below saturation read
        16-208 ms of TTFT that their steps do not account for).
    """

    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    block_size: int = 16
    memory_utilization: float = 0.9
    kv_cache_tokens: Optional[int] = None
    mem_fraction_static: Optional[float] = None
    chunked_prefill: bool = True
    mixed_prefill: Optional[bool] = None
    rule: Optional[str] = None
    prefix_cache_hit: float = 0.0
    stop_at_unfit_prompt: bool = False
    reserve_to_completion: bool = False
    request_overhead_s: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_cache_tokens"):
            if name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens") and getattr(self, name) is None:
                continue
            v = whole_number(getattr(self, name), name)
            if v < 1:
                raise DsdsimError(f"{name} must be >= 1, got {v}")
            object.__setattr__(self, name, v)
        mf = self.mem_fraction_static
        if mf is not None and (isinstance(mf, bool) or not isinstance(mf, (int, float)) or not 0 < mf < 1):
            raise DsdsimError(f"mem_fraction_static (SGLang's --mem-fraction-static) must be in (0, 1), got {mf!r}")
        mu = self.memory_utilization
        if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not 0 < mu <= 1:
            raise DsdsimError(f"memory_utilization must be in (0, 1], got {mu!r}")
        if (self.max_num_seqs is not None and self.max_num_batched_tokens is not None
                and self.max_num_batched_tokens < self.max_num_seqs):
            raise DsdsimError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                              f"({self.max_num_seqs}), as vLLM requires")
        if self.rule is not None:
            rule_named(self.rule)
        ov = self.request_overhead_s
        if ov is not None and (isinstance(ov, bool) or not isinstance(ov, (int, float)) or not 0 <= ov < 3600):
            raise DsdsimError(f"request_overhead_s (the time a request spends outside the GPU steps) must be a number "
                              f"of seconds in [0, 3600), got {ov!r}")
        h = self.prefix_cache_hit
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 <= h < 1:
            raise DsdsimError(f"prefix_cache_hit (the share of each prompt found in the prefix cache) must be in "
                              f"[0, 1), got {h!r}; 0.5 means half of every prompt is served from the cache")

    def for_server(self, engine, speculative: bool, hardware=None, tp: int = 1) -> "SchedulerConfig":
        """These limits settled for one server: max_num_seqs as given, else the engine's own default where its spec
        states one (TensorRT-LLM's max_batch_size), else DEFAULT_MAX_NUM_SEQS, capped by the engine's limit for a
        speculative server where its spec states one; max_num_batched_tokens as given, else the engine's default on
        ``hardware`` (``default_batched_tokens``)."""
        if self.max_num_seqs is not None and self.max_num_batched_tokens is not None:
            return self
        seqs = self.max_num_seqs
        if seqs is None:
            own = getattr(engine, "max_running_requests", None)       # the engine's own default (TensorRT-LLM)
            seqs = own.value if own is not None else DEFAULT_MAX_NUM_SEQS
            limit = getattr(engine, "speculative_max_requests", None) if speculative else None
            seqs = min(seqs, limit.value) if limit is not None else seqs
        tokens = self.max_num_batched_tokens
        if tokens is None:
            tokens = max(default_batched_tokens(engine, hardware, tp), seqs)
        return replace(self, max_num_seqs=seqs, max_num_batched_tokens=tokens)   # __post_init__ checks the pair

    @property
    def rule_name(self) -> str:
        """The rule that builds each step: ``rule``, else what ``mixed_prefill`` says."""
        if self.rule is not None:
            return self.rule
        return PrefillFirst.name if self.mixed_prefill is False else MixedChunked.name


@dataclass
class Plan:
    """One step as scheduled, before its K is fixed. Arrays are int64, one entry per request.

    dec_ids: decoding requests; pre_ids / pre_chunks: prefilling requests and the tokens each computes.
    k_cap: the largest K the token budget and the free blocks allow the decoding requests (0 without any).
    dec_drafts: where vLLM's running pass trimmed the speculative tokens of the decoder at the budget's edge, the
        drafts each decoding request may verify (at most k_cap; the step's K caps them again); None: k_cap for all.
    """

    dec_ids: np.ndarray
    pre_ids: np.ndarray
    pre_chunks: np.ndarray
    k_cap: int
    covered_k: int = -1          # the decoding requests already hold the blocks of this K (-1: not known)
    dec_drafts: Optional[np.ndarray] = None   # drafts each decoder may verify where the budget trimmed some (vLLM)

    @property
    def num_requests(self) -> int:
        return int(self.dec_ids.size + self.pre_ids.size)


_NONE = np.zeros(0, dtype=np.int64)
DEFAULT_MAX_NUM_SEQS = 256      # SchedulerConfig.max_num_seqs where neither it nor the engine says otherwise
DEFAULT_BATCHED_TOKENS = 8192   # SchedulerConfig.max_num_batched_tokens without a GPU to judge by
GIB = float(1 << 30)


def default_batched_tokens(engine, hardware, tp: int = 1) -> int:
    """The tokens one step may schedule when the server is given none, by engine, release and GPU.

    vLLM (``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``, the API server's): 8192 on a GPU of >= 70
    GiB whose name is not an A100 ("Setting large max_num_batched_tokens for A100 reduces throughput, see PR
    #17885"), 2048 otherwise; from 0.28, 16384 on GPUs of >= 160 GiB ("for GPUs like B200/B300 with >= 160GB memory,
    use the largest defaults", as a reading of v0.28.0's arg_utils.py quotes it; that release not read here). SGLang: its
    ``chunked_prefill_size`` (``server_args.py``): up to 0.4.9 2048 below 25,000 MiB, else 8192; 0.4.10-0.5.2 2048
    below 35 GiB, 8192 below 160, else 16384; from 0.5.3 ``dsdsim.cost.kvpool.sglang_defaults``. The GPU's memory is
    the driver's total (``HardwareSpec.engine_memory_bytes``). An engine whose spec states one default for every GPU
    (``EngineSpec.max_batched_tokens``: TensorRT-LLM's max_num_tokens 8192) has that."""
    own = getattr(engine, "max_batched_tokens", None)
    if own is not None:
        return own.value
    if hardware is None:
        return DEFAULT_BATCHED_TOKENS
    from dsdsim.cost.kvpool import sglang_defaults
    from dsdsim.specs.engine import parse_version

    memory = float(hardware.engine_memory_bytes)
    release_text = getattr(engine, "newest_release", None) if engine is not None else None
    release = parse_version(release_text) if release_text else None
    if engine is not None and engine.name == "sglang":
        mib = memory / (1 << 20)
        release = release or (0, 5, 12)
        if release < (0, 4, 10):
            return 2048 if mib < 25_000 else 8192
        if release < (0, 5, 3):
            return 2048 if memory < 35 * GIB else 8192 if memory < 160 * GIB else 16384
        return sglang_defaults(release, mib, tp)[0]
    if memory >= 160 * GIB and (release is None or release >= (0, 28)):
        return 16384
    if memory >= 70 * GIB and "a100" not in hardware.name.lower():
        return 8192
    return 2048


def overhead_seconds(ms, what: str = "request_overhead_ms") -> float:
    """A request overhead given in milliseconds (``--request-overhead-ms``, ``dsdsim.simulate``), checked, in the
    seconds ``SchedulerConfig.request_overhead_s`` takes."""
    if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms < 3.6e6:
        raise DsdsimError(f"{what} must be a number of milliseconds >= 0, got {ms!r}")
    return ms / 1e3


class SchedulingRule(Protocol):
    """How one step is built from the server's state: which requests run and how many tokens each (a ``Plan``)."""

    name: str
    summary: str
    trims_drafts: bool        # the budget trims the drafts of the decoder at its edge, as vLLM's running pass does

    def schedule(self, s: "Scheduler", k_guess: int) -> Plan: ...


class MixedChunked:
    """vLLM V1 (``Scheduler.schedule``): running requests first, decoders at 1 + K tokens, then waiting ones FCFS
    in the same step, their prompts chunked under the token budget."""

    name = "vllm"
    summary = "running requests, then waiting ones in the same step (chunked prefill mixed with decodes; vLLM V1)"
    trims_drafts = True

    def schedule(self, s: "Scheduler", k_guess: int) -> Plan:
        return s.running_then_waiting(k_guess, admit=True)


class PrefillFirst:
    """SGLang without ``--enable-mixed-chunk``: a prefill batch whenever one can be formed, else the decode batch
    (``Scheduler.get_next_batch_to_run`` runs a new extend batch before the running decode batch)."""

    name = "prefill-first"
    summary = "a prefill batch whenever one can be formed, else the decode batch (SGLang without mixed chunks)"
    trims_drafts = False

    def schedule(self, s: "Scheduler", k_guess: int) -> Plan:
        plan = s.prefill_batch()
        return plan if plan is not None else s.running_then_waiting(k_guess, admit=False)


RULES: dict[str, SchedulingRule] = {r.name: r for r in (MixedChunked(), PrefillFirst())}


def register_rule(rule: SchedulingRule) -> None:
    """Make ``rule`` available by its name (``SchedulerConfig(rule=...)``, ``simulate --scheduling``)."""
    name = getattr(rule, "name", None)
    if not isinstance(name, str) or not name or not callable(getattr(rule, "schedule", None)):
        raise DsdsimError("a scheduling rule has a name and a schedule(scheduler, k_guess) method")
    RULES[name] = rule


def rule_named(name: str) -> SchedulingRule:
    rule = RULES.get(str(name).strip().lower())
    if rule is None:
        raise DsdsimError(f"unknown scheduling rule {name!r}; use one of: {', '.join(sorted(RULES))}")
    return rule


def _ceil_div(a, b):
    return -(-a // b)


class Scheduler:
    """The server's state: every request's progress, the running list, the waiting queue and the free KV blocks.

    requests: (arrival_s, input_len, output_len) per request; concurrency: the client's limit on requests in flight
    (None: none); kv_blocks: blocks in the cache; lookahead: the server's num_speculative_tokens (0: no speculation).
    prompts: what the prompts share (``dsdsim.serve.prefix.Prompts``: shared prefixes, conversations): the server keeps
    a prefix cache of their blocks (``PrefixCache``), and a conversation's later turns are sent as the turns before
    finish (their ``arrival_s`` is not read); None: prompts share nothing.
    """

    def __init__(self, arrival_s: Sequence[float], input_len: Sequence[int], output_len: Sequence[int],
                 config: SchedulerConfig, kv_blocks: int, lookahead: int, concurrency: Optional[int] = None,
                 draft_tokens: Optional[Sequence[int]] = None, prompts: Optional[Prompts] = None):
        self.cfg = (config if config.max_num_seqs is not None and config.max_num_batched_tokens is not None
                    else config.for_server(None, False))
        self.arrival = np.asarray(arrival_s, dtype=float)
        self.in_len = np.asarray(input_len, dtype=np.int64)
        self.out_len = np.asarray(output_len, dtype=np.int64)
        n = self.n = self.in_len.size
        self.lookahead = int(lookahead)
        self.overhead_s = float(self.cfg.request_overhead_s or 0.0)   # send -> scheduler (SchedulerConfig)
        # draft tokens a decoding request verifies at each K (0..lookahead): K for a chain; a draft tree's tokens at
        # any K > 0 (SGLang allocates and verifies the tree's num_draft_tokens). The KV lookahead is the most of them.
        self.chain = draft_tokens is None
        self.drafts = (np.arange(self.lookahead + 1) if draft_tokens is None
                       else np.asarray(draft_tokens, dtype=np.int64))
        if self.drafts.size != self.lookahead + 1:
            raise DsdsimError(f"draft_tokens needs one count per K in 0..{self.lookahead}, got {self.drafts.size}")
        self.kv_lookahead = int(self.drafts[-1])
        self.total_blocks = int(kv_blocks)
        self.free = int(kv_blocks)
        self.computed = np.zeros(n, dtype=np.int64)      # tokens in the KV cache
        self.generated = np.zeros(n, dtype=np.int64)     # output tokens emitted
        self.held = np.zeros(n, dtype=np.int64)          # KV blocks allocated
        self.decoding = np.zeros(n, dtype=bool)          # prefill (or recompute) done: verifies 1 + K tokens a step
        # prompt tokens found in the prefix cache on admission: the hit share in whole blocks, the last token computed
        bs = self.cfg.block_size
        self.cache_hit = np.minimum(np.floor(self.in_len * float(self.cfg.prefix_cache_hit) / bs).astype(np.int64) * bs,
                                    np.maximum(self.in_len - 1, 0))
        self.prompt_admitted = self.prompt_cached = 0    # prompt tokens admitted, and found in the cache, all runs
        self.prefix: Optional[PrefixCache] = None         # the cache of what prompts share, where they share
        self.successor = np.full(n, -1, dtype=np.int64)  # a conversation's next turn (-1: none)
        self.think_s = 0.0
        if prompts is not None:
            if self.cfg.prefix_cache_hit > 0:
                raise DsdsimError("give prefix caching once: a hit share (prefix_cache_hit) or prompts that share "
                                  "prefixes or conversations, not both")
            for name in ("group", "after"):
                a = getattr(prompts, name)
                if a is not None and np.shape(a) != (n,):
                    raise DsdsimError(f"prompts.{name} needs one entry per request ({n}), got shape {np.shape(a)}")
            self.prefix = PrefixCache(n, prompts, bs)
            self.successor = prompts.successors(n)
            self.think_s = float(prompts.think_s)
        first = np.ones(n, dtype=bool) if prompts is None or prompts.after is None else prompts.after < 0
        self.send_t = np.full(n, np.nan)                 # when the client sent it (latencies start here)
        self.first_t = np.full(n, np.nan)
        self.finish_t = np.full(n, np.nan)
        self.last_emit_t = np.full(n, np.nan)
        # the requests the client sends by arrival time (a conversation's later turns follow its replies: _follow)
        self.order = np.flatnonzero(first)[np.argsort(self.arrival[first], kind="stable")]
        self._next = 0                                   # next request (in arrival order) the client has not sent
        self._follow: list[tuple[float, int]] = []      # heap: (when it is sent, a conversation's next turn)
        self.just_retired = _NONE                        # the requests the last step finished
        self._slots = None if concurrency is None else [0.0] * int(concurrency)   # heap: when each free slot freed
        self.run: list[int] = []                         # RUNNING, in admission order
        self.waiting: deque[int] = deque()               # WAITING, FCFS; preempted requests go to the front
        self.finished = 0
        self.preemptions = 0
        # requests riding the next step that decodes after their drafts finished them (a server scheduling a step
        # ahead, set by its Server before each step): vLLM still holds them in its running list then, so in a step
        # that decodes each takes a seat under max_num_seqs and 1 + K tokens of the budget (Server.riders)
        self.riding = 0
        self._riding_now = 0                             # ... in the step being built (0 where none decodes)
        self.rule = rule_named(config.rule_name)
        # vLLM's running pass trims the drafts of the decoder at the budget's edge (a chain's, under a rule that
        # says so: SchedulingRule.trims_drafts); elsewhere the budget lowers the step's K for every decoder
        self.trims = bool(self.chain and self.lookahead > 0 and getattr(self.rule, "trims_drafts", False))

    # ------------------------------------------------------------------------------------------- the client

    def release(self, now: float) -> None:
        """Queue every request the client has sent (its arrival come, a slot free under its limit) that has reached
        the scheduler by ``now`` (``request_overhead_s`` after it was sent), and every conversation's next turn
        likewise (its client holds the slot between turns), in the order they were sent."""
        order, slots, follow, ov = self.order, self._slots, self._follow, self.overhead_s
        while True:
            a = math.inf
            if self._next < order.size and (slots is None or slots):
                r = int(order[self._next])
                a = float(self.arrival[r]) if slots is None else max(float(self.arrival[r]), slots[0])
            if follow and follow[0][0] <= a and follow[0][0] + ov <= now:
                t, nxt = heapq.heappop(follow)
                self.send_t[nxt] = t
                self.waiting.append(nxt)
                continue
            if a + ov > now:
                return
            if slots is not None:
                heapq.heappop(slots)
            self.send_t[r] = a
            self.waiting.append(r)
            self._next += 1

    def send(self, r: int, t: float) -> None:
        """Request ``r``, sent at ``t`` by someone other than this server's own client (a fleet's router), now at the
        scheduler (the router hands it over ``request_overhead_s`` after ``t``): it waits for the next step. A server
        fed this way is built with every arrival at infinity."""
        self.send_t[r] = t
        self.waiting.append(r)

    def next_arrival(self) -> Optional[float]:
        """When the next unsent request, or a conversation's next turn, reaches the scheduler (``request_overhead_s``
        after it is sent; None: all sent, or the client waits for a slot)."""
        ov = self.overhead_s
        follow = self._follow[0][0] + ov if self._follow else None
        if self._next >= self.order.size or (self._slots is not None and not self._slots):
            return follow
        a = float(self.arrival[int(self.order[self._next])])
        if self._slots is not None:                 # sent when a slot is free (a closed loop's last reply)
            a = max(a, self._slots[0])
        return a + ov if follow is None else min(a + ov, follow)

    @property
    def caches_prefixes(self) -> bool:
        """Whether prompts find cached tokens here (a hit share, shared prefixes or conversations): the run reports the
        share."""
        return self.prefix is not None or self.cfg.prefix_cache_hit > 0

    @property
    def riding_now(self) -> int:
        """The riders seated in the step just scheduled (``riding``, less those the budget leaves out)."""
        return self._riding_now

    @property
    def idle(self) -> bool:
        return not self.run and not self.waiting

    # ------------------------------------------------------------------------------------------- one step

    def schedule(self, k_guess: int) -> Plan:
        """Build the step by the configured rule (``SchedulingRule``)."""
        return self.rule.schedule(self, k_guess)

    def running_then_waiting(self, k_guess: int, admit: bool = True) -> Plan:
        """The running requests (decoders at 1 + ``k_guess`` tokens, prefills their next chunk) under the token
        budget and the free blocks, preempting when blocks run out; then, with ``admit`` and no preemption, waiting
        requests FCFS. Without ``admit`` (a decode batch) running requests still prefilling wait for a prefill
        batch."""
        cfg, bs, la = self.cfg, self.cfg.block_size, self.kv_lookahead
        separate = not admit
        k_guess = min(int(k_guess), self.lookahead)
        q_guess = 1 + int(self.drafts[k_guess])      # tokens a decoding request brings at that K
        preempted = False
        ids = np.asarray(self.run, dtype=np.int64)
        comp = self.computed[ids]
        dec = self.decoding[ids]
        # riders ride a step that decodes and verify in it too; those whose tokens would leave the running requests
        # no budget do not ride (vLLM would run a step of riders alone, which emits nothing)
        n_dec = int(np.count_nonzero(dec))          # (reductions as ufuncs: a step runs this for every request)
        riding = self.riding if n_dec else 0
        riding = self._riding_now = min(riding, max(cfg.max_num_batched_tokens - 1, 0) // q_guess)
        budget = cfg.max_num_batched_tokens - riding * q_guess
        if n_dec == ids.size:                      # the common step: every running request decodes
            want = np.full(ids.size, q_guess, dtype=np.int64)
            need = _ceil_div(comp + (q_guess + la), bs)
            total = ids.size * q_guess
        else:
            want = np.where(dec, q_guess, 0 if separate else self.in_len[ids] + self.generated[ids] - comp)
            need = None
            total = int(np.add.reduce(want))
        if total <= budget:
            grant = want
        else:
            before = np.cumsum(want) - want
            grant = np.minimum(want, np.maximum(budget - before, 0))
            need = None
        if need is None:
            need = _ceil_div(comp + grant + np.where(dec, la, 0), bs)
        held = self.held[ids]
        extra = np.maximum(need - held, 0)
        if total > budget:
            extra[grant == 0] = 0
        spend = int(np.add.reduce(extra))
        if spend <= self.free:
            if spend:
                self.held[ids] = held + extra
                self.free -= spend
        else:
            kept = self._schedule_with_preemption(extra, need, grant)
            preempted = True
            ids, dec, grant = ids[:kept], dec[:kept], grant[:kept]
        if total > budget or preempted or separate:   # a request granted no token is not in the step
            on = grant > 0
            ids, dec, grant = ids[on], dec[on], grant[on]
            n_dec = int(np.count_nonzero(dec))
            left = budget - int(np.add.reduce(grant))
        else:
            left = budget - total                  # every request granted what it wants
        new_ids, new_chunks = ([], []) if preempted or separate else self._admit(left)
        if n_dec == ids.size and not new_ids:      # the common step again: no prefill at all
            dec_ids, pre_ids, pre_chunks = ids, _NONE, _NONE
        else:
            pre_ids = np.concatenate([ids[~dec], np.asarray(new_ids, dtype=np.int64)])
            pre_chunks = np.concatenate([grant[~dec], np.asarray(new_chunks, dtype=np.int64)])
            dec_ids = ids[dec]
        if total > budget and admit and self.trims and dec_ids.size and k_guess > 0:
            # vLLM trims the drafts of the decoder at the budget's edge; the budget is spent: no K above K'
            drafts = grant[dec] - 1
            trimmed = drafts if int(drafts.min()) < k_guess else None
            return Plan(dec_ids, pre_ids, pre_chunks, k_guess, k_guess, trimmed)
        covered = k_guess if total <= budget else -1     # every decoding request holds the blocks of this K
        return Plan(dec_ids, pre_ids, pre_chunks, self._k_cap(dec_ids, int(np.add.reduce(pre_chunks)), covered),
                    covered)

    def prefill_batch(self) -> Optional[Plan]:
        """A prefill-only step (SGLang's extend batch): the running requests still prefilling continue their prompt,
        then waiting ones are admitted, under the token budget and the free blocks; None when none can run (the
        decode batch runs instead)."""
        cfg, bs = self.cfg, self.cfg.block_size
        left = cfg.max_num_batched_tokens
        self._riding_now = 0                         # riders wait for the decode batch
        ids, chunks = [], []
        for r in self.run:
            if self.decoding[r] or left <= 0:
                continue
            c = min(int(self.in_len[r] + self.generated[r] - self.computed[r]), left)
            need = _ceil_div(int(self.computed[r]) + c, bs)
            if need - int(self.held[r]) > self.free:
                break
            self.free -= max(need - int(self.held[r]), 0)
            self.held[r] = max(int(self.held[r]), need)
            ids.append(r)
            chunks.append(c)
            left -= c
        new_ids, new_chunks = self._admit(left) if left > 0 else ([], [])
        if not ids and not new_ids:
            return None
        return Plan(_NONE, np.asarray(ids + new_ids, dtype=np.int64), np.asarray(chunks + new_chunks, dtype=np.int64),
                    self.lookahead, -1)

    def _schedule_with_preemption(self, extra: np.ndarray, need: np.ndarray, grant: np.ndarray) -> int:
        """The running pass one request at a time, preempting from the end of the running list when blocks run out.
        Returns how many of the running list (in order) remain; those with a grant hold their blocks."""
        run, i = self.run, 0
        while i < len(run):
            r = run[i]
            if grant[i] > 0:
                stop = False
                while int(extra[i]) > self.free:
                    victim = run.pop()
                    self._preempt(victim)
                    if victim == r:
                        stop = True
                        break
                if stop:
                    break
                self.free -= int(extra[i])
                self.held[r] = max(int(self.held[r]), int(need[i]))
            i += 1
        return len(run)

    def _preempt(self, r: int) -> None:
        """Recompute preemption: blocks freed, KV forgotten, back to the front of the waiting queue."""
        self._release(np.asarray([r]), keep=True)       # its context stays cached for its readmission
        self.computed[r] = 0
        self.decoding[r] = False
        self.waiting.appendleft(r)
        self.preemptions += 1

    def _admit(self, left: int) -> tuple[list[int], list[int]]:
        """Waiting requests FCFS while seats, tokens and blocks allow; their first (or only) prefill chunk."""
        cfg, bs = self.cfg, self.cfg.block_size
        ids, chunks, skipped = [], [], []
        while self.waiting and left > 0 and len(self.run) + self._riding_now < cfg.max_num_seqs:
            r = self.waiting[0]
            hit, prefix, context, pinned = self._cached(r)   # a new or preempted request: its cached tokens
            pending = int(self.in_len[r] + self.generated[r]) - hit
            if not cfg.chunked_prefill and pending > left:
                if cfg.stop_at_unfit_prompt:                 # TensorRT-LLM stops at it
                    break
                skipped.append(self.waiting.popleft())      # vLLM skips it this step and tries the next
                continue
            c = min(pending, left)
            need = _ceil_div(hit + c, bs)
            if cfg.reserve_to_completion:   # its whole sequence's blocks, held from now on (with the drafts a step
                # past its last token may verify, as the cache's check of the longest request counts them)
                need = max(need, _ceil_div(int(self.in_len[r] + self.out_len[r]) + 2 * self.kv_lookahead, bs))
            if need - prefix - context + pinned > self.free:
                break
            if prefix or context:                   # it takes what it found: its prefix shared, its context its own
                self.prefix.take(r, prefix, context)
                self.free -= pinned
                self.held[r] = prefix + context
            self.computed[r] = hit
            self.prompt_admitted += int(self.in_len[r])
            self.prompt_cached += min(hit, int(self.in_len[r]))
            self.waiting.popleft()
            self.free -= need - int(self.held[r])
            self.held[r] = need
            self.run.append(r)
            ids.append(r)
            chunks.append(c)
            left -= c
        self.waiting.extendleft(reversed(skipped))
        return ids, chunks

    def _cached(self, r: int) -> tuple[int, int, int, int]:
        """What waiting request ``r`` (new, or preempted) finds cached, looked up at each try to admit it as vLLM's
        ``get_computed_blocks`` is: (tokens found, blocks of them in its shared prefix, blocks of its context, blocks
        the free count loses when it takes them). A hit share's tokens are the request's own blocks (found in no
        block); a prefix cache's blocks are taken only if it is admitted (``PrefixCache.take``)."""
        if self.prefix is None:
            return int(self.cache_hit[r]), 0, 0, 0
        bs = self.cfg.block_size
        most = (int(self.in_len[r] + self.generated[r]) - 1) // bs
        prefix, context, pinned = self.prefix.look(r, most, self.free)
        return (prefix + context) * bs, prefix, context, pinned

    def _k_cap(self, dec_ids: np.ndarray, prefill_tokens: int, covered: int) -> int:
        """The largest K every decoding request can verify: the tokens left in the budget (prefill chunks + 1 + K per
        decoding request <= max_num_batched_tokens) and the blocks left in the cache."""
        if dec_ids.size == 0:
            return self.lookahead
        d = int(dec_ids.size) + self._riding_now         # riders verify the step's K too (their blocks are held)
        la, bs = self.kv_lookahead, self.cfg.block_size
        room = (self.cfg.max_num_batched_tokens - prefill_tokens - d) // d      # draft tokens each can bring
        if self.chain:
            cap = min(self.lookahead, room)
        else:                             # the largest K whose draft tokens fit (a tree: its tokens, or none)
            cap = max((k for k in range(self.lookahead + 1) if self.drafts[k] <= room), default=0)
        if cap <= max(covered, 0):
            return max(int(cap), 0)
        comp, held = self.computed[dec_ids], self.held[dec_ids]
        while cap > max(covered, 0):      # K = 0 always fits: each decoding request holds its granted tokens' blocks
            need = _ceil_div(comp + 1 + int(self.drafts[cap]) + la, bs)
            if int(np.add.reduce(np.maximum(need - held, 0))) <= self.free:
                break
            cap -= 1
        return max(int(cap), 0)

    def commit(self, plan: Plan, k: int) -> None:
        """Take the blocks decoding requests need at the step's K (``k <= plan.k_cap``)."""
        if plan.dec_ids.size == 0 or k <= max(plan.covered_k, 0):
            return
        ids = plan.dec_ids
        need = _ceil_div(self.computed[ids] + 1 + int(self.drafts[k]) + self.kv_lookahead, self.cfg.block_size)
        extra = np.maximum(need - self.held[ids], 0)
        self.free -= int(np.add.reduce(extra))
        self.held[ids] += extra
        if self.free < 0:
            raise AssertionError("KV blocks over-allocated: K above the plan's cap")

    def finish(self, plan: Plan, t_end: float, accepted: np.ndarray) -> tuple[np.ndarray, int]:
        """Advance every scheduled request to the end of the step at ``t_end``: prefill chunks computed (a prompt
        that completes emits a token), decoding requests emit 1 + accepted tokens (capped at their remaining output).
        Returns (the inter-emission gaps of this step, tokens emitted)."""
        gaps, emitted = [], 0
        done = []
        self.just_retired = _NONE
        if plan.pre_ids.size:
            ids = plan.pre_ids
            self.computed[ids] += plan.pre_chunks
            if self.prefix is not None:             # the prefix blocks written become the prefix's, shared
                self.free -= self.prefix.written(ids, self.computed[ids], self.cfg.block_size, self.free)
            ntok = self.in_len[ids] + self.generated[ids]
            emits = ids[self.computed[ids] == ntok]
            if emits.size:
                resumed = emits[self.generated[emits] >= 1]
                gaps.append(t_end - self.last_emit_t[resumed])
                fresh = emits[self.generated[emits] == 0]
                self.first_t[fresh] = t_end
                self.generated[emits] += 1
                self.decoding[emits] = True
                self.last_emit_t[emits] = t_end
                emitted += int(emits.size)
                done.append(emits[self.generated[emits] >= self.out_len[emits]])
        if plan.dec_ids.size:
            ids = plan.dec_ids
            out, before = self.out_len[ids], self.generated[ids]
            e = np.minimum(1 + accepted, out - before)
            gen = before + e
            self.generated[ids] = gen
            self.computed[ids] = self.in_len[ids] + gen - 1
            gaps.append(t_end - self.last_emit_t[ids])
            self.last_emit_t[ids] = t_end
            emitted += int(np.add.reduce(e))
            done.append(ids[gen >= out])
        if done:
            finished = done[0] if len(done) == 1 else np.concatenate(done)
            if finished.size:
                self._retire(finished, t_end)
        return (np.concatenate(gaps) if gaps else np.zeros(0)), emitted

    def _release(self, ids: np.ndarray, keep: bool = False) -> None:
        """Requests ``ids`` give their KV blocks back (finished, or preempted: ``keep``): their own, and a shared
        prefix's where they were the last to use it (to the prefix cache's queue, still counted free). The full
        blocks of a request's context past its prefix stay findable where a later turn of its conversation will look
        for them, or it will itself when readmitted (``keep``)."""
        if self.prefix is None:
            self.free += int(np.add.reduce(self.held[ids]))
        else:
            cache, bs = self.prefix, self.cfg.block_size
            for r in ids.tolist():
                context = 0
                if keep or self.successor[r] >= 0:
                    context = int(self.computed[r]) // bs - (cache.prefix_blocks if cache.group[r] >= 0 else 0)
                self.free += cache.release(r, int(self.held[r] - cache.shared[r]), context)
        self.held[ids] = 0

    def _retire(self, ids: np.ndarray, t_end: float) -> None:
        self.finish_t[ids] = t_end
        self._release(ids)
        gone = set(ids.tolist())
        self.run = [r for r in self.run if r not in gone]
        self.finished += len(gone)
        self.just_retired = ids
        for r in ids.tolist():
            nxt = int(self.successor[r])
            if nxt >= 0:                            # the conversation's next turn, after the think time
                heapq.heappush(self._follow, (t_end + self.think_s, nxt))
            elif self._slots is not None:           # its client is free again
                heapq.heappush(self._slots, t_end)
