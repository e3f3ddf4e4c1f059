"""The mixed step of a serving simulation (dsdsim.cost.mixed): prefill chunks and decode tokens in one pass.

Anchors: a step of decoding requests only is the steady step (``simulate_step``) at that batch, K and context;
attention demand is a sum over sequences (linear in the context for full attention); a long prefill chunk runs at
least as long as its GEMM FLOPs at the part's peak; the KV capacity is what the memory left after the weights holds.
"""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.cost.memory import profile_peak_bytes
from dsdsim.cost.mixed import MixedPricer
from dsdsim.cost.step import simulate_step
from dsdsim.errors import DsdsimError
from dsdsim.serve.step import ScheduledStep
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DraftTree, parse_drafter, with_tree
from dsdsim.units import DType
from dsdsim.specs.setup import resolve

SETUPS = [
    ("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3"),
    ("qwen3-30b-a3b", "h100-sxm", Deployment(tp=2, ep=2), "eagle3"),
    ("deepseek-v3", "h200-sxm", Deployment(tp=8), "mtp"),
    ("llama-3.1-70b", "h100-sxm", Deployment(tp=4), with_tree(parse_drafter("eagle3"), DraftTree(steps=4, topk=4, tokens=16))),
    ("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None),
    ("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", "sglang"),     # its own speculative capture list
]


def _decode(k, contexts):
    return ScheduledStep(k, np.asarray(contexts, dtype=float), np.zeros(0), np.zeros(0))


@pytest.mark.parametrize("args", SETUPS, ids=["llama-8b", "qwen3-moe", "dsv3-mtp", "llama-70b-tree", "llama-8b-plain",
                                          "llama-8b-sglang"])
def test_a_decode_only_step_is_the_steady_step(args):
    s = resolve(*args)
    pricer = MixedPricer(s)
    rng = np.random.default_rng(3)
    for _ in range(12):
        b = int(rng.integers(1, 300))
        k = int(rng.integers(0, pricer.max_k + 1))
        c = float(rng.integers(0, 20000))
        want = float(simulate_step(None, None, setup=s, batch=b, k=k, context=c).step_time_s)
        assert pricer.seconds(_decode(k, np.full(b, c))) == pytest.approx(want, rel=1e-12), (b, k, c)


def test_attention_is_summed_over_the_requests():
    """Full attention's FLOPs and bytes are linear in each request's context: two requests at 1,000 and 9,000
    cached tokens cost what two at 5,000 cost; a sliding-window model does not have that symmetry."""
    pricer = MixedPricer(resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3"))
    for k in (0, 3):
        assert pricer.seconds(_decode(k, [1000, 9000])) == pytest.approx(pricer.seconds(_decode(k, [5000, 5000])),
                                                                         rel=1e-12)
    assert pricer.seconds(_decode(0, [1000, 9000])) > pricer.seconds(_decode(0, [1000, 1000]))


def test_a_prefill_chunk_costs_its_tokens():
    """A chunk of T tokens runs the GEMMs over T rows: at 8,192 tokens on llama-3.1-8b it takes at least its
    2 x 7.5e9 x T FLOPs (non-embedding parameters) at the part's dense bf16 peak, and less than 3x that; each more
    token costs more."""
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None)
    pricer = MixedPricer(s)
    t = 8192
    step = ScheduledStep(0, np.zeros(0), np.array([float(t)]), np.array([0.0]))
    seconds = pricer.seconds(step)
    peak = s.hardware.peak_flops_per_s[DType.bf16].value
    non_embedding = s.model.params_total - s.model.params_embedding - s.model.params_lm_head
    lower = 2 * non_embedding * t / peak
    assert lower < seconds < 3 * lower
    smaller = pricer.seconds(ScheduledStep(0, np.zeros(0), np.array([4096.0]), np.array([0.0])))
    assert smaller < seconds
    mixed = pricer.seconds(ScheduledStep(0, np.full(32, 1000.0), np.array([2048.0]), np.array([0.0])))
    assert mixed > pricer.seconds(_decode(0, np.full(32, 1000.0)))
    assert mixed > pricer.seconds(ScheduledStep(0, np.zeros(0), np.array([2048.0]), np.array([0.0])))


def test_kv_capacity_is_the_memory_left_after_the_weights():
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None)
    pricer = MixedPricer(s)
    per_token = 32 * 2 * 8 * 128 * 2          # layers x (k, v) x kv heads x head dim x bf16 bytes
    left = s.hardware.engine_memory_bytes * 0.9 - 2 * s.model.params_total
    tokens = pricer.kv_capacity_tokens(0.9)
    assert tokens * per_token <= left
    assert tokens * per_token >= left - 8192 * 4e5 - 2 * 256 * 128256 * 4   # an 8,192-token pass, 256 rows sampled
    assert pricer.kv_capacity_tokens(0.5) < tokens
    with pytest.raises(DsdsimError, match="memory utilization"):
        pricer.kv_capacity_tokens(1.5)


GIB = 2 ** 30


