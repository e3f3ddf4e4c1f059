"""Suffix decoding (Oliaro et al., arXiv 2411.04975; snowflakedb/ArcticInference, vLLM method ``suffix``).

Model-free like n-gram: per-request and global suffix trees on the host propose up to K tokens; no device pass.
Its cost is the host lookup per step: ``suffix[:US_PER_STEP[,US_PER_SEQUENCE]]`` in microseconds.
"""
from __future__ import annotations

from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun, whole_numbers
from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal

FORM = "suffix[:US_PER_STEP[,US_PER_SEQUENCE]]"
# Host time per step. No absolute figure is published: the paper and the Snowflake engineering blog ("SuffixDecoding
# at Production Scale with Arctic Inference and vLLM") give only relative speed-ups of the lookup (3.4x faster
# speculation after the hashmap change). Assumption, the n-gram drafter's figures (DrafterSpec.host_s_*):
# measure it (vLLM logs the proposer's time) and pass it.
US_PER_STEP, US_PER_SEQUENCE = 20, 2


def _parse(arg: str, raw: str) -> dict:
    given = whole_numbers(arg, raw, ("microseconds per step", "microseconds per sequence"), FORM)
    step, per_seq = given + [US_PER_STEP, US_PER_SEQUENCE][len(given):]
    return {"host_s_per_step": step / 1e6, "host_s_per_sequence": per_seq / 1e6}


def _label(d) -> str:
    us = (round(d.host_s_per_step * 1e6), round(d.host_s_per_sequence * 1e6))
    return "suffix" if us == (US_PER_STEP, US_PER_SEQUENCE) else f"suffix:{us[0]},{us[1]}"


INFO = DrafterInfo(
    kind=DrafterKind.suffix, form=FORM, aliases=("suffix-decoding",), parse=_parse, label=_label, host_only=True,
    summary="suffix decoding: host-side suffix-tree lookup, no device pass", passes=DraftPasses.none, max_k=24,
    max_k_source="vLLM suffix_decoding_max_tree_depth default 24 (docs/reference/engines.md §2)",
    acceptance="K is a cap: each request speculates up to max_spec_factor x its match length; alpha from vLLM "
               "counters (per-position counts over the drafts made)",
    engines={"vllm": EngineRun(refusal="vLLM runs suffix decoding (method suffix, needs arctic-inference) with its own "
                                       "per-request speculation length, and suffix decoding conflicts with dynamic "
                                       "speculative decoding (vllm-ascend PR #12368): no per-batch-size K table; "
                                       "export csv or json",
                               source="docs/reference/engines.md §1.2, §2"),
             "sglang": sglang_refusal("suffix decoding", "export csv or json"),
             "trtllm": trtllm_refusal("suffix decoding", "export csv or json")})
