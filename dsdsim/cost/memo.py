"""Per-setup constants computed once: a small cache keyed by the value of immutable spec objects.

Specs (``dsdsim.specs.frozen.FrozenSpec`` models, frozen dataclasses) never change after construction, so anything
derived from them alone — a step's plan, a PassContext, a model's layer groups, the EAGLE head's layer, per-GPU
weight bytes — can be computed once per value and reused by every later call, whether it passes the same objects
or equal ones built anew (a ``Deployment(tp=1)`` per call). A spec keeps its hash once computed, and a dict finds
the very object it holds without comparing fields, so a call with the same objects costs one lookup. The cache
forgets the least recently used entries past ``_MAX``.
"""
from __future__ import annotations

import functools

_MAX = 256


def by_value(fn):
    """Memoise ``fn(*specs)`` on the value of its positional arguments (all immutable and hashable)."""
    return functools.lru_cache(maxsize=_MAX)(fn)
