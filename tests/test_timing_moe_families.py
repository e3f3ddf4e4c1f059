"""Timing of fused-MoE calls by kernel family (dsdsim.cost.timing.moe_family_rates): the family the engine names,
the weight format's launches and fallbacks, the shape terms, and a spec without families timed exactly as before.

Ground truth: the equation written out by hand from the spec's figures (one formula, checked term by term), the
kernel chains of the families (vLLM fused_experts_impl: 6 launches bf16, 8 fp8 block-quantised), and the legacy
formula of the single figures (2 launch gaps + max(2 floors - work, 0) + latency + work).
"""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.cost.ops import MoEExperts, OpKind, KernelClass, moe_experts
from dsdsim.cost.timing import (MoECall, launch_overhead, op_rates, op_time, p_norm_time, rates_of, record_rates,
                                seconds)
from dsdsim.fit.kernels import Coverage, MoERow, moe_row_seconds
from dsdsim.specs.catalog import load_hardware
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.units import DType

QWEN3 = dict(top_k=8, hidden=2048, width=768)          # qwen3-30b-a3b's routed experts (config.json)


def _op(weight: DType, tile: int = 16, experts: int = 128) -> MoEExperts:
    return MoEExperts(QWEN3["top_k"], QWEN3["hidden"], QWEN3["width"], weight, DType.bf16, tile, experts=experts)


def _hand_time(hw: HardwareSpec, family: str, weight: DType, tokens: float, touched: float, launches: float,
               call: MoECall) -> float:
    """The family's equation from its figures, written out (MoEFamilyFigures docstring)."""
    kf, fam = hw.kernels, hw.kernels.moe_families[family]
    op = _op(weight, int(fam.tile_m.value), call.experts)
    d = op.demand(tokens, touched, 1.0)
    own = fam.compute_fractions.get(weight)               # the family's fraction where fitted for the format
    tc = d.flops_padded / (hw.peak(weight) * (own.value if own is not None else kf.moe_compute_fraction.value))
    tm = d.bytes / (hw.bandwidth * fam.bandwidth_fraction.value)
    work = p_norm_time(tc, tm, kf.gemm_transition_p.value)
    fixed = fam.latency_s.value
    if fam.lead_expert_bandwidth_fraction is not None:
        fixed += call.expert_weight_bytes / (hw.bandwidth * fam.lead_expert_bandwidth_fraction.value)
    if fam.align_s_per_expert is not None:
        fixed += call.experts * fam.align_s_per_expert.value
    gap = hw.launch_overhead_s.value
    return launches * gap + max(2 * kf.kernel_floor_s.value - work, 0.0) + fixed + work


@pytest.mark.parametrize("hw_name,family,weight,launches", [
    ("h100-sxm", "triton_fused_moe", DType.bf16, 6), ("h100-sxm", "triton_fused_moe", DType.fp8, 8),
    ("b300", "flashinfer_trtllm", DType.nvfp4, 5), ("b300", "flashinfer_trtllm", DType.bf16, 4),
    ("mi355x", "aiter", DType.fp8, 5), ("h100-sxm", "marlin", DType.int4, 6)])
def test_one_call_is_the_family_equation(hw_name, family, weight, launches):
    hw = load_hardware(hw_name)
    op = _op(weight, int(hw.kernels.moe_families[family].tile_m.value))
    call = MoECall(op.expert_weight_bytes, op.experts)
    rates = rates_of(op, hw, moe_family=family)
    assert rates.helper_launches == launches - 2                   # the two grouped GEMMs are the op's own
    for tokens, touched in ((1.0, 8.0), (4.0, 29.1), (64.0, 126.0), (4096.0, 128.0)):   # the last compute-bound
        got = seconds(rates, op.demand(tokens, touched, 1.0), launch_overhead(hw, True))
        assert got == pytest.approx(_hand_time(hw, family, weight, tokens, touched, launches, call), rel=1e-12)


def test_the_engine_names_the_family_and_a_missing_one_runs_the_default():
    b300, h100 = load_hardware("b300"), load_hardware("h100-sxm")
    op = _op(DType.fp8)
    trtllm = rates_of(op, b300, "flashinfer_trtllm")
    triton = rates_of(op, b300, "triton_fused_moe")
    assert trtllm != triton and rates_of(op, b300) == triton        # None: the spec's default family
    assert b300.kernels.moe_default_family == "triton_fused_moe"
    # a family the part has no figures for (TRT-LLM-gen does not run on Hopper): the default, as engines fall back
    assert rates_of(op, h100, "flashinfer_trtllm") == rates_of(op, h100, "triton_fused_moe")
    # weight-only int4 is not a Triton format here: Marlin runs it (vLLM / SGLang on Hopper)
    assert h100.kernels.moe_family("triton_fused_moe", DType.int4)[0] == "marlin"
    assert rates_of(_op(DType.int4), h100).bytes_per_s == pytest.approx(
        h100.bandwidth * h100.kernels.moe_families["marlin"].bandwidth_fraction.value)


