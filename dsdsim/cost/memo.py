"""Per-setup constants computed once: a small cache keyed by the identity of immutable spec objects.

Specs (pydantic models with ``frozen=True``, frozen dataclasses) never change after construction, so anything
derived from them alone — a PassContext, a model's layer groups, the EAGLE head's layer, per-GPU weight bytes —
can be computed once per object and reused by every later call. Keys are object identities, not values:
hashing a ModelSpec by value costs more than most of what it would save. The cache holds the objects it is
keyed on (an id is never reused while its object lives) and forgets the oldest entries past ``_MAX``.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

_MAX = 256


def by_identity(fn):
    """Memoise ``fn(*specs)`` on the identity of its positional arguments (all immutable)."""
    cache: OrderedDict[tuple, tuple] = OrderedDict()

    @functools.wraps(fn)
    def wrapper(*args):
        key = id(args[0]) if len(args) == 1 else tuple(map(id, args))
        hit = cache.get(key)
        if hit is not None:      # the entry holds the objects, so these ids are theirs: no identity check needed
            return hit[1]
        value = fn(*args)
        cache[key] = (args, value)
        if len(cache) > _MAX:
            cache.popitem(last=False)
        return value

    wrapper.cache_clear = cache.clear
    return wrapper
