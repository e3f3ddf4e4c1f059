"""The serving simulator (dsdsim.serve): closed forms on a linear fake pricer, invariants of vLLM V1's scheduler,
the acceptance sampler against the acceptance model, table files read back from dsdsim's own writers, and runs on
the real MixedPricer.

The fake pricer prices a step as a + b * tokens + c * (context tokens read) + d * K, so a step's time is known in
closed form; it has a KV cache of ``kv`` tokens and a drafter limit of ``max_k``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.export.engines import (build_vllm_lookup, sglang_adaptive_config, trtllm_draft_len_schedule,
                                   vllm_speculative_config)
from dsdsim.policy.acceptance import constant, from_list
from dsdsim.serve.lengths import PRESETS, parse_lengths
from dsdsim.serve.metrics import Slo
from dsdsim.serve.policies import PolicyEnv, StepView, parse_policies
from dsdsim.serve.requests import draw_acceptance
from dsdsim.serve.scheduler import SchedulerConfig
from dsdsim.serve.simulate import parse_slo, simulate
from dsdsim.serve.step import ScheduledStep
from dsdsim.serve.tables import read_table_file, table_lookup
from dsdsim.serve.workload import parse_workload, read_trace

DATA = Path(__file__).parent / "data" / "serve"
CONTRACT_KEYS = {"name", "output_tokens_per_s", "requests_per_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                 "goodput_requests_per_s", "mean_batch", "mean_acceptance_length", "k_histogram", "k_limited_steps",
                 "batch_seconds", "preemptions", "duration_s",
                 "steps", "kv_cache_tokens", "kv_cache_source", "kv_cache_rule", "kv_cache_memory_share"}


class FakePricer:
    """seconds = a + b * tokens + c * context tokens + d * K (StepPricer contract), every call recorded."""

    def __init__(self, a=5e-3, b=2e-6, c=1e-9, d=4e-4, kv=10 ** 6, max_k=8):
        self.a, self.b, self.c, self.d, self.kv, self.max_k = a, b, c, d, kv, max_k
        self.steps: list[ScheduledStep] = []

    def seconds(self, step: ScheduledStep) -> float:
        self.steps.append(step)
        verified = (step.decode_contexts.size * (1 + step.k) if step.decode_tokens is None
                    else float(step.decode_tokens.sum()))
        tokens = float(step.prefill_tokens.sum()) + verified
        context = float(step.decode_contexts.sum() + step.prefill_contexts.sum())
        return self.a + self.b * tokens + self.c * context + self.d * step.k

    def kv_capacity_tokens(self, memory_utilization: float) -> int:
        return self.kv


def run(workload, policies, pricer=None, **kw):
    kw.setdefault("acceptance", 0.8)
    return simulate(None, workload, policies, pricer=pricer or FakePricer(), **kw)


@pytest.fixture(scope="module")
def llama():
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    return resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3")


# ---------------------------------------------------------------------------------------------- closed forms


def test_tpot_at_concurrency_one_is_the_decode_step_time():
    """One request at a time, no speculation: every output token after the first is one decode step at batch 1,
    at contexts input .. input + output − 2, so TPOT is the mean of those step times (exact)."""
    f = FakePricer()
    n_in, n_out = 3, 12
    p = run("closed:1", "none", pricer=f, requests=10, input_len=str(n_in), output_len=str(n_out)).policies[0]
    steps = [f.seconds(ScheduledStep(0, np.array([float(c)]), np.zeros(0), np.zeros(0)))
             for c in range(n_in, n_in + n_out - 1)]
    assert p.tpot_ms.mean == pytest.approx(1e3 * np.mean(steps), rel=1e-9)
    assert p.tpot_ms.p99 == pytest.approx(p.tpot_ms.p50, rel=1e-9)       # every request alike
    # TTFT: the prefill step of n_in tokens at context 0
    assert p.ttft_ms.mean == pytest.approx(1e3 * (f.a + f.b * n_in), rel=1e-9)
    assert p.mean_batch == 1.0 and p.k_histogram == {0: 10 * (n_out - 1)}


def test_itl_is_counted_per_emission_event():
    """vLLM's bench appends one ITL per streamed chunk; a step's tokens are one chunk. At concurrency 1 with K = 3
    each decode step is one gap, so ITL is the step time (not step / tau) and there is one gap per decode step."""
    f = FakePricer(c=0.0)
    p = run("closed:1", "fixed:3", pricer=f, requests=30, input_len="5", output_len="40").policies[0]
    decode_steps = int(np.sum(p.timeline.decoding))
    step_ms = 1e3 * (f.a + f.b * 4 + f.d * 3)
    assert p.itl_ms.mean == pytest.approx(step_ms, rel=1e-9)
    assert p.mean_acceptance_length > 2.0                     # several tokens per gap
    assert p.tpot_ms.mean < p.itl_ms.mean / 2
    assert decode_steps == p.k_histogram[3]


def test_a_request_overhead_adds_to_ttft_and_latency_not_tpot():
    """Each request reaches the scheduler the overhead after it is sent: one at a time, every TTFT and latency is
    exactly that much longer, every TPOT the same, and the client's cycle (the run's length) grows by it per request;
    a fleet's router hands each over as late. Bad values are refused in one line."""
    ov = 0.025
    for replicas in (1, 2):
        base, slow = (run("closed:1", "fixed:3", requests=12, input_len="7", output_len="30", replicas=replicas,
                          scheduler=SchedulerConfig(request_overhead_s=s)).policies[0] for s in (0.0, ov))
        np.testing.assert_allclose(slow.ttft_s, base.ttft_s + ov, rtol=1e-12)
        np.testing.assert_allclose(slow.e2e_s, base.e2e_s + ov, rtol=1e-12)
        tpot = [(p.e2e_s - p.ttft_s) for p in (base, slow)]               # (e2e - TTFT) per request
        np.testing.assert_allclose(tpot[1], tpot[0], rtol=1e-9)
        assert slow.tpot_ms.to_dict() == pytest.approx(base.tpot_ms.to_dict(), rel=1e-9)
        assert slow.duration_s == pytest.approx(base.duration_s + 12 * ov, rel=1e-9)
    for bad in (-0.001, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(DsdsimError, match="request_overhead_s"):
            SchedulerConfig(request_overhead_s=bad)


def test_littles_law_in_closed_loop():
    """Closed loop with C in flight: throughput x mean latency = C. Tails excluded: the window opens when 10% of the
    requests have finished (warm-up) and closes when the last request is sent (after it fewer than C are in flight);
    latencies of the requests finishing inside the window."""
    c = 16
    p = run("closed:16", "fixed:2", requests=1500, input_len="lognormal:200:100",
            output_len="lognormal:80:40").policies[0]
    finish = p.finish_s
    t0 = np.sort(finish)[len(finish) // 10]
    t1 = float(np.max(p.sent_s))
    inside = (finish > t0) & (finish <= t1)
    throughput = inside.sum() / (t1 - t0)
    assert throughput * p.e2e_s[inside].mean() == pytest.approx(c, rel=0.03)


def _accept_moments(acc, k):
    p = acc.unconditional(k)                                   # P(A >= i), i = 1..k
    mean = p.sum()
    second = np.sum((2 * np.arange(1, k + 1) - 1) * p)        # E[A^2] = sum (2i - 1) P(A >= i)
    return mean, second - mean ** 2


def test_fixed_k_mean_accepted_length_is_tau():
    acc = from_list([0.85, 0.7, 0.6])
    k = 4
    p = simulate(None, "closed:32", f"fixed:{k}", pricer=FakePricer(), acceptance=acc, requests=800,
                 output_len="200").policies[0]
    verifies = int(p.timeline.decoding[p.timeline.k > 0].sum())
    _, var = _accept_moments(acc, k)
    assert verifies > 50_000
    assert p.mean_acceptance_length == pytest.approx(acc.tau(k), abs=4 * np.sqrt(var / verifies))


@pytest.mark.parametrize("spread", [None, 4.0])
def test_acceptance_draws_match_the_population(spread):
    """Each request draws its Beta multiplier; over requests the mean of 1 + accepted is Acceptance.tau (spread
    included), and with a spread the requests really differ."""
    acc = from_list([0.9, 0.75, 0.7]).with_spread(spread)
    n, k = 60_000, 5
    draws = draw_acceptance(acc, np.full(n, 10), k, np.random.default_rng(3))
    a = draws.accepted(np.arange(n), k, np.zeros(n, dtype=np.int64))
    _, var = _accept_moments(acc, k)
    assert 1 + a.mean() == pytest.approx(acc.tau(k), abs=4 * np.sqrt(var / n) + 0.01 * (spread is not None))
    assert (np.std(draws.multiplier) > 0.05) == (spread is not None)
    if spread is not None:
        assert acc.tau(k) > from_list([0.9, 0.75, 0.7]).tau(k)          # Jensen: the spread raises the mean


def test_no_uniform_decides_twice():
    """A step decides with the uniforms up to its first rejection; the next step starts past the bonus token, so the
    deciding uniforms of successive steps never overlap."""
    k = 4
    draws = draw_acceptance(constant(0.5), np.array([200]), k, np.random.default_rng(0))
    pos, seen = 0, set()
    while pos < 200:
        a = int(draws.accepted(np.array([0]), k, np.array([pos]))[0])
        deciding = set(range(pos, pos + min(a + 1, k)))
        assert not deciding & seen
        seen |= deciding
        pos += 1 + a
    assert len(seen) > 100

# ---------------------------------------------------------------------------------------------- reproducibility


def test_a_seed_reproduces_and_another_differs():
    kw = dict(requests=200, input_len="lognormal:300:150", output_len="lognormal:100:50")
    a = run("poisson:40", "fixed:3,adaptive", seed=7, **kw).to_dict()
    b = run("poisson:40", "fixed:3,adaptive", seed=7, **kw).to_dict()
    c = run("poisson:40", "fixed:3,adaptive", seed=8, **kw).to_dict()
    assert a == b
    assert a["policies"][0]["e2e_ms"] != c["policies"][0]["e2e_ms"]


def test_a_policy_sees_the_same_draws_whatever_runs_beside_it():
    kw = dict(requests=150, seed=1, output_len="lognormal:100:50")
    alone = run("closed:8", "fixed:3", **kw).policies[0].to_dict()
    beside = run("closed:8", "none,oracle,fixed:3", **kw).policy("fixed:3").to_dict()
    assert alone == beside


# ---------------------------------------------------------------------------------------------- scheduler


def test_rollout_batch_drains():
    """Every request at t = 0: admissions fill the batch, then after the last prefill the batch only shrinks."""
    p = run("rollout", "fixed:3", requests=300, input_len="uniform:10:500", output_len="lognormal:120:80",
            scheduler=SchedulerConfig(max_num_seqs=512, max_num_batched_tokens=2048)).policies[0]
    tl = p.timeline
    prefills = tl.requests - tl.decoding
    last = int(np.flatnonzero(prefills > 0)[-1])
    assert tl.requests.max() > 150                   # most in flight at once (decoders take 1 + K tokens first)
    assert int(np.argmax(tl.requests)) <= last + 1   # the peak while prompts are admitted
    assert np.all(np.diff(tl.requests[last:]) <= 0)


def test_preemption_with_a_tiny_cache_and_everything_finishes():
    f = FakePricer(kv=3000)
    cfg = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=512)
    p = run("closed:32", "fixed:3", pricer=f, requests=200, input_len="256", output_len="128",
            scheduler=cfg).policies[0]
    assert p.preemptions > 0
    assert np.all(np.isfinite(p.finish_s))
    assert int(p.timeline.tokens.sum()) == 200 * 128           # every token emitted once
    blocks = 3000 // 16
    for step in f.steps:                                        # the cache never holds more than it has
        kv_tokens = step.decode_contexts + 1 + step.k + 3       # lookahead 3
        assert np.sum(np.ceil(kv_tokens / 16)) <= blocks


def test_steps_respect_the_token_budget_and_max_num_seqs():
    f = FakePricer()
    cfg = SchedulerConfig(max_num_seqs=24, max_num_batched_tokens=600)
    run("poisson:200", "fixed:4,adaptive", pricer=f, requests=300,
        input_len="lognormal:700:500", output_len="lognormal:60:30", scheduler=cfg)
    assert len(f.steps) > 100
    for s in f.steps:
        tokens = s.prefill_tokens.sum() + s.decode_contexts.size * (1 + s.k)
        assert tokens <= 600
        assert s.num_requests <= 24
    assert any(s.prefill_tokens.size and s.decode_contexts.size for s in f.steps)     # chunked prefill mixes


def test_the_budget_trims_the_drafts_of_the_decoder_at_its_edge():
    """vLLM's running pass: max_num_batched_tokens 64, 32 decoding requests at K = 5. The first 10 get 1 + 5 tokens
    (60), the 11th the 4 left (its drafts trimmed to 3), the other 21 wait. Every draft accepted: the 10 emit 6 tokens
    each and the trimmed one 4, 64 a step."""
    f = FakePricer()
    cfg = SchedulerConfig(max_num_seqs=32, max_num_batched_tokens=64)
    p = run("closed:32", "fixed:5", pricer=f, requests=32, input_len="8", output_len="400", acceptance=1.0,
            scheduler=cfg).policies[0]
    decode_only = [i for i, s in enumerate(f.steps) if s.decode_contexts.size and not s.prefill_tokens.size]
    trimmed = [i for i in decode_only if f.steps[i].decode_tokens is not None]
    assert trimmed and all(f.steps[i].k == 5 for i in decode_only)
    for i in trimmed[:20]:
        s = f.steps[i]
        assert s.decode_contexts.size == 11
        assert s.decode_tokens.tolist() == [6.0] * 10 + [4.0]
        assert p.timeline.tokens[i] == 64            # the trimmed request accepts at most its 3 drafts
    assert p.k_budget_limited_steps >= len(trimmed)


def test_k_is_lowered_for_every_decoder_where_the_rule_does_not_trim():
    """The prefill-first rule (SGLang): max_num_batched_tokens 64 with 32 decoding requests: 1 + K <= 2 tokens each,
    so K <= 1 whatever the table."""
    f = FakePricer()
    cfg = SchedulerConfig(max_num_seqs=32, max_num_batched_tokens=64, rule="prefill-first")
    p = run("closed:32", "fixed:5", pricer=f, requests=64, input_len="8", output_len="50",
            scheduler=cfg).policies[0]
    full = [s for s in f.steps if s.decode_contexts.size == 32]
    assert full and all(s.k <= 1 and s.decode_tokens is None for s in full)
    assert p.k_budget_limited_steps > 0


def test_a_fixed_k_runs_its_k_while_prompts_fill_the_budget():
    """Every request at t = 0 and a budget of 2,048 tokens: the decoders bring 1 + 3 tokens to every step, before any
    waiting prompt is given what is left (vLLM schedules RUNNING requests first); K never drops for the prompts."""
    f = FakePricer()
    p = run("rollout", "fixed:3", pricer=f, requests=300, input_len="uniform:10:500", output_len="lognormal:120:80",
            scheduler=SchedulerConfig(max_num_seqs=512, max_num_batched_tokens=2048)).policies[0]
    mixed = [s for s in f.steps if s.decode_contexts.size and s.prefill_tokens.size]
    assert mixed and all(s.k == 3 for s in f.steps if s.decode_contexts.size)
    assert set(p.k_histogram) == {3} or p.k_histogram.get(0, 0) <= 1


# ---------------------------------------------------------------------------------------------- policies


def test_oracle_picks_the_best_expected_rate():
    """A decode step: the K of the most expected tokens per second. A step with prefill chunks: the K whose drafts
    beat, for their time, the rate the same requests decode at alone (tokens - rate x seconds)."""
    f = FakePricer(a=3e-3, b=2e-5, d=1e-3)            # a draft costs 1 ms a step: the best decode K is 2
    pol = parse_policies("oracle:6")[0].bind(PolicyEnv(None, constant(0.8), 512, 256, f, 8))
    tau = [constant(0.8).tau(k) for k in range(7)]
    decode = StepView(np.full(40, 600.0), np.zeros(0), np.zeros(0), 0)
    rates = [40 * tau[k] / f.seconds(decode.scheduled(k)) for k in range(7)]
    assert pol.k(40, decode) == int(np.argmax(rates)) == 2
    mixed = StepView(np.full(40, 600.0), np.array([3000.0]), np.array([0.0]), 1)
    alone = max(rates)
    scores = [40 * tau[k] - alone * f.seconds(mixed.scheduled(k)) for k in range(7)]
    assert pol.k(41, mixed) == int(np.argmax(scores)) == 2
    # counting the completing prefill's token and the chunk's time in one rate would pick K = 6 here
    naive = [(40 * tau[k] + 1) / f.seconds(mixed.scheduled(k)) for k in range(7)]
    assert int(np.argmax(naive)) == 6


def test_oracle_bounds_the_fixed_ks_on_one_pricer():
    """Every policy priced by one pricer (one server): the oracle's run is at least the best fixed K's (a closed loop
    of 16 whose steps are decode steps after the first prefills), within 0.1% for the different trajectories."""
    f = FakePricer(a=4e-3, b=1e-4, c=0.0, d=3e-4)
    names = ",".join(f"fixed:{k}" for k in range(1, 7)) + ",oracle:6"
    r = run("closed:16", names, pricer=f, requests=64, output_len="200")
    best_fixed = max(p.output_tokens_per_s for p in r.policies if p.name.startswith("fixed"))
    assert r.policy("oracle:6").output_tokens_per_s >= 0.999 * best_fixed


def test_oracle_bounds_the_dynamic_table_on_its_server(llama):
    """Llama-3.1-8B on one H100, EAGLE-3, a closed loop of 64: the oracle and dsd on the same dynamic server; the
    oracle at least dsd's throughput (within 0.1%), where it once lost to fixed:3 (K 4-5 in steps with prefills)."""
    r = simulate(llama, "closed:64", "dsd,oracle", requests=200)
    assert r.policy("oracle").output_tokens_per_s >= 0.999 * r.policy("dsd").output_tokens_per_s
    assert max(r.policy("oracle").k_histogram) <= 3


def test_adaptive_follows_sglangs_ema_rule():
    """SGLang AdaptiveSpeculativeParams: candidates [1, 3, 7], EMA from steps - 1 = 2, warm-up 10 verify batches,
    recompute every 5; a rise needs ema > tier - 0.5, a drop ema <= lower tier - 0.75."""
    pol = parse_policies("adaptive")[0].bind(PolicyEnv(None, constant(0.8), 512, 256, FakePricer(), 8))
    assert pol.current == 3 and pol.candidates == (1, 3, 7)
    for _ in range(15):
        pol.observe(np.full(8, 3.0), 3)                  # every request accepts all 3 drafts
    assert pol.current == 7                              # ema = 3 - 0.8^15 > 3 - 0.5 at the 15th batch: up
    for _ in range(40):
        pol.observe(np.zeros(8), 7)
    assert pol.current == 1
    few = parse_policies("adaptive")[0].bind(PolicyEnv(None, constant(0.8), 512, 256, FakePricer(max_k=4), 4))
    assert few.candidates == (1, 3) and few.lookahead == 3


@pytest.mark.parametrize("alpha, tier", [(0.95, 7), (0.15, 1), (0.7, 3)])
def test_adaptive_moves_where_sglangs_bands_say(alpha, tier):
    """A whole run at a flat acceptance: SGLang's rule leaves K = 3 only where the mean accepted drafts at K = 3 pass
    3 - 0.5 (up: α³ + α² + α > 2.5, α above about 0.91) or fall to 1 - 0.75 (down: α below about 0.2); in between it
    stays, by design (the hysteresis), as its thresholds do on the default acceptance."""
    r = run("closed:8", "adaptive", requests=64, output_len="200", acceptance=alpha).policies[0]
    last = r.timeline.k[r.timeline.decoding > 0][-20:]
    assert set(last.tolist()) == {tier}


def test_policies_never_exceed_the_drafter_and_need_one():
    f = FakePricer(max_k=4)
    with pytest.raises(DsdsimError, match="beyond the drafter's limit of 4"):
        run("closed:2", "fixed:5", pricer=f, requests=4)
    p = run("closed:4", "oracle,adaptive", pricer=f, requests=20).policies
    assert all(max(r.k_histogram) <= 4 for r in p)
    with pytest.raises(DsdsimError, match="needs a drafter"):
        run("closed:2", "none,fixed:3", pricer=FakePricer(max_k=0), requests=4)
    assert run("closed:2", "none", pricer=FakePricer(max_k=0), requests=4).policies[0].steps > 0


# ---------------------------------------------------------------------------------------------- table files


RANGES = [(1, 16, 4), (17, 64, 3), (65, 200, 1), (201, 256, 0)]


def _lookup(ranges, upto):
    return [table_lookup(ranges, b) for b in range(1, upto + 1)]


def test_vllm_table_round_trips(tmp_path):
    cfg = vllm_speculative_config(RANGES, method="eagle3", max_num_seqs=256)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(cfg))
    assert read_table_file(path) == RANGES
    assert _lookup(read_table_file(path), 256) == build_vllm_lookup(cfg["num_speculative_tokens_per_batch_size"],
                                                                      256, cfg["num_speculative_tokens"])[1:]
    bare = tmp_path / "bare.yaml"
    bare.write_text(json.dumps([list(r) for r in RANGES]))     # JSON is YAML: the bare list
    assert read_table_file(bare) == RANGES


