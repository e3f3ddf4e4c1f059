"""K policies: how many drafts each step verifies, decided once the step's requests are known.

``parse_policies("none,fixed:3,dsd,table:FILE,oracle,adaptive")`` gives unbound policies; the simulator binds each
to the run (``Policy.bind(env)``: the setup, the acceptance model, the context, the pricer), which returns a fresh
policy with its own state, and asks ``k(num_requests, step)`` every step. ``num_requests`` counts every request
scheduled in the step, prefills included (what vLLM looks its dynamic table up by); ``step`` is a ``StepView``.

* ``none``       K = 0; the server runs without speculation (lookahead 0, no draft weights).
* ``fixed:K``    K every step (vLLM ``num_speculative_tokens``).
* ``dsd``        the K table ``dsdsim.policy.predict.predict`` exports for the same setup and acceptance at one
                 context (``dsd_table``), looked up by the scheduled requests.
* ``table:FILE`` a vLLM, SGLang or TensorRT-LLM table file (``dsdsim.serve.tables``), looked up the same way.
* ``oracle[:MAXK]`` each step, the K in 0..MAXK (default min(8, the drafter's limit), as predict's axis; never above
                 what the step's token budget and free blocks allow) that serves the step's decoding requests best,
                 priced by the pricer for exactly this step (its contexts, prefill chunks and padding), with τ the
                 population's: in a decode step the most expected tokens per second, D τ(K) / T(K) (dsd's rule with
                 the step in hand instead of a table by batch size); in a step with prefill chunks the K whose drafts
                 beat, for their time, the rate r the same requests decode at alone (the best D τ(K) / T_decode(K)):
                 the largest D τ(K) - r T(K). It does not plan across steps (a step's K moves the next step's token
                 budget), so it bounds the dynamic policies on its server to within the noise of different
                 trajectories (tests/test_serve_core.py), not exactly. Counting a completing prefill's token and the
                 chunk's time in one rate, (D τ(K) + F) / T(K), as it once did, made a step with prefills look cheap
                 to speculate in: on the default setup it ran K 4-5 in 7% of the steps and lost to fixed:3.
* ``adaptive``   SGLang's adaptive speculative decoding (``python/sglang/srt/speculative/adaptive_spec_params.py``,
                 ``AdaptiveSpeculativeParams``; docs/advanced_features/adaptive_speculative_decoding.md): an EMA
                 (``ema_alpha`` 0.2) of the batch's mean accepted drafts per request after each verify step; after
                 ``warmup_batches`` (10), every ``update_interval`` (5) verify steps the tier moves down while
                 ema <= previous tier − 0.5 + ``down_hysteresis`` (−0.25) and up while ema > current tier − 0.5 +
                 ``up_hysteresis`` (0.0) over ``candidate_steps`` [1, 3, 7]; the EMA starts at the initial steps − 1
                 (initial steps 3, the documented launch example's ``--speculative-num-steps``). Candidates above the
                 drafter's limit are dropped. SGLang's batch-size-keyed tiers (``adaptive_step_router``) are not used.

Every policy caps K at what it declared as its lookahead (the server's num_speculative_tokens), which never exceeds
the pricer's ``max_k``; with no drafter (``max_k`` 0) every policy but ``none`` is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from dsdsim.defaults import DEFAULT_MAX_K
from dsdsim.errors import DsdsimError
from dsdsim.policy.table import Ranges
from dsdsim.records import frozen
from dsdsim.serve.step import ScheduledStep

POLICY_FORMS = ("none", "fixed:K", "dsd", "table:FILE", "oracle", "oracle:MAXK", "adaptive")
ADAPTIVE_CANDIDATES = (1, 3, 7)        # SGLang AdaptiveSpeculativeParams default candidate_steps
ADAPTIVE_INITIAL = 3                   # the docs' launch example: --speculative-num-steps 3


@frozen
class PolicyEnv:
    """What a policy may know about the run it is bound to."""

    setup: object                      # dsdsim.specs.setup.Setup (None with a pricer and policies that need none)
    acceptance: object                 # Acceptance or TreeAcceptance
    context: int                       # tokens: the workload's mean input + half its mean output
    max_num_seqs: int
    pricer: object                     # StepPricer
    max_k: int                         # the pricer's max_k


@frozen
class StepView:
    """The step being decided: its requests' contexts and chunks (ScheduledStep's arrays), the prefills that
    complete in it (each emits one token whatever K is) and the largest K the token budget and the free KV blocks
    leave it (a larger choice is lowered to it)."""

    decode_contexts: np.ndarray
    prefill_tokens: np.ndarray
    prefill_contexts: np.ndarray
    prefills_completing: int
    k_max: int = 1 << 30

    def scheduled(self, k: int) -> ScheduledStep:
        return ScheduledStep(int(k), self.decode_contexts, self.prefill_tokens, self.prefill_contexts)


@dataclass
class Policy:
    """A K policy. ``name`` is how results name it; ``lookahead`` the largest K it may choose (the server's
    num_speculative_tokens, set by ``bind``). Which server a policy is priced on follows from its kind
    (``dsdsim.serve.simulate.server_kind``). Subclasses implement ``k``."""

    name: str
    lookahead: int = 0

    def bind(self, env: PolicyEnv) -> "Policy":
        """A fresh copy for one run (its own state), checked against the drafter's limit."""
        if env.max_k < 1:
            raise DsdsimError(f"policy {self.name} needs a drafter; this setup has none (only 'none' runs without)")
        return replace(self)

    def k(self, num_requests: int, step: StepView) -> int:
        raise NotImplementedError

    def observe(self, accepted: np.ndarray, k: int) -> None:
        """Drafts each decoding request accepted in the step just run at ``k`` (for online policies)."""


