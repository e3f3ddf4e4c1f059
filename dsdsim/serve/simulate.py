"""The serving simulation: the same requests served once per K policy by a vLLM-V1-like server, step by step.

Each step: the scheduler builds the step (``dsdsim.serve.scheduler``), the policy picks K for it, the pricer gives
its seconds, the clock advances, prefill chunks are computed and decoding requests emit 1 + accepted tokens (drawn
per request, ``dsdsim.serve.requests``), capped at their remaining output. A prompt that completes in the step emits
its first token at the step's end (TTFT). Steps run back to back; when nothing is running or waiting the clock
jumps to the next arrival.

Common random numbers: every policy serves the same requests (lengths, arrivals) with the same per-request
acceptance draws (multipliers and uniforms), so differences between policies are the policies'. The requests and
the acceptance draws come from two streams spawned from ``seed`` (``numpy.random.SeedSequence``): changing the
workload's arrival process leaves the lengths and the acceptance draws as they were.

Pricers: without ``pricer`` each policy gets ``dsdsim.cost.mixed.MixedPricer``: ``none`` the server without a
drafter (no draft weights: more KV cache), ``fixed:K`` the static server with the drafter, and the policies that
change K (dsd, table, oracle, adaptive) the same server running a dynamic K table (``MixedPricer(dynamic=True)``:
the engine version's costs of such a server). A given ``pricer`` prices every policy.

Fleets: ``replicas`` > 1 serves the workload with that many copies of each policy's server behind a router
(``dsdsim.serve.fleet``), co-simulated in time order (``_run_fleet``); each replica is a ``Server`` with its own
scheduler, KV cache and bound policy. A trace that carries its run's own latencies (a vllm bench serve result) is
compared with each policy's (``SimulationResult.versus_measured``).
"""
from __future__ import annotations

import heapq
import math
import re
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from dsdsim.defaults import DEFAULT_REQUESTS
from dsdsim.errors import DsdsimError, whole_number
from dsdsim.records import frozen
from dsdsim.specs.drafter import MAX_K
from dsdsim.serve.fleet import DEFAULT_ROUTER, RoutedRequests, check_replicas, router_named
from dsdsim.serve.lengths import parse_lengths
from dsdsim.serve.metrics import PolicyResult, Slo, Timeline, policy_result, versus_measured
from dsdsim.serve.policies import FixedK, NoSpeculation, Policy, PolicyEnv, StepView, parse_policies
from dsdsim.serve.prefix import MultiTurn, Prompts, SharedPrefix, parse_multi_turn, parse_shared_prefix
from dsdsim.serve.requests import RequestAcceptance, draw_acceptance
from dsdsim.serve.scheduler import Scheduler, SchedulerConfig
from dsdsim.serve.step import ScheduledStep
from dsdsim.serve.workload import Request, Workload, build_requests, limit_concurrency, parse_workload

MAX_REQUESTS = 1_000_000
_EMPTY = np.zeros(0)


def _own_drafts(dec_drafts: Optional[np.ndarray], k: int) -> Optional[np.ndarray]:
    """The drafts each decoder verifies at the step's K where the budget trimmed some (``Plan.dec_drafts``);
    None where every decoder verifies K."""
    if dec_drafts is None or k == 0:
        return None
    own = np.minimum(dec_drafts, k)
    return None if int(own.min()) >= k else own.astype(np.int64)


@frozen
class SimulationResult:
    """Every policy's result on the same requests."""

    policies: list[PolicyResult]
    setup: object
    workload: Workload
    requests: list[Request]
    seed: int
    context: int                           # the context the dsd table was predicted at (mean input + mean output / 2)
    replicas: int = 1                      # data-parallel servers behind a router (each policy's fleet)
    router: Optional[str] = None           # ... and the router's name (None: one server)
    shared_prefix: Optional[SharedPrefix] = None   # the prompts' shared prefixes (None: none)
    multi_turn: Optional[MultiTurn] = None         # conversations (None: single requests)
    request_overhead_s: float = 0.0                # send -> scheduler, outside the steps (SchedulerConfig)

    def to_dict(self) -> dict:
        """The run without its setup (a sweep writes the setup once, above its loads). A trace that carries its
        run's own latencies (a vllm bench serve result) adds ``vs_measured`` to each policy."""
        fleet = {"replicas": self.replicas, "router": self.router} if self.replicas > 1 else {}
        shared = {"shared_prefix": self.shared_prefix.to_dict()} if self.shared_prefix is not None else {}
        if self.multi_turn is not None:
            shared["multi_turn"] = self.multi_turn.to_dict()
        policies = [p.to_dict() for p in self.policies]
        for d, vs in zip(policies, self.versus_measured()):
            d["vs_measured"] = vs
        wl = self.workload
        limit = {"max_concurrency": wl.concurrency} if wl.kind != "closed" and wl.concurrency else {}
        if self.request_overhead_s:
            limit["request_overhead_ms"] = 1e3 * self.request_overhead_s
        return {"workload": wl.text, **limit, "requests": len(self.requests), "seed": self.seed, **shared, **fleet,
                "policies": policies}

    def versus_measured(self) -> list[dict]:
        """Per policy, its latencies against the replayed run's (``dsdsim.serve.metrics.versus_measured``); [] when
        the workload is not a trace that measured them."""
        trace = self.workload.trace
        if trace is None or trace.measured is None:
            return []
        n = len(self.requests)
        outs = np.array([r.output_len for r in self.requests], dtype=np.int64)
        m = trace.measured
        return [versus_measured(p, m.ttft_s[:n], m.e2e_s[:n], outs) for p in self.policies]

    def policy(self, name: str) -> PolicyResult:
        for p in self.policies:
            if p.name == name:
                return p
        raise DsdsimError(f"no policy {name!r} in this result; it has: {', '.join(p.name for p in self.policies)}")


