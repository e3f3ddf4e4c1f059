"""TensorRT-LLM's serving defaults in the simulation (engine_specs/trtllm-0.20.yaml): whole prompts with a queue
that stops at the first that does not fit, admission that reserves a whole sequence (GUARANTEED_NO_EVICT), its
request and token limits, and its KV pool from the memory the weights and the warm-up leave."""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.serve.scheduler import SchedulerConfig
from dsdsim.serve.simulate import engine_prefill_rule, simulate
from dsdsim.specs.setup import resolve
from test_serve_core import FakePricer


def _prefills_of_first_step(cfg: SchedulerConfig, trace, tmp_path) -> list[float]:
    pricer = FakePricer()
    simulate(None, f"trace:{trace}", "none", pricer=pricer, acceptance=0.8, scheduler=cfg)
    return sorted(float(t) for t in pricer.steps[0].prefill_tokens)


def test_without_chunking_the_queue_stops_or_skips_at_a_prompt_that_does_not_fit(tmp_path):
    """Budget 1,000 tokens, prompts 600, 600, 100 all due at t = 0: vLLM skips the second and admits the third in
    the first step; TensorRT-LLM's micro-batch scheduler stops at the second."""
    trace = tmp_path / "three.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,600,8\n0,600,8\n0,100,8\n")
    whole = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1000, chunked_prefill=False, mixed_prefill=True)
    assert _prefills_of_first_step(whole, trace, tmp_path) == [100.0, 600.0]
    stop = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1000, chunked_prefill=False, mixed_prefill=True,
                           stop_at_unfit_prompt=True)
    assert _prefills_of_first_step(stop, trace, tmp_path) == [600.0]


def test_reserving_whole_sequences_never_preempts_and_holds_what_fits():
    """A cache of 2,000 tokens (125 blocks), requests of 200 in + 200 out (25 blocks each, with no drafts): vLLM's
    admission fills the cache with prompts and preempts as outputs grow; reserving to completion runs at most 5 at
    once and preempts none, and every request still finishes."""
    kw = dict(requests=40, input_len="200", output_len="200", acceptance=0.8)
    vllm = simulate(None, "closed:16", "none", pricer=FakePricer(kv=2000), **kw).policies[0]
    reserve = simulate(None, "closed:16", "none", pricer=FakePricer(kv=2000),
                       scheduler=SchedulerConfig(reserve_to_completion=True, mixed_prefill=True), **kw).policies[0]
    assert vllm.preemptions > 0
    assert reserve.preemptions == 0
    assert int(reserve.timeline.requests.max()) == 125 // 25
    assert np.all(np.isfinite(reserve.finish_s))


@pytest.fixture(scope="module")
def trt():
    return resolve("llama-3.1-70b", "a100-sxm-80gb", {"tp": 4}, "eagle3", "trtllm")


def test_the_engine_spec_sets_trtllm_serves_defaults(trt):
    cfg = engine_prefill_rule(SchedulerConfig(), trt)
    assert (cfg.chunked_prefill, cfg.stop_at_unfit_prompt, cfg.reserve_to_completion, cfg.mixed_prefill) == (
        False, True, True, True)
    server = cfg.for_server(trt.engine, True, trt.hardware, 4)
    assert (server.max_num_seqs, server.max_num_batched_tokens) == (2048, 8192)
    vllm = resolve("llama-3.1-70b", "a100-sxm-80gb", {"tp": 4}, "eagle3", "vllm")
    plain = engine_prefill_rule(SchedulerConfig(), vllm)
    assert (plain.chunked_prefill, plain.stop_at_unfit_prompt, plain.reserve_to_completion) == (True, False, False)
    assert plain.for_server(vllm.engine, True, vllm.hardware, 4).max_num_batched_tokens == 2048   # vLLM on an A100


def test_show_engine_says_how_trtllm_admits_prompts():
    from dsdsim.cli.engine import prefill_text
    from dsdsim.specs.catalog import load_engine

    assert prefill_text(load_engine("trtllm")) == (
        "whole prompts mixed into decode steps, the queue stopping at one that does not fit; a request admitted with "
        "its whole sequence's blocks (never preempted); at most 2,048 requests and 8,192 tokens a step by default")


def test_the_kv_pool_is_a_share_of_the_memory_left(trt):
    """vLLM: 0.9 M - W - P; TensorRT-LLM: 0.9 (M - W - P'), with P' the warm-up's forward (P less the sampler's
    logits). Their difference is 0.1 W + P - 0.9 P': a tenth of the weights, up to the peaks."""
    from dsdsim.cost.mixed import MixedPricer
    from dsdsim.cost.memory import profile_peak_bytes

    vllm = resolve("llama-3.1-70b", "a100-sxm-80gb", {"tp": 4}, "eagle3", "vllm")
    a, b = MixedPricer(trt).kv_pool(0.9, 8192, 2048), MixedPricer(vllm).kv_pool(0.9, 8192, 2048)
    assert "free_gpu_memory_fraction" in a.rule and "gpu_memory_utilization" in b.rule
    figures = MixedPricer(trt)._plan.memory
    weights = float(figures.use(0.0, 0.0, 0.0).weights_bytes) + float(figures.draft_weights_bytes or 0.0)
    cell = float(figures.kv.bytes(1.0, 1.0)) + MixedPricer(trt)._draft_cell_bytes()
    peaks = (profile_peak_bytes(figures, trt.model.vocab_size, 8192, 2048)
             - 0.9 * profile_peak_bytes(figures, trt.model.vocab_size, 8192, 1))
    assert (a.tokens - b.tokens) * cell == pytest.approx(0.1 * weights + peaks, rel=1e-3)


def test_simulate_says_how_a_trtllm_server_schedules_and_refuses_a_prompt_past_its_budget(cli, tmp_path):
    code, out, err = cli("simulate", "-e", "trtllm", "--requests", "20", "--input-len", "128", "--output-len", "16",
                         "--executor", "local")
    assert code == 0, err
    text = " ".join(out.split())
    assert "scheduling (trtllm's defaults): prompts enter a step whole" in text
    assert "GUARANTEED_NO_EVICT" in text and "at most 2,048 requests a step" in text
    assert "free_gpu_memory_fraction" in text and "for max tokens in paged KV cache" in text
    target = tmp_path / "never.json"
    code, _, err = cli("simulate", "-e", "trtllm", "--requests", "4", "--input-len", "9000", "-o", str(target))
    assert code == 2 and "raise --max-num-batched-tokens to at least 9000" in err
    assert len(err.strip().splitlines()) == 1 and not target.exists()