@dataclass
class NoSpeculation(Policy):
    name: str = "none"

    def bind(self, env: PolicyEnv) -> "Policy":
        return replace(self, lookahead=0)

    def k(self, num_requests: int, step: StepView) -> int:
        return 0


@dataclass
class FixedK(Policy):
    fixed: int = 0

    def bind(self, env: PolicyEnv) -> "Policy":
        super().bind(env)
        if self.fixed > env.max_k:
            raise DsdsimError(f"policy {self.name}: K = {self.fixed} is beyond the drafter's limit of {env.max_k}")
        return replace(self, lookahead=self.fixed)

    def k(self, num_requests: int, step: StepView) -> int:
        return self.fixed


@dataclass
class TablePolicy(Policy):
    """A K table as ranges (start, end, K): the last range's K past its end. ``path``: the file (None for dsd)."""

    path: Optional[str] = None
    ranges: Optional[Ranges] = None
    source: str = ""
    _lookup: list = field(default_factory=list, repr=False)

    def bind(self, env: PolicyEnv) -> "Policy":
        super().bind(env)
        if self.path is not None:
            from dsdsim.serve.tables import read_table_file

            ranges, source = read_table_file(self.path), f"table file {self.path}"
        else:
            ranges, source = dsd_table(env.setup, env.acceptance, env.context, env.max_num_seqs), (
                f"dsdsim predict at context {env.context}")
        top = max(k for _, _, k in ranges)
        if top > env.max_k:
            raise DsdsimError(f"policy {self.name}: the table's K = {top} is beyond the drafter's limit of {env.max_k}")
        lookup = _dense_lookup(ranges, env.max_num_seqs)
        return replace(self, ranges=ranges, source=source, _lookup=lookup, lookahead=max(top, 0))

    def k(self, num_requests: int, step: StepView) -> int:
        return self._lookup[min(num_requests, len(self._lookup) - 1)]


@dataclass
class Oracle(Policy):
    """The best K for each step under the model (pricer and population τ)."""

    max_try: Optional[int] = None
    _tau: Optional[np.ndarray] = field(default=None, repr=False)
    _pricer: object = field(default=None, repr=False)

    def bind(self, env: PolicyEnv) -> "Policy":
        super().bind(env)
        top = self.max_try if self.max_try is not None else min(DEFAULT_MAX_K, env.max_k)
        if top > env.max_k:
            raise DsdsimError(f"policy {self.name}: K = {top} is beyond the drafter's limit of {env.max_k}")
        tau = np.asarray(env.acceptance.tau(np.arange(top + 1)), dtype=float)
        return replace(self, lookahead=top, _tau=tau, _pricer=env.pricer)

    def k(self, num_requests: int, step: StepView) -> int:
        d = step.decode_contexts.size
        if d == 0:
            return 0
        ks = range(min(self.lookahead, step.k_max) + 1)
        tokens = [d * float(self._tau[k]) for k in ks]
        seconds = [self._pricer.seconds(step.scheduled(k)) for k in ks]
        if not step.prefill_tokens.size:          # a decode step: the most tokens per second
            return max(ks, key=lambda k: tokens[k] / seconds[k])
        # a step with prefill chunks: K's drafts are worth their time where they beat the rate the same requests
        # decode at alone (the best tokens per second of their decode step): the most tokens - rate x seconds
        rate = max(tokens[k] / self._pricer.seconds(ScheduledStep(k, step.decode_contexts, _NO_PREFILLS,
                                                                  _NO_PREFILLS)) for k in ks)
        return max(ks, key=lambda k: tokens[k] - rate * seconds[k])


_NO_PREFILLS = np.zeros(0)


