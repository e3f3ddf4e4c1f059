"""Invariants of whole steps: K = 0 is plain decoding, step time never falls as B, K or c grow, the vectorised
grid equals scalar calls, every number is finite, and memory feasibility flips to infeasible at large B x c.

Setups cover each layer kind (dense GQA, MoE, MLA with MTP, sliding window, chunked, sinks + MXFP4 experts),
tensor and expert parallelism, and every drafter kind.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsdsim.cost.memory import weight_bytes_per_gpu
from dsdsim.cost.step import simulate_step, step_time_grid
from dsdsim.errors import DsdsimError
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.model import FFNKind
from dsdsim.specs.setup import resolve
from dsdsim.units import DType

# (id, model, hardware, tp, ep, drafters)
SETUPS = [
    ("dense", "llama-3.1-8b", "h100-sxm", 1, 1,
     ["eagle3", "eagle", "medusa", "ngram", "draft-model:llama-3.2-1b", "self-spec:512"]),
    ("dense-tp", "llama-3.1-70b", "h100-sxm", 4, 1, ["eagle3", "draft-model:llama-3.2-1b"]),
    ("moe", "qwen3-30b-a3b", "h200-sxm", 1, 1, ["eagle3", "ngram", "self-spec:1024"]),
    ("moe-ep", "qwen3-30b-a3b", "h200-sxm", 4, 4, ["eagle3"]),
    ("mla", "deepseek-v3", "h200-sxm", 8, 1, ["mtp", "eagle3"]),
    ("mla-ep", "deepseek-v3", "h200-sxm", 8, 8, ["mtp"]),
    ("sliding", "gemma-3-27b", "h100-sxm", 2, 1, ["eagle3", "ngram"]),
    ("chunked", "llama-4-scout", "b200", 4, 1, ["eagle3"]),
    ("sinks-mxfp4", "gpt-oss-20b", "h100-sxm", 1, 1, ["eagle3", "medusa"]),
    ("mixtral-ep", "mixtral-8x7b", "a100-sxm-80gb", 4, 2, ["eagle3"]),
    ("moe-routing-stats", "qwen3-30b-a3b", "h200-sxm", 2, 2, ["eagle3"]),   # overlap + skewed popularity
]
# routing statistics for the "moe-routing-stats" setup: 38% of a token's experts reused by the next token,
# Zipf-like expert popularity
ROUTING = dict(expert_overlap=0.375, expert_popularity=tuple(float(x) for x in 1.0 / np.arange(1, 129) ** 0.5))


def deployment(tp: int, ep: int, model: str, setup_id: str = "") -> Deployment:
    return Deployment(tp=tp, ep=ep, **(ROUTING if setup_id == "moe-routing-stats" else {}))
CASES = [(sid, m, hw, tp, ep, d) for sid, m, hw, tp, ep, ds in SETUPS for d in ds]
CASE_IDS = [f"{c[0]}-{c[5]}" for c in CASES]

_setups: dict = {}


def setup_for(sid, model, hw, tp, ep, drafter):
    key = (sid, model, hw, tp, ep, drafter)
    if key not in _setups:
        _setups[key] = resolve(model, hw, deployment(tp, ep, model, sid), drafter)
    return _setups[key]


def max_k(s) -> int:
    return s.drafter.max_k if s.drafter is not None else 0


BATCHES = np.arange(1, 513)
CONTEXTS = [0, 1, 127, 128, 1000, 1024, 4096, 8192, 8193, 32768, 131072]


@pytest.mark.parametrize("sid,model,hw,tp,ep,drafter", CASES, ids=CASE_IDS)
def test_step_time_is_finite_positive_and_non_decreasing_in_b_k_c(sid, model, hw, tp, ep, drafter):
    s = setup_for(sid, model, hw, tp, ep, drafter)
    ks = np.arange(0, max_k(s) + 1)
    window = s.model.max_position_embeddings
    contexts = [c for c in CONTEXTS if window is None or c <= window]     # what the model holds (simulate_step)
    t, feasible = step_time_grid(None, None, batch_sizes=BATCHES, k_values=ks, contexts=contexts, setup=s)
    assert t.shape == (len(BATCHES), len(ks), len(contexts))
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    tol = 1e-12 * t
    assert np.all(np.diff(t, axis=0) >= -tol[1:]), "step time fell as the batch grew"
    # vLLM rounds its capture sizes to multiples of K + 1 (0.14+): one more draft token can pad to fewer tokens
    # (3 sequences: 15 tokens pad to 20 at K = 4, 18 tokens replay the 18-token graph at K = 5). Where the padded
    # verify tokens do not fall, the step time does not either.
    padded = simulate_step(None, None, batch=BATCHES[:, None, None], k=ks[None, :, None],
                           context=np.asarray(contexts, dtype=float)[None, None, :], setup=s).verify_padded_tokens
    padded = np.broadcast_to(padded, t.shape)
    fell = np.diff(t, axis=1) < -tol[:, 1:]
    assert not np.any(fell & (np.diff(padded, axis=1) >= 0)), "step time fell as K grew"
    assert np.all(np.diff(t, axis=2) >= -tol[:, :, 1:]), "step time fell as the context grew"
    # feasibility only ever flips from feasible to infeasible along each axis
    f = feasible.astype(int)
    assert np.all(np.diff(f, axis=0) <= 0) and np.all(np.diff(f, axis=1) <= 0) and np.all(np.diff(f, axis=2) <= 0)


@pytest.mark.parametrize("sid,model,hw,tp,ep,drafter", CASES, ids=CASE_IDS)
def test_k_zero_is_plain_decoding(sid, model, hw, tp, ep, drafter):
    b = np.array([1, 3, 64, 512])[:, None]
    c = np.array([0, 2048, 32768])[None, :]
    dep = deployment(tp, ep, model, sid)
    plain = simulate_step(model, hw, dep, None, b, 0, c)
    spec = simulate_step(model, hw, dep, drafter, b, 0, c)
    np.testing.assert_allclose(spec.step_time_s, plain.step_time_s, rtol=1e-12)
    np.testing.assert_allclose(spec.verify.time_s, plain.verify.time_s, rtol=1e-12)
    assert np.all(np.asarray(spec.draft.time_s) == 0)
    # and K = 1 costs strictly more than plain decoding
    one = simulate_step(model, hw, dep, drafter, b, 1, c)
    assert np.all(one.step_time_s > plain.step_time_s)


@settings(max_examples=40, deadline=None)
@given(case=st.sampled_from(CASES), b=st.integers(1, 1024), k_frac=st.floats(0, 1), c=st.integers(0, 65536))
def test_grid_equals_scalar_calls(case, b, k_frac, c):
    sid, model, hw, tp, ep, drafter = case
    s = setup_for(sid, model, hw, tp, ep, drafter)
    k = int(round(k_frac * max_k(s)))
    window = s.model.max_position_embeddings or 65536
    c = min(c, window)                                   # within the model's window (simulate_step refuses past it)
    batches, ks, contexts = [1, b, 1024], [0, k, max_k(s)], [c, 0, min(65536, window)]
    grid_t, grid_f = step_time_grid(None, None, batch_sizes=batches, k_values=ks, contexts=contexts, setup=s)
    one = simulate_step(None, None, batch=b, k=k, context=c, setup=s)
    assert float(one.step_time_s) == pytest.approx(float(grid_t[1, 1, 0]), rel=1e-12)
    assert bool(one.feasible) == bool(grid_f[1, 1, 0])
    assert float(one.verify.flops) > 0 and np.isfinite(float(one.memory.used_bytes))


def test_scalar_step_has_scalar_results():
    s = simulate_step("qwen3-30b-a3b", "h200-sxm", None, "eagle3", 8, 3, 2048)
    for x in (s.step_time_s, s.verify.time_s, s.draft.time_s, s.verify.flops, s.memory.used_bytes, s.feasible,
              s.experts_touched):
        assert np.ndim(x) == 0
    assert 8 <= float(s.experts_touched) <= 128


def test_grid_argument_errors():
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", None, None, 1, 3, 100)      # K > 0 needs a drafter
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 0, 1, 100)  # B >= 1
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 1, 1.5, 100)
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", None, "medusa", 1, 6, 100)   # beyond Medusa's 5 heads
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", Deployment(tp=3), None, 1, 0, 100)  # 3 does not divide 32 heads
    with pytest.raises(DsdsimError):
        simulate_step("llama-3.1-8b", "h100-sxm", None, "mtp", 1, 1, 100)     # no MTP module


# --- memory ------------------------------------------------------------------------------------------------


def test_memory_feasibility_flips_at_large_batch_times_context():
    # Llama-3.1-8B on one H100 (the driver's 85.03e9 B x 0.9 usable): 16.06 GB of bf16 weights, 131072 KV bytes a token
    s = simulate_step("llama-3.1-8b", "h100-sxm", None, None, np.array([1, 64])[:, None], 0,
                      np.array([1024, 131072])[None, :])
    assert s.feasible.tolist() == [[True, True], [True, False]]
    assert s.memory.used_bytes[1, 1] > 80e9
    # the largest batch that fits 8191 + 1 tokens each: (76.53e9 - weights) / (8192 x 131072) = 56.3 sequences,
    # less a little for activations and logits
    c = 8191
    batches = np.arange(1, 1025)
    _, feasible = step_time_grid("llama-3.1-8b", "h100-sxm", None, None, batches, [0], [c])
    largest = int(batches[feasible[:, 0, 0]].max())
    by_hand = (85.03e9 * 0.9 - 8_030_261_248 * 2) / ((c + 1) * 131072)
    assert by_hand - 2 <= largest <= by_hand
    assert not feasible[largest:, 0, 0].any()


def test_memory_terms_by_hand():
    # weights: every parameter at 2 bytes (bf16 checkpoint); KV: B * (c + K + 1) * 131072 bytes
    m_name, B, K, c = "llama-3.1-8b", 16, 3, 4000
    s = simulate_step(m_name, "h100-sxm", None, "eagle3", B, K, c)
    from dsdsim.specs.catalog import load_model

    m = load_model(m_name)
    assert s.memory.weights_bytes == m.params_total * 2
    assert float(s.memory.kv_bytes) == B * (c + K + 1) * 131072
    assert s.memory.capacity_bytes == pytest.approx(85.03e9 * 0.9)      # the driver's total (vLLM PR #26836)
    assert float(s.memory.draft_bytes) > 0                    # EAGLE-3 head weights and its own KV
    s2 = simulate_step(m_name, "h100-sxm", Deployment(tp=2), None, B, 0, c)
    assert s2.memory.weights_bytes == m.params_total * 2 / 2
    assert float(s2.memory.kv_bytes) == B * (c + 1) * 131072 / 2


def test_sliding_layers_hold_only_their_window():
    # Gemma-3-27B: 52 sliding layers keep 1024 tokens, 10 full layers keep everything; 16 KV heads x 128
    B, c = 2, 20000
    s = simulate_step("gemma-3-27b", "h100-sxm", None, None, B, 0, c)
    per_token_layer = 2 * 16 * 128 * 2
    assert float(s.memory.kv_bytes) == B * per_token_layer * (52 * 1024 + 10 * (c + 1))


def test_mxfp4_experts_are_stored_at_4_25_bits():
    # gpt-oss: MXFP4 routed experts (4-bit elements + an 8-bit scale per 32), everything else bf16
    from dsdsim.specs.catalog import load_model

    m = load_model("gpt-oss-20b")
    routed = sum(layer.ffn.num_experts * 3 * m.hidden_size * layer.ffn.expert_intermediate_size
                 for layer in m.layers if layer.ffn.kind is FFNKind.moe)
    expected = (m.params_total - routed) * 2 + routed * 4.25 / 8
    assert weight_bytes_per_gpu(m, Deployment()) == pytest.approx(expected, rel=1e-12)
    assert DType.mxfp4.bytes_per_element == 4.25 / 8