def test_vllm_table_with_gaps_and_clamp_reads_as_vllm_does():
    """[1,16,5] clamped to num_speculative_tokens 3; a gap takes the previous K (vLLM's test: lookup[17] == 3)."""
    ranges = read_table_file(DATA / "vllm_speculative_config.yaml")
    assert ranges == [(1, 31, 3), (32, 255, 2), (256, 512, 0)]
    sched = [[1, 16, 5], [32, 128, 2], [256, 512, 0]]
    assert _lookup(ranges, 600) == build_vllm_lookup(sched, 600, 3)[1:]


def test_sglang_table_round_trips(tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(sglang_adaptive_config(RANGES)))
    assert _lookup(read_table_file(path), 300) == _lookup(RANGES, 300)
    newer = tmp_path / "newer.json"                               # newer SGLang: the candidate list itself
    newer.write_text(json.dumps({"1": [3], "8": [1], "32": [0]}))
    assert read_table_file(newer) == [(1, 7, 3), (8, 31, 1), (32, 32, 0)]


def test_trtllm_table_round_trips(tmp_path):
    sched = trtllm_draft_len_schedule(RANGES)
    path = tmp_path / "trt.json"
    path.write_text(json.dumps({"draft_len_schedule": {str(k): v for k, v in sched.items()}}))
    ranges = read_table_file(path)
    assert _lookup(ranges, 300) == _lookup(RANGES, 300)
    yaml_path = tmp_path / "extra_llm_api_options.yaml"          # as TensorRT-LLM's YAML nests it
    yaml_path.write_text("speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 4\n  draft_len_schedule:\n"
                         "    4: 4\n    8: 2\n    32: 1\n")
    ranges = read_table_file(yaml_path)
    assert _lookup(ranges, 40) == [4] * 4 + [2] * 4 + [1] * 24 + [0] * 8     # above the largest key: 0


