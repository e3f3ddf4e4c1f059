"""EAGLE-3: fc(3h -> h) on fused low/mid/high target features, a 2h-input layer, a reduced draft vocabulary."""
from __future__ import annotations

from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters.base import CHAIN_ACCEPTANCE, DraftPasses, DrafterInfo, DrafterKind, EngineRun


def _parse(arg: str, raw: str) -> dict:
    if not arg.strip():
        return {}
    try:
        vocab = int(arg)
    except ValueError:
        raise DsdsimError(f"eagle3 takes an optional draft vocabulary size (eagle3:32000), got {raw!r}") from None
    if vocab <= 0:
        raise DsdsimError(f"eagle3 draft vocabulary size must be > 0 (e.g. eagle3:32000), got {raw!r}")
    return {"draft_vocab_size": vocab}


INFO = DrafterInfo(
    kind=DrafterKind.eagle3, form="eagle3[:DRAFT_VOCAB]", aliases=("eagle-3",), parse=_parse,
    summary="EAGLE-3 head: fc(3h->h), one 2h-input layer, own lm_head over the draft vocabulary; K sequential passes",
    passes=DraftPasses.chain, trees=True, validated=True,
    acceptance=CHAIN_ACCEPTANCE,
    engines={"vllm": EngineRun(method="eagle3", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": EngineRun(method="EAGLE3", source="SGLang --speculative-algorithm"),
             "trtllm": EngineRun(method="eagle3", source="engine_specs/trtllm-0.20.yaml speculative_drafters")})
