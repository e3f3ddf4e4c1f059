"""How an engine sizes its KV cache pool, by release: the share of the GPU's memory it keeps for the cache.

vLLM (``dsdsim.cost.memory.profile_peak_bytes``): ``gpu_memory_utilization`` x the memory the driver reports, less
the weights and the peak of a profile run. SGLang (here): ``mem_fraction_static`` x the memory free before the weights
load, less the weights, over the bytes of one token's cache:

    rest_memory = post_model_load_memory - pre_model_load_memory * (1 - mem_fraction_static)
    max_total_num_tokens = rest_memory // cell_size

(``ModelRunner.profile_max_num_token``, ``python/sglang/srt/model_executor/model_runner.py`` at v0.4.6-v0.5.5;
``model_runner_kv_cache_mixin.py`` at v0.5.10; ``mem_cache/kv_cache_configurator.py`` ``_profile_available_bytes``
at v0.5.17-v0.5.23). The memory before the weights is taken as the driver's total (``engine_memory_bytes``): the CUDA
context and the communicators SGLang has already made by then are not modelled.

The default ``mem_fraction_static`` when a server is given none (``python/sglang/srt/server_args.py``
``__post_init__`` / ``_handle_gpu_memory_settings``; ``arg_groups/memory_hook.py`` at v0.5.23), read at the releases
named below; ``gpu_mem`` is the GPU's memory in MiB (SGLang reads nvidia-smi's total, which runs 0.3-0.5 GiB above
the driver total used here):

* up to 0.4.9 (read at 0.4.6): 0.88 / 0.87 / 0.85 / 0.81 / 0.79 at tp 1 / 2 / 4 / 8 / 16 on GPUs of at most 81,920
  MiB, else (gpu_mem - 13 GiB) / gpu_mem. No speculative term.
* 0.4.10-0.5.2 (read at 0.4.10, 0.5.0rc2, 0.5.1, 0.5.2): (gpu_mem - reserved) / gpu_mem, rounded to 3 places, with
  reserved (2.8 + P/10) GiB below 35 GiB, (9.5 + P/2) GiB below 90, (12 + P/2) GiB below 160, else 32 GiB (P = tp x
  pp); + 2 GiB with a speculative algorithm, + 4 GiB with DP attention.
* 0.5.3-0.5.13 (read at 0.5.3, 0.5.4, 0.5.10): reserved = 512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x
  cuda_graph_max_bs + tp x pp / 8 x 1024 MiB, at least 10 GiB on GPUs above 60 GiB; + 2 GiB for EAGLE-class drafters
  (+ 4 GiB from 0.5.10), + 6 GiB for STANDALONE (a draft model), nothing for NGRAM. The piecewise-CUDA-graph term of
  0.5.10-0.5.13 (``len(piecewise_cuda_graph_tokens) x 8`` MiB) is not modelled.
* 0.5.14 on (read at 0.5.14, 0.5.15, 0.5.17, 0.5.19, 0.5.21, 0.5.23): the same reserve without a speculative term;
  the drafter's weights load before the pool is sized and one token's cell counts the drafter's layers too
  (``pool_configurator.py``: ``cell_size * (1 + draft_num_layers / num_layers)``).

Up to 0.5.13 the drafter loads after the target's pool is sized: its weights and its own cache come out of the
memory left outside the fraction. Up to 0.5.6 the target's pool also grows by a headroom for the tokens verify and
draft may hold at once: ``max_num_reqs x (speculative_num_steps x topk + speculative_num_draft_tokens) + 100``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from dsdsim.specs.engine import parse_version

MIB = float(1 << 20)
GIB_MIB = 1024.0


class SglangPoolRule(NamedTuple):
    """What SGLang's pool sizing does at one release (module docstring)."""

    fraction: float            # the mem_fraction_static used
    given: bool                # the fraction was given, not SGLang's default
    draft_in_pool: bool        # the drafter's weights and cache come out of the pool (0.5.14 on)
    headroom: bool             # the target's pool grows by the verify / draft headroom (up to 0.5.6)


