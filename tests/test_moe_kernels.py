"""Fused-MoE kernel families: the fitter inverts the cost model's own equation, the shipped figures reproduce the
published timings they were fitted to (measurements/kernels/fused_moe.csv, each row citing its source), and a whole
step of qwen3-30b-a3b spends per MoE layer what the published kernels take at that shape.

Ground truth: the committed rows (vLLM / SGLang / FlashInfer / aiter benchmark PRs, named per row). Tolerances per
family are the fits' own errors rounded up (scripts/fit_kernels.py prints them; measurements/kernels/fused_moe_fit.json
keeps them): the model has two figures per family and part, so a family whose published times vary with the format
(bf16 vs fp8 on Triton) or with tokens past the plateau (Marlin) is reproduced less closely.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
from dsdsim.fit.kernels import (COMPUTE_ROWS_PER_EXPERT, FITTABLE, Coverage, MoEFamilyFit, MoERow,
                                kept_compute_formats, moe_row_seconds, read_moe_rows, rows_per_expert, select_terms)
from dsdsim.units import median_abs
from dsdsim.specs.catalog import load_hardware
from dsdsim.units import DType

DATA = REPO_ROOT / "measurements" / "kernels" / "fused_moe.csv"
SUMMARY = json.loads((REPO_ROOT / "measurements" / "kernels" / "fused_moe_fit.json").read_text())
STAND_INS = {"a100-pcie-40gb": "a100-sxm-40gb"}    # scripts/fit_kernels.py: same HBM2 bandwidth and peaks

# (median |pred/meas - 1|, max |pred/meas - 1|) the shipped figures must meet on their own part's rows, those
# published at decode sizes (random routing); the sweeps to 16,384 tokens have their own test below
TOLERANCE = {"triton_fused_moe": (0.15, 0.35), "flashinfer_trtllm": (0.10, 0.45), "flashinfer_cutlass": (0.10, 0.15),
             "aiter": (0.05, 0.30), "marlin": (0.25, 0.60)}
# median |error| on the held-out rows (leave-one-shape-out; one-shape parts leave-one-row-out)
HELD_OUT = {"triton_fused_moe": 0.25, "flashinfer_trtllm": 0.10, "flashinfer_cutlass": 0.15, "aiter": 0.10,
            "marlin": 0.40}


def _row(shape: tuple, tokens: float, family: str, part: str, covers: Coverage = Coverage.call,
         routing: str = "uniform") -> MoERow:
    model, experts, experts_global, top_k, hidden, width, weight = shape
    return MoERow("synthetic", part, family, model, experts, experts_global, top_k, hidden, width, weight, tokens,
                  1.0, covers, True, routing=routing)


def _synthetic(hw, family, shapes, tokens, noise: float, seed: int = 0, routing: str = "uniform") -> list[MoERow]:
    """Rows timed by the cost model itself with ``family``'s figures, times scattered by a log-normal ``noise``."""
    rng = np.random.default_rng(seed)
    rows = [_row(s, t, "f", hw.name, routing=routing) for s in shapes for t in tokens]
    return [dataclasses.replace(r, time_s=moe_row_seconds(r, hw, family) * float(np.exp(rng.normal(0.0, noise))))
            for r in rows]


def _with(family, **values):
    from dsdsim.specs.hardware import Figure, Verified

    return family.model_copy(update={k: Figure(value=v, source="truth", verified=Verified.derived)
                                     for k, v in values.items()})


HOPPER_SHAPES = [("qwen3-30b", 128, 128, 8, 2048, 768, DType.fp8), ("mixtral", 8, 8, 2, 4096, 7168, DType.bf16),
                 ("qwen3-next", 512, 512, 10, 2048, 256, DType.fp8)]
DSV3_EP8 = [("dsv3-ep8", 32, 256, 8, 7168, 2048, w) for w in (DType.bf16, DType.fp8, DType.nvfp4)]
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128)


def test_fit_recovers_latency_and_bandwidth_from_rows_the_model_made():
    hw = load_hardware("h100-sxm")
    truth = _with(hw.kernels.moe_families["triton_fused_moe"], latency_s=12e-6, bandwidth_fraction=0.8)
    rows = _synthetic(hw, truth, HOPPER_SHAPES, TOKENS, noise=0.02)
    fit = MoEFamilyFit(hw, hw.kernels.moe_families["triton_fused_moe"]).fit(rows)
    assert fit.latency_s_ == pytest.approx(12e-6, rel=0.10)
    assert fit.bandwidth_fraction_ == pytest.approx(0.8, rel=0.03)
    assert median_abs(fit.residuals_) < 0.03                  # the 2% scatter, not a model error


