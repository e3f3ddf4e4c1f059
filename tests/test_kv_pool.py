"""How engines size their KV cache pool: SGLang's mem_fraction_static by release, worked by hand from its code
(``dsdsim.cost.kvpool``'s docstring quotes it), and the pools against what servers logged."""
from __future__ import annotations

import pytest

from dsdsim.cost.kvpool import sglang_defaults, sglang_mem_fraction_static, sglang_pool_rule, sglang_pool_tokens
from dsdsim.cost.mixed import MixedPricer
from dsdsim.errors import DsdsimError
from dsdsim.specs.catalog import load_engine
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.setup import resolve
from dsdsim.units import DType

H200_MIB = 143771          # nvidia-smi's total of an H200 (sgl-project/sglang issue #3196)
H100_MIB = 81559           # ... of an H100 80GB HBM3 (NVIDIA/nccl issue #1264)


@pytest.mark.parametrize("release, drafter, expected", [
    ("0.4.6", None, (143771 - 13 * 1024) / 143771),              # above 81,920 MiB: all but 13 GiB
    ("0.4.6", "eagle3", (143771 - 13 * 1024) / 143771),          # no speculative term yet
    ("0.4.10", None, 0.911),                                     # reserved (12 + 1/2) GiB = 12,800 MiB
    ("0.5.2", "eagle3", 0.897),                                  # + 2 GiB with a drafter: 14,848 MiB
    ("0.5.4", None, 0.907),                                      # 512 + 1.5 x 8192 + 2 x 256 + 128 = 13,440 MiB
    ("0.5.4", "eagle3", 0.892),                                  # + 2,048 MiB
    ("0.5.10", "eagle3", 0.878),                                 # + 4,096 MiB: (143771 - 17536) / 143771
    ("0.5.4", "draft-model", 0.864),                             # STANDALONE + 6 GiB: 19,584 MiB
    ("0.5.4", "ngram", 0.907),                                   # NGRAM: nothing
    ("0.5.14", "eagle3", 0.907),                                 # the term is gone; the drafter sits in the pool
])
def test_sglang_default_fraction_on_an_h200_by_release(release, drafter, expected):
    assert sglang_mem_fraction_static(release, H200_MIB, tp=1, drafter_kind=drafter) == pytest.approx(expected,
                                                                                                       abs=1e-9)


def test_sglang_default_fraction_by_tp_on_an_80_gb_gpu():
    assert [sglang_mem_fraction_static("0.4.6", H100_MIB, tp=t) for t in (1, 2, 4, 8, 16)] == \
        [0.88, 0.87, 0.85, 0.81, 0.79]
    # 0.4.10-0.5.2 below 90 GiB: (9.5 + P/2) GiB; tp 8 -> 13.5 GiB = 13,824 MiB
    assert sglang_mem_fraction_static("0.5.1", H100_MIB, tp=8) == round((81559 - 13824) / 81559, 3)
    # 0.5.3 on: tp 8 uses cuda_graph_max_bs 512 and 1 GiB for the ranks: 512 + 12288 + 1024 + 1024 = 14,848 MiB
    assert sglang_defaults((0, 5, 4), H100_MIB, 8) == (8192, 512)
    assert sglang_mem_fraction_static("0.5.4", H100_MIB, tp=8) == round((81559 - 14848) / 81559, 3)
    # on a 24 GiB card: 2048 tokens, 16 graphs (24 from 0.5.5), no 10 GiB floor: 512 + 3072 + 32 + 128 = 3,744 MiB
    assert sglang_mem_fraction_static("0.5.4", 24564, tp=1) == round((24564 - 3744) / 24564, 3)
    assert sglang_defaults((0, 5, 5), 24564, 1) == (2048, 24)


