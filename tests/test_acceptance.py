"""Acceptance models pinned to a Monte Carlo of the accept/reject loop, closed forms and vLLM's metric formats.

Ground truth for τ(K): simulate the speculative step itself — walk the K draft positions, accept position i with
probability α_i, stop at the first rejection; the step emits (accepted + 1) tokens (the +1 is the bonus or
correction token). vLLM formulas from reference/engines.md §2: mean acceptance length = 1 + accepted / num_drafts,
per-position rate = accepted_per_pos / num_drafts (unconditional).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.policy.acceptance import (
    DEFAULT_ACCEPTANCE,
    VLLM_PR32374_RATES,
    Acceptance,
    beta_spread,
    constant,
    from_list,
    from_mean_acceptance_length,
    from_unconditional_rates,
)
from dsdsim.policy.acceptance_input import from_vllm_prometheus, from_vllm_request_metrics, parse_acceptance

MC_STEPS = 200_000
MC_RTOL = 0.01          # 1 %: the Monte Carlo standard error at 200k steps is ~0.1-0.2 % of τ
SEED = 20240601


def simulate_steps(alpha_per_step: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Tokens emitted by each simulated step. alpha_per_step: (steps, K) conditional α of that step's request."""
    accept = rng.random(alpha_per_step.shape) < alpha_per_step          # (steps, K)
    accepted = np.cumprod(accept, axis=1).sum(axis=1)                  # leading accepted drafts, stops at 1st reject
    return accepted + 1


def mc_tau(alphas: np.ndarray, k: int, rng: np.random.Generator, steps: int = MC_STEPS) -> float:
    alpha_per_step = np.broadcast_to(alphas[:k], (steps, k))
    return float(simulate_steps(alpha_per_step, rng).mean())


# ------------------------------------------------------------------------------------------------- τ(K)


@pytest.mark.parametrize("alphas", [[0.8], [0.9, 0.7, 0.5, 0.3], list(DEFAULT_ACCEPTANCE.alpha), [0.6, 0.0, 0.9]])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_tau_matches_monte_carlo_of_accept_loop(alphas, k):
    rng = np.random.default_rng(SEED)
    acc = from_list(alphas)
    expected = mc_tau(acc.alpha_at(k), k, rng)
    assert acc.tau(k) == pytest.approx(expected, rel=MC_RTOL)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.95])
def test_constant_alpha_closed_form(alpha):
    k = np.arange(0, 17)
    closed = (1 - alpha ** (k + 1)) / (1 - alpha)
    np.testing.assert_allclose(constant(alpha).tau(k), closed, rtol=1e-12)


def test_constant_one_accepts_everything():
    np.testing.assert_allclose(constant(1.0).tau(np.arange(10)), np.arange(10) + 1.0)


@pytest.mark.parametrize("acc", [constant(0.7), from_list([0.9, 0.2, 0.8]), DEFAULT_ACCEPTANCE,
                                 constant(0.8).with_spread(5.0)])
def test_tau_invariants(acc):
    k = np.arange(0, 33)
    tau = acc.tau(k)
    assert acc.tau(0) == 1.0 and isinstance(acc.tau(0), float)
    assert np.all(np.diff(tau) >= 0)                      # drafting more never emits fewer tokens on average
    assert np.all(tau <= k + 1 + 1e-12) and np.all(tau >= 1.0)


def test_tau_vectorised_over_shapes():
    acc = from_list([0.8, 0.6])
    grid = np.array([[0, 1], [2, 5]])
    out = acc.tau(grid)
    assert out.shape == (2, 2)
    assert out[0, 1] == pytest.approx(1.8) and out[1, 0] == pytest.approx(1 + 0.8 + 0.48)


def test_extrapolation_repeat_last_is_stated():
    acc = from_list([0.8, 0.7, 0.6])
    np.testing.assert_allclose(acc.alpha_at(5), [0.8, 0.7, 0.6, 0.6, 0.6])
    assert acc.extrapolated_positions(5) == 2 and acc.extrapolated_positions(2) == 0
    assert "positions > 3 extrapolated (repeat last α=0.6)" in acc.describe(5)
    assert "extrapolated" not in acc.describe(3)
    assert "\n" not in acc.describe(5)
    zero = Acceptance((0.8, 0.7), "test", extrapolation="zero")
    assert zero.tau(6) == pytest.approx(1 + 0.8 + 0.56)
    assert constant(0.8).extrapolated_positions(10) == 0      # a constant α is the model, not an extrapolation


