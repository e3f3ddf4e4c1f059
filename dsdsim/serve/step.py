"""What one engine step of a continuously batching server runs, and the contract of whatever prices it.

The scheduler (``dsdsim.serve.scheduler``) decides each step which requests run and how many tokens each brings:
decoding requests bring K + 1 tokens (the last accepted token and K drafts; 1 without speculation), prefilling
requests a chunk of their prompt. The pricer (``dsdsim.cost.mixed.MixedPricer``, from a resolved Setup) turns that
into seconds: one mixed pass whose GEMMs run over all the step's tokens and whose attention runs each sequence over
its own context, plus the draft passes and the engine's terms.
"""
from __future__ import annotations

from typing import Optional, Protocol

import numpy as np

from dsdsim.records import frozen


@frozen
class ScheduledStep:
    """One step's work. Arrays are float64, one entry per request in the step.

    k: draft tokens per decoding request this step (0: plain decoding): the drafter's K, and every decoding request's
        but those ``decode_tokens`` trims.
    decode_contexts: tokens already in each decoding request's KV cache before the step.
    prefill_tokens: prompt tokens each prefilling request computes this step (its chunk).
    prefill_contexts: tokens already cached for each prefilling request (its earlier chunks).
    decode_tokens: tokens each decoding request verifies where the token budget trimmed some of their drafts (vLLM's
        running pass: 1 + its own drafts, at most 1 + K); None: 1 + K each (a tree's tokens + 1). The drafter still
        ran K passes for every request: vLLM trims drafts already proposed.
    """

    k: int
    decode_contexts: np.ndarray
    prefill_tokens: np.ndarray
    prefill_contexts: np.ndarray
    decode_tokens: Optional[np.ndarray] = None

    @property
    def num_requests(self) -> int:
        """Requests scheduled in the step, prefills included: what vLLM looks its dynamic K table up by."""
        return int(self.decode_contexts.size + self.prefill_tokens.size)


class StepPricer(Protocol):
    """Seconds of a scheduled step on one setup, and the memory the scheduler allocates KV blocks from."""

    max_k: int                                   # the largest K the drafter may run (0 without a drafter)

    def seconds(self, step: ScheduledStep) -> float:
        """Wall-clock seconds of the step, engine terms included."""
        ...

    def kv_capacity_tokens(self, memory_utilization: float) -> int:
        """Tokens of KV cache (all requests together) that fit beside the weights at this GPU memory share."""
        ...
