"""dsdsim.export: K tables in the formats vLLM, SGLang and TensorRT-LLM read, plus CSV."""
from dsdsim.export.engines import (
    Ranges,
    build_vllm_lookup,
    expand_ranges,
    ranges_from_k_per_batch,
    sglang_adaptive_config,
    table_csv,
    trtllm_draft_len_schedule,
    validate_ranges,
    validate_vllm_schedule,
    vllm_batch_stats,
    vllm_speculative_config,
)

__all__ = [
    "Ranges",
    "build_vllm_lookup",
    "expand_ranges",
    "ranges_from_k_per_batch",
    "sglang_adaptive_config",
    "table_csv",
    "trtllm_draft_len_schedule",
    "validate_ranges",
    "validate_vllm_schedule",
    "vllm_batch_stats",
    "vllm_speculative_config",
]