@dataclass
class Adaptive(Policy):
    """SGLang's EMA rule over candidate step counts (module docstring)."""

    candidates: tuple = ()
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    current: int = 0
    ema: float = 0.0
    batches: int = 0

    def bind(self, env: PolicyEnv) -> "Policy":
        super().bind(env)
        cands = sorted({c for c in ADAPTIVE_CANDIDATES if c <= env.max_k} | {min(ADAPTIVE_INITIAL, env.max_k)})
        if len(cands) < 2:
            raise DsdsimError(f"policy {self.name}: SGLang's adaptive rule needs two candidate step counts within the "
                              f"drafter's limit of {env.max_k}")
        initial = min(cands, key=lambda c: (abs(c - ADAPTIVE_INITIAL), c))      # snapped to the nearest candidate
        return replace(self, candidates=tuple(cands), current=initial, ema=float(initial - 1), batches=0,
                       lookahead=cands[-1])

    def k(self, num_requests: int, step: StepView) -> int:
        return self.current

    def observe(self, accepted: np.ndarray, k: int) -> None:
        if accepted.size == 0 or k <= 0:
            return
        self.ema = (1 - self.ema_alpha) * self.ema + self.ema_alpha * float(accepted.mean())
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return
        c = self.candidates
        i = c.index(self.current)
        while i > 0 and self.ema <= c[i - 1] - 0.5 + self.down_hysteresis:
            i -= 1
        while i < len(c) - 1 and self.ema > c[i] - 0.5 + self.up_hysteresis:
            i += 1
        self.current = c[i]


def parse_policies(text) -> list[Policy]:
    """Policies from a comma-separated list (``POLICY_FORMS``); names must be distinct."""
    if isinstance(text, Policy):
        return [text]
    items = [str(t).strip() for t in (text if isinstance(text, (list, tuple)) else str(text).split(","))]
    if not items or any(not t for t in items):
        raise DsdsimError(f"policies {text!r}: an empty item; list policies separated by commas, e.g. none,fixed:3,dsd")
    out = [_policy(t) for t in items]
    names = [p.name for p in out]
    for name in names:
        if names.count(name) > 1:
            raise DsdsimError(f"policy {name!r} is listed twice; each policy runs once")
    return out


def _policy(text: str) -> Policy:
    head, _, arg = text.partition(":")
    kind = head.strip().lower()
    arg = arg.strip()
    if kind == "none" and not arg:
        return NoSpeculation()
    if kind == "fixed":
        return FixedK(name=f"fixed:{_k(arg, text, 'fixed:K')}", fixed=_k(arg, text, "fixed:K"))
    if kind == "dsd" and not arg:
        return TablePolicy(name="dsd")
    if kind == "table":
        if not arg:
            raise DsdsimError(f"policy {text!r}: write table:FILE (a vLLM, SGLang or TensorRT-LLM table file)")
        return TablePolicy(name=f"table:{Path(arg).name}", path=arg)
    if kind == "oracle":
        return Oracle(name=text.strip().lower(), max_try=_k(arg, text, "oracle:MAXK") if arg else None)
    if kind == "adaptive" and not arg:
        return Adaptive(name="adaptive")
    raise DsdsimError(f"unknown policy {text!r}; use one of: {', '.join(POLICY_FORMS)}")


def _k(arg: str, text: str, form: str) -> int:
    if not arg.isdigit() or not arg.isascii():
        raise DsdsimError(f"policy {text!r}: write {form} with K a whole number >= 0")
    return int(arg)


def dsd_table(setup, acceptance, context: int, max_num_seqs: int) -> Ranges:
    """The K table ``predict`` exports for ``setup`` at ``context`` over batch sizes 1..max_num_seqs, as ranges
    (the last one extended to max_num_seqs; sizes past the last that fits in memory keep the last K)."""
    from dsdsim.policy.predict import predict

    if setup is None:
        raise DsdsimError("policy dsd needs the setup (model, hardware, deployment, drafter) to predict its table")
    s = setup
    p = predict(s.model, s.hardware, s.deployment, s.drafter, engine=s.engine, acceptance=acceptance,
                context=int(context), batch_sizes=f"1-{int(max_num_seqs)}")
    ranges = p.ranges(last_end=int(max_num_seqs))
    if not ranges:
        raise DsdsimError(f"policy dsd: no batch size fits in memory at context {context}; there is no table")
    return ranges


def _dense_lookup(ranges: Ranges, max_num_seqs: int) -> list[int]:
    """K for 0..max_num_seqs requests (index 0 unused), vLLM's step function over the ranges."""
    from dsdsim.serve.tables import table_lookup

    return [0] + [table_lookup(ranges, b) for b in range(1, int(max_num_seqs) + 1)]