def test_the_lead_expert_term_grows_with_one_experts_bytes():
    """TRT-LLM-gen's fixed part grows with one expert's weights (FlashInfer PR #5301: 26 / 38 / 51 us at 1 token
    for NVFP4 / MXFP8 / BF16 of the same shape); the family's fixed seconds differ by W_e / (BW * fraction)."""
    hw = load_hardware("b300")
    fam = hw.kernels.moe_families["flashinfer_trtllm"]
    assert fam.lead_expert_bandwidth_fraction is not None
    small, big = (rates_of(MoEExperts(8, 7168, 2048, w, DType.bf16, 8, experts=32), hw, "flashinfer_trtllm")
                  for w in (DType.nvfp4, DType.bf16))
    w_small, w_big = (3 * 7168 * 2048 * w.bytes_per_element for w in (DType.nvfp4, DType.bf16))
    assert big.fixed_s - small.fixed_s == pytest.approx(
        (w_big - w_small) / (hw.bandwidth * fam.lead_expert_bandwidth_fraction.value), rel=1e-9)


def test_a_record_and_its_planned_operator_are_timed_alike():
    hw = load_hardware("b300")
    op = MoEExperts(8, 7168, 2048, DType.nvfp4, DType.bf16, 8)                 # no expert count given
    rec = op.record("experts", 4.0, 3.8, 0.125)
    assert record_rates(rec, hw, "flashinfer_trtllm") == rates_of(op, hw, "flashinfer_trtllm")
    t = op_time(rec, hw, moe_family="flashinfer_trtllm")
    assert float(t.time_s) == pytest.approx(seconds(rates_of(op, hw, "flashinfer_trtllm"), op.demand(4.0, 3.8, 0.125),
                                                    launch_overhead(hw, True)))
    assert t.terms.overhead_per > 0 and t.rates is not None


def test_the_fitter_times_a_row_with_the_same_formula():
    """dsdsim.fit.kernels.moe_row_seconds of a whole-call row is the operator's time by rates_of and seconds."""
    hw = load_hardware("h100-sxm")
    fam = hw.kernels.moe_families["triton_fused_moe"]
    row = MoERow("s", "h100-sxm", "triton_fused_moe", "qwen3", 128, 128, 8, 2048, 768, DType.fp8, 2.0, 1.0,
                 Coverage.call, True)
    op = _op(DType.fp8, int(fam.tile_m.value))
    expected = seconds(rates_of(op, hw), op.demand(2.0, row.experts_touched, 1.0), launch_overhead(hw, True))
    assert moe_row_seconds(row, hw, fam) == pytest.approx(expected, rel=1e-12)


def _legacy_spec(latency_s: float = 42e-6, fraction: float = 0.74) -> HardwareSpec:
    data = load_hardware("h100-sxm").model_dump()
    for key in ("moe_families", "moe_default_family"):
        data["kernels"].pop(key)
    data["kernels"]["moe_call_latency_s"] = {"value": latency_s, "source": "user", "verified": "unverified"}
    data["kernels"]["moe_bandwidth_fraction"] = {"value": fraction, "source": "user", "verified": "unverified"}
    return HardwareSpec.model_validate(data)


def test_a_spec_without_families_is_timed_by_its_single_figures_as_before():
    hw = _legacy_spec()
    kf = hw.kernels
    rec = moe_experts("experts", 1.0, 8, 2048, 768, 8.0, 1.0, DType.bf16, DType.bf16, tile_m=64)
    tc = rec.flops_padded / (hw.peak(DType.bf16) * kf.moe_compute_fraction.value)
    tm = rec.bytes / (hw.bandwidth * 0.74)
    work = p_norm_time(tc, tm, kf.gemm_transition_p.value)
    legacy = 2 * hw.launch_overhead_s.value + max(2 * kf.kernel_floor_s.value - work, 0.0) + 42e-6 + work
    assert float(op_time(rec, hw).time_s) == pytest.approx(legacy, rel=1e-12)
    assert op_time(rec, hw, moe_family="triton_fused_moe").time_s == op_time(rec, hw).time_s   # no families: ignored
    assert hw.kernels.moe_family("triton_fused_moe", DType.bf16) is None


def test_families_are_vectorised_over_a_grid():
    hw = load_hardware("gb200")
    op = _op(DType.bf16)
    tokens = np.array([1.0, 2.0, 4.0, 16.0])
    touched = 128 * (1 - (1 - 8 / 128) ** tokens)
    grid = seconds(rates_of(op, hw), op.demand(tokens, touched, 1.0), launch_overhead(hw, True))
    one = [seconds(rates_of(op, hw), op.demand(float(t), float(e), 1.0), launch_overhead(hw, True))
           for t, e in zip(tokens, touched)]
    assert np.allclose(grid, one, rtol=1e-12) and np.all(np.diff(grid) > 0)


def test_op_rates_takes_the_family_and_shape_from_the_plan():
    hw = load_hardware("h200-sxm")
    r = op_rates(hw, OpKind.moe_experts, KernelClass.fused_moe, DType.fp8, moe_family="triton_fused_moe",
                 moe_call=MoECall(3 * 2048 * 768, 128))
    fam = hw.kernels.moe_families["triton_fused_moe"]
    assert r.fixed_s == pytest.approx(fam.latency_s.value)       # no shape terms chosen on h200-sxm
    assert r.bytes_per_s == pytest.approx(hw.bandwidth * fam.bandwidth_fraction.value)
    assert hw.kernels.moe_tile_m("triton_fused_moe", DType.fp8) == 16
