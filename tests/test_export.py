"""Engine exports checked by expanding them with each engine's own lookup rule.

vLLM: validate_and_normalize_dynamic_sd_schedule / build_dynamic_sd_schedule_lookup
(vllm/v1/spec_decode/dynamic/utils.py; tests/v1/spec_decode/test_dynamic_sd.py), reference/engines.md §1.2.
SGLang: AdaptiveStepRouter.batch_size_key_for_batch — largest lower-bound key ≤ batch size (§3).
TensorRT-LLM: get_draft_len_for_batch_size — first key ≥ batch size, 0 above the largest key (§4, PR #10860).
"""
from __future__ import annotations

import bisect
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsdsim.errors import DsdsimError
from dsdsim.export import (
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

DOCS_TABLE = [(1, 16, 5), (17, 32, 4), (33, 64, 3), (65, 128, 1), (129, 512, 0)]   # vLLM DSD docs example
DENSE_TABLE = [(1, 8, 4), (9, 64, 2), (65, 256, 1)]
MOE_TABLE = [(1, 4, 2), (5, 48, 4), (49, 128, 1), (129, 1024, 0)]                   # low–high–low
MIDDLE_ZERO = [(1, 2, 3), (3, 10, 0), (11, 20, 1), (21, 64, 0)]
TABLES = [DOCS_TABLE, DENSE_TABLE, MOE_TABLE, MIDDLE_ZERO]


def sglang_k(config: dict, batch_size: int) -> int:
    """SGLang routing without CUDA-graph padding: the largest lower-bound key ≤ batch size."""
    keys = sorted(int(k) for k in config)
    key = keys[max(0, bisect.bisect_right(keys, batch_size) - 1)]
    return config[str(key)]["candidate_steps"][0]


def trtllm_k(schedule: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM rule: the first key ≥ batch size gives the draft length; above the largest key, 0."""
    keys = sorted(schedule)
    idx = bisect.bisect_left(keys, batch_size)
    return schedule[keys[idx]] if idx < len(keys) else 0


# ------------------------------------------------------------------------------------------------- vLLM


def test_vllm_lookup_matches_vllm_unit_tests():
    lookup = build_vllm_lookup([(1, 16, 3), (32, 128, 2), (256, 2048, 0)], 512, 3)
    assert len(lookup) == 513 and lookup[0] == 0
    assert lookup[1] == 3 and lookup[16] == 3
    assert lookup[17] == 3 and lookup[31] == 3          # gap inherits the previous K
    assert lookup[32] == 2 and lookup[255] == 2 and lookup[256] == 0 and lookup[512] == 0
    assert build_vllm_lookup([(1, 256, 4)], 300, 3)[100] == 3          # clamped to num_speculative_tokens
    assert build_vllm_lookup([(1, 4, 2), (5, 8, 1)], 20, 4)[20] == 1   # past the last range: last K


def test_vllm_validator_sorts_like_vllm():
    assert validate_vllm_schedule([[32, 64, 1], [1, 31, 2]]) == [(1, 31, 2), (32, 64, 1)]


@pytest.mark.parametrize("schedule,needle", [
    ([], "non-empty"),
    ([[1, 16]], "3 items"),
    ([[0, 16, 2]], "positive"),
    ([[1, 16, 2], [10, 12, 1]], "overlap"),
    ([[1, 16, 2], [16, 32, 1]], "overlap"),
    ([[1, 16, -1]], "K < 0"),
    ([[1, 16, 2], [40, 20, 1]], "start > end"),
    ([[2, 16, 2]], "start at 1"),
    ("1-16:3", "non-empty list"),
])
def test_vllm_validator_rejects(schedule, needle):
    with pytest.raises(DsdsimError, match=needle) as info:
        validate_vllm_schedule(schedule)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("table", TABLES)
def test_vllm_config_passes_validator_and_reproduces_k(table):
    max_seqs = table[-1][1]
    config = vllm_speculative_config(table, "eagle3", max_num_seqs=max_seqs)
    json.dumps(config)                                                     # JSON-serialisable as-is
    assert set(config) == {"method", "num_speculative_tokens", "num_speculative_tokens_per_batch_size"}
    assert config["num_speculative_tokens"] == max(1, max(k for *_, k in table))
    schedule = config["num_speculative_tokens_per_batch_size"]
    assert all(isinstance(e, list) and len(e) == 3 for e in schedule)
    validate_vllm_schedule(schedule)
    lookup = build_vllm_lookup(schedule, max_seqs, config["num_speculative_tokens"])
    assert lookup == expand_ranges(table)


def test_vllm_config_max_num_seqs_cuts_or_extends():
    cut = vllm_speculative_config(DOCS_TABLE, max_num_seqs=100)["num_speculative_tokens_per_batch_size"]
    assert cut[-1] == [65, 100, 1] and len(cut) == 4
    longer = vllm_speculative_config(DENSE_TABLE, max_num_seqs=1024)["num_speculative_tokens_per_batch_size"]
    assert longer[-1] == [65, 1024, 1]


def test_vllm_method_mapping():
    assert vllm_speculative_config(DENSE_TABLE, "mtp")["method"] == "mtp"
    assert vllm_speculative_config(DENSE_TABLE, "ngram")["method"] == "ngram"
    assert vllm_speculative_config(DENSE_TABLE, "medusa")["method"] == "medusa"
    assert vllm_speculative_config(DENSE_TABLE, "eagle")["method"] == "eagle"
    dm = vllm_speculative_config(DENSE_TABLE, "draft-model:meta-llama/Llama-3.2-1B")
    assert dm["method"] == "draft_model" and dm["model"] == "meta-llama/Llama-3.2-1B"
    assert vllm_speculative_config(DENSE_TABLE, "eagle3", model="yuhuili/EAGLE3")["model"] == "yuhuili/EAGLE3"
    with pytest.raises(DsdsimError, match="no self-speculation"):
        vllm_speculative_config(DENSE_TABLE, "self-spec:512")
    with pytest.raises(DsdsimError, match="use one of"):
        vllm_speculative_config(DENSE_TABLE, "lookahead")


def test_vllm_all_zero_table_still_valid():
    config = vllm_speculative_config([(1, 64, 0)])
    assert config["num_speculative_tokens"] == 1
    assert build_vllm_lookup(config["num_speculative_tokens_per_batch_size"], 64, 1)[1:] == [0] * 64


def test_vllm_batch_stats_pr_format():
    bs, ks = [1, 16, 64, 128], [0, 1, 3, 5]
    grid = np.array([[7.0, 7.4, 8.0, 8.9],               # rows bs 1, 16, 64, 128; columns k 0, 1, 3, 5; .T → (K, B)
                     [7.5, 8.1, 9.3, 10.8],
                     [8.53, 10.44, 13.16, 17.54],
                     [np.nan, 15.0, 21.0, np.inf]]).T    # bs 128: k = 0 infeasible → dropped
    rates = [0.68, 0.39, 0.20, 0.10, 0.06]
    out = vllm_batch_stats(bs, ks, grid, rates, 5)
    assert out["is_online"] is False and out["max_num_speculative_tokens"] == 5
    assert out["acceptance_rate_per_pos"] == rates
    assert list(out["batch_stats"]) == ["1", "16", "64"]
    assert out["batch_stats"]["64"] == {"0": 8.53, "1": 10.44, "3": 13.16, "5": 17.54}
    assert json.loads(json.dumps(out)) == out
    grid[3, 1] = np.nan                                  # k = 5 at bs 16
    assert "5" not in vllm_batch_stats(bs, ks, grid, rates, 5)["batch_stats"]["16"]   # one entry omitted


def test_vllm_batch_stats_manager_picks_dsdsim_k_star():
    """PR #32374 manager.py: K*(bs) = argmax_k (1 + Σ_{i<k} a_i) / ITL(bs, k), with ITL the step time.

    Fed step times and Acceptance.unconditional, it must pick dsdsim's K* = argmax_k τ(k) / T(B, k).
    """
    from dsdsim.policy.acceptance import DEFAULT_ACCEPTANCE

    ks, bs = np.arange(0, 6), np.array([1, 8, 64, 256])
    step_ms = 6.0 + 0.004 * bs[None, :] * (ks[:, None] + 1) + 0.3 * ks[:, None]   # (K, B) grows with B·(K+1)
    out = vllm_batch_stats(bs, ks, step_ms, DEFAULT_ACCEPTANCE.unconditional(5).tolist(), 5)
    a = out["acceptance_rate_per_pos"]
    tau = DEFAULT_ACCEPTANCE.tau(ks)
    for j, b in enumerate(bs):
        itl = out["batch_stats"][str(b)]
        manager = max(ks, key=lambda k: (1 + sum(a[:k])) / itl[str(k)])
        assert manager == int(np.argmax(tau / step_ms[:, j]))
    k_star = [int(np.argmax(tau / step_ms[:, j])) for j in range(len(bs))]
    assert len(set(k_star)) > 1 and k_star == sorted(k_star, reverse=True)              # the grid spans regimes


@pytest.mark.parametrize("kwargs,needle", [
    (dict(k_values=[0, 3, 5]), "k = 0"),
    (dict(batch_sizes=[2, 16, 64, 128]), "batch size 1"),
    (dict(acceptance_rate_per_pos=[0.68, 0.39]), "at least"),
    (dict(acceptance_rate_per_pos=[0.68, 0.7, 0.2, 0.1, 0.05]), "non-increasing"),
    (dict(acceptance_rate_per_pos=[1.0, 0.5, 0.2, 0.1, 0.05]), r"\(0, 1\)"),
    (dict(max_num_speculative_tokens=3), "≥ every k"),
    (dict(itl_ms_grid=np.ones((4, 3))), "shape"),
    (dict(max_num_seqs=256), "max_num_seqs=256"),
])
def test_vllm_batch_stats_rejects(kwargs, needle):
    args = dict(batch_sizes=[1, 16, 64, 128], k_values=[0, 1, 3, 5], itl_ms_grid=np.ones((4, 4)),
                acceptance_rate_per_pos=[0.68, 0.39, 0.20, 0.10, 0.06], max_num_speculative_tokens=5)
    args.update(kwargs)
    if "k_values" in kwargs:
        args["itl_ms_grid"] = np.ones((len(kwargs["k_values"]), 4))
    with pytest.raises(DsdsimError, match=needle):
        vllm_batch_stats(**args)


# ------------------------------------------------------------------------------------------------- SGLang


@pytest.mark.parametrize("table", TABLES)
def test_sglang_keys_are_lower_bounds(table):
    config = sglang_adaptive_config(table)
    assert list(config) == [str(s) for s, _, _ in table]
    assert all(isinstance(v["candidate_steps"][0], int) for v in config.values())
    per_bs = expand_ranges(table)
    assert [sglang_k(config, b) for b in range(1, len(per_bs))] == per_bs[1:]
    assert sglang_k(config, 10 * table[-1][1]) == table[-1][2]       # past the table: last slot, like vLLM
    json.dumps(config)


# ------------------------------------------------------------------------------------------------- TensorRT-LLM


@pytest.mark.parametrize("table", [DOCS_TABLE, DENSE_TABLE, MIDDLE_ZERO])
def test_trtllm_upper_bounds_reproduce_k(table):
    schedule = trtllm_draft_len_schedule(table)
    per_bs = expand_ranges(table)
    assert [trtllm_k(schedule, b) for b in range(1, len(per_bs))] == per_bs[1:]
    assert trtllm_k(schedule, 10 * table[-1][1]) == 0


def test_trtllm_shapes():
    assert trtllm_draft_len_schedule(DOCS_TABLE) == {16: 5, 32: 4, 64: 3, 128: 1}   # trailing K = 0 dropped
    assert trtllm_draft_len_schedule(MIDDLE_ZERO) == {2: 3, 10: 0, 20: 1}           # middle K = 0 kept
    assert trtllm_draft_len_schedule([(1, 4, 4), (5, 8, 2), (9, 32, 1)]) == {4: 4, 8: 2, 32: 1}  # engines.md §4


def test_trtllm_rejects_what_it_cannot_express():
    with pytest.raises(DsdsimError, match="largest draft length at the smallest"):
        trtllm_draft_len_schedule(MOE_TABLE)
    with pytest.raises(DsdsimError, match="never speculates"):
        trtllm_draft_len_schedule([(1, 64, 0)])


# ------------------------------------------------------------------------------------------------- ranges, CSV


def test_ranges_from_k_per_batch():
    assert ranges_from_k_per_batch([1, 2, 4, 8, 16], [4, 4, 3, 3, 1]) == [(1, 3, 4), (4, 15, 3), (16, 16, 1)]
    assert ranges_from_k_per_batch([8, 32], [2, 0]) == [(1, 31, 2), (32, 32, 0)]     # first range starts at 1
    assert ranges_from_k_per_batch([64, 1], [0, 5]) == [(1, 63, 5), (64, 64, 0)]     # unsorted input is sorted


@pytest.mark.parametrize("bs,ks,needle", [
    ([1, 2], [3], "one K per batch size"),
    ([], [], "one K per batch size"),
    ([1, 1], [3, 2], "listed twice"),
    ([0, 4], [3, 2], "≥ 1"),
    ([1, 4], [3, -1], "≥ 0"),
    ([1, 4.5], [3, 1], "whole number"),
])
def test_ranges_from_k_per_batch_rejects(bs, ks, needle):
    with pytest.raises(DsdsimError, match=needle):
        ranges_from_k_per_batch(bs, ks)


@pytest.mark.parametrize("ranges,needle", [
    ([], "empty"),
    ([(2, 8, 3)], "start at batch size 1"),
    ([(1, 8, 3), (10, 16, 2)], "must start at 9"),
    ([(1, 8, 3), (5, 16, 2)], "must start at 9"),
    ([(1, 8, 3), (9, 7, 2)], "ends before"),
    ([(1, 8, -1)], "K < 0"),
    ([(1, 8)], "3 items"),
    ([(1, 8.5, 2)], "whole number"),
    ([(9, 16, 2), (1, 8, 3)], "start at batch size 1"),
])
def test_invalid_ranges_raise(ranges, needle):
    for fn in (validate_ranges, vllm_speculative_config, sglang_adaptive_config, trtllm_draft_len_schedule):
        with pytest.raises(DsdsimError, match=needle) as info:
            fn(ranges)
        assert "\n" not in str(info.value)


def test_table_csv():
    rows = [{"batch_size": 1, "k_star": 4, "goodput_tok_s": 1234.56789, "note": None},
            {"batch_size": 64, "k_star": 0, "goodput_tok_s": float("nan"), "feasible": False}]
    text = table_csv(rows)
    lines = text.splitlines()
    assert lines[0] == "batch_size,k_star,goodput_tok_s,note,feasible"
    assert lines[1] == "1,4,1234.57,,"
    assert lines[2] == "64,0,nan,,false"
    with pytest.raises(DsdsimError):
        table_csv([])


# ------------------------------------------------------------------------------------------------- property


@st.composite
def per_batch_tables(draw):
    batch_sizes = sorted(draw(st.sets(st.integers(1, 600), min_size=1, max_size=25)))
    ks = draw(st.lists(st.integers(0, 8), min_size=len(batch_sizes), max_size=len(batch_sizes)))
    return batch_sizes, ks


@settings(max_examples=150, deadline=None)
@given(per_batch_tables())
def test_random_k_lists_survive_ranges_and_vllm_lookup(table):
    batch_sizes, ks = table
    ranges = ranges_from_k_per_batch(batch_sizes, ks)
    assert validate_ranges(ranges) == ranges
    max_bs = batch_sizes[-1]
    config = vllm_speculative_config(ranges, "eagle3", max_num_seqs=max_bs)
    lookup = build_vllm_lookup(config["num_speculative_tokens_per_batch_size"], max_bs,
                               config["num_speculative_tokens"])
    for b, k in zip(batch_sizes, ks):
        assert lookup[b] == k
    for b in range(1, max_bs + 1):                       # unlisted sizes: the nearest listed size below (or the first)
        i = max(0, bisect.bisect_right(batch_sizes, b) - 1)
        assert lookup[b] == ks[i]
    # the other engines agree with vLLM on every batch size the table covers
    sg = sglang_adaptive_config(ranges)
    assert all(sglang_k(sg, b) == lookup[b] for b in range(1, max_bs + 1))
    if any(ks) and ranges[0][2] == max(k for *_, k in ranges):
        trt = trtllm_draft_len_schedule(ranges)
        assert all(trtllm_k(trt, b) == lookup[b] for b in range(1, max_bs + 1))


def test_table_ranges_live_in_the_policy_layer():
    """dsdsim.export offers the K-table helpers from dsdsim.policy.table, where they are defined; the engine
    formats module does not re-export them."""
    import dsdsim.export as export
    from dsdsim.export import engines as engine_formats
    from dsdsim.policy import table

    for name in ("expand_ranges", "ranges_from_k_per_batch", "validate_ranges", "Ranges"):
        assert getattr(export, name) is getattr(table, name)
    assert not hasattr(engine_formats, "expand_ranges") and not hasattr(engine_formats, "ranges_from_k_per_batch")