@pytest.mark.parametrize("content, match", [
    ("", "empty"),
    ("{not json", "not valid JSON"),
    ('{"num_speculative_tokens_per_batch_size": [[2, 16, 3]]}', "must start at 1"),
    ('{"num_speculative_tokens_per_batch_size": [[1, 16, 3], [10, 20, 2]]}', "overlap"),
    ('{"num_speculative_tokens_per_batch_size": [[1, 16]]}', "exactly 3 items"),
    ('{"num_speculative_tokens_per_batch_size": [[1, 16, -1]]}', "K < 0"),
    ('{"1": {"candidate_steps": [1, 3, 7]}}', "3 candidate steps"),
    ('{"4": {"candidate_steps": [3]}}', "must be 1"),
    ('{"draft_len_schedule": {"four": 4}}', "not a batch size"),
    ('{"draft_len_schedule": {"4": 2.5}}', "whole number"),
    ('[1, 2, 3]', "3 items"),
    ('"text"', "holds the text"),
    ('{"method": "eagle3"}', "cannot tell the format"),
])
def test_malformed_table_files_give_one_line_errors(tmp_path, content, match):
    path = tmp_path / "table.json"
    path.write_text(content)
    with pytest.raises(DsdsimError, match=match) as err:
        read_table_file(path)
    assert "\n" not in str(err.value)


