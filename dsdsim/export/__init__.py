"""dsdsim.export: K tables in the formats vLLM, SGLang and TensorRT-LLM read, plus CSV.

The names below are read from dsdsim.export.engines when first used, so that importing a light submodule
(the output formats, atomic file writing) does not load numpy.
"""
from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    if name in __all__:
        value = getattr(importlib.import_module("dsdsim.export.engines"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dsdsim.export' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
