"""Prompt lookup (n-gram): no device work, a host-side lookup per step."""
from __future__ import annotations

from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun

INFO = DrafterInfo(
    kind=DrafterKind.ngram, form="ngram", aliases=("prompt-lookup", "n-gram"), host_only=True,
    summary="n-gram prompt lookup: host-side, no device pass", passes=DraftPasses.none,
    acceptance="conditional alpha per draft position; a miss proposes fewer than K tokens",
    # a model-free lookup accepts what the text repeats: far less than a trained drafter on generic chat
    default_acceptance=(1.37, 5, "n-gram on generic chat, TensorRT-LLM tech blog 7 (NVIDIA/TensorRT-LLM docs/source/"
                                 "blogs/tech_blog/blog7_NGram_performance_Analysis_And_Auto_Enablement.md: Magpie's "
                                 "first turn, k = 3, v = 5; 1.66 on its second turn, above 4 on translation)"),
    engines={"vllm": EngineRun(method="ngram", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": EngineRun(method="NGRAM", source="SGLang --speculative-algorithm"),
             "trtllm": EngineRun(method="ngram", source="engine_specs/trtllm-0.20.yaml description")})
