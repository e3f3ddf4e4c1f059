"""The drafter kinds, one module each, in one registry: ``drafter_info(kind)`` and ``lookup(name)``.

A new kind is a module here (its ``INFO``: form, parameters, limits, passes, acceptance convention, engine names and
refusals), its cost in ``dsdsim.cost.drafters``, and a member of ``DrafterKind``.
"""
from __future__ import annotations

import difflib

from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters import (dflash, draft_model, dspark, eagle, eagle3, medusa, mtp, ngram, pard,
                                   self_spec, suffix)
from dsdsim.specs.drafters.base import MAX_K, DraftPasses, DrafterInfo, EngineRun

__all__ = ["MAX_K", "DraftPasses", "DrafterInfo", "EngineRun", "REGISTRY", "drafter_info", "lookup", "forms",
           "is_known", "validated_kinds"]

REGISTRY: dict = {m.INFO.kind: m.INFO for m in (eagle3, eagle, mtp, medusa, ngram, draft_model, self_spec, dflash,
                                                 dspark, pard, suffix)}
_NAMES = {name: info for info in REGISTRY.values() for name in (info.name, *info.aliases)}


def drafter_info(kind) -> DrafterInfo:
    return REGISTRY[kind]


def validated_kinds() -> list[str]:
    """The names of the kinds whose passes dsdsim.bench builds in torch (``validate`` times them)."""
    return [info.name for info in REGISTRY.values() if info.validated]


def is_known(name: str) -> bool:
    """Whether ``name`` (lower-case, '-' for '_') names a kind or one of its aliases."""
    return name in _NAMES


def forms() -> str:
    """Every kind's command-line form, ' | '-separated (the -d help)."""
    return " | ".join(info.form for info in REGISTRY.values())


def lookup(name: str, raw: str) -> DrafterInfo:
    """The kind called ``name`` (already lower-case, '_' as '-'); unknown: one line with the close names."""
    info = _NAMES.get(name)
    if info is not None:
        return info
    close = difflib.get_close_matches(name, list(_NAMES), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise DsdsimError(f"unknown drafter {raw!r}; {hint}use one of: {', '.join(i.form for i in REGISTRY.values())}")