def test_table_policy_runs_a_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(vllm_speculative_config([(1, 4, 5), (5, 8, 2)], method="eagle3")))
    p = run("closed:8", f"table:{path}", requests=80, output_len="60").policies[0]
    assert p.name == "table:spec.json"
    assert set(p.k_histogram) <= {2, 5} and 2 in p.k_histogram         # batch 8 once all 8 are in flight


# ---------------------------------------------------------------------------------------------- inputs


def test_length_forms_and_presets():
    rng = np.random.default_rng(0)
    x = parse_lengths("lognormal:500:250").sample(rng, 200_000)
    assert x.mean() == pytest.approx(500, rel=0.01) and x.std() == pytest.approx(250, rel=0.03)
    u = parse_lengths("uniform:3:5").sample(rng, 1000)
    assert set(u) == {3, 4, 5}
    assert parse_lengths(64).sample(rng, 3).tolist() == [64, 64, 64]
    assert parse_lengths("normal:2:50").sample(rng, 1000).min() >= 1               # clipped to >= 1
    for name, preset in PRESETS.items():
        assert preset.source and preset.input.source == preset.source
        assert parse_lengths(name, "--output-len") is preset.output
        assert parse_lengths(name) is preset.input
    assert parse_lengths("sharegpt").sample(rng, 5000).max() <= 1024


