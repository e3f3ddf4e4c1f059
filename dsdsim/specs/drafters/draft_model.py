"""A separate small draft model: K sequential passes, the first over the tokens verified last step."""
from __future__ import annotations

from dsdsim.specs.drafters.base import CHAIN_ACCEPTANCE, DraftPasses, DrafterInfo, DrafterKind, EngineRun, needs_model

FORM = "draft-model:MODEL"

INFO = DrafterInfo(
    kind=DrafterKind.draft_model, form=FORM, aliases=("draft", "draftmodel"), loads_model=True, trees=True,
    parse=needs_model(FORM, "draft-model:llama-3.2-1b"), label=lambda d: f"draft-model:{d.model}",
    check=lambda d: None if d.model else "draft-model needs a model: write draft-model:MODEL "
                                         "(e.g. draft-model:llama-3.2-1b)",
    summary="a separate draft model: K sequential passes", passes=DraftPasses.chain,
    acceptance=CHAIN_ACCEPTANCE,
    engines={"vllm": EngineRun(method="draft_model", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": EngineRun(method="STANDALONE", source="SGLang --speculative-algorithm"),
             "trtllm": EngineRun(source="two-model drafting, TensorRT-LLM PR #7651")})
