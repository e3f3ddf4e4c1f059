"""Routers: which of N data-parallel servers a request goes to when it is sent (``simulate --replicas N --router``).

A router sees, at each send, every replica's load (its requests running and waiting) and the request, and names
the replica. Each replica is a whole server: its own scheduler, KV cache and K policy (a K table, an oracle's
state, SGLang's EMA); the fleet's figures are every request's, the replicas' each their own.

* ``round-robin``   the i-th request sent goes to replica i mod N (vLLM's data-parallel API server hands requests
                    to its engines in turn; an open loop's arrivals are split evenly whatever their lengths).
* ``least-loaded``  the replica with the fewest requests running and waiting (ties: the lowest index), as a
                    load-balancing proxy counts outstanding requests (llm-d's load-aware scorer, SGLang's router
                    ``--policy shortest_queue``).
* ``prefix-aware``  SGLang's router ``--policy cache_aware`` (``PrefixAware``): the replica whose requests share
                    the longest prefix with this prompt, unless the loads are out of balance.

``register_router(name, factory)`` adds one: a factory of objects with ``pick(loads, request) -> replica``, and
optionally ``prepare(requests)``, called once with the prompts (``RoutedRequests``) before the first send.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol, Sequence

from dsdsim.defaults import DEFAULT_ROUTER
from dsdsim.errors import DsdsimError, whole_number
from dsdsim.records import frozen

__all__ = ["DEFAULT_ROUTER", "ROUTERS", "PrefixAware", "RoutedRequests", "Router", "check_replicas",
           "register_router", "router_named"]
MAX_REPLICAS = 1024


class Router(Protocol):
    def pick(self, loads: Sequence[int], request: int) -> int:
        """The replica (0..N-1) request ``request`` goes to, given each replica's requests running and waiting."""
        ...


class RoundRobin:
    def __init__(self) -> None:
        self._sent = 0

    def pick(self, loads: Sequence[int], request: int) -> int:
        r = self._sent % len(loads)
        self._sent += 1
        return r


class LeastLoaded:
    def pick(self, loads: Sequence[int], request: int) -> int:
        return min(range(len(loads)), key=lambda i: (loads[i], i))


@frozen
class RoutedRequests:
    """What a router may read of the requests: each prompt's length (tokens), the shared prefix it begins with (-1:
    none; None: no prompt shares one) and that prefix's length, the replicas, and the conversation of each (its
    first turn's index; None: no conversations), whose earlier prompts begin this one."""

    input_len: Sequence[int]
    prefix: Optional[Sequence[int]]
    prefix_tokens: int
    replicas: int
    conversation: Optional[Sequence[int]] = None


class PrefixAware:
    """SGLang's router, ``--policy cache_aware`` (sgl-project/sglang ``sgl-router`` ``Router::CacheAware``,
    ``select_generate_worker_from_text``; its defaults as ``sglang_router.launch_router`` 0.1.9 sets them):

    1. The loads (requests sent to a replica and not finished) are out of balance when both max - min >
       ``balance_abs_threshold`` (32) and max > ``balance_rel_threshold`` (1.0001) x min: then the least-loaded
       replica (ties: the lowest index).
    2. Else the router's approximate tree of every prompt it sent to each replica gives the longest match: an
       earlier turn's whole prompt where a turn of the same conversation went there before (a conversation's
       prompts begin with one another), else the prompt's shared prefix where a prompt of that prefix went there
       (its own tokens match no other prompt). Where the best match is more than ``cache_threshold`` (0.5) of the
       prompt, that replica (ties: the lowest index); else the replica whose tree is smallest (fewest prompt tokens
       sent there that were new to it). The tree holds prompts, not replies: a turn matches its predecessors'
       prompts, not their outputs.
    3. The prompt is inserted into the chosen replica's tree either way.

    The router's trees are pruned to ``max_tree_size`` (2^24 characters) every ``eviction_interval`` (60 s): not
    modelled, so a prefix counts as sent to a replica for the whole run. It knows what it sent, not what the replica
    still caches: a prefix the replica evicted is still routed there."""

    def __init__(self, cache_threshold: float = 0.5, balance_abs_threshold: int = 32,
                 balance_rel_threshold: float = 1.0001) -> None:
        self.cache_threshold = float(cache_threshold)
        self.balance_abs_threshold = int(balance_abs_threshold)
        self.balance_rel_threshold = float(balance_rel_threshold)
        self._requests: Optional[RoutedRequests] = None
        self._sent: list[set] = []                 # prefixes sent to each replica
        self._tree: list[int] = []                 # tokens in each replica's tree
        self._turns: list[dict] = []               # per replica: a conversation's longest prompt sent there

    def prepare(self, requests: RoutedRequests) -> None:
        self._requests = requests
        self._sent = [set() for _ in range(requests.replicas)]
        self._tree = [0] * requests.replicas
        self._turns = [{} for _ in range(requests.replicas)]

    def pick(self, loads: Sequence[int], request: int) -> int:
        reqs = self._requests
        if reqs is None:
            raise DsdsimError("the prefix-aware router reads the prompts: call prepare(requests) first")
        count = len(loads)
        group = int(reqs.prefix[request]) if reqs.prefix is not None else -1
        length = int(reqs.input_len[request])
        most, least = max(loads), min(loads)
        matched = [reqs.prefix_tokens if group >= 0 and group in self._sent[i] else 0 for i in range(count)]
        conv = int(reqs.conversation[request]) if reqs.conversation is not None else None
        if conv is not None:
            matched = [max(m, self._turns[i].get(conv, 0)) for i, m in enumerate(matched)]
        if most - least > self.balance_abs_threshold and most > self.balance_rel_threshold * least:
            pick = min(range(count), key=lambda i: (loads[i], i))
        elif max(matched) > self.cache_threshold * length:
            pick = min(range(count), key=lambda i: (-matched[i], i))
        else:
            pick = min(range(count), key=lambda i: (self._tree[i], i))
        self._tree[pick] += length - matched[pick]
        if group >= 0:
            self._sent[pick].add(group)
        if conv is not None:
            self._turns[pick][conv] = length
        return pick


ROUTERS: dict[str, Callable[[], Router]] = {"round-robin": RoundRobin, "least-loaded": LeastLoaded,
                                           "prefix-aware": PrefixAware}


def register_router(name: str, factory: Callable[[], Router]) -> None:
    """Make ``--router NAME`` build ``factory()`` for each run."""
    ROUTERS[str(name).strip().lower()] = factory


def router_named(name: str) -> Router:
    key = str(name).strip().lower()
    factory = ROUTERS.get(key)
    if factory is None:
        raise DsdsimError(f"unknown router {name!r}; use one of: {', '.join(sorted(ROUTERS))}")
    return factory()


def check_replicas(replicas) -> int:
    n = whole_number(replicas, "replicas")
    if not 1 <= n <= MAX_REPLICAS:
        raise DsdsimError(f"replicas must be in 1..{MAX_REPLICAS}, got {n}")
    return n
