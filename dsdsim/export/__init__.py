"""dsdsim.export: K tables in the formats vLLM, SGLang and TensorRT-LLM read, plus CSV.

The names below are read when first used (the engine formats from dsdsim.export.engines, the K-table ranges
from dsdsim.policy.table, where they are defined), so that importing a light submodule (the output formats,
atomic file writing) does not load numpy.
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


_FROM_TABLE = ("Ranges", "expand_ranges", "ranges_from_k_per_batch", "validate_ranges", "validate_vllm_schedule")


def __getattr__(name: str):
    if name in __all__:
        module = "dsdsim.policy.table" if name in _FROM_TABLE else "dsdsim.export.engines"
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dsdsim.export' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
