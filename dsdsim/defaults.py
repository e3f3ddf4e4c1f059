"""Shipped defaults of `dsdsim predict` with no arguments (one place, so docs and code agree).

llama-3.1-8b on h100-sxm with an EAGLE-3 head: a common dense model with a public EAGLE-3 head
(yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) on the most common datacenter GPU.
"""
DEFAULT_MODEL = "llama-3.1-8b"
DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DRAFTER = "eagle3"
DEFAULT_CONTEXT = 1024
DEFAULT_MAX_K = 8
DEFAULT_FIXED_K = 3
DEFAULT_ENGINE = "vllm"
