"""Prompts that share a prefix, and the prefix cache that finds them: which blocks a server keeps, shares and evicts.

A workload may give its prompts shared prefixes (``SharedPrefix``, ``simulate --shared-prefix TOKENS:GROUPS``): each
prompt is one of GROUPS prefixes of TOKENS tokens followed by its own tokens, as the benchmarks built for prefix
caching write them: vLLM's ``vllm bench serve --dataset-name prefix_repetition`` (``--prefix-repetition-prefix-len``,
``-suffix-len``, ``-num-prefixes``: num_prompts / num_prefixes prompts per prefix, then shuffled) and SGLang's
``bench_serving --dataset-name generated-shared-prefix`` (``--gsp-num-groups``, ``--gsp-system-prompt-len``,
``--gsp-question-len``: ``sample_generated_shared_prefix_requests`` builds the groups, then ``random.shuffle``). An
RL rollout that samples G completions of each of N prompts is ``TOKENS:N`` with the prompt as the prefix.

``PrefixCache`` is one server's cache of those prefixes, as vLLM V1's automatic prefix caching keeps blocks
(``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``):

* full blocks only: a prefix of P tokens can be found in ``P // block_size`` blocks; a request finds at most
  ``(prompt - 1) // block_size`` of them (``num_computed_tokens`` stays below the prompt: the last token is
  recomputed for its logits);
* a block is cached once the request writing it has computed it (``cache_full_blocks`` after each step); a request
  admitted while another is still writing the prefix finds the blocks written so far and writes the rest again into
  its own blocks (a block whose hash is cached already is not cached twice);
* found blocks are shared by reference count (``touch``): the requests using a prefix hold one copy of it;
* a block no request uses stays cached and counts as free (the free block queue holds it); it is evicted, oldest
  first, when an allocation needs it (``_maybe_evict_cached_block``). A finished request's blocks join the queue
  together, tail first (``KVCacheManager.free``), so its own go before its prefix's; a request's own blocks are
  never found again here (its prompt's own tokens are unique), so they are evicted as they come up and count as free
  meanwhile.

The scheduler keeps its own count of free blocks (``Scheduler.free``: free plus cached-but-unused, vLLM's
``get_num_free_blocks``); allocations take from it without naming blocks, and the cache evicts lazily (``settle``)
before it is asked for a prefix, which gives the same blocks as evicting at each allocation: the queue only grows at
its young end between two look-ups.

Not modelled: a preempted request finding its own blocks again (vLLM's cache keeps them; here it recomputes all but
its prefix), prefixes that share a part with each other, SGLang's radix cache at token granularity (its page size
is 1 by default; here blocks of the scheduler's block size), and hash collisions.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Optional

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

MAX_GROUPS = 1 << 24
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


def parse_shared_prefix(text) -> Optional[SharedPrefix]:
    """``TOKENS:GROUPS`` (``2048:16``: 16 prefixes of 2,048 tokens) as a SharedPrefix; None or "" for none."""
    if text is None or isinstance(text, SharedPrefix):
        return text
    raw = str(text).strip()
    if not raw:
        return None
    parts = [p.strip() for p in raw.split(":")]
    if len(parts) != 2 or not all(re.fullmatch(_WHOLE, p) for p in parts):
        raise DsdsimError(f"shared prefix {raw!r}: write TOKENS:GROUPS, two whole numbers (e.g. 2048:16: each prompt "
                          "begins with one of 16 prefixes of 2,048 tokens, then its own --input-len tokens)")
    tokens, groups = int(parts[0]), int(parts[1])
    if tokens < 1:
        raise DsdsimError(f"shared prefix {raw!r}: the prefix must be >= 1 token, got {tokens}")
    if not 1 <= groups <= MAX_GROUPS:
        raise DsdsimError(f"shared prefix {raw!r}: the number of prefixes must be in 1..{MAX_GROUPS}, got {groups}")
    return SharedPrefix(tokens, groups)


def assign_groups(n: int, shared: SharedPrefix, rng: np.random.Generator) -> np.ndarray:
    """Which prefix each of ``n`` requests begins with: the prefixes in equal shares (request i of the unshuffled
    list takes prefix i mod GROUPS), then shuffled, as both benchmarks build and shuffle their prompts. Shape (n,)."""
    return rng.permutation(np.arange(n, dtype=np.int64) % shared.groups)


class PrefixCache:
    """One server's cached prefix blocks (module docstring). ``group``: each request's prefix (-1: none);
    ``prefix_blocks``: the full blocks of a prefix. Counts are blocks; the scheduler's ``free`` includes
    ``evictable``."""

    def __init__(self, group: np.ndarray, prefix_blocks: int, groups: int):
        self.group = np.asarray(group, dtype=np.int64)
        self.prefix_blocks = int(prefix_blocks)
        self.cached = np.zeros(groups, dtype=np.int64)         # blocks of each prefix in the cache
        self.users = np.zeros(groups, dtype=np.int64)          # requests sharing them (vLLM's ref_cnt)
        self.shared = np.zeros(self.group.size, dtype=np.int64)   # blocks each request shares with its prefix
        # the free queue's cached blocks, oldest first: a prefix (key g >= 0) or a finished request's own blocks
        # (a key < 0, never found again); blocks of each
        self.queue: OrderedDict[int, int] = OrderedDict()
        self.evictable = 0
        self._dead = 0                                         # keys of requests' own blocks in the queue

    def settle(self, free: int) -> None:
        """Evict, oldest first, the cached blocks that allocations have taken since the last look-up: while the
        queue holds more blocks than are free."""
        while self.evictable > free:
            key, blocks = next(iter(self.queue.items()))
            take = min(blocks, self.evictable - free)
            self.evictable -= take
            if key >= 0:
                self.cached[key] -= take                       # a prefix loses its tail blocks first
            if take == blocks:
                del self.queue[key]
            else:
                self.queue[key] = blocks - take

    def look(self, r: int, most: int, free: int) -> tuple[int, int]:
        """What request ``r`` finds of its prefix, at most ``most`` blocks: (blocks found, blocks the free count
        would lose in taking them: the prefix's, where no request shares it and it waits in the queue). Looking
        changes nothing but the evictions due (``settle``)."""
        g = int(self.group[r])
        if g < 0:
            return 0, 0
        self.settle(free)
        found = min(int(self.cached[g]), max(int(most), 0))
        if found == 0:
            return 0, 0
        return found, int(self.queue.get(g, 0)) if self.users[g] == 0 else 0

    def take(self, r: int, found: int) -> None:
        """Request ``r`` is admitted with the ``found`` blocks of its prefix (``look``): it shares them."""
        self.shared[r] = found
        self._use(int(self.group[r]))

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

    def release(self, r: int, own: int) -> int:
        """Request ``r`` leaves the server (finished, or preempted) with ``own`` blocks of its own. Its blocks join
        the queue tail first, as vLLM frees them (``KVCacheManager.free``: "in reverse order so that the tail blocks
        are evicted first"): its own, then its prefix's where no request shares them any more. Returns the blocks
        the free count gains."""
        freed = 0
        if own > 0:
            self._dead -= 1
            self.queue[self._dead] = int(own)
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


__all__ = ["PrefixCache", "SharedPrefix", "assign_groups", "parse_shared_prefix"]
