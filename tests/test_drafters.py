"""Drafter weights against published head sizes (independent ground truth)."""
from __future__ import annotations

import pytest

from dsdsim import load_model
from dsdsim.cost.drafts import drafter_weight_params
from dsdsim.specs.drafter import parse_drafter


@pytest.mark.parametrize("model,published", [
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: fc 50.3M + attention 67.1M + MLP 176.2M + lm_head 131.1M ~ 425M
    # (SpecForge llama3-8B-eagle3.json; the 525M shared embedding is not stored in the head)
    ("llama-3.1-8b", 425e6),
    # yuhuili/EAGLE3-LLaMA3.3-Instruct-70B: fc 201M, attention 235M, MLP 705M, lm_head 262M ~ 1.40B
    ("llama-3.3-70b", 1.40e9),
])
def test_eagle3_head_parameters_match_published(model, published):
    got = drafter_weight_params(load_model(model), parse_drafter("eagle3"), None)
    assert got == pytest.approx(published, rel=0.015)


def test_deepseek_mtp_module_matches_published():
    # DeepSeek-V3 README_WEIGHTS: the MTP module holds 11.5B unique parameters (embedding and head shared)
    m = load_model("deepseek-v3")
    assert drafter_weight_params(m, parse_drafter("mtp"), None) == pytest.approx(11.5e9, rel=0.015)


def test_draft_model_and_host_drafters():
    target = load_model("llama-3.1-8b")
    small = load_model("llama-3.2-1b")
    assert drafter_weight_params(target, parse_drafter("draft-model:llama-3.2-1b"), small) == small.params_total
    assert drafter_weight_params(target, parse_drafter("ngram"), None) == 0


def test_eagle1_head_matches_published_checkpoint():
    # yuhuili/EAGLE-LLaMA3-Instruct-8B: 1.55 GB bf16 checkpoint ~ 775M params including a copy of the 525M
    # embedding, so ~250M unique (fc 2h->h with bias + one decoder layer; drafts with the target lm_head)
    got = drafter_weight_params(load_model("llama-3.1-8b"), parse_drafter("eagle"), None)
    assert got == pytest.approx(250e6, rel=0.02)
