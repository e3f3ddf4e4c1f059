"""Engine facts several drafter kinds share (docs/reference/engines.md): one wording, one source each."""
from __future__ import annotations

from dsdsim.specs.drafters.base import EngineRun

SGLANG_ADAPTIVE_EAGLE_ONLY = (
    "SGLang's adaptive speculative decoding (--speculative-adaptive, which reads a per-batch-size K table) supports "
    "EAGLE and EAGLE3 only")
SGLANG_ADAPTIVE_SOURCE = "SGLang docs/advanced_features/adaptive_speculative_decoding.md (docs/reference/engines.md §3)"
TRTLLM_SOURCE = ("docs/reference/engines.md §4; engine_specs/trtllm-0.20.yaml (MTP / EAGLE-3 / n-gram chains); NVIDIA/"
                 "TensorRT-LLM tests/unittest/_torch/speculative/test_draft_len_schedule.py (draft_len_schedule with "
                 "NGramDecodingConfig and DraftTargetDecodingConfig)")


def sglang_refusal(what: str, instead: str = "export for vLLM") -> EngineRun:
    """SGLang cannot read a K table for ``what`` (a drafter it runs, if at all, without adaptive steps)."""
    return EngineRun(refusal=f"{SGLANG_ADAPTIVE_EAGLE_ONLY}: it cannot run {what} from this table; {instead}",
                     source=SGLANG_ADAPTIVE_SOURCE)


def trtllm_refusal(what: str, instead: str = "export for vLLM") -> EngineRun:
    return EngineRun(refusal=f"TensorRT-LLM documents no {what} drafter for its draft_len_schedule (it reads one for "
                             f"MTP, EAGLE-3, n-gram and draft-model chains); {instead}", source=TRTLLM_SOURCE)
