"""Prompts that share a prefix, conversations whose turns extend one another, and the prefix cache that finds them:
which blocks a server keeps, shares and evicts.

A workload may give its prompts shared prefixes (``SharedPrefix``, ``simulate --shared-prefix TOKENS:GROUPS``): each
prompt is one of GROUPS prefixes of TOKENS tokens followed by its own tokens, as the benchmarks built for prefix
caching write them: vLLM's ``vllm bench serve --dataset-name prefix_repetition`` (``--prefix-repetition-prefix-len``,
``-suffix-len``, ``-num-prefixes``: num_prompts / num_prefixes prompts per prefix, then shuffled) and SGLang's
``bench_serving --dataset-name generated-shared-prefix`` (``--gsp-num-groups``, ``--gsp-system-prompt-len``,
``--gsp-question-len``: ``sample_generated_shared_prefix_requests`` builds the groups, then ``random.shuffle``). An
RL rollout that samples G completions of each of N prompts is ``TOKENS:N`` with the prompt as the prefix.

It may also make them conversations (``MultiTurn``, ``simulate --multi-turn TURNS[:THINK_S]``), as vLLM's
``benchmarks/multi_turn/benchmark_serving_multi_turn.py`` runs them: each turn's prompt is the conversation so far
(the previous prompt, its reply, a new user message), sent when the reply to the turn before has arrived plus a think
time. A conversation's turns begin with its shared prefix when there is one.

``PrefixCache`` is one server's cache of those prompts, as vLLM V1's automatic prefix caching keeps blocks
(``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``):

* full blocks only: a prefix of P tokens can be found in ``P // block_size`` blocks; a request finds at most
  ``(its tokens - 1) // block_size`` blocks (``num_computed_tokens`` stays below them: the last token is computed for
  its logits), and only the longest run of cached blocks from its start: a conversation's context is found only
  behind its whole shared prefix (block hashes chain);
* a block is cached once the request writing it has computed it (``cache_full_blocks`` after each step); a request
  admitted while another is still writing the prefix finds the blocks written so far and writes the rest again into
  its own blocks (a block whose hash is cached already is not cached twice);
* found blocks of a shared prefix are shared by reference count (``touch``): the requests using a prefix hold one
  copy of it. A conversation's context is used by one turn at a time: the next turn takes its blocks;
* a block no request uses stays cached and counts as free (the free block queue holds it); it is evicted, oldest
  first, when an allocation needs it (``_maybe_evict_cached_block``). A request's blocks join the queue together,
  tail first (``KVCacheManager.free``: "in reverse order so that the tail blocks are evicted first"): its partial
  and lookahead blocks, then its context's full blocks (where a later turn, or the request itself after a
  preemption, may find them), then its shared prefix's where it was the last to use it. A finished request's own
  blocks that nothing will look for are evicted as they come up and count as free meanwhile.

The scheduler keeps its own count of free blocks (``Scheduler.free``: free plus cached-but-unused, vLLM's
``get_num_free_blocks``); allocations take from it without naming blocks, and the cache evicts lazily (``settle``)
before it is asked for anything, which gives the same blocks as evicting at each allocation: the queue only grows at
its young end between two look-ups.

Not modelled: a finished request's own context found by an unrelated later prompt (prompts are unique beyond their
shared prefix and conversation), prefixes that share a part with each other, SGLang's radix cache at token
granularity (its page size is 1 by default; here blocks of the scheduler's block size), and hash collisions.
"""
from __future__ import annotations

import math
import re
from collections import OrderedDict
from typing import Optional

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.serve.lengths import NUMBER

MAX_GROUPS = 1 << 24
MAX_TURNS = 1 << 16
_WHOLE = r"[0-9]+"


@frozen
class SharedPrefix:
    """Each prompt begins with one of ``groups`` distinct prefixes of ``tokens`` tokens, then its own tokens (the
    input length drawn for it)."""

    tokens: int
    groups: int

    def describe(self) -> str:
        return f"{self.groups:,} shared prefix{'es' if self.groups != 1 else ''} of {self.tokens:,} tokens"

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "groups": self.groups}


@frozen
class MultiTurn:
    """Conversations of ``turns`` user turns: each turn's prompt is the conversation so far and a new user message
    (its drawn input length), sent ``think_s`` seconds after the reply to the turn before."""

    turns: int
    think_s: float = 0.0

    def describe(self) -> str:
        think = f", {self.think_s:g} s to think" if self.think_s else ""
        return f"conversations of {self.turns} turns{think}"

    def to_dict(self) -> dict:
        return {"turns": self.turns, "think_s": self.think_s}