def parse_slo(text) -> Slo:
    """``ttft=200,tpot=50`` (also ``ttft:200 tpot:50``, vLLM bench's ``--goodput``): milliseconds, keys ttft, tpot,
    e2el."""
    if text is None or isinstance(text, Slo):
        return text
    raw = str(text).strip()
    items = [t for t in re.split(r"[,\s]+", raw) if t]
    if not items:
        raise DsdsimError("SLO is empty; write ttft=MS,tpot=MS (milliseconds; keys ttft, tpot, e2el)")
    values = {}
    for item in items:
        key, sep, value = item.replace(":", "=", 1).partition("=")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "tpot", "e2el"):
            raise DsdsimError(f"SLO {raw!r}: cannot read {item!r}; write ttft=MS,tpot=MS (keys ttft, tpot, e2el)")
        try:
            v = float(value)
        except ValueError:
            raise DsdsimError(f"SLO {raw!r}: {key} must be a number of milliseconds, got {value!r}") from None
        if not (math.isfinite(v) and v >= 0):
            raise DsdsimError(f"SLO {raw!r}: {key} must be a finite number of milliseconds >= 0")
        if key in values:
            raise DsdsimError(f"SLO {raw!r}: {key} is given twice")
        values[key] = v
    return Slo(values.get("ttft"), values.get("tpot"), values.get("e2el"))