def test_the_kv_pool_is_what_vllm_logged_for_llama_3_8b_on_an_h100():
    """vllm-project/vllm PR #10511 (2024-12-14), `vllm serve meta-llama/Meta-Llama-3-8B` on one H100 80GB at 0.90:
    total_gpu_memory 79.22GiB, model weights 14.96GiB, non_torch_memory 1.79GiB, PyTorch activation peak memory
    1.26GiB, available_kv_cache_memory 53.29GiB (max_num_batched_tokens 8192, max_num_seqs 256). dsdsim does not
    model the non-torch memory: its pool is the logged one plus at most that 1.79 GiB."""
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None)   # Llama-3.1-8B: Llama-3-8B's shapes
    assert s.hardware.engine_memory_bytes / GIB == pytest.approx(79.22, abs=0.05)   # the spec: 79.19 (PR #26836)
    figures = MixedPricer(s)._plan.memory
    assert figures.weights_bytes / GIB == pytest.approx(14.96, abs=0.01)
    peak = profile_peak_bytes(figures, s.model.vocab_size, 8192, 256)
    assert peak / GIB == pytest.approx(1.26, rel=0.12)
    pool = MixedPricer(s).kv_capacity_tokens(0.9, max_num_batched_tokens=8192, max_num_seqs=256) \
        * float(figures.kv.bytes(1.0, 1.0)) / GIB
    assert 53.29 < pool < 53.29 + 1.79 + 0.15


def test_the_kv_pool_of_gemma_4_31b_fp8_on_an_h100_nvl_without_the_hybrid_manager():
    """seongyun1104/depthchart RESULTS.md §4 (vLLM 0.23, Gemma-4-31B-it-qat-FP8, KV fp8, one H100 NVL): GPU KV pool
    123,520 tokens with the hybrid manager force-disabled (every layer holds every token, as dsdsim's cache does).
    vLLM's defaults assumed: gpu_memory_utilization 0.9, and on a GPU of >= 70 GiB max_num_seqs 1024 and
    max_num_batched_tokens 8192 (``EngineArgs.get_batch_defaults``)."""
    s = resolve("gemma-4-31b", "h100-nvl", Deployment(tp=1, dtype=DType.fp8, kv_dtype=DType.fp8), None)
    tokens = MixedPricer(s).kv_capacity_tokens(0.9, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert tokens == pytest.approx(123_520, rel=0.05)


def test_the_kv_pool_of_llama_3_1_8b_on_an_rtx_4090_against_vllm_0_19():
    """casys-kaist/LLMServingSim bench/results/llama-3.1-8b-rtx4090/meta.json: vLLM 0.19, Llama-3.1-8B bf16 on one
    RTX 4090 (torch total 25,250,627,584 B), gpu_memory_utilization 0.9, max_num_seqs 256, max_num_batched_tokens
    2048: num_gpu_blocks 2588, 41,408 tokens. dsdsim's pool is 13.5% larger (0.73 GB): the memory outside PyTorch's
    allocator (0.20 GiB on a 4090 in vllm-project/vllm PR #14447's log) and the CUDA graphs' pool, which vLLM's
    profiler can estimate, are not modelled. The activation reserve of every batched row's fp32 logits, before,
    left 24.3k tokens (41% fewer)."""
    s = resolve("llama-3.1-8b", "rtx-4090", Deployment(tp=1), None)
    assert s.hardware.engine_memory_bytes == pytest.approx(25_250_627_584, rel=1e-3)
    tokens = MixedPricer(s).kv_capacity_tokens(0.9, max_num_batched_tokens=2048, max_num_seqs=256)
    assert 41_408 < tokens < 41_408 * 1.15


def test_the_profile_run_samples_one_row_per_request():
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None)
    figures = MixedPricer(s)._plan.memory
    row = 2 * 128256 * 4                          # one request's fp32 logits, twice
    forward = 8192 * figures.act_elements_per_token * 2
    assert profile_peak_bytes(figures, 128256, 8192, 256) == forward + 256 * row
    assert profile_peak_bytes(figures, 128256, 8192, 1024) == forward + 1024 * row
    assert profile_peak_bytes(figures, 128256, 100, 256) == 100 * figures.act_elements_per_token * 2 + 100 * row


def test_k_outside_the_drafter_is_refused():
    pricer = MixedPricer(resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), None))
    assert pricer.max_k == 0
    with pytest.raises(DsdsimError, match="K = 2"):
        pricer.seconds(_decode(2, [100.0]))
    assert pricer.seconds(_decode(0, [])) == 0.0


@pytest.mark.parametrize("model, tp", [("llama-3.1-8b", 1), ("gemma-3-27b", 2)])   # gemma: per-request attention
def test_a_step_whose_drafts_the_budget_trimmed_costs_its_tokens(model, tp):
    """vLLM trims the drafts of the decoder at the budget's edge (``ScheduledStep.decode_tokens``): eager, the step of
    10 decoders at 1 + 5 tokens and one at 1 + 2 costs more than the 10 alone and less than 11 at 1 + 5; the drafter
    ran its 5 passes for all 11 either way. With graphs, it is not a uniform decode batch (its token count padded as
    a mixed step's, piecewise), and still costs more than the 10."""
    for graphs in (False, True):
        pricer = MixedPricer(resolve(model, "h100-sxm", Deployment(tp=tp, cuda_graphs=graphs), "eagle3"))
        ctx = np.full(11, 2000.0)
        trimmed = pricer.seconds(ScheduledStep(5, ctx, np.zeros(0), np.zeros(0), np.array([6.0] * 10 + [3.0])))
        full = pricer.seconds(_decode(5, ctx))
        ten = pricer.seconds(_decode(5, ctx[:10]))
        assert ten < trimmed
        if not graphs:
            assert trimmed < full
