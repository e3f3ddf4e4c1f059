"""The base of every spec: a frozen pydantic model that hashes by value, once per object.

Specs never change after construction, so what is derived from them alone can be remembered under their value
(``dsdsim.cost.memo``): a ``Deployment(tp=1)`` built anew for each call finds the plan an equal one built. pydantic's
own hash of a frozen model walks every field on every call and fails on a dict field (a hardware spec's peaks); this
one freezes dicts and lists, and keeps the result in a slot of the object, which neither equality, ``model_dump``
nor ``model_copy`` sees (a copy with changed fields hashes again).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

FROZEN = ConfigDict(frozen=True, extra="forbid")


class FrozenSpec(BaseModel):
    """A frozen model with a misspelled key refused (``extra="forbid"``), hashed by value and the hash kept."""

    __slots__ = ("_value_hash",)
    model_config = FROZEN

    def __eq__(self, other) -> bool:
        if self is other or (type(other) is type(self) and self.__dict__ == other.__dict__):
            return True                  # the fields alike (a spec has no extra or private attributes)
        return super().__eq__(other)

    def __hash__(self) -> int:
        try:
            return _VALUE_HASH(self)         # the slot read directly: pydantic's __getattr__ would word a miss
        except AttributeError:
            values = tuple(self.__dict__.values())
            try:
                h = hash((type(self), values))
            except TypeError:               # a dict or list field: frozen first (``_hashable``)
                h = hash((type(self), tuple(_hashable(v) for v in values)))
            object.__setattr__(self, "_value_hash", h)
            return h


    def __repr__(self) -> str:
        """Short: the fields whose own repr is short, '...' for the rest, cut at REPR_CHARS (a model spec's whole
        repr ran to 26 k characters); ``model_dump()`` has every field."""
        parts = []
        for key, value in self.__dict__.items():
            r = repr(value)
            parts.append(f"{key}={r}" if len(r) <= _REPR_FIELD_CHARS else f"{key}=...")
        text = f"{type(self).__name__}(" + ", ".join(parts) + ")"
        return text if len(text) <= REPR_CHARS else text[:REPR_CHARS - 5].rsplit(", ", 1)[0] + ", ...)"


REPR_CHARS = 400            # a spec's repr at most (the fields that fit, then ', ...)')
_REPR_FIELD_CHARS = 60      # a field whose repr is longer shows as 'name=...'
_VALUE_HASH = FrozenSpec._value_hash.__get__


def _hashable(value):
    """``value`` with its dicts, lists and sets frozen (equal values give equal results; specs hash themselves)."""
    if isinstance(value, dict):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_hashable(v) for v in value)
    return value