def simulate(setup, workload, policies, *, requests: Optional[int] = None, input_len="512", output_len="256",
             acceptance=None, scheduler: Optional[SchedulerConfig] = None, slo=None, seed: int = 0, pricer=None,
             progress: Optional[Callable[[float], None]] = None, replicas: int = 1,
             router: str = DEFAULT_ROUTER, shared_prefix=None, multi_turn=None,
             max_concurrency: Optional[int] = None) -> SimulationResult:
    """Serve ``requests`` requests of ``workload`` once per policy and report each.

    setup: a resolved ``dsdsim.specs.setup.Setup`` (None only with a ``pricer`` and policies that need no setup).
    workload: ``closed:C``, ``poisson:QPS``, ``gamma:QPS:CV``, ``rollout``, ``trace:FILE`` (``parse_workload``).
    policies: ``"none,fixed:3,dsd"`` or Policy objects (``parse_policies``).
    requests: how many (default 1000; a trace: all its rows). input_len, output_len: ``parse_lengths`` forms (a
        trace's own lengths take their place). acceptance: what ``acceptance_for`` takes (None: predict's default).
    scheduler: a SchedulerConfig (default: vLLM's, at the deployment's memory_utilization). slo: ``parse_slo`` text or an Slo; goodput is None without.
    seed: seeds the lengths, arrivals and acceptance draws. pricer: a StepPricer for every policy (default:
        MixedPricer per policy, module docstring). progress: called with the fraction done (0..1) as it runs.
    replicas, router: N data-parallel copies of the server behind a router (``dsdsim.serve.fleet``): each with its
        own scheduler, KV cache and bound policy; the workload is the fleet's (``closed:C`` is C clients in all).
    shared_prefix: ``TOKENS:GROUPS`` or a SharedPrefix: each prompt begins with one of GROUPS prefixes of TOKENS
        tokens, then its ``input_len`` tokens; each server keeps a prefix cache of their blocks
        (``dsdsim.serve.prefix``). None: no shared prefixes.
    multi_turn: ``TURNS[:THINK_S]`` or a MultiTurn: the requests are conversations of TURNS turns, each turn's prompt
        the conversation so far and a new message of ``input_len`` tokens, sent THINK_S seconds after the reply to
        the turn before; the workload's arrivals (``closed:C``: C conversations at a time) start conversations.
    max_concurrency: the client's limit on requests in flight under a ``poisson``, ``gamma`` or ``trace`` workload
        (``vllm bench serve --max-concurrency``; ``limit_concurrency``). None: no limit (a trace: its own, if any).
    """
    cfg = default_scheduler(setup) if scheduler is None else scheduler
    if not isinstance(cfg, SchedulerConfig):
        raise DsdsimError("scheduler must be a SchedulerConfig")
    if cfg.request_overhead_s is None:   # the engine spec's calibrated figure, else none
        cfg = replace(cfg, request_overhead_s=calibrated_request_overhead_s(setup))
    if cfg.mixed_prefill is None:   # the engine version's: mixed prefill and decode steps unless its spec says not
        cfg = engine_prefill_rule(cfg, setup, prefix_caching=cfg.prefix_cache_hit > 0 or shared_prefix is not None
                                  or multi_turn is not None)
    seed = whole_number(seed, "seed")
    replicas = check_replicas(replicas)
    router_named(router)                        # checked even for one replica: a typo is a typo
    wl = limit_concurrency(parse_workload(workload), max_concurrency)
    pols = parse_policies(policies) if not (isinstance(policies, (list, tuple))
                                            and all(isinstance(p, Policy) for p in policies)) else list(policies)
    if not pols:
        raise DsdsimError("no policies given; e.g. none,fixed:3,dsd")
    if requests is not None:
        requests = whole_number(requests, "requests", allow_negative=True)      # the range below says the bound
        if not 1 <= requests <= MAX_REQUESTS:
            raise DsdsimError(f"requests must be in 1..{MAX_REQUESTS}, got {requests}")
    elif wl.kind != "trace":
        requests = DEFAULT_REQUESTS
    slo = parse_slo(slo)
    in_dist = parse_lengths(input_len, "--input-len", side="input")
    out_dist = parse_lengths(output_len, "--output-len", side="output")
    tree = setup.drafter.tree if setup is not None and setup.drafter is not None else None
    if tree is not None:
        check_tree_policies(pols, tree)
    from dsdsim.policy.predict import acceptance_for

    acc = acceptance_for(acceptance, tree, setup.drafter if setup is not None else None)
    shared = parse_shared_prefix(shared_prefix)
    turns = parse_multi_turn(multi_turn)
    if (shared is not None or turns is not None) and cfg.prefix_cache_hit > 0:
        raise DsdsimError("give prefix caching once: a hit share of every prompt (--prefix-cache-hit) or the prompts "
                          "themselves (--shared-prefix, --multi-turn), not both")
    # three streams: requests, acceptance, and which prefix each prompt shares (spawn(3)'s first two are spawn(2)'s)
    rng_requests, rng_acceptance, rng_prefix = (np.random.default_rng(s)
                                                for s in np.random.SeedSequence(seed).spawn(3))
    reqs = build_requests(wl, requests, in_dist, out_dist, rng_requests, shared, rng_prefix, turns)
    prompts = None
    if shared is not None or turns is not None:
        prompts = Prompts(np.array([r.prefix for r in reqs], dtype=np.int64) if shared is not None else None,
                          shared.tokens if shared is not None else 0,
                          np.array([r.after for r in reqs], dtype=np.int64) if turns is not None else None,
                          turns.think_s if turns is not None else 0.0)
    ins = np.array([r.input_len for r in reqs], dtype=np.int64)
    outs = np.array([r.output_len for r in reqs], dtype=np.int64)
    arrivals = np.array([r.arrival_s for r in reqs], dtype=float)
    _check_window(setup, ins, outs)
    context = int(round(float(ins.mean()) + float(outs.mean()) / 2))
    pricers = _Pricers(setup, pricer)
    bound = []
    configs = []
    for p in pols:
        pr = pricers.for_policy(p)
        c = cfg.for_server(getattr(setup, "engine", None), server_kind(p) != "plain",   # SGLang: 48 with a drafter
                           getattr(setup, "hardware", None), getattr(getattr(setup, "deployment", None), "tp", 1))
        configs.append(c)
        bound.append((p.bind(PolicyEnv(setup, acc, context, c.max_num_seqs, pr, int(pr.max_k))), pr))
    # one stream per request of output_len + MAX_K uniforms, whichever policies run: a policy's draws do not depend
    # on the others simulated with it
    draws = draw_acceptance(acc, outs, max([MAX_K] + [b.lookahead for b, _ in bound]), rng_acceptance,
                            tree_steps=None if tree is None else tree_depth(tree))
    results = []
    for i, (policy, pr) in enumerate(bound):
        tick = None if progress is None else (lambda f, i=i: progress((i + f) / len(bound)))
        drafts = None if tree is None or policy.lookahead == 0 else [0] + [tree.tokens] * policy.lookahead
        if replicas == 1:
            results.append(_run(policy, pr, arrivals, ins, outs, wl.concurrency, configs[i], draws, slo, tick,
                                drafts, prompts))
            continue
        env = PolicyEnv(setup, acc, context, configs[i].max_num_seqs, pr, int(pr.max_k))
        copies = [policy] + [pols[i].bind(env) for _ in range(replicas - 1)]     # each replica its own state
        results.append(_run_fleet(copies, pr, arrivals, ins, outs, wl.concurrency, configs[i], draws, slo, tick,
                                  router_named(router), drafts, prompts))   # each policy's fleet its own router
    if progress is not None:
        progress(1.0)
    return SimulationResult(results, setup, wl, reqs, seed, context, replicas,
                            str(router).strip().lower() if replicas > 1 else None, shared, turns,
                            float(cfg.request_overhead_s))