def test_arrival_processes():
    rng = np.random.default_rng(5)
    from dsdsim.serve.workload import build_requests

    fixed = parse_lengths(16)
    for text, cv in (("poisson:50", 1.0), ("gamma:50:2.5", 2.5)):
        reqs = build_requests(parse_workload(text), 40_000, fixed, fixed, rng)
        gaps = np.diff([r.arrival_s for r in reqs])
        assert reqs[0].arrival_s == 0.0
        assert 1 / gaps.mean() == pytest.approx(50, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
    assert parse_workload("closed:8").concurrency == 8 and parse_workload("rollout").concurrency is None


def _most_in_flight(policy) -> int:
    """The most requests a run had sent and not yet finished at once (a send at the instant another finishes takes
    that request's slot)."""
    events = sorted([(t, 1) for t in policy.sent_s] + [(t, -1) for t in policy.finish_s], key=lambda e: (e[0], e[1]))
    return int(np.max(np.cumsum([d for _, d in events])))


def test_an_open_loop_under_a_max_concurrency(tmp_path):
    """vllm bench serve --request-rate QPS --max-concurrency C: never more than C in flight; a request goes at its
    arrival or when a slot frees, whichever is later; a limit that never binds changes nothing; and requests all
    due at t = 0 under a limit of C are the closed loop of C exactly."""
    kw = dict(requests=120, input_len="128", output_len="64")
    capped = run("poisson:40", "none,fixed:3", max_concurrency=4, **kw)
    free = run("poisson:40", "none,fixed:3", **kw)
    arrival = np.array([r.arrival_s for r in capped.requests])
    for p, q in zip(capped.policies, free.policies):
        assert _most_in_flight(q) > 4                               # the open loop alone would exceed the limit
        assert _most_in_flight(p) == 4
        assert np.all(p.sent_s >= arrival - 1e-12)
        late = p.sent_s > arrival + 1e-9                            # held back: sent the moment a request finished
        assert late.any() and np.all(np.isin(p.sent_s[late], p.finish_s))
    never = run("poisson:40", "none,fixed:3", max_concurrency=10_000, **kw)
    assert never.to_dict()["policies"] == free.to_dict()["policies"]
    at_once = tmp_path / "at_once.csv"
    at_once.write_text("arrival_s,input_len,output_len\n" + "0,128,64\n" * 120)
    limited = run(f"trace:{at_once}", "none,fixed:3", max_concurrency=6)
    closed = run("closed:6", "none,fixed:3", **kw)
    assert limited.to_dict()["policies"] == closed.to_dict()["policies"]
    assert _most_in_flight(closed.policies[0]) == 6
    d = capped.to_dict()
    assert (d["workload"], d["max_concurrency"]) == ("poisson:40", 4)
    assert "max_concurrency" not in free.to_dict() and "max_concurrency" not in closed.to_dict()
    assert capped.workload.describe() == "Poisson arrivals at 40 requests/s, at most 4 in flight"


@pytest.mark.parametrize("workload, limit, match", [
    ("closed:8", 4, "a closed loop is its own limit"),
    ("rollout", 4, "write the workload closed:4"),
    ("poisson:4", 0, r"max concurrency must be in 1\.\.1048576, got 0"),
    ("poisson:4", 2.5, "max concurrency must be a whole number"),
])
def test_a_max_concurrency_where_it_means_nothing_is_refused(workload, limit, match):
    with pytest.raises(DsdsimError, match=match) as err:
        run(workload, "none", requests=10, max_concurrency=limit)
    assert "\n" not in str(err.value)


def test_a_tree_is_drawn_with_its_mean_length():
    from dsdsim.policy.acceptance import TreeAcceptance

    n = 50_000
    draws = draw_acceptance(TreeAcceptance(2.6), np.full(n, 8), 1, np.random.default_rng(2), tree_steps=4)
    a = draws.accepted(np.arange(n), 4, np.zeros(n, dtype=np.int64))
    assert 1 + a.mean() == pytest.approx(2.6, abs=0.02)


def test_progress_reaches_one():
    seen = []
    run("closed:4", "none,fixed:2", requests=50, progress=seen.append)
    assert seen[-1] == 1.0 and all(b >= a for a, b in zip(seen, seen[1:])) and len(seen) > 4


def test_trace_files():
    tr = read_trace(DATA / "trace_aliases.csv")                  # timestamp, prompt_len, output_tokens; unsorted
    assert tr.arrival_s.tolist() == [0.0, 0.5, 1.25, 2.0]
    assert tr.input_len.tolist() == [64, 120, 300, 8] and tr.output_len.tolist() == [32, 40, 16, 64]
    j = read_trace(DATA / "trace.jsonl")
    assert j.input_len.tolist() == [128, 256, 64]
    v = parse_workload(f"trace:{DATA / 'vllm_bench_result.json'}")
    assert v.concurrency == 2 and v.trace.input_len.tolist() == [128, 256, 64, 32, 100]    # the failed one dropped
    p = run(f"trace:{DATA / 'vllm_bench_result.json'}", "fixed:2").policies[0]
    assert p.finish_s.size == 5 and p.mean_batch <= 2


@pytest.mark.parametrize("call, match", [
    (lambda: parse_workload("poisson:0"), "must be > 0"),
    (lambda: parse_workload("poisson:-3"), "QPS must be > 0, got -3"),     # a number: its range named, not its form
    (lambda: parse_workload("poisson:x"), "poisson:QPS"),
    (lambda: parse_workload("closed:0"), "1.."),
    (lambda: parse_workload("gamma:4"), "gamma:QPS:CV"),
    (lambda: parse_workload("gamma:4:0"), "CV"),
    (lambda: parse_workload("gamma:4:-1"), "CV must be > 0, got -1"),
    (lambda: parse_workload("bursty"), "unknown workload"),
    (lambda: parse_workload(f"trace:{DATA / 'trace_missing_output.csv'}"), "no output length column"),
    (lambda: parse_workload("trace:/no/such/file.csv"), "not found"),
    (lambda: parse_policies("none,greedy"), "unknown policy"),
    (lambda: parse_policies("fixed:x"), "fixed:K"),
    (lambda: parse_policies("fixed:3,fixed:3"), "twice"),
    (lambda: parse_lengths("normal:5"), "MEAN:STD"),
    (lambda: parse_lengths("normal:512:-5"), "std must be a finite number >= 0"),
    (lambda: parse_lengths("-5"), "tokens >= 1"),
    (lambda: parse_lengths("abc", "--output-len"), "--output-len"),
    (lambda: parse_lengths("uniform:9:3"), "A <= B"),
    (lambda: parse_lengths("0"), ">= 1"),
    (lambda: parse_slo("ttft=200,latency=3"), "keys ttft, tpot, e2el"),
    (lambda: run("closed:2", "none", requests=0), "requests must be in"),
    (lambda: run("closed:2", "fixed:9"), "drafter's limit of 8"),
    (lambda: SchedulerConfig(max_num_seqs=512, max_num_batched_tokens=256), "must be >= max_num_seqs"),
    (lambda: run("closed:2", "none", requests=3, input_len="5000", pricer=FakePricer(kv=1000)), "KV blocks"),
])
def test_bad_input_is_one_line(call, match):
    with pytest.raises(DsdsimError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_slo_goodput_and_the_json_contract():
    assert parse_slo("ttft=200,tpot=50") == Slo(200.0, 50.0, None)
    assert parse_slo("ttft:200 tpot:50") == Slo(200.0, 50.0, None)
    r = run("poisson:50", "none,fixed:3", requests=300, slo="ttft=40,tpot=4")
    d = r.to_dict()
    assert set(d) == {"workload", "requests", "seed", "policies"} and d["requests"] == 300
    for p in r.policies:
        assert set(p.to_dict()) == CONTRACT_KEYS
        assert 0 <= p.goodput_requests_per_s <= p.requests_per_s
        assert set(p.to_dict()["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    assert r.policy("fixed:3").goodput_requests_per_s > r.policy("none").goodput_requests_per_s   # TPOT 4 ms
    assert run("poisson:50", "none", requests=20).policies[0].goodput_requests_per_s is None
    json.dumps(d)


# ---------------------------------------------------------------------------------------------- the real pricer


def test_dsd_is_within_a_few_percent_of_the_best_static_k(llama):
    """Steady closed loop on llama-3.1-8b / H100 / EAGLE-3 with MixedPricer. On one server (every policy priced as
    the dynamic-K server) the predicted table does as well as the best fixed K, within the goodput tolerance the
    table was built with (predict's default, 0.5%). Against static servers
    (each policy on its own server, the default) it also pays what the engine charges a server running a dynamic
    table (vLLM >= 0.24's spec): within 5%."""
    from dsdsim.cost.mixed import MixedPricer

    kw = dict(requests=240, input_len="512", output_len="128", seed=0)
    same = simulate(llama, "closed:32", "fixed:1,fixed:2,fixed:3,fixed:4,dsd", pricer=MixedPricer(llama, dynamic=True),
                    **kw)
    best = max(same.policies[:-1], key=lambda p: p.output_tokens_per_s)
    from dsdsim.defaults import DEFAULT_TOLERANCE
    from dsdsim.policy.options import parse_tolerance

    assert same.policy("dsd").output_tokens_per_s >= (1 - parse_tolerance(DEFAULT_TOLERANCE)) * best.output_tokens_per_s
    assert same.context == 512 + 64                              # mean input + half the mean output
    own = simulate(llama, "closed:32", f"{best.name},dsd", **kw)
    assert own.policy("dsd").output_tokens_per_s >= 0.95 * own.policy(best.name).output_tokens_per_s


def test_mixed_pricer_serves_a_bursty_workload(llama):
    r = simulate(llama, "gamma:20:2", "none,dsd", requests=200, input_len="sharegpt", output_len="sharegpt",
                 slo="ttft=500,tpot=30", seed=1)
    none, dsd = r.policy("none"), r.policy("dsd")
    assert none.k_histogram.keys() == {0}
    assert dsd.tpot_ms.mean < none.tpot_ms.mean                 # speculation lowers TPOT at this load
    assert dsd.goodput_requests_per_s is not None and dsd.preemptions == 0
    assert max(dsd.k_histogram) <= 8


def test_an_engine_without_mixed_prefill_runs_prefill_and_decode_batches_apart():
    """SGLang (enable_mixed_chunk off by default) runs a step as a prefill batch or a decode batch, prefills first;
    vLLM V1 mixes prefill chunks into decode steps. The engine spec says which (``EngineSpec.mixed_prefill``)."""
    from dsdsim.serve.simulate import simulate
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    runs = {}
    for engine in ("sglang@0.5.6", "vllm"):
        s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine=engine)
        r = simulate(s, "poisson:20", "fixed:2", requests=120, input_len="uniform:200:3000", output_len="128", seed=3)
        tl = r.policies[0].timeline
        requests, decoding = np.asarray(tl.requests), np.asarray(tl.decoding)
        runs[engine] = bool(((decoding > 0) & (decoding < requests)).any())     # a step with both kinds
        assert r.policies[0].to_dict()["steps"] > 0
    assert runs == {"sglang@0.5.6": False, "vllm": True}


def test_a_scheduler_config_overrides_the_engine_mixing():
    from dsdsim.serve.scheduler import SchedulerConfig
    from dsdsim.serve.simulate import simulate
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine="vllm")
    r = simulate(s, "poisson:20", "fixed:2", requests=120, input_len="uniform:200:3000", output_len="128", seed=3,
                 scheduler=SchedulerConfig(mixed_prefill=False))
    tl = r.policies[0].timeline
    requests, decoding = np.asarray(tl.requests), np.asarray(tl.decoding)
    assert not ((decoding > 0) & (decoding < requests)).any()


def test_the_scheduling_rule_is_an_extension_point():
    """A rule registered by name builds every step: here one that admits no new request while any decodes (a
    decode-first server), against vllm's mixed steps on the same requests; a rule by name equals the flag it stands
    for (prefill-first == mixed_prefill False)."""
    from dsdsim.serve import scheduler as sch
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    class DecodeFirst:
        name = "decode-first-test"
        summary = "decodes while any request decodes; prompts only when none does"

        def schedule(self, s, k_guess):
            if any(s.decoding[r] for r in s.run):
                return s.running_then_waiting(k_guess, admit=False)
            return s.running_then_waiting(k_guess, admit=True)

    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine="vllm")
    args = dict(requests=60, input_len="uniform:200:3000", output_len="64", seed=3)
    sch.register_rule(DecodeFirst())
    try:
        runs = {rule: simulate(s, "poisson:20", "fixed:2", scheduler=SchedulerConfig(rule=rule), **args)
                for rule in ("vllm", "decode-first-test", "prefill-first")}
    finally:
        del sch.RULES["decode-first-test"]
    tl = runs["decode-first-test"].policies[0].timeline
    requests, decoding = np.asarray(tl.requests), np.asarray(tl.decoding)
    assert not ((decoding > 0) & (decoding < requests)).any()            # never a prompt beside a decode
    assert runs["decode-first-test"].to_dict() != runs["vllm"].to_dict()
    flag = simulate(s, "poisson:20", "fixed:2", scheduler=SchedulerConfig(mixed_prefill=False), **args)
    assert flag.to_dict() == runs["prefill-first"].to_dict()
    with pytest.raises(DsdsimError, match="unknown scheduling rule 'fifo'; use one of: prefill-first, vllm"):
        SchedulerConfig(rule="fifo")
    with pytest.raises(DsdsimError, match="a name and a schedule"):
        sch.register_rule(object())


def test_simulate_takes_the_scheduling_rule(cli):
    code, out, _ = cli("simulate", "--requests", "30", "--policies", "none", "--scheduling", "prefill-first",
                       "--workload", "poisson:20", "--input-len", "uniform:200:3000", "-f", "json")
    assert code == 0
    import dsdsim

    api = dsdsim.simulate(requests=30, policies="none", scheduling="prefill-first", workload="poisson:20",
                          input_len="uniform:200:3000")
    assert api.to_json() == out.rstrip("\n")
    code, _, err = cli("simulate", "--requests", "4", "--scheduling", "fifo")
    assert code == 2 and "unknown scheduling rule 'fifo'" in err


def test_the_api_takes_the_cli_spelling_of_no_drafter(cli):
    """``-d none`` on the command line is ``drafter="none"`` (or None) in ``dsdsim.simulate`` and ``dsdsim.resolve``:
    the same server without speculation, the same JSON."""
    import dsdsim

    code, out, _ = cli("simulate", "-d", "none", "--requests", "12", "--workload", "poisson:8", "-f", "json")
    assert code == 0
    for drafter in ("none", " None ", None):
        api = dsdsim.simulate(drafter=drafter, requests=12, workload="poisson:8")
        assert api.to_json() == out.rstrip("\n")
    assert dsdsim.resolve(drafter="none").drafter is None


def test_an_sglang_speculative_server_runs_at_most_48_requests_unless_told():
    """SGLang's server_args sets max_running_requests = 48 for EAGLE-family speculation: its speculative servers
    (fixed:K, dsd) admit at most 48 of 64 clients, the server without speculation up to the default 256; a given
    max_num_seqs holds for every server. vLLM has no such limit."""
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine="sglang@0.5.6")
    args = dict(requests=128, input_len="128", output_len="64", seed=1)
    most = {p.name: max(p.timeline.requests) for p in simulate(s, "closed:64", "none,fixed:2", **args).policies}
    assert most == {"none": 64, "fixed:2": 48}
    told = simulate(s, "closed:64", "fixed:2", scheduler=SchedulerConfig(max_num_seqs=64), **args).policies[0]
    assert max(told.timeline.requests) == 64
    v = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3", engine="vllm")
    assert max(simulate(v, "closed:64", "fixed:2", **args).policies[0].timeline.requests) == 64


