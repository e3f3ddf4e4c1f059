"""Medusa: K heads (ResBlock + own lm_head) on the target's last hidden state, one pass."""
from __future__ import annotations

from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal
from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun

INFO = DrafterInfo(
    kind=DrafterKind.medusa, form="medusa", summary="Medusa: K heads in one pass",
    passes=DraftPasses.one, max_k=5,
    max_k_source="the paper evaluates up to 5 heads (Cai et al. 2024, arXiv 2401.10774); K cannot exceed the heads",
    acceptance="conditional alpha per head position (head i drafts token i)",
    engines={"vllm": EngineRun(method="medusa", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": sglang_refusal("Medusa"),
             "trtllm": trtllm_refusal("Medusa")})