def test_fit_recovers_the_lead_expert_term_and_selection_keeps_it_only_when_the_data_hold_it():
    hw = load_hardware("b300")
    base = hw.kernels.moe_families["flashinfer_trtllm"]
    truth = _with(base, latency_s=10e-6, bandwidth_fraction=0.85, lead_expert_bandwidth_fraction=0.4)
    rows = _synthetic(hw, truth, DSV3_EP8, TOKENS, noise=0.01)
    terms, folds = select_terms(rows, hw, base)
    assert terms == ("lead_expert_bandwidth_fraction",) and len(folds) == 3
    fit = MoEFamilyFit(hw, base, terms).fit(rows)
    assert fit.lead_expert_bandwidth_fraction_ == pytest.approx(0.4, rel=0.10)
    assert fit.latency_s_ == pytest.approx(10e-6, rel=0.15)
    assert fit.bandwidth_fraction_ == pytest.approx(0.85, rel=0.03)
    plain = _with(base, latency_s=10e-6, bandwidth_fraction=0.85).model_copy(
        update={"lead_expert_bandwidth_fraction": None})                 # no such term in the truth
    assert select_terms(_synthetic(hw, plain, DSV3_EP8, TOKENS, noise=0.01), hw, base)[0] == ()


def _balanced_logits_experts(tokens: int, experts: int, top_k: int) -> int:
    """Distinct experts ai-dynamo/aiconfigurator's collector/helper.py balanced_logits routes ``tokens`` to, worked
    out as that helper does (token t picks (t + j*stride) mod E, or (t*stride/T + j*stride) mod E below one stride)."""
    stride = -(-experts // top_k)
    t, j = np.arange(tokens)[:, None], np.arange(top_k)[None, :]
    picked = (t + j * stride) % experts if tokens >= stride else np.floor((t * stride / tokens + j * stride) % experts)
    return len(np.unique(picked.astype(int)))


@pytest.mark.parametrize("experts,top_k", [(128, 8), (256, 8), (512, 10), (160, 8), (60, 4), (8, 2)])
def test_balanced_routing_touches_the_experts_the_benchmark_picks(experts, top_k):
    for tokens in (1, 4, 16, 64, 256, 1024):
        row = dataclasses.replace(_row(("m", experts, experts, top_k, 2048, 768, DType.fp8), tokens, "f", "h200-sxm"),
                                  routing="balanced")
        assert row.experts_touched == _balanced_logits_experts(tokens, experts, top_k)
        uniform = dataclasses.replace(row, routing="uniform")
        assert uniform.experts_touched <= row.experts_touched + 1e-9   # random routing collides, balanced does not


def test_fit_recovers_a_compute_fraction_from_compute_bound_rows():
    hw = load_hardware("h200-sxm")
    base = hw.kernels.moe_families["triton_fused_moe"]
    from dsdsim.specs.hardware import Figure, Verified
    truth = _with(base, latency_s=9e-6, bandwidth_fraction=0.85).model_copy(update={"compute_fractions": {
        DType.fp8: Figure(value=0.4, source="truth", verified=Verified.derived)}})
    shapes = [("qwen3-30b", 128, 128, 8, 2048, 768, DType.fp8), ("qwen3-235b-tp4", 128, 128, 8, 4096, 384, DType.fp8),
              ("mixtral-fp8", 8, 8, 2, 4096, 7168, DType.fp8)]
    rows = _synthetic(hw, truth, shapes, TOKENS + (1024, 4096, 16384), noise=0.02, routing="balanced")
    assert sum(rows_per_expert(r) >= COMPUTE_ROWS_PER_EXPERT for r in rows) >= 6
    fit = MoEFamilyFit(hw, base).fit(rows)
    assert fit.compute_fractions_[DType.fp8] == pytest.approx(0.4, rel=0.05)
    assert fit.bandwidth_fraction_ == pytest.approx(0.85, rel=0.05)
    assert kept_compute_formats(fit, rows) == (DType.fp8,)            # 0.4 against the part's 0.53: it earns its place


def _sweep_errors(part: str, weight: DType, compute_bound: bool) -> np.ndarray:
    hw = load_hardware(part)
    fam = hw.kernels.moe_families["triton_fused_moe"]
    rows = [r for r in read_moe_rows(DATA) if r.part == part and r.routing == "balanced" and not r.excluded
            and r.weight is weight and (rows_per_expert(r) >= COMPUTE_ROWS_PER_EXPERT) == compute_bound]
    return np.array([moe_row_seconds(r, hw, fam) / r.time_s - 1.0 for r in rows])


@pytest.mark.parametrize("part", ["h100-sxm", "h200-sxm"])
def test_the_sweeps_to_16k_tokens_are_reproduced_and_fp8_keeps_its_own_compute_fraction(part):
    """aiconfigurator's SGLang 0.5.14 Triton rows, 1-16,384 tokens at TP 1-8: below the compute-bound regime as
    closely as the decode rows; compute-bound fp8 within 11% with its fitted fraction (0.41-0.42 of the fp8 peak,
    where the part's 0.53 read 19-21% fast); compute-bound bf16 scatters about 31-33% around any one fraction (the
    test's bound), so bf16 keeps the part's figure (kept_compute_formats)."""
    fam = load_hardware(part).kernels.moe_families["triton_fused_moe"]
    assert set(fam.compute_fractions) == {DType.fp8} and 0.35 <= fam.compute_fractions[DType.fp8].value <= 0.47
    for weight in (DType.bf16, DType.fp8):
        assert median_abs(_sweep_errors(part, weight, compute_bound=False)) <= 0.15
    assert median_abs(_sweep_errors(part, DType.fp8, compute_bound=True)) <= 0.11
    assert median_abs(_sweep_errors(part, DType.bf16, compute_bound=True)) <= 0.35


def test_a_routing_the_reader_does_not_know_is_refused(tmp_path):
    text = DATA.read_text().splitlines()
    bad = tmp_path / "rows.csv"
    bad.write_text("\n".join([text[0], text[1].rsplit(",", 1)[0] + ",skewed"]) + "\n")
    with pytest.raises(ValueError, match="unknown routing"):
        read_moe_rows(bad)


def test_fit_is_deterministic():
    hw = load_hardware("h100-sxm")
    rows = _synthetic(hw, hw.kernels.moe_families["triton_fused_moe"], HOPPER_SHAPES, TOKENS, noise=0.05, seed=3)
    a = MoEFamilyFit(hw, hw.kernels.moe_families["triton_fused_moe"]).fit(rows)
    b = MoEFamilyFit(hw, hw.kernels.moe_families["triton_fused_moe"]).fit(rows)
    assert (a.latency_s_, a.bandwidth_fraction_) == (b.latency_s_, b.bandwidth_fraction_)


def _fitted_groups() -> dict[tuple[str, str], list[MoERow]]:
    groups: dict[tuple[str, str], list[MoERow]] = {}
    for r in read_moe_rows(DATA):
        if not r.excluded and r.covers in FITTABLE and r.routing == "uniform":
            groups.setdefault((r.family, r.part), []).append(r)
    written = {(g["family"], g["part"]) for g in SUMMARY if g["status"] == "fitted"}
    return {k: v for k, v in groups.items() if k in written}


def test_every_row_keeps_its_source_and_every_fitted_family_is_in_the_summary():
    rows = read_moe_rows(DATA)
    assert len(rows) >= 200 and all(r.source.strip() for r in rows)
    fitted = {(g["family"], g["part"]) for g in SUMMARY if g["status"] == "fitted"}
    assert {("triton_fused_moe", "h100-sxm"), ("triton_fused_moe", "b200"), ("flashinfer_trtllm", "b300"),
            ("aiter", "mi355x"), ("marlin", "h20")} <= fitted


@pytest.mark.parametrize("family,part", sorted(_fitted_groups()))
def test_shipped_figures_reproduce_the_published_rows(family, part):
    rows = _fitted_groups()[family, part]
    hw = load_hardware(STAND_INS.get(part, part))
    fam = hw.kernels.moe_families[family] if part in hw.kernels.moe_families[family].latency_s.measured_on else None
    if fam is None:                       # a stand-in spec carries the measured part's figures as assumed
        fam = hw.kernels.moe_families[family]
        assert fam.latency_s.measured_on == (part,)
    errors = np.array([moe_row_seconds(r, hw, fam) / r.time_s - 1.0 for r in rows])
    median_tol, max_tol = TOLERANCE[family]
    assert median_abs(errors) <= median_tol, f"{family}/{part}: median |error| {median_abs(errors):.3f}"
    assert np.max(np.abs(errors)) <= max_tol, f"{family}/{part}: max |error| {np.max(np.abs(errors)):.3f}"


@pytest.mark.parametrize("group", [g for g in SUMMARY if g["status"] == "fitted"], ids=lambda g: g["family"] + "/" + g["part"])
def test_held_out_rows_are_reported_and_predicted(group):
    assert group["held_out"], "no held-out rows"
    assert sum(h["rows"] for h in group["held_out"]) >= min(group["rows"], 5)
    assert group["held_out_median_abs_error"] <= HELD_OUT[group["family"]]


def test_the_fit_script_is_up_to_date():
    """scripts/fit_kernels.py --check refits from the committed rows and finds nothing to change (deterministic)."""
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "fit_kernels.py"), "--check"],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-2000:]
    assert "held out" in out.stdout