@frozen
class Prompts:
    """What the requests' prompts share, as a server sees it: each request's shared prefix (-1: none; None: no
    prompt has one) with its length in tokens, and the turn before each in its conversation (-1: none; None: no
    conversations) with the think time after a reply. Built by the simulation from the workload."""

    group: Optional[np.ndarray] = None
    prefix_tokens: int = 0
    after: Optional[np.ndarray] = None
    think_s: float = 0.0

    def successors(self, n: int) -> np.ndarray:
        """The next turn of each of ``n`` requests (-1: none)."""
        nxt = np.full(n, -1, dtype=np.int64)
        if self.after is not None:
            has = np.flatnonzero(self.after >= 0)
            nxt[self.after[has]] = has
        return nxt

    def roots(self, n: int) -> np.ndarray:
        """The first turn of each request's conversation (itself where it has no turn before)."""
        root = np.arange(n, dtype=np.int64)
        if self.after is not None:
            for r in range(n):             # turns come after their predecessors (build_requests numbers them so)
                a = int(self.after[r])
                if a >= 0:
                    root[r] = root[a]
        return root


def _fields(text) -> Optional[tuple[str, list[str]]]:
    """(the text stripped, its ``:``-separated fields), or None for None or ""."""
    raw = "" if text is None else str(text).strip()
    return (raw, [p.strip() for p in raw.split(":")]) if raw else None


def parse_shared_prefix(text) -> Optional[SharedPrefix]:
    """``TOKENS:GROUPS`` (``2048:16``: 16 prefixes of 2,048 tokens) as a SharedPrefix; None or "" for none."""
    if isinstance(text, SharedPrefix):
        return text
    fields = _fields(text)
    if fields is None:
        return None
    raw, parts = fields
    if len(parts) != 2 or not all(re.fullmatch(_WHOLE, p) for p in parts):
        raise DsdsimError(f"shared prefix {raw!r}: write TOKENS:GROUPS, two whole numbers (e.g. 2048:16: each prompt "
                          "begins with one of 16 prefixes of 2,048 tokens, then its own --input-len tokens)")
    tokens, groups = int(parts[0]), int(parts[1])
    if tokens < 1:
        raise DsdsimError(f"shared prefix {raw!r}: the prefix must be >= 1 token, got {tokens}")
    if not 1 <= groups <= MAX_GROUPS:
        raise DsdsimError(f"shared prefix {raw!r}: the number of prefixes must be in 1..{MAX_GROUPS}, got {groups}")
    return SharedPrefix(tokens, groups)


def parse_multi_turn(text) -> Optional[MultiTurn]:
    """``TURNS`` or ``TURNS:THINK_S`` (``8:2``: conversations of 8 turns, 2 s to think before each next turn) as a
    MultiTurn; None or "" for none."""
    if isinstance(text, MultiTurn):
        return text
    fields = _fields(text)
    if fields is None:
        return None
    raw, parts = fields
    if len(parts) not in (1, 2) or not re.fullmatch(_WHOLE, parts[0]) or (
            len(parts) == 2 and not re.fullmatch(NUMBER, parts[1])):
        raise DsdsimError(f"multi-turn {raw!r}: write TURNS or TURNS:THINK_S (e.g. 8:2: conversations of 8 turns, "
                          "2 s between a reply and the next turn)")
    turns = int(parts[0])
    think = float(parts[1]) if len(parts) == 2 else 0.0
    if not 1 <= turns <= MAX_TURNS:
        raise DsdsimError(f"multi-turn {raw!r}: the turns must be in 1..{MAX_TURNS}, got {turns}")
    if not (math.isfinite(think) and think >= 0):
        raise DsdsimError(f"multi-turn {raw!r}: the think time must be a finite number of seconds >= 0")
    return MultiTurn(turns, think)


def assign_groups(n: int, shared: SharedPrefix, rng: np.random.Generator) -> np.ndarray:
    """Which prefix each of ``n`` requests (or conversations) begins with: the prefixes in equal shares (the i-th
    of the unshuffled list takes prefix i mod GROUPS), then shuffled, as both benchmarks build and shuffle their
    prompts. Shape (n,)."""
    return rng.permutation(np.arange(n, dtype=np.int64) % shared.groups)


