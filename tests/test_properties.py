"""Property tests: predict() on random but valid models, deployments, acceptance and batch lists.

Models are built directly from the typed spec classes (ModelSpec / Layer / Attention / FFN): dense and MoE FFNs
(shared experts, dense-first layers), GQA/MHA/MQA, sliding-window and chunked layers, MLA, optional MTP modules.
Deployments use a tensor-parallel size that the heads allow and, for MoE, an expert-parallel size dividing both
tp and the expert count. For every draw:

* feasible rows have finite, positive step time, ITL and tokens/s, and tau in [1, K + 1];
* K* is in 0..max_k (or -1 exactly where nothing fits), and infeasible rows say so;
* the JSON render parses and carries every batch size; every vLLM table passes engines.validate_vllm_schedule
  (and, for SGLang / TensorRT-LLM, renders or refuses with a one-line DsdsimError).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsdsim.errors import DsdsimError
from dsdsim.export import engines
from dsdsim.export.prediction import PredictFormat, render
from dsdsim.policy.acceptance import constant, from_list
from dsdsim.policy.predict import predict
from dsdsim.specs.catalog import load_hardware
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import parse_drafter
from dsdsim.specs.model import FFN, Attention, AttentionKind, FFNKind, Layer, ModelSpec
from dsdsim.units import DType

SETTINGS = settings(max_examples=int(os.environ.get("DSDSIM_PROPERTY_EXAMPLES", "40")), deadline=None,
                    derandomize=not os.environ.get("DSDSIM_PROPERTY_EXAMPLES"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HARDWARE = ["h200-sxm", "h100-sxm", "mi300x", "l4"]


@st.composite
def attentions(draw, hidden: int):
    kind = draw(st.sampled_from(["full", "full", "sliding", "chunked", "mla"]))
    if kind == "mla":
        heads = draw(st.sampled_from([8, 16, 32, 64, 128]))
        nope = draw(st.sampled_from([64, 128]))
        rope = draw(st.sampled_from([32, 64]))
        return Attention(kind=AttentionKind.mla, num_heads=heads, num_kv_heads=heads, head_dim=nope + rope,
                         q_lora_rank=draw(st.sampled_from([None, 512, 1536])),
                         kv_lora_rank=draw(st.sampled_from([128, 256, 512])), qk_nope_head_dim=nope,
                         qk_rope_head_dim=rope, v_head_dim=draw(st.sampled_from([64, 128])))
    kv = draw(st.sampled_from([1, 2, 4, 8, 16]))
    group = draw(st.sampled_from([1, 2, 4, 8]))
    head_dim = draw(st.sampled_from([64, 80, 128, 256]))
    window = draw(st.sampled_from([128, 512, 4096, 8192])) if kind in ("sliding", "chunked") else None
    return Attention(kind=AttentionKind(kind), num_heads=kv * group, num_kv_heads=kv, head_dim=head_dim,
                     window=window, qkv_bias=draw(st.booleans()), qk_norm=draw(st.booleans()))


@st.composite
def ffns(draw, moe: bool):
    if not moe:
        return FFN(kind=FFNKind.dense, intermediate_size=draw(st.integers(64, 32768)))
    experts = draw(st.sampled_from([4, 8, 16, 32, 64, 128, 256]))
    shared = draw(st.integers(0, 2))
    return FFN(kind=FFNKind.moe, num_experts=experts, top_k=draw(st.integers(1, min(8, experts))),
               expert_intermediate_size=draw(st.integers(64, 4096)), num_shared_experts=shared,
               shared_intermediate_size=draw(st.integers(64, 4096)) if shared else 0,
               shared_gate=draw(st.booleans()) if shared else False)


@st.composite
def models(draw):
    hidden = draw(st.sampled_from([256, 512, 1024, 2048, 4096, 5120, 8192]))
    n_layers = draw(st.integers(1, 12))
    attn = draw(attentions(hidden))
    moe = draw(st.booleans())
    ffn = draw(ffns(moe))
    dense_ffn = draw(ffns(False))
    first_dense = draw(st.integers(0, min(3, n_layers - 1))) if moe else 0
    interleave = attn.kind is not AttentionKind.mla and draw(st.booleans())
    layers = []
    for i in range(n_layers):
        a = attn
        if interleave and i % 2 == 1:        # alternate with full-attention layers of the same heads
            a = attn.model_copy(update={"kind": AttentionKind.full, "window": None})
        layers.append(Layer(attention=a, ffn=dense_ffn if i < first_dense else ffn))
    mtp = draw(st.integers(0, 1))
    return ModelSpec(name="prop-model", family="property", hidden_size=hidden,
                     vocab_size=draw(st.integers(1000, 256000)), tie_word_embeddings=draw(st.booleans()),
                     layers=tuple(layers), mtp_layers=mtp, mtp_layer=layers[-1] if mtp else None)


def _tp_choices(model: ModelSpec) -> list[int]:
    out = []
    for tp in (1, 2, 4, 8):
        try:
            Deployment(tp=tp).check(model)
        except DsdsimError:
            continue
        out.append(tp)
    return out


@st.composite
def cases(draw):
    model = draw(models())
    tp = draw(st.sampled_from(_tp_choices(model)))
    ep = 1
    if model.is_moe:
        ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if tp % e == 0 and model.moe_ffn.num_experts % e == 0]))
    dep = Deployment(tp=tp, ep=ep, cuda_graphs=draw(st.booleans()),
                     dtype=draw(st.sampled_from([None, None, DType.fp8, DType.int4, DType.nvfp4])),
                     kv_dtype=draw(st.sampled_from([DType.bf16, DType.fp8])),
                     expert_overlap=draw(st.sampled_from([0.0, 0.0, 0.4])) if model.is_moe else 0.0)
    drafters = ["eagle3", "eagle", "ngram", "medusa"] + (["mtp"] if model.mtp_layers else [])
    drafter = draw(st.sampled_from(drafters))
    max_k = draw(st.integers(1, parse_drafter(drafter).max_k if drafter == "medusa" else 8))
    alpha = st.floats(0.0, 1.0, allow_nan=False)
    acc = draw(st.one_of(alpha.map(constant), st.lists(alpha, min_size=1, max_size=8).map(from_list)))
    batches = draw(st.lists(st.integers(1, 2048), min_size=1, max_size=6, unique=True))
    context = draw(st.sampled_from([0, 1, 128, 1024, 8192, 32768]))
    hw = draw(st.sampled_from(HARDWARE))
    return model, hw, dep, drafter, acc, context, batches, max_k


@pytest.fixture(scope="module", autouse=True)
def _warm_catalog():
    for name in HARDWARE:
        load_hardware(name)


@SETTINGS
@given(cases())
def test_predict_on_random_models(case):
    model, hw, dep, drafter, acc, context, batches, max_k = case
    p = predict(model, hw, dep, drafter, acceptance=acc, context=context, batch_sizes=batches, max_k=max_k, fixed_k=0)
    assert list(p.batch_sizes) == sorted(batches)
    assert p.k_values.tolist() == list(range(max_k + 1))

    # tau: 1 <= tau(K) <= K + 1 and non-decreasing in K
    tau = np.asarray(p.tau)
    assert np.all(np.isfinite(tau))
    assert np.all(tau >= 1 - 1e-12) and np.all(tau <= p.k_values + 1 + 1e-9)
    assert np.all(np.diff(tau) >= -1e-12)

    # the grid: finite positive step times wherever feasible; goodput NaN exactly where infeasible
    feas = np.asarray(p.feasible)
    assert np.all(np.isfinite(p.step_s[feas])) and np.all(p.step_s[feas] > 0)
    assert np.all(np.isfinite(p.goodput[feas])) and np.all(p.goodput[feas] > 0)
    assert np.all(np.isnan(p.goodput[~feas]))

    # K*: in 0..max_k where something fits, -1 exactly where nothing does
    any_fit = feas.any(axis=0)
    assert np.all((p.k_best >= 0) == any_fit)
    assert np.all(p.k_best[any_fit] <= max_k)
    for j in np.nonzero(any_fit)[0]:
        assert p.goodput[p.k_best[j], j] == np.nanmax(p.goodput[:, j])

    for r in p.rows:
        if not r.feasible:
            assert r.k is None and r.tokens_per_s is None
            continue
        for v in (r.tau, r.step_ms, r.itl_ms, r.tokens_per_s, r.speedup_vs_vanilla):
            assert v is not None and math.isfinite(v) and v > 0, r
        assert 0 <= r.k <= max_k
        assert 1 - 1e-12 <= r.tau <= r.k + 1 + 1e-9
        # the table's K is within its tolerance of the table's own K = 0 row; against a server without speculation
        # it can lose only that and the off tier's cost (vLLM issue #49548)
        i = list(p.k_values).index(r.k)
        j = list(p.batch_sizes).index(r.batch_size)
        assert p.goodput[i, j] >= p.goodput[0, j] * (1 - p.table.tolerance) * (1 - 1e-9)
        if not p.dynamic:
            assert r.speedup_vs_vanilla >= (1 - p.table.tolerance) * (1 - 1e-9)
        assert r.itl_ms == pytest.approx(r.step_ms / r.tau)
        assert r.tokens_per_s == pytest.approx(r.batch_size * r.tau / (r.step_ms / 1e3))

    # JSON contract parses (no NaN/Infinity tokens) and covers every batch size
    data = json.loads(render(p, PredictFormat.json), parse_constant=_no_constants)
    assert [row["batch_size"] for row in data["rows"]] == sorted(batches)
    if not any_fit.any():              # nothing fits: no table, and the engine formats refuse in one line
        assert data["table"]["ranges"] == []
        with pytest.raises(DsdsimError, match="no batch size fits"):
            render(p, PredictFormat.vllm)
        return
    assert engines.validate_ranges(data["table"]["ranges"])

    if all(k == 0 for _, _, k in data["table"]["ranges"]):   # never speculates: no engine table, in one line
        with pytest.raises(DsdsimError, match="serve without speculative decoding"):
            render(p, PredictFormat.vllm)
        return
    # an engine table that never beats a server without speculation is refused unless forced (one rule)
    from dsdsim.export.prediction import best_speedup, export_refusals

    gain = best_speedup(p)
    if gain is not None and gain <= 1.0:
        assert any("does not pay" in r for r in export_refusals(p, PredictFormat.vllm))
        with pytest.raises(DsdsimError, match="does not pay"):
            render(p, PredictFormat.vllm)
    # vLLM: every table passes vLLM's own schedule validation and ends at the last batch size that fits
    cfg = json.loads(render(p, PredictFormat.vllm, force=True))
    sched = engines.validate_vllm_schedule(cfg["num_speculative_tokens_per_batch_size"])
    assert sched[-1][1] == int(p.batch_sizes[any_fit][-1])
    assert cfg["num_speculative_tokens"] >= max(k for _, _, k in sched)
    assert cfg["num_speculative_tokens"] <= max(1, max_k)

    # SGLang and TensorRT-LLM: a table, or a one-line refusal (e.g. a table that never speculates)
    for fmt in (PredictFormat.sglang, PredictFormat.trtllm, PredictFormat.csv, PredictFormat.vllm_batch_stats):
        try:
            text = render(p, fmt)
        except DsdsimError as exc:
            assert str(exc) and "\n" not in str(exc)
            continue
        if fmt is not PredictFormat.csv:
            json.loads(text, parse_constant=_no_constants)


def _no_constants(name):
    raise AssertionError(f"JSON output contains {name}")


@SETTINGS
@given(models())
def test_random_models_are_consistent(model):
    """Parameter counts are positive and active <= total; KV bytes per token are positive."""
    assert 0 < model.params_active <= model.params_total
    assert model.kv_bytes_per_token() > 0
    if not model.is_moe:
        assert model.params_active == model.params_total


@settings(SETTINGS, max_examples=min(SETTINGS.max_examples, 8))
@given(cases(), st.integers(1, 512), st.integers(0, 8))
def test_plots_draw_for_random_models(tmp_path_factory, case, batch, k):
    """Both displays draw (and save) for any valid case, including ones where nothing fits in memory."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from dsdsim.cost.step import simulate_step
    from dsdsim.export.plots import PredictionDisplay, RooflineDisplay, save_png

    model, hw, dep, drafter, acc, context, batches, max_k = case
    out = tmp_path_factory.mktemp("plots")
    try:
        p = predict(model, hw, dep, drafter, acceptance=acc, context=context, batch_sizes=batches, max_k=max_k, fixed_k=0)
        save_png(PredictionDisplay.from_prediction(p).plot(), out / "prediction.png")
        k = min(k, max_k)
        step = simulate_step(model, hw, dep, drafter if k else None, batch, k, context)
        save_png(RooflineDisplay.from_step(step).plot(), out / "roofline.png")
    finally:
        plt.close("all")
    assert sorted(f.name for f in out.iterdir()) == ["prediction.png", "roofline.png"]
