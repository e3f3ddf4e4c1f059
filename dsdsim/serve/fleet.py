"""Routers: which of N data-parallel servers a request goes to when it is sent (``simulate --replicas N --router``).

A router sees, at each send, every replica's load (its requests running and waiting) and the request, and names
the replica. Each replica is a whole server: its own scheduler, KV cache and K policy (a K table, an oracle's
state, SGLang's EMA); the fleet's figures are every request's, the replicas' each their own.

* ``round-robin``   the i-th request sent goes to replica i mod N (vLLM's data-parallel API server hands requests
                    to its engines in turn; an open loop's arrivals are split evenly whatever their lengths).
* ``least-loaded``  the replica with the fewest requests running and waiting (ties: the lowest index), as a
                    load-balancing proxy counts outstanding requests (llm-d's load-aware scorer, SGLang's router
                    ``--policy shortest_queue``).

``register_router(name, factory)`` adds one: a factory of objects with ``pick(loads, request) -> replica``.
Prefix-aware routing needs to know which prompts share a prefix; the simulation's prefix cache is a hit share of
every prompt (``SchedulerConfig.prefix_cache_hit``), so it is refused by name.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

from dsdsim.defaults import DEFAULT_ROUTER
from dsdsim.errors import DsdsimError, whole_number

__all__ = ["DEFAULT_ROUTER", "ROUTERS", "Router", "check_replicas", "register_router", "router_named"]
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


ROUTERS: dict[str, Callable[[], Router]] = {"round-robin": RoundRobin, "least-loaded": LeastLoaded}
_NOT_MODELLED = {"prefix-aware": "prefix-aware routing routes by which prompts share a prefix, and the simulation "
                                 "models prefix caching as a hit share of every prompt (--prefix-cache-hit), not "
                                 "the prompts' prefixes; use round-robin or least-loaded with --prefix-cache-hit"}


def register_router(name: str, factory: Callable[[], Router]) -> None:
    """Make ``--router NAME`` build ``factory()`` for each run."""
    ROUTERS[str(name).strip().lower()] = factory


def router_named(name: str) -> Router:
    key = str(name).strip().lower()
    if key in _NOT_MODELLED:
        raise DsdsimError(f"router {key}: {_NOT_MODELLED[key]}")
    factory = ROUTERS.get(key)
    if factory is None:
        raise DsdsimError(f"unknown router {name!r}; use one of: {', '.join(sorted(ROUTERS))}")
    return factory()


def check_replicas(replicas) -> int:
    n = whole_number(replicas, "replicas")
    if not 1 <= n <= MAX_REPLICAS:
        raise DsdsimError(f"replicas must be in 1..{MAX_REPLICAS}, got {n}")
    return n