# --- a whole step: qwen3-30b-a3b at batch 1 --------------------------------------------------------------------
#
# Published whole-call times of its MoE shape (E=128, top-8, h=2048, I=768, TP1): B200 bf16 39.61 / 73.18 us at 1 /
# 4 tokens (vllm-project/vllm PR #31448, default config); H100 fp8 44.54 / 90.46 us (vllm-project/vllm PR #24700,
# Qwen3 MoE FP8, Main). gb200 carries b200's Triton figures (same 8 TB/s HBM3e, Blackwell). Tolerance 30%: the
# held-out error of the Triton fits on those parts (b200 0.23, h100-sxm 0.19) rounded up.

QWEN3_CASES = [("gb200", None, 0, 39.61e-6), ("gb200", None, 3, 73.18e-6),
               ("h100-sxm", DType.fp8, 0, 44.54e-6), ("h100-sxm", DType.fp8, 3, 90.46e-6)]
OLD_LATENCY_S = 42e-6          # the single figure every spec carried (sgl-project/sglang PR #11816, B200 DeepSeek-R1)


def _moe_layer_s(hw, expert_dtype, k: int) -> float:
    from dsdsim.cost.step import simulate_step
    from dsdsim.specs.catalog import load_model
    from dsdsim.specs.deployment import Deployment

    # the published times are kernel benchmarks over random tokens (vLLM's benchmark_moe.py): independent routing
    step = simulate_step(load_model("qwen3-30b-a3b"), hw, Deployment(expert_dtype=expert_dtype, expert_overlap=0.0),
                         drafter="eagle3" if k else None, batch=1, k=k)
    (moe,) = [t for t in step.verify.op_times if t.op.kind.value == "moe_experts"]
    return float(moe.time_s) / float(moe.op.count)