class AheadPricer(FakePricer):
    """A server that schedules a step ahead (vLLM's async scheduling): ``schedules_ahead``."""

    schedules_ahead = True


def test_a_server_scheduling_ahead_carries_a_request_its_drafts_finished_one_more_step():
    """Two requests one after the other (closed:1), 9 output tokens, K = 3, every draft accepted: the first finishes
    on its second decode step (1 -> 5 -> 9 tokens) only because its drafts were accepted, so a server scheduling
    ahead runs it once more in the next step that decodes (the second request's first decode; its prefill step
    carries it on): that step prices 1 + K more tokens at the rider's context (in + 9 - 1), and the second
    request's end comes exactly that much later."""
    kw = dict(requests=2, input_len="100", output_len="9", acceptance=1.0)
    base = run("closed:1", "fixed:3", pricer=FakePricer(), **kw).policies[0]
    f = AheadPricer()
    ahead = run("closed:1", "fixed:3", pricer=f, **kw).policies[0]
    extra = f.b * 4 + f.c * (100 + 9 - 1)
    assert ahead.e2e_s[1] - base.e2e_s[1] == pytest.approx(extra, rel=1e-9)
    assert ahead.ttft_s[1] == pytest.approx(base.ttft_s[1], rel=1e-12)
    assert ahead.e2e_s[0] == pytest.approx(base.e2e_s[0]) and ahead.steps == base.steps
    # 10 tokens end 1 -> 5 -> 9 -> 10: the last step needs one token, which finishes it even if every draft is
    # rejected; the scheduler knows it is done: no rider
    kw["output_len"] = "10"
    base = run("closed:1", "fixed:3", pricer=FakePricer(), **kw).policies[0]
    ahead = run("closed:1", "fixed:3", pricer=AheadPricer(), **kw).policies[0]
    assert ahead.e2e_s[1] == pytest.approx(base.e2e_s[1], rel=1e-12)