class PrefixCache:
    """One server's cached blocks of shared prefixes and contexts (module docstring), counted in blocks; the
    scheduler's ``free`` includes ``evictable``.

    A request's prompt is found as a chain: its shared prefix (group g, ``prefix_blocks`` full blocks, shared by the
    requests using it), then its context: the full blocks a turn of its conversation left behind, or it itself
    before a preemption (key ``context_key``, taken whole by the request that finds it)."""

    def __init__(self, n: int, prompts: Prompts, block_size: int):
        group = prompts.group if prompts.group is not None else np.full(n, -1, dtype=np.int64)
        self.group = np.asarray(group, dtype=np.int64)
        self.groups = int(self.group.max(initial=-1)) + 1
        self.prefix_blocks = int(prompts.prefix_tokens) // int(block_size)
        self.root = prompts.roots(n)                                # a conversation's first turn: its context's key
        self.cached = np.zeros(self.groups, dtype=np.int64)         # blocks of each prefix in the cache
        self.users = np.zeros(self.groups, dtype=np.int64)          # requests sharing them (vLLM's ref_cnt)
        self.shared = np.zeros(n, dtype=np.int64)                   # blocks each request shares with its prefix
        # the free queue's cached blocks, oldest first: a prefix (key g < groups), a context (groups + root), or a
        # request's own blocks that nothing looks for (a key < 0); blocks of each
        self.queue: OrderedDict[int, int] = OrderedDict()
        self.evictable = 0
        self._dead = 0

    def context_key(self, r: int) -> int:
        return self.groups + int(self.root[r])

    def settle(self, free: int) -> None:
        """Evict, oldest first, the cached blocks that allocations have taken since the last look-up: while the
        queue holds more blocks than are free."""
        while self.evictable > free:
            key, blocks = next(iter(self.queue.items()))
            take = min(blocks, self.evictable - free)
            self.evictable -= take
            if 0 <= key < self.groups:
                self.cached[key] -= take                       # a prefix loses its tail blocks first
            if take == blocks:
                del self.queue[key]
            else:
                self.queue[key] = blocks - take

    def look(self, r: int, most: int, free: int) -> tuple[int, int, int]:
        """What request ``r`` finds, at most ``most`` blocks: (blocks of its shared prefix, blocks of its context,
        blocks the free count would lose in taking them: its prefix's where it waits in the queue, its context's).
        Looking changes nothing but the evictions due (``settle``)."""
        self.settle(free)
        g = int(self.group[r])
        most = max(int(most), 0)
        prefix = min(int(self.cached[g]), most) if g >= 0 else 0
        whole = g < 0 or prefix == self.prefix_blocks          # the context's blocks chain behind the whole prefix
        context = min(self.queue.get(self.context_key(r), 0), most - prefix) if whole else 0
        pinned = (self.queue.get(g, 0) if prefix and self.users[g] == 0 else 0) + context
        return prefix, context, pinned

    def take(self, r: int, prefix: int, context: int) -> None:
        """Request ``r`` is admitted with what it found (``look``): it shares its prefix's blocks and takes its
        context's as its own."""
        if prefix:
            self.shared[r] = prefix
            self._use(int(self.group[r]))
        if context:
            key = self.context_key(r)
            left = self.queue.pop(key) - context
            self.evictable -= context
            if left:                                           # not found (past what it may find): nothing will be
                self._dead -= 1
                self.queue[self._dead] = left                  # looked for there
                self.queue.move_to_end(self._dead, last=False)

    def written(self, ids: np.ndarray, computed: np.ndarray, block_size: int, free: int) -> int:
        """Requests ``ids`` have computed ``computed`` tokens: the full prefix blocks they wrote beyond those cached
        become the prefix's, shared with their writer. Returns the blocks the free count loses (a prefix taken back
        from the queue)."""
        pinned = 0
        for r, done in zip(ids.tolist(), computed.tolist()):
            g = int(self.group[r])
            if g < 0:
                continue
            top = min(done // block_size, self.prefix_blocks)
            extra = top - int(self.cached[g])
            if extra <= 0:
                continue
            if self.shared[r] == 0:
                self.settle(free - pinned)
                pinned += self._use(g)
            self.cached[g] += extra
            self.shared[r] += extra
        return pinned

    def release(self, r: int, own: int, context: int = 0) -> int:
        """Request ``r`` leaves the server (finished, or preempted) with ``own`` blocks of its own, ``context`` of
        them full blocks of its context past its shared prefix that a later turn (or it, readmitted) may find. Its
        blocks join the queue tail first: the rest of its own, its context, then its prefix's where no request shares
        them any more. Returns the blocks the free count gains."""
        context = min(max(int(context), 0), int(own))
        rest = int(own) - context
        if rest:
            self._dead -= 1
            self.queue[self._dead] = rest
        if context:
            key = self.context_key(r)
            stale = self.queue.pop(key, 0)                     # an older context of its conversation, not taken
            if stale:
                self._dead -= 1
                self.queue[self._dead] = stale
            self.queue[key] = context
        freed = int(own)
        if self.shared[r] > 0:
            g = int(self.group[r])
            self.shared[r] = 0
            self.users[g] -= 1
            if self.users[g] == 0 and self.cached[g] > 0:
                self.queue[g] = int(self.cached[g])
                freed += int(self.cached[g])
        self.evictable += freed
        return freed

    def _use(self, g: int) -> int:
        """One more request shares prefix ``g``; the blocks that leave the queue (the first user takes them back)."""
        self.users[g] += 1
        if self.users[g] > 1 or g not in self.queue:
            return 0
        blocks = self.queue.pop(g)
        self.evictable -= blocks
        return blocks


__all__ = ["MultiTurn", "PrefixCache", "Prompts", "SharedPrefix", "assign_groups", "parse_multi_turn",
           "parse_shared_prefix"]