@pytest.mark.parametrize("hw_name,expert_dtype,k,published_s", QWEN3_CASES)
def test_qwen3_moe_layer_time_matches_the_published_kernel(hw_name, expert_dtype, k, published_s):
    hw = load_hardware(hw_name)
    per_layer = _moe_layer_s(hw, expert_dtype, k)
    assert per_layer == pytest.approx(published_s, rel=0.30)
    assert hw.kernels.moe_families["triton_fused_moe"].latency_s.value < OLD_LATENCY_S


@pytest.mark.parametrize("hw_name,expert_dtype,k,published_s", [c for c in QWEN3_CASES if c[2] == 0])
def test_the_old_single_constant_overstated_the_one_token_call(hw_name, expert_dtype, k, published_s):
    """At one token the fixed part is most of the call: the old constant (plus its two launches) put the layer
    outside the published time's tolerance, the families put it inside."""
    legacy = _legacy(load_hardware(hw_name))        # one 42 us latency per call, 0.74 of bandwidth, every model
    assert _moe_layer_s(legacy, expert_dtype, k) > published_s * 1.30


def _legacy(hw):
    """``hw`` with the single MoE figures every spec carried before the families (sgl-project/sglang PR #11816)."""
    from dsdsim.specs.hardware import HardwareSpec

    data = hw.model_dump()
    kernels = data["kernels"]
    for key in ("moe_families", "moe_default_family"):
        kernels.pop(key)
    kernels["moe_call_latency_s"] = {"value": OLD_LATENCY_S, "source": "sglang PR #11816", "verified": "unverified"}
    kernels["moe_bandwidth_fraction"] = {"value": 0.74, "source": "sglang PR #11816", "verified": "unverified"}
    return HardwareSpec.model_validate(data)
