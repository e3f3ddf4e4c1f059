"""The model's own next-n prediction module(s) (DeepSeek-V3 MTP and the like): a full layer, MoE included."""
from __future__ import annotations

from dsdsim.specs.drafters.base import CHAIN_ACCEPTANCE, DraftPasses, DrafterInfo, DrafterKind, EngineRun


def no_mtp_module(model_name: str) -> str:
    """The refusal of ``-d mtp`` on a model whose spec holds no MTP module."""
    return (f"{model_name}'s spec has no MTP module (its config.json declares none, e.g. num_nextn_predict_layers or "
            "mtp_num_hidden_layers, or none its released weights hold); choose eagle3, eagle or draft-model:MODEL")


INFO = DrafterInfo(
    kind=DrafterKind.mtp, form="mtp", summary="the model's MTP module: a full layer run K times",
    passes=DraftPasses.chain, trees=True,
    acceptance=CHAIN_ACCEPTANCE,
    engines={"vllm": EngineRun(method="mtp", source="vllm/config/speculative.py SpeculativeMethod (mtp)"),
             "sglang": EngineRun(method="EAGLE", source="SGLang runs MTP modules as EAGLE"),
             "trtllm": EngineRun(method="mtp", source="engine_specs/trtllm-0.20.yaml speculative_drafters")})