def test_scaled_and_shifted_clip_to_unit_interval():
    acc = from_list([0.9, 0.5])
    assert acc.scaled(1.5).alpha == (1.0, 0.75)
    assert acc.shifted(-0.6).alpha == pytest.approx((0.3, 0.0))
    assert acc.scaled(0.9).tau(4) < acc.tau(4) < acc.shifted(0.05).tau(4)
    assert "α×1.5" in acc.scaled(1.5).source


# ------------------------------------------------------------------------------------------------- fits


@pytest.mark.parametrize("al,k", [(2.79, 3), (1.5, 1), (3.2, 7), (1.0, 4), (5.0, 4)])
def test_mean_acceptance_length_round_trip(al, k):
    acc = from_mean_acceptance_length(al, k)
    assert acc.tau(k) == pytest.approx(al, abs=1e-9)
    assert parse_acceptance(f"al={al}@{k}").alpha == pytest.approx(acc.alpha)


def test_mean_acceptance_length_with_spread_round_trip():
    acc = from_mean_acceptance_length(2.79, 3, spread=10.0)
    assert acc.tau(3) == pytest.approx(2.79, abs=1e-9)
    assert acc.alpha[0] < from_mean_acceptance_length(2.79, 3).alpha[0]   # spread lifts τ, so a lower mean fits


def test_unconditional_to_conditional():
    acc = from_unconditional_rates([0.8, 0.4, 0.1])
    np.testing.assert_allclose(acc.alpha, [0.8, 0.5, 0.25])
    np.testing.assert_allclose(acc.unconditional(3), [0.8, 0.4, 0.1])
    assert acc.tau(3) == pytest.approx(1 + 0.8 + 0.4 + 0.1)


def test_default_acceptance_is_vllm_pr_test_data():
    np.testing.assert_allclose(DEFAULT_ACCEPTANCE.unconditional(7), VLLM_PR32374_RATES, rtol=1e-12)
    assert DEFAULT_ACCEPTANCE.alpha[0] == pytest.approx(0.68)
    assert DEFAULT_ACCEPTANCE.alpha[1] == pytest.approx(0.39 / 0.68)
    assert "PR #32374" in DEFAULT_ACCEPTANCE.source and "not a measurement" in DEFAULT_ACCEPTANCE.source
    # vLLM's own mean acceptance length formula: 1 + Σ per-position rates
    assert DEFAULT_ACCEPTANCE.tau(7) == pytest.approx(1 + sum(VLLM_PR32374_RATES))
    assert parse_acceptance("default") is DEFAULT_ACCEPTANCE


def test_a_drafter_kind_brings_its_own_example_acceptance():
    """Without an acceptance, n-gram lookup takes what TensorRT-LLM's blog 7 measured for it on generic chat (mean
    acceptance length 1.37 at v = 5 on Magpie's first turn, its constant α); a kind without a figure of its own
    (EAGLE-3) keeps the generic example, and a given acceptance wins for every kind."""
    from dsdsim.policy.predict import acceptance_for
    from dsdsim.specs.drafter import parse_drafter

    ngram, eagle3 = parse_drafter("ngram"), parse_drafter("eagle3")
    own = acceptance_for(None, None, ngram)
    assert own.tau(5) == pytest.approx(1.37, abs=1e-9) and len(set(own.alpha)) == 1
    assert "TensorRT-LLM tech blog 7" in own.source and "not a measurement of your workload" in own.source
    assert acceptance_for("default", None, ngram) is own
    assert acceptance_for(None, None, eagle3) is DEFAULT_ACCEPTANCE is acceptance_for(None, None, None)
    assert acceptance_for(0.8, None, ngram).alpha == (0.8,)


