"""Prompt lookup (n-gram): no device work, a host-side lookup per step."""
from __future__ import annotations

from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun

INFO = DrafterInfo(
    kind=DrafterKind.ngram, form="ngram", aliases=("prompt-lookup", "n-gram"), host_only=True,
    summary="n-gram prompt lookup: host-side, no device pass", passes=DraftPasses.none,
    acceptance="conditional alpha per draft position; a miss proposes fewer than K tokens",
    engines={"vllm": EngineRun(method="ngram", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": EngineRun(method="NGRAM", source="SGLang --speculative-algorithm"),
             "trtllm": EngineRun(method="ngram", source="engine_specs/trtllm-0.20.yaml description")})
