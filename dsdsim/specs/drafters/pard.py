"""PARD: a parallel draft model (An et al. 2025, arXiv 2504.18583; AMD-AIG-AIMA/PARD).

A separate small draft model, trained to fill K mask positions, proposes all K tokens in ONE forward pass over the
tokens verified last step plus K mask tokens. ``pard:MODEL``: the draft model (catalog name or config.json path),
e.g. ``pard:llama-3.2-1b`` for amd/PARD-Llama-3.2-1B (a Llama-3.2-1B fine-tune: same shapes).
"""
from __future__ import annotations

from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun, needs_model
from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal

FORM = "pard:MODEL"

INFO = DrafterInfo(
    kind=DrafterKind.pard, form=FORM, aliases=("parallel-draft",), loads_model=True,
    parse=needs_model(FORM, "pard:llama-3.2-1b"), label=lambda d: f"pard:{d.model}",
    check=lambda d: None if d.model else "pard needs a model: write pard:MODEL (e.g. pard:llama-3.2-1b)",
    summary="PARD parallel draft model: the draft model over q + K positions in ONE pass",
    passes=DraftPasses.one,
    acceptance="conditional alpha per draft position (all K drafted at once, verified as a chain)",
    engines={"vllm": EngineRun(method="draft_model", extra={"parallel_drafting": True},
                               source="vLLM docs speculative_decoding index (PARD); SpeculativeConfig.parallel_drafting"
                                      " (docs/reference/engines.md §2)"),
             "sglang": sglang_refusal("PARD"),
             "trtllm": trtllm_refusal("PARD")})