def test_predict_with_ngram_and_no_acceptance_reads_the_ngram_example(cli):
    code, out, err = cli("predict", "-d", "ngram", "-b", "1,64", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert "TensorRT-LLM tech blog 7" in doc["acceptance"]["source"]
    assert all(r["tau"] < 1.38 for r in doc["rows"])           # at most 1.37 at K = 5 and below it at smaller K


def test_zero_rate_stops_later_positions():
    acc = from_unconditional_rates([0.5, 0.0, 0.0])
    assert acc.alpha == (0.5, 0.0, 0.0)
    assert "never reached" in acc.source


# ------------------------------------------------------------------------------------------------- spread


@pytest.mark.parametrize("alphas,kappa", [([0.8], 20.0), ([0.8], 4.0), ([0.9, 0.7, 0.6, 0.5], 8.0)])
def test_spread_matches_monte_carlo_with_beta_requests(alphas, kappa):
    """Each step belongs to a request with quality a ~ Beta(m κ, (1−m) κ), m = max α; its α_j = α_j · a / m."""
    k = 8
    rng = np.random.default_rng(SEED)
    acc = from_list(alphas).with_spread(kappa)
    m = max(alphas)
    a = rng.beta(m * kappa, (1 - m) * kappa, size=MC_STEPS)                 # (steps,)
    alpha_per_step = acc.alpha_at(k)[None, :] * (a / m)[:, None]            # (steps, K)
    expected = float(simulate_steps(alpha_per_step, rng).mean())
    assert acc.tau(k) == pytest.approx(expected, rel=MC_RTOL)


def test_spread_closed_form_for_constant_mean():
    m, kappa = 0.8, 20.0
    a, b = m * kappa, (1 - m) * kappa
    moments = [np.prod([(a + j) / (a + b + j) for j in range(i)]) for i in range(0, 9)]   # E[α^i], i = 0..8
    assert parse_acceptance("beta:0.8:20").tau(8) == pytest.approx(sum(moments), rel=1e-12)


def test_spread_raises_tau_at_same_mean_alpha_jensen():
    """E[α^i] ≥ (E α)^i for convex α^i: at equal mean α a spread raises the batch-average τ, more at large K.

    (The brief expected the opposite sign; the Monte Carlo above pins this direction.)
    """
    plain, spread = constant(0.8), beta_spread(constant(0.8), 20.0)
    assert spread.tau(1) == pytest.approx(plain.tau(1))                  # K = 1: only the mean matters
    assert spread.tau(8) > plain.tau(8)
    gap = spread.tau(np.arange(1, 17)) - plain.tau(np.arange(1, 17))
    assert np.all(np.diff(gap) > 0)


def test_spread_effective_alpha_stays_probability():
    acc = from_list([0.5, 0.99, 0.99]).with_spread(2.0)
    pop = acc.population_alpha(12)
    assert np.all((pop >= 0) & (pop <= 1))


# ------------------------------------------------------------------------------------------------- vLLM inputs

PROMETHEUS_SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6000.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4000.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7183e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 18000.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"} 4800.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="1"} 3000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"} 1500.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"} 3200.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",position="1"} 2000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"} 1000.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"} 1.7183e+09
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# EOF
"""


def test_prometheus_gives_conditional_alpha():
    acc = from_vllm_prometheus(PROMETHEUS_SAMPLE)
    # per position summed over engines: 8000, 5000, 2500 of 10000 drafts → p = 0.8, 0.5, 0.25
    np.testing.assert_allclose(acc.alpha, [0.8, 0.625, 0.5])
    assert acc.tau(3) == pytest.approx(1 + 0.8 + 0.5 + 0.25)     # vLLM: 1 + accepted / num_drafts
    assert "10000 drafts" in acc.source


def test_prometheus_without_total_suffix():
    text = ('vllm:spec_decode_num_drafts{model_name="m"} 100\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos{model_name="m",position="0"} 90\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos{position="1",model_name="m"} 45\n')
    np.testing.assert_allclose(from_vllm_prometheus(text).alpha, [0.9, 0.5])


def test_prometheus_file_through_parse_acceptance(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text(PROMETHEUS_SAMPLE)
    acc = parse_acceptance(str(path))
    np.testing.assert_allclose(acc.alpha, [0.8, 0.625, 0.5])
    assert "metrics.txt" in acc.source


@pytest.mark.parametrize("text,needle", [
    ('vllm:spec_decode_num_drafts_total{model_name="m" 10\n', "line 1"),
    ("vllm:spec_decode_num_drafts_total 10\nthis is not prometheus\n", "line 2"),
    ("vllm:spec_decode_num_drafts_total 10\n", "no vllm:spec_decode_num_accepted"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\n', "num_drafts"),
    ('vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} -1\n',
     "negative"),
    ('vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\n'
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 7\n', "non-increasing"),
])
def test_prometheus_errors_name_the_problem(text, needle):
    with pytest.raises(DsdsimError, match=needle) as info:
        from_vllm_prometheus(text)
    assert "\n" not in str(info.value)


def test_request_histogram_single_draft_length():
    # 100 steps at K=3: 20 accepted 0, 30 accepted 1, 25 accepted 2, 25 accepted all 3.
    obj = {"metrics": {"speculative_decoding": {"acceptance_histogram": [20, 30, 25, 25], "num_spec_tokens": 3}}}
    acc = from_vllm_request_metrics(obj)
    np.testing.assert_allclose(acc.alpha, [0.8, 0.5 / 0.8, 0.25 / 0.5])
    # τ(3) equals the request's mean acceptance length 1 + accepted / steps
    assert acc.tau(3) == pytest.approx(1 + (30 + 2 * 25 + 3 * 25) / 100)


def test_request_histograms_pool_over_draft_lengths():
    by_len = {"2": [10, 10, 20], "3": [20, 30, 25, 25]}
    acc = from_vllm_request_metrics([{"speculative_decoding": {"acceptance_histogram_by_draft_length": by_len}}])
    # position 1: (30 + 80) / (40 + 100); position 2: (20 + 50) / (30 + 80); position 3 only K=3: 25 / 50
    np.testing.assert_allclose(acc.alpha, [110 / 140, 70 / 110, 25 / 50])


def test_request_histograms_recover_alpha_of_simulated_steps(tmp_path):
    """Simulate steps at mixed draft lengths, histogram them like vLLM, recover α within sampling error."""
    rng = np.random.default_rng(SEED)
    truth = np.array([0.85, 0.7, 0.6, 0.5])
    records = []
    for k, steps in [(2, 40_000), (4, 60_000)]:
        accepted = simulate_steps(np.broadcast_to(truth[:k], (steps, k)), rng) - 1
        records.append({"metrics": {"speculative_decoding": {
            "acceptance_histogram_by_draft_length": {str(k): np.bincount(accepted, minlength=k + 1).tolist()}}}})
    path = tmp_path / "requests.json"
    path.write_text(json.dumps(records))
    acc = parse_acceptance(str(path))
    np.testing.assert_allclose(acc.alpha, truth, atol=0.01)
    assert "2 requests" in acc.source


def test_request_detailed_per_step_arrays():
    spec = {"per_step_accepted": [0, 1, 3, 3, 2], "per_step_drafted": [3, 3, 3, 3, 3]}
    acc = from_vllm_request_metrics({"speculative_decoding": spec})
    np.testing.assert_allclose(acc.alpha, [4 / 5, 3 / 4, 2 / 3])


@pytest.mark.parametrize("obj,needle", [
    ({"speculative_decoding": {"acceptance_histogram": [5, -1, 2]}}, "whole counts"),
    ({"speculative_decoding": {"acceptance_histogram_by_draft_length": {"3": [1, 2, 3]}}}, "expected 4"),
    ({"speculative_decoding": {"mean_acceptance_length": 2.1}}, "no acceptance_histogram"),
    ({"speculative_decoding": {"acceptance_histogram": []}}, "non-empty"),
    ([], "no request metrics"),
    ({"speculative_decoding": {"acceptance_histogram": [0, 0, 0]}}, "no speculative steps"),
])
def test_request_metrics_errors(obj, needle):
    with pytest.raises(DsdsimError, match=needle):
        from_vllm_request_metrics(obj)


# ------------------------------------------------------------------------------------------------- parsing


def test_parse_forms():
    assert parse_acceptance("0.8").alpha == (0.8,)
    assert parse_acceptance(" 0.8, 0.7 ,0.6 ").alpha == (0.8, 0.7, 0.6)
    assert parse_acceptance("beta:0.8:20").spread == 20.0
    np.testing.assert_allclose(parse_acceptance("unconditional:0.68,0.39").alpha, [0.68, 0.39 / 0.68])


@pytest.mark.parametrize("bad", [1.2, -0.1, float("nan")])
def test_invalid_alpha_raises(bad):
    with pytest.raises(DsdsimError, match=r"outside \[0, 1\]"):
        constant(bad)
    with pytest.raises(DsdsimError):
        from_list([0.8, bad])


@pytest.mark.parametrize("call", [
    lambda: from_list([]),
    lambda: from_unconditional_rates([0.5, 0.6]),
    lambda: from_unconditional_rates([0.5, 1.2]),
    lambda: from_mean_acceptance_length(4.5, 3),
    lambda: from_mean_acceptance_length(0.9, 3),
    lambda: from_mean_acceptance_length(2.0, 0),
    lambda: constant(0.8).with_spread(-1.0),
    lambda: Acceptance((0.8, 0.7), "x", extrapolation="linear"),
    lambda: constant(0.8).tau(-1),
    lambda: constant(0.8).tau(1.5),
    lambda: constant(0.8).scaled(-1),
])
def test_invalid_inputs_raise_one_line(call):
    with pytest.raises(DsdsimError) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text,needle", [
    ("garbage", "use one of"),
    ("2.79", "al=2.79@K"),
    ("0.8,abc", "use one of"),
    ("unconditional:0.5,x", "cannot read numbers"),
    ("missing/metrics.json", "not found"),
    ("1.2,0.5", "outside"),
])
def test_parse_errors(text, needle):
    with pytest.raises(DsdsimError, match=needle) as info:
        parse_acceptance(text)
    assert "\n" not in str(info.value)


def test_bad_json_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{not json")
    with pytest.raises(DsdsimError, match="not valid JSON"):
        parse_acceptance(str(path))


def test_ingestion_lives_apart_from_the_model():
    """Parsing strings and vLLM files is dsdsim.policy.acceptance_input; the model module keeps τ, conversions and
    the spread, and does not hand out the parsing names (one home for each)."""
    import dsdsim
    from dsdsim.policy import acceptance, acceptance_input

    for name in ("parse_acceptance", "from_vllm_prometheus", "from_vllm_request_metrics", "ACCEPTANCE_FORMS"):
        assert not hasattr(acceptance, name), name
        assert hasattr(acceptance_input, name), name
    assert "def parse_acceptance" not in open(acceptance.__file__, encoding="utf-8").read()
    assert dsdsim.parse_acceptance is acceptance_input.parse_acceptance


def test_the_model_module_never_imports_the_parsing_module():
    """acceptance.py <- acceptance_input.py one way only: importing the model loads no parsing code."""
    import subprocess
    import sys

    code = ("import sys, dsdsim.policy.acceptance; "
            "print('dsdsim.policy.acceptance_input' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- messages in the user's words ----------------------------------------------------------------------------

INTERNAL_WORDS = ("from_list", "from_unconditional_rates", "parse_acceptance", "constant acceptance", "utf-8-sig",
                  "codec", "Traceback")


@pytest.mark.parametrize("text,wanted", [
    ("beta:1.5:10", ("'beta:1.5:10'", "mean α 1.5", "[0, 1]", "κ > 0", "beta:0.8:20")),
    ("beta:0.8:0", ("'beta:0.8:0'", "concentration κ 0", "> 0")),
    ("beta:0.8:-1", ("'beta:0.8:-1'", "concentration κ -1")),
    ("beta:0.8", ("'beta:0.8'", "beta:MEAN:KAPPA")),
    ("unconditional:0.3,0.5", ("'unconditional:0.3,0.5'", "non-increasing", "write 0.3,0.5",
                               "without 'unconditional:'")),
    ("unconditional:1.3,0.5", ("'unconditional:1.3,0.5'", "position 1 has 1.3", "[0, 1]")),
    ("-0.5", ("acceptance -0.5", "[0, 1]")),
    ("0.8,1.7", ("'0.8,1.7'", "position 2 has 1.7")),
    ("0.8,,0.7", ("cannot read numbers in '0.8,,0.7'",)),
    ("al=x@3", ("'al=x@3'", "al=2.79@3")),
    ("1e400", ("'1e400'", "finite")),
])
def test_parse_errors_name_what_the_user_wrote(text, wanted):
    """The message quotes the form the user typed and says what to type; no function or module names."""
    with pytest.raises(DsdsimError) as info:
        parse_acceptance(text)
    msg = str(info.value)
    assert "\n" not in msg
    for word in wanted:
        assert word in msg, (word, msg)
    for word in (*INTERNAL_WORDS, "position 1 has -0.5"):
        assert word not in msg, (word, msg)


def test_rising_unconditional_rates_name_no_function():
    with pytest.raises(DsdsimError, match="non-increasing") as info:
        from_unconditional_rates([0.3, 0.5])
    assert "from_list" not in str(info.value) and "conditional α" in str(info.value)


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_bytes("# caf\xe9\nvllm:spec_decode_num_drafts_total 100\n".encode("latin-1"))
    with pytest.raises(DsdsimError) as info:
        parse_acceptance(str(path))
    assert str(info.value) == "metrics.txt is not UTF-8 text: save it as UTF-8"


def test_a_byte_order_mark_is_still_utf8(tmp_path):
    """Editors on Windows save UTF-8 with a leading BOM; it is read as UTF-8 (JSON would otherwise refuse it)."""
    path = tmp_path / "requests.json"
    body = {"metrics": {"speculative_decoding": {"acceptance_histogram": [10, 30, 60]}}}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(body).encode())
    np.testing.assert_allclose(parse_acceptance(str(path)).alpha, [0.9, 60 / 90])


def test_request_metrics_errors_name_the_file_and_the_json_kind(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text("42")
    with pytest.raises(DsdsimError) as info:
        parse_acceptance(str(path))
    msg = str(info.value)
    assert msg.startswith("requests.json: request 1:") and "the number 42" in msg and "int" not in msg.split()