def default_scheduler(setup, **limits) -> SchedulerConfig:
    """vLLM's scheduler defaults at the deployment's GPU memory share, with ``limits`` (SchedulerConfig fields)."""
    mu = getattr(getattr(setup, "deployment", None), "memory_utilization", None)
    return SchedulerConfig(**limits) if mu is None else SchedulerConfig(memory_utilization=float(mu), **limits)


def calibrated_request_overhead_s(setup) -> float:
    """The request overhead (``SchedulerConfig.request_overhead_s``) an engine spec's calibration fitted from its
    runs' TTFT (``EngineCalibration.request_overhead_ms``, ``dsdsim calibrate --measurements --replay``); 0 where
    none was fitted (the shipped specs)."""
    cal = getattr(getattr(setup, "engine", None), "calibration", None)
    ms = getattr(cal, "request_overhead_ms", None)
    return 0.0 if ms is None else float(ms) / 1e3


V0_MIN_BATCHED_TOKENS = 2048   # vLLM V0 SchedulerConfig without chunked prefill: max(max_model_len, 2048) a step


def engine_prefill_rule(cfg: SchedulerConfig, setup, prefix_caching: bool = False) -> SchedulerConfig:
    """``cfg`` with the engine version's way of mixing prefills and decodes (``cfg.mixed_prefill`` None): mixed
    unless its spec says not (``EngineSpec.mixed_prefill``); whole prompts where its spec says so
    (``EngineSpec.chunked_prefill`` false: TensorRT-LLM's default), and admission that reserves a request's whole
    sequence (``EngineSpec.reserve_to_completion``). Where the spec says a release serves MLA models without
    chunked prefill (``EngineSpec.mla_chunked_prefill`` false, vLLM 0.7.1-0.7.3) and the model has MLA layers:
    whole prompts in prefill-first steps of up to max(max_model_len, 2048) tokens (the model's
    max_position_embeddings, vLLM's default max_model_len, where the server is given no token budget). Such a server
    has no prefix cache either."""
    engine = getattr(setup, "engine", None)
    flag = getattr(engine, "mla_chunked_prefill", None)
    model = getattr(setup, "model", None)
    if (flag is not None and not flag.value and flag.holds_for(getattr(engine, "release", None))
            and model is not None and model.layer_pattern().get("mla", 0)):
        if prefix_caching:
            served = f"{engine.name} {engine.release or getattr(engine.versions, 'label', '')}".strip()
            raise DsdsimError(f"{served} turns prefix caching off for MLA models (\"MLA is enabled; forcing chunked "
                              "prefill and prefix caching to be disabled\"): drop the prefix cache options or pick a "
                              "later release")
        tokens = cfg.max_num_batched_tokens
        if tokens is None:
            tokens = max(model.max_position_embeddings or 0, V0_MIN_BATCHED_TOKENS)
        return replace(cfg, chunked_prefill=False, mixed_prefill=False, max_num_batched_tokens=tokens)
    flag = getattr(engine, "mixed_prefill", None)
    cfg = replace(cfg, mixed_prefill=True if flag is None else bool(flag.value))
    chunked, reserve = getattr(engine, "chunked_prefill", None), getattr(engine, "reserve_to_completion", None)
    if chunked is not None and not chunked.value:      # whole prompts, and the queue stops at one that does not fit
        cfg = replace(cfg, chunked_prefill=False, stop_at_unfit_prompt=True)
    if reserve is not None and reserve.value:
        cfg = replace(cfg, reserve_to_completion=True)
    return cfg


