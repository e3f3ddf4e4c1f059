"""EAGLE-1/2: fc(2h -> h) + one decoder layer, drafting with the target's lm_head (SafeAILab/EAGLE)."""
from __future__ import annotations

from dsdsim.specs.drafters.base import CHAIN_ACCEPTANCE, DraftPasses, DrafterInfo, DrafterKind, EngineRun

INFO = DrafterInfo(
    kind=DrafterKind.eagle, form="eagle", summary="EAGLE head: fc(2h->h) + one layer, K sequential passes",
    passes=DraftPasses.chain, trees=True,
    acceptance=CHAIN_ACCEPTANCE,
    engines={"vllm": EngineRun(method="eagle", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": EngineRun(method="EAGLE", source="SGLang --speculative-algorithm"),
             "trtllm": EngineRun(method="eagle", source="engine_specs/trtllm-0.20.yaml speculative_drafters")})