def test_sglang_pool_counts_the_drafter_where_its_release_does():
    early = sglang_pool_rule("0.5.8", H200_MIB, 1, 1, "eagle3", False, 0.8)     # no headroom from 0.5.7
    late = sglang_pool_rule("0.5.14", H200_MIB, 1, 1, "eagle3", False, 0.8)
    assert early.given and not early.draft_in_pool and not early.headroom
    assert late.draft_in_pool
    memory, weights, draft_w, cell, draft_cell = 100e9, 20e9, 1e9, 1e5, 1e4
    assert sglang_pool_tokens(early, memory, weights, draft_w, cell, draft_cell, 48, 3) == int(60e9 // 1e5)
    assert sglang_pool_tokens(late, memory, weights, draft_w, cell, draft_cell, 48, 3) == int(59e9 // 1.1e5)
    headroom = sglang_pool_rule("0.5.6", H200_MIB, 1, 1, "eagle3", False, 0.8)
    assert headroom.headroom       # max_num_reqs x (steps x topk + draft tokens) + 100, a chain of K = 3
    assert sglang_pool_tokens(headroom, memory, weights, draft_w, cell, draft_cell, 48, 3) == \
        int(60e9 // 1e5) + 48 * (3 + 4) + 100


def test_sglang_pool_of_qwen3_235b_fp8_on_four_h100s_against_its_log():
    """vllm-project/vllm issue #21348: `sglang.launch_server --model Qwen3-235B-A22B-FP8 --tp 4
    --mem-fraction-static 0.93` on 4x H100 logged "KV Cache is allocated. #tokens: 367404". dsdsim's pool is 15%
    larger: the memory SGLang measures before the weights excludes the CUDA context and the communicators it has
    already made, and what the FP8 checkpoint allocates beyond its weights, neither modelled (about 2.5 GiB a rank
    here)."""
    s = resolve("qwen3-235b-a22b", "h100-sxm", Deployment(tp=4, dtype=DType.fp8), None, engine="sglang@0.4.9")
    pool = MixedPricer(s).kv_pool(0.9, mem_fraction_static=0.93)
    assert pool.fraction == 0.93 and "given" in pool.rule
    assert 367_404 < pool.tokens < 367_404 * 1.2


def test_the_engine_at_a_release_knows_it_and_the_pool_follows():
    assert load_engine("sglang@0.5.4").release == "0.5.4"
    assert load_engine("sglang").release is None and load_engine("sglang").newest_release is not None
    tokens = {}
    for eng in ("sglang@0.4.6", "sglang@0.5.4"):
        s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine=eng)
        pool = MixedPricer(s).kv_pool(0.9, max_num_seqs=48, lookahead=3)
        tokens[eng] = pool.tokens
        assert eng.split("@")[1] in pool.rule
    assert tokens["sglang@0.4.6"] > tokens["sglang@0.5.4"]        # 0.88 against 0.809 (13,440 + 2,048 MiB)


def test_mem_fraction_static_is_refused_for_vllm():
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None, engine="vllm")
    with pytest.raises(DsdsimError, match="SGLang"):
        MixedPricer(s).kv_pool(0.9, mem_fraction_static=0.8)


@pytest.mark.parametrize("engine, hardware, tokens", [
    ("vllm", "h100-sxm", 8192),            # >= 70 GiB and not an A100
    ("vllm", "a100-sxm-80gb", 2048),       # the A100 carve-out (vllm-project/vllm PR #17885)
    ("vllm", "rtx-4090", 2048),            # under 70 GiB
    ("vllm", "b200", 16384),               # >= 160 GiB from 0.28
    ("vllm@0.24", "b200", 8192),           # ... not before
    ("sglang@0.5.4", "h200-sxm", 8192),    # 0.5.3 on: chunked_prefill_size by GPU tier
    ("sglang@0.5.4", "rtx-4090", 2048),
    ("sglang@0.5.1", "mi300x", 16384),     # 0.4.10-0.5.2: 16384 from 160 GiB
    ("sglang@0.4.6", "l4", 2048),          # 0.4.x: 2048 below 25,000 MiB
    ("sglang@0.4.6", "h100-sxm", 8192),
])
def test_the_step_token_budget_is_the_engines_default_for_the_gpu(engine, hardware, tokens):
    from dsdsim.serve.scheduler import SchedulerConfig, default_batched_tokens
    from dsdsim.specs.catalog import load_hardware

    hw, eng = load_hardware(hardware), load_engine(engine)
    assert default_batched_tokens(eng, hw) == tokens
    assert SchedulerConfig().for_server(eng, False, hw).max_num_batched_tokens == tokens
    assert SchedulerConfig(max_num_batched_tokens=4096).for_server(eng, False, hw).max_num_batched_tokens == 4096