def _run_fleet(policies: list[Policy], pricer, arrivals, ins, outs, concurrency, cfg: SchedulerConfig,
               draws: RequestAcceptance, slo: Optional[Slo], progress, router, drafts=None,
               prompts: Optional[Prompts] = None) -> PolicyResult:
    """N replicas of one server behind ``router`` (``dsdsim.serve.fleet``), one bound policy each, co-simulated in
    time order: the replica whose clock is earliest runs its next step, unless a request is due to be sent first
    (an open loop's arrival, a closed loop's client whose last request finished, or a conversation's next turn);
    then the router picks its replica from every replica's requests running and waiting, and it waits for that
    replica's next step. The fleet's figures are every request's; ``replicas`` holds each replica's over the
    requests it served."""
    blocks, kv_rule, kv_share = _cache(policies[0], pricer, ins, outs, cfg, drafts)
    n, count = ins.size, len(policies)
    never = np.full(n, np.inf)                           # a replica's own client sends nothing: the router does
    servers = [Server(p, pricer, Scheduler(never, ins, outs, cfg, blocks, p.lookahead, None, drafts, prompts), draws)
               for p in policies]
    prepare = getattr(router, "prepare", None)            # a router that reads the prompts (prefix-aware)
    if prepare is not None:
        prepare(RoutedRequests(ins, None if prompts is None else prompts.group,
                               0 if prompts is None else prompts.prefix_tokens, count,
                               None if prompts is None or prompts.after is None else prompts.roots(n)))
    successor, think = servers[0].sch.successor, servers[0].sch.think_s     # a conversation's next turn
    ov = servers[0].sch.overhead_s                       # a request reaches its replica this long after it is sent
    clocks = [0.0] * count
    owner = np.full(n, -1, dtype=np.int64)
    firsts = np.arange(n) if prompts is None or prompts.after is None else np.flatnonzero(prompts.after < 0)
    order = firsts[np.argsort(arrivals[firsts], kind="stable")]
    slots = None if concurrency is None else [0.0] * int(concurrency)     # heap: when each client slot freed
    follow: list[tuple[float, int]] = []                 # heap: (when it is sent, a conversation's next turn)
    sent = finished = 0
    next_tick = 0
    while finished < n:
        due = math.inf
        if sent < order.size and (slots is None or slots):
            a = float(arrivals[order[sent]])
            due = a if slots is None else max(a, slots[0])
        turn = follow and follow[0][0] <= due
        if turn:
            due = follow[0][0]
        busy = [i for i in range(count) if not servers[i].sch.idle]
        first = min(busy, key=lambda i: clocks[i]) if busy else None
        if due + ov <= (clocks[first] if first is not None else math.inf):
            if due == math.inf:
                raise AssertionError("no request left to send while some are unfinished")
            if turn:
                t, r = heapq.heappop(follow)
            else:
                r = int(order[sent])
                t = due if slots is None else max(float(arrivals[r]), heapq.heappop(slots))
                sent += 1
            loads = [len(x.sch.run) + len(x.sch.waiting) for x in servers]
            i = int(router.pick(loads, r))
            if not 0 <= i < count:
                raise DsdsimError(f"router picked replica {i}; there are {count} (0..{count - 1})")
            if servers[i].sch.idle:
                clocks[i] = max(clocks[i], t + ov)
            servers[i].sch.send(r, t)
            owner[r] = i
            continue
        x = servers[first]
        before = x.sch.finished
        clocks[first] = x.step(clocks[first])
        finished += x.sch.finished - before
        for r in x.sch.just_retired.tolist():
            nxt = int(successor[r])
            if nxt >= 0:                                 # the conversation's next turn, after the think time
                heapq.heappush(follow, (clocks[first] + think, nxt))
            elif slots is not None:                      # its client is free again
                heapq.heappush(slots, clocks[first])
        if progress is not None and finished >= next_tick:
            progress(finished / n)
            next_tick = finished + max(1, n // 100)
    kv = (blocks * cfg.block_size, cfg.kv_cache_tokens is not None, kv_rule, kv_share)
    replicas = tuple(x.result(outs, slo, kv, ids=np.flatnonzero(owner == i)) for i, x in enumerate(servers))
    return _fleet_result(servers, owner, outs, slo, kv, replicas)


def _fleet_result(servers: list[Server], owner: np.ndarray, outs, slo, kv: tuple, replicas: tuple) -> PolicyResult:
    """Every request's figures, each from the replica that served it; the replicas' steps merged in time order."""
    n = owner.size
    send, first, finish = (np.full(n, np.nan) for _ in range(3))
    for i, x in enumerate(servers):
        mine = owner == i
        send[mine], first[mine], finish[mine] = x.sch.send_t[mine], x.sch.first_t[mine], x.sch.finish_t[mine]
    lines = [x.timeline() for x in servers]
    t_end = np.concatenate([t.t_end_s for t in lines])
    by_time = np.argsort(t_end, kind="stable")
    timeline = Timeline(*(np.concatenate([getattr(t, f) for t in lines])[by_time]
                          for f in ("t_end_s", "requests", "decoding", "k", "tokens")))
    verifies = sum(x.verifies for x in servers)
    mal = 1.0 + sum(x.accepted_sum for x in servers) / verifies if verifies else 1.0
    itl = np.concatenate([x.itl() for x in servers])
    admitted = sum(x.sch.prompt_admitted for x in servers)
    hit = (sum(x.sch.prompt_cached for x in servers) / admitted if admitted else 0.0) \
        if servers[0].sch.caches_prefixes else None
    result = policy_result(servers[0].policy.name, send, first, finish, np.asarray(outs), itl, timeline,
                           sum(x.sch.preemptions for x in servers), slo, mal, sum(x.limited for x in servers),
                           kv_cache=kv, prefix_cache_hit=hit)
    return replace(result, replicas=replicas)


def tree_depth(tree) -> int:
    """Draft tokens one step of a tree can accept: a path at most ``steps`` deep and ``tokens`` long."""
    return min(tree.steps, tree.tokens)


def check_tree_policies(policies: list[Policy], tree) -> None:
    """A draft tree's server verifies its tree every speculative step (SGLang's EAGLE trees: --speculative-num-steps,
    -eagle-topk, -num-draft-tokens): ``none`` and ``fixed:DEPTH`` (the tree) run; a K table, the oracle and the
    adaptive rule pick a chain's K, which a tree does not have."""
    depth = tree_depth(tree)
    for p in policies:
        if isinstance(p, NoSpeculation) or (isinstance(p, FixedK) and p.fixed == depth):
            continue
        raise DsdsimError(f"policy {p.name}: the drafter runs a draft tree ({tree.label}), verified whole every "
                          f"step; simulate none and fixed:{depth} (its {depth} draft steps), or a chain drafter for "
                          "the policies that change K")


SERVERS = {"plain": "a server without speculation (no draft weights: more KV cache)",
           "static": "a server with that fixed K, holding the drafter",
           "dynamic": "one server running a dynamic K table, at the K the policy picks each step"}


def server_kind(policy: Policy) -> str:
    """Which server a policy runs on: 'plain' (none), 'static' (fixed:K), 'dynamic' (every policy that changes K)."""
    return "plain" if isinstance(policy, NoSpeculation) else "static" if isinstance(policy, FixedK) else "dynamic"


class _Pricers:
    """The pricer of each policy: the given one, or MixedPricer per server kind (module docstring), built once."""

    def __init__(self, setup, pricer):
        self.setup, self.given, self.made = setup, pricer, {}

    def for_policy(self, policy: Policy):
        if self.given is not None:
            return self.given
        if self.setup is None:
            raise DsdsimError("simulate needs a setup (or a pricer) to time the steps")
        kind = server_kind(policy)
        if kind not in self.made:
            from dsdsim.cost.mixed import MixedPricer
            from dsdsim.policy.predict import plain_setup

            setup = plain_setup(self.setup) if kind == "plain" else self.setup
            self.made[kind] = MixedPricer(setup, dynamic=kind == "dynamic")
        return self.made[kind]


def _check_window(setup, ins: np.ndarray, outs: np.ndarray) -> None:
    window = getattr(getattr(setup, "model", None), "max_position_embeddings", None)
    if window is None:
        return
    total = ins + outs
    if int(total.max()) > window:
        i = int(np.argmax(total))
        raise DsdsimError(f"request {i} has {int(ins[i])} input + {int(outs[i])} output tokens, beyond "
                          f"{setup.model.name}'s window of {window} (vLLM refuses it); shorten the lengths")


def _kv_blocks(pricer, cfg: SchedulerConfig, lookahead: int) -> tuple[int, Optional[str], Optional[float]]:
    """KV blocks of the cache, the rule that sized it and the memory share it took: ``cfg.kv_cache_tokens`` where given, else the pricer's
    ``kv_pool`` (MixedPricer: the engine's own rule, ``MixedPricer.kv_pool``), // block_size; a pricer with only
    ``kv_capacity_tokens(memory_utilization)`` (a ``StepPricer``) is asked that."""
    if cfg.kv_cache_tokens is not None:
        return cfg.kv_cache_tokens // cfg.block_size, None, None
    pool = getattr(pricer, "kv_pool", None)
    if pool is not None:
        kv = pool(cfg.memory_utilization, max_num_batched_tokens=cfg.max_num_batched_tokens,
                  max_num_seqs=cfg.max_num_seqs, lookahead=lookahead, mem_fraction_static=cfg.mem_fraction_static)
        return int(kv.tokens) // cfg.block_size, kv.rule, float(kv.fraction)
    if cfg.mem_fraction_static is not None:
        raise DsdsimError("mem_fraction_static needs a pricer that knows the engine's KV pool rule (MixedPricer)")
    return int(pricer.kv_capacity_tokens(cfg.memory_utilization)) // cfg.block_size, None, cfg.memory_utilization


def _cache(policy: Policy, pricer, ins, outs, cfg: SchedulerConfig,
           drafts=None) -> tuple[int, Optional[str], Optional[float]]:
    """The server's KV blocks, rule and memory share (``_kv_blocks``), checked against the longest request."""
    la = policy.lookahead
    blocks, kv_rule, kv_share = _kv_blocks(pricer, cfg, la)
    ahead = la if drafts is None else int(drafts[-1])      # a tree's draft tokens, else K
    worst = int(np.max(-(-(ins + outs + 2 * ahead) // cfg.block_size)))
    if worst > blocks:
        i = int(np.argmax(ins + outs))
        given = cfg.kv_cache_tokens is not None
        held = (f"{cfg.kv_cache_tokens:,} token{'s' if cfg.kv_cache_tokens != 1 else ''} given, in whole blocks of "
                f"{cfg.block_size}" if given
                else f"{blocks * cfg.block_size} tokens at a memory share of {kv_share:g}")
        raise DsdsimError(f"policy {policy.name}: request {i} ({int(ins[i])} input + {int(outs[i])} output tokens) "
                          f"needs {worst} KV blocks but the cache holds {blocks} ({held}); shorten the lengths or "
                          + ("give a larger cache" if given else "add memory"))
    if not cfg.chunked_prefill and cfg.reserve_to_completion and int(ins.max()) > cfg.max_num_batched_tokens:
        # nothing is preempted, so nothing is recomputed: the longest prompt must fit one step
        raise DsdsimError(f"without chunked prefill a prompt enters one step whole, and max_num_batched_tokens "
                          f"({cfg.max_num_batched_tokens}; TensorRT-LLM's max_num_tokens) holds fewer tokens than the "
                          f"longest prompt ({int(ins.max())}): raise --max-num-batched-tokens to at least "
                          f"{int(ins.max())} or shorten the prompts")
    longest = int((ins + outs).max())
    if not cfg.chunked_prefill and not cfg.reserve_to_completion and longest > cfg.max_num_batched_tokens:
        raise DsdsimError(f"without chunked prefill max_num_batched_tokens ({cfg.max_num_batched_tokens}) must hold "
                          f"a whole prompt and a preempted request's recompute ({longest} tokens here): raise it to at "
                          f"least {longest}")
    return blocks, kv_rule, kv_share


class Server:
    """One server's run, a step at a time: its scheduler, its K policy and pricer, and what its steps recorded (the
    timeline, the gaps between emissions, acceptance and budget counts). ``step(now)`` runs the next step from
    ``now`` and returns when it ends; the caller sends requests between steps (``Scheduler.release``, or a fleet's
    router through ``Scheduler.send``)."""

    def __init__(self, policy: Policy, pricer, sch: Scheduler, draws: RequestAcceptance):
        self.policy, self.pricer, self.sch, self.draws = policy, pricer, sch, draws
        self.la = policy.lookahead
        self.k_prev = 0
        # a server that schedules a step ahead (``schedules_ahead``: vLLM's async scheduling, SGLang's overlap)
        # cannot know that a request's accepted drafts finished it: the request rides the next step too, its
        # tokens discarded (vLLM's Scheduler skips a request only when it is done even if every draft is rejected:
        # num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens)
        self.ahead = bool(getattr(pricer, "schedules_ahead", False)) and self.la > 0
        self.riders = _EMPTY               # contexts of the requests riding this step after they finished
        # ... and its K policy learns step n's acceptance only after it has chosen step n + 1's K (SGLang's overlap
        # scheduler processes batch n's result while batch n + 1 runs: the adaptive EMA lags a step)
        self._unseen: Optional[tuple[np.ndarray, int]] = None
        self.t_end, self.n_req, self.n_dec, self.ks, self.toks, self.gaps = [], [], [], [], [], []
        self.verifies = self.accepted_sum = self.limited = 0

    def step(self, now: float) -> float:
        sch, policy, la = self.sch, self.policy, self.la
        sch.riding = int(self.riders.size)
        plan = sch.schedule(self.k_prev)
        if plan.num_requests == 0:
            raise AssertionError("a step scheduled nothing while requests wait")
        if plan.pre_ids.size:
            pre = plan.pre_ids
            pre_ctx = sch.computed[pre].astype(float)
            ntok = sch.in_len[pre] + sch.generated[pre]
            completing = int(np.count_nonzero(sch.computed[pre] + plan.pre_chunks == ntok))
        else:
            pre_ctx, completing = _EMPTY, 0
        view = StepView(sch.computed[plan.dec_ids].astype(float),
                        plan.pre_chunks.astype(float) if plan.pre_ids.size else _EMPTY, pre_ctx, completing,
                        plan.k_cap if plan.dec_ids.size else la)
        # riders ride a step that decodes, those the budget seated (a prefill batch carries them on)
        riders = self.riders[:sch.riding_now] if plan.dec_ids.size else _EMPTY
        want = min(int(policy.k(plan.num_requests + riders.size, view)), la)
        if self._unseen is not None:                  # the step before's acceptance, now that this K is chosen
            policy.observe(*self._unseen)
            self._unseen = None
        k = min(want, plan.k_cap) if plan.dec_ids.size else want
        own = _own_drafts(plan.dec_drafts, k) if plan.dec_ids.size else None   # the budget trimmed some (vLLM)
        self.limited += int(k < want or own is not None)
        sch.commit(plan, k)
        decode_contexts = view.decode_contexts if not riders.size else np.concatenate([view.decode_contexts, riders])
        tokens = None if own is None else np.concatenate([1.0 + own, np.full(riders.size, 1.0 + k)])
        step_s = float(self.pricer.seconds(ScheduledStep(k, decode_contexts, view.prefill_tokens,
                                                         view.prefill_contexts, tokens)))
        if not (math.isfinite(step_s) and step_s > 0):
            raise DsdsimError(f"the pricer gave {step_s!r} s for a step of {plan.num_requests} requests at K = {k}; "
                              "a step takes a positive, finite time")
        now += step_s
        accepted = self.draws.accepted(plan.dec_ids, k, sch.generated[plan.dec_ids])
        if own is not None:                            # a trimmed request accepts at most the drafts it verified
            accepted = np.minimum(accepted, own)
        if plan.dec_ids.size and k > 0:
            self.verifies += int(plan.dec_ids.size)
            self.accepted_sum += int(np.add.reduce(accepted))
            seen = (accepted if own is None else accepted[own == k], k)
            if self.ahead:
                self._unseen = seen
            else:
                policy.observe(*seen)
        before = sch.generated[plan.dec_ids] if self.ahead and k > 0 else None
        g, emitted = sch.finish(plan, now, accepted)
        if plan.dec_ids.size:
            self.riders = _EMPTY
        if before is not None and plan.dec_ids.size:
            left = sch.out_len[plan.dec_ids]
            rides = (sch.generated[plan.dec_ids] >= left) & (before + 1 < left)   # its drafts finished it
            if rides.any():
                self.riders = sch.computed[plan.dec_ids[rides]].astype(float)
        if g.size:
            self.gaps.append(g)
        self.t_end.append(now)
        self.n_req.append(plan.num_requests)          # the scheduler's steps: riders are priced, not counted
        self.n_dec.append(int(plan.dec_ids.size))
        self.ks.append(k)
        self.toks.append(emitted)
        if sch.trims:               # the drafts the decoders bring to the next step: under vLLM's rule the K its
            self.k_prev = want      # table gives the step, whatever budget was left (a prompt completing drafts too)
        elif plan.dec_ids.size:
            self.k_prev = k
        return now

    def timeline(self) -> Timeline:
        return Timeline(np.asarray(self.t_end), np.asarray(self.n_req), np.asarray(self.n_dec), np.asarray(self.ks),
                        np.asarray(self.toks))

    def itl(self) -> np.ndarray:
        return np.concatenate(self.gaps) if self.gaps else np.zeros(0)

    def result(self, outs, slo: Optional[Slo], kv: tuple, ids: Optional[np.ndarray] = None) -> PolicyResult:
        """The run's figures over the requests ``ids`` (None: all) it served."""
        sch = self.sch
        mal = 1.0 + self.accepted_sum / self.verifies if self.verifies else 1.0
        pick = slice(None) if ids is None else ids
        hit = (sch.prompt_cached / sch.prompt_admitted if sch.prompt_admitted else 0.0) \
            if sch.caches_prefixes else None
        return policy_result(self.policy.name, sch.send_t[pick], sch.first_t[pick], sch.finish_t[pick],
                             np.asarray(outs)[pick], self.itl(), self.timeline(), sch.preemptions, slo, mal,
                             self.limited, kv_cache=kv, prefix_cache_hit=hit)


def _run(policy: Policy, pricer, arrivals, ins, outs, concurrency, cfg: SchedulerConfig, draws: RequestAcceptance,
         slo: Optional[Slo], progress, drafts=None, prompts: Optional[Prompts] = None) -> PolicyResult:
    blocks, kv_rule, kv_share = _cache(policy, pricer, ins, outs, cfg, drafts)
    sch = Scheduler(arrivals, ins, outs, cfg, blocks, policy.lookahead, concurrency, drafts, prompts)
    server = Server(policy, pricer, sch, draws)
    n = sch.n
    now = 0.0
    next_tick = 0
    sch.release(now)
    while sch.finished < n:
        if sch.idle:
            nxt = sch.next_arrival()
            if nxt is None:
                raise AssertionError("no request left to arrive while some are unfinished")
            now = max(now, nxt)
            sch.release(now)
            continue
        now = server.step(now)
        sch.release(now)
        if progress is not None and sch.finished >= next_tick:
            progress(sch.finished / n)
            next_tick = sch.finished + max(1, n // 100)
    return server.result(outs, slo, (blocks * cfg.block_size, cfg.kv_cache_tokens is not None, kv_rule, kv_share))