def test_a_rider_takes_a_seat_in_the_step_it_rides(tmp_path):
    """max_num_seqs 2, three requests at t = 0, K = 3, every draft accepted: A (9 output tokens) finishes on its
    third step only because its drafts were accepted, B (30) keeps decoding. A server scheduling ahead still holds A
    in its running list in the next step (vLLM's async scheduling), so that step has no seat for C: C's prefill waits
    one step, where a server that knows A is done admits C beside B at once."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,9\n0,100,30\n0,100,5\n")
    cfg = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=1024)
    steps = {}
    for name, pricer in (("base", FakePricer()), ("ahead", AheadPricer())):
        run(f"trace:{trace}", "fixed:3", pricer=pricer, acceptance=1.0, scheduler=cfg)
        steps[name] = [(s.decode_contexts.size, s.prefill_tokens.size) for s in pricer.steps[:5]]
    assert steps["base"][:4] == [(0, 2), (2, 0), (2, 0), (1, 1)]     # C's prefill beside B once A is done
    assert steps["ahead"][:5] == [(0, 2), (2, 0), (2, 0), (2, 0), (1, 1)]   # B + rider A; then B beside C


def test_a_server_scheduling_ahead_learns_a_steps_acceptance_a_step_late():
    """SGLang's overlap scheduler picks batch n + 1's K before batch n's acceptance is processed: the adaptive rule's
    EMA lags a step. Every draft accepted, 8 requests of 400 tokens at t = 0 (no rider before the switch): the step
    at which K leaves 3 comes exactly one step later than on a server that waits for the result."""
    kw = dict(requests=8, input_len="100", output_len="400", acceptance=1.0)
    first = {}
    for name, pricer in (("waits", FakePricer()), ("ahead", AheadPricer())):
        tl = run("rollout", "adaptive", pricer=pricer, **kw).policies[0].timeline
        ks = tl.k[tl.decoding > 0]
        first[name] = int(np.flatnonzero(ks != 3)[0])
        assert ks[first[name]] == 7
    assert first["ahead"] == first["waits"] + 1


def test_riders_never_take_the_whole_budget():
    """A budget of 2 tokens, 2 seats, K = 5, every draft accepted, on a server scheduling ahead: the decoder at the
    budget's edge verifies 1 draft, and a request its drafts finished would need 6 tokens to ride. It does not ride
    (vLLM would run a step of riders alone, which emits nothing); every request still finishes, every token once."""
    cfg = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=2)
    p = run("closed:2", "fixed:5", pricer=AheadPricer(), requests=12, input_len="8", output_len="9",
            acceptance=1.0, scheduler=cfg).policies[0]
    assert np.all(np.isfinite(p.finish_s)) and int(p.timeline.tokens.sum()) == 12 * 9


def test_vllm_0_7_serves_mla_models_with_whole_prompts_before_any_decode():
    """vLLM 0.7.1-0.7.3 force chunked prefill off for MLA models (PR #12642: "MLA is enabled; forcing chunked prefill
    and prefix caching to be disabled"): a V0 step is then a prefill batch of whole prompts, up to
    max_num_batched_tokens, or a decode batch, prefills first. Four 3,000-token prompts arriving together with room
    for two a step: two prefill steps of two requests each, no decode before both, and the second pair's first
    token exactly one prefill step after the first pair's. The 0.7.4 nightlies (CUDA) and models without MLA mix."""
    from dsdsim.serve.simulate import engine_prefill_rule
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.setup import resolve

    mla = resolve("deepseek-v2-lite", "h100-sxm", Deployment(tp=1), None, engine="vllm@0.7.3")
    r = simulate(mla, "closed:4", "none", requests=4, input_len="3000", output_len="16", seed=0,
                 scheduler=SchedulerConfig(max_num_batched_tokens=6000)).policies[0]
    tl = r.timeline
    assert list(np.asarray(tl.requests)[:2]) == [2, 2] and list(np.asarray(tl.decoding)[:2]) == [0, 0]
    assert (np.asarray(tl.decoding)[2:] == np.asarray(tl.requests)[2:]).all()        # then decode steps only
    ttft = np.sort(r.ttft_s)
    t_end = np.asarray(tl.t_end_s)
    assert ttft[0] == ttft[1] == pytest.approx(t_end[0]) and ttft[2] == ttft[3] == pytest.approx(t_end[1])

    cfg = engine_prefill_rule(SchedulerConfig(), mla)       # no budget given: max(max_model_len, 2048)
    assert (cfg.chunked_prefill, cfg.mixed_prefill) == (False, False)
    assert cfg.max_num_batched_tokens == mla.model.max_position_embeddings
    for model, engine in (("deepseek-v2-lite", "vllm@0.7.4"), ("llama-3.1-8b", "vllm@0.7.3")):
        s = resolve(model, "h100-sxm", Deployment(tp=1), None, engine=engine)
        assert engine_prefill_rule(SchedulerConfig(), s).mixed_prefill is True
    with pytest.raises(DsdsimError, match="turns prefix caching off for MLA models"):
        simulate(mla, "closed:4", "none", requests=4, input_len="3000", output_len="16",
                 scheduler=SchedulerConfig(prefix_cache_hit=0.5))


def test_simulate_says_when_the_release_serves_whole_prompts(cli):
    """The text output names the unchunked prefill-first schedule where the engine release imposes it (vLLM 0.7.3
    and an MLA model), and says nothing of it elsewhere."""
    args = ("-d", "none", "-g", "a100-sxm-80gb", "--workload", "closed:2", "--requests", "4", "--input-len", "500",
            "--output-len", "8", "--policies", "none")
    code, out, err = cli("simulate", "-m", "deepseek-v2-lite", "-e", "vllm@0.7.3", *args)
    assert code == 0, err
    line = [ln for ln in out.splitlines() if ln.startswith("scheduling:")]
    assert line and "163,840 tokens" in line[0]
    code, out, err = cli("simulate", "-m", "deepseek-v2-lite", "-e", "vllm@0.8.4", *args)
    assert code == 0, err
    assert "scheduling:" not in out


def test_show_engine_says_how_prompts_enter_steps(cli):
    """`show engine` names the prefill rule the serving simulation applies: mixed chunks (vLLM), prefill-first batches
    (SGLang), and vLLM 0.7's whole prompts for MLA models through 0.7.3."""
    from dsdsim.cli.engine import prefill_text
    from dsdsim.specs.catalog import load_engine

    assert prefill_text(load_engine("vllm")) == "chunks mixed into decode steps"
    assert prefill_text(load_engine("sglang@0.5.6")) == "prefill-first batches apart from decode steps"
    assert prefill_text(load_engine("vllm@0.7.3")) == ("chunks mixed into decode steps; MLA models through 0.7.3: "
                                                       "whole prompts, prefill-first, no prefix cache")
    code, out, err = cli("show", "engine", "vllm@0.7.3")
    assert code == 0, err
    assert "MLA models through 0.7.3" in " ".join(out.split())