def sglang_defaults(release: tuple, gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a GPU of ``gpu_mem_mib`` MiB from 0.5.3
    (``_handle_gpu_memory_settings``): 2048 / 8 below 20 GiB; 2048 / 16 (24 from 0.5.5) at tp < 4, else 80, below 35
    GiB (4096 / 48 or 160 at 0.5.23); 4096 / 32 or 160 below 60 GiB; 8192 / 256 or 512 below 160 GiB; 16384 / 512."""
    gib = gpu_mem_mib / GIB_MIB
    small_tp = tp < 4
    if gib < 20:
        return 2048, 8
    if gib < 35:
        if release >= (0, 5, 23):
            return 4096, 48 if small_tp else 160
        return 2048, (24 if release >= (0, 5, 5) else 16) if small_tp else 80
    if gib < 60:
        return 4096, 32 if small_tp else 160
    if gib < 160:
        return 8192, 256 if small_tp else 512
    return 16384, 512


def sglang_mem_fraction_static(release_text: str, gpu_mem_mib: float, tp: int = 1, pp: int = 1,
                               drafter_kind: Optional[str] = None, dp_attention: bool = False) -> float:
    """SGLang's default ``mem_fraction_static`` at ``release_text`` on a GPU of ``gpu_mem_mib`` MiB (module
    docstring). ``drafter_kind``: dsdsim's drafter kind of a speculative server (None: plain); ``draft-model`` is
    SGLang's STANDALONE, ``ngram`` its NGRAM, the rest EAGLE-class."""
    release = parse_version(release_text)
    parallel = tp * pp
    speculative = drafter_kind is not None
    if release < (0, 4, 10):
        if gpu_mem_mib <= 81920:
            for at_least, fraction in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
                if tp >= at_least:
                    return fraction
            return 0.88
        return (gpu_mem_mib - 13 * GIB_MIB) / gpu_mem_mib
    if release < (0, 5, 3):
        gib = gpu_mem_mib / GIB_MIB
        if gib < 35:
            reserved = (2.8 + parallel / 10) * GIB_MIB
        elif gib < 90:
            reserved = (9.5 + parallel / 2) * GIB_MIB
        elif gib < 160:
            reserved = (12 + parallel / 2) * GIB_MIB
        else:
            reserved = 32 * GIB_MIB
        reserved += 2 * GIB_MIB * speculative + 4 * GIB_MIB * dp_attention
        return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    chunked, max_bs = sglang_defaults(release, gpu_mem_mib, tp)
    reserved = 512 + 1.5 * max(chunked, 2048) + 2 * max_bs + parallel / 8 * GIB_MIB
    if gpu_mem_mib > 60 * GIB_MIB:
        reserved = max(reserved, 10 * GIB_MIB)
    if speculative and release < (0, 5, 14):
        if drafter_kind == "draft-model":
            reserved += 6 * GIB_MIB
        elif drafter_kind != "ngram":
            reserved += (4 if release >= (0, 5, 10) else 2) * GIB_MIB
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def sglang_pool_rule(release_text: str, gpu_mem_mib: float, tp: int, pp: int, drafter_kind: Optional[str],
                     dp_attention: bool, given_fraction: Optional[float]) -> SglangPoolRule:
    """The pool rule of one SGLang release: the fraction (``given_fraction`` where given, else the release's
    default) and where the drafter's memory comes from."""
    release = parse_version(release_text)
    fraction = given_fraction if given_fraction is not None else sglang_mem_fraction_static(
        release_text, gpu_mem_mib, tp, pp, drafter_kind, dp_attention)
    speculative = drafter_kind is not None
    return SglangPoolRule(fraction, given_fraction is not None, speculative and release >= (0, 5, 14),
                          speculative and drafter_kind != "ngram" and release < (0, 5, 7))


def sglang_pool_tokens(rule: SglangPoolRule, memory_bytes: float, weights_bytes: float, draft_weights_bytes: float,
                       cell_bytes: float, draft_cell_bytes: float, max_running_requests: int, k: int) -> int:
    """Tokens of SGLang's pool: (memory x fraction - the weights in the budget) // the cell; with the drafter in the
    budget (0.5.14 on) its weights too, and a cell that holds its layers; up to 0.5.6 plus the verify / draft
    headroom of a chain of ``k`` drafts (topk 1: ``max_running_requests x (k + k + 1) + 100``)."""
    rest = memory_bytes * rule.fraction - weights_bytes
    cell = cell_bytes
    if rule.draft_in_pool:
        rest -= draft_weights_bytes
        cell += draft_cell_bytes
    if rest <= 0 or cell <= 0:
        return 0
    tokens = int(rest // cell)
    if rule.headroom and k > 0:
        tokens += max_running_requests * (2 * k + 1) + 100
    return tokens
