"""The result of predicting one corpus case: what ``evaluate`` computes and ``checks`` reads.

Its own module so that both import it one way: ``evaluate`` scores cases into ``CaseResult`` and runs the checks,
``checks`` reads ``CaseResult``; neither needs the other's names to describe it.
"""
from __future__ import annotations

from typing import Optional

from dsdsim.records import frozen


@frozen
class CaseResult:
    id: str
    source: str            # URL or repository path, and where in it
    split: str
    quantity: str
    measured: Optional[float]        # None where the source states a direction, not a figure
    predicted: Optional[float]       # None when not evaluated
    rel_error: Optional[float]       # predicted / measured - 1
    tag: str
    engine: str
    architecture: str                # dense | moe | unknown (not evaluated)
    drafter_kind: str
    acceptance: str                  # how acceptance entered the prediction, in words
    tau: Optional[float]             # tokens per step used (None where the quantity does not need it)
    fits_in_memory: Optional[bool]
    not_evaluated: Optional[str]
    engine_version: Optional[str] = None
    engine_spec: Optional[str] = None       # the engine spec file the case was predicted with
    batch_size: Optional[int] = None


@frozen
class FittedAcceptance:
    group: str
    split: str
    alpha: float
    n: int
