"""Hardware specs say where each kernel figure was measured, their generation, and their fused-MoE families; `show
hardware` marks what is assumed from another part.

Ground truth: the sources the figures cite (the B200 GEMM sweep of vllm-project/vllm PR #20071 for
gemm_transition_p, the H100 graph replay of pytorch/pytorch issue #161104 for kernel_floor_s) and the fitted parts in
measurements/kernels/fused_moe_fit.json.
"""
from __future__ import annotations

import json

import pytest

from conftest import SHIPPED_HW
from dsdsim.errors import SpecError
from dsdsim.specs.catalog import load_hardware
from dsdsim.specs.hardware import HardwareSpec, KernelFigures, kernel_figure_origins


@pytest.mark.parametrize("name", SHIPPED_HW)
def test_every_shipped_spec_has_a_sourced_generation_and_kernel_figures_that_say_where_they_were_measured(name):
    hw = load_hardware(name)
    assert hw.generation is not None and hw.generation.source
    origins = kernel_figure_origins(hw)
    assert origins
    fitted_or_copied = [o for o in origins if o.name.endswith(("latency_s", "bandwidth_fraction", "_fraction",
                                                                "transition_p", "floor_s", "ramp_tokens"))]
    assert all(o.measured_on for o in fitted_or_copied), [o.name for o in fitted_or_copied if not o.measured_on]


@pytest.mark.parametrize("name", [n for n in SHIPPED_HW if not n.startswith(("gaudi", "tpu"))])
def test_gpus_run_fused_moe_families_and_copies_name_the_measured_part(name):
    hw = load_hardware(name)
    kf = hw.kernels
    assert kf.moe_families and kf.moe_default_family in kf.moe_families
    fitted = {(g["family"], g["part"]) for g in json.loads(
        (__import__("conftest").REPO_ROOT / "measurements/kernels/fused_moe_fit.json").read_text())
        if g["status"] == "fitted"}
    for family, fam in kf.moe_families.items():
        (part,) = fam.latency_s.measured_on
        assert (family, part) in fitted
        if part != name:
            assert fam.latency_s.verified.value == "unverified" and "assumed from" in fam.latency_s.note


def test_gaudi_and_tpu_keep_the_single_figures_marked_as_measured_on_b200():
    for name in ("gaudi3", "tpu-v5e", "tpu-v6e"):
        kf = load_hardware(name).kernels
        assert not kf.moe_families and kf.moe_call_latency_s.measured_on == ("b200",)


def test_h100_marks_what_it_assumes_from_other_parts():
    hw = load_hardware("h100-sxm")
    by_name = {o.name: o for o in kernel_figure_origins(hw)}
    assert by_name["gemm_transition_p"].assumed and by_name["gemm_transition_p"].measured_on == ("b200",)
    assert by_name["kernel_floor_s"].assumed is False
    assert by_name["moe_families.triton_fused_moe.latency_s"].assumed is False
    assert by_name["moe_families.marlin.latency_s"].measured_on == ("h20",)
    assert "moe_call_latency_s" not in by_name            # a view of the default family, not a figure of its own


def test_show_hardware_says_measured_or_assumed(cli):
    code, out, err = cli("show", "hardware", "h100-sxm")
    assert code == 0, err
    row = next(line for line in out.splitlines() if "gemm_transition_p" in line)
    assert "assumed from b200" in row
    assert any("triton_fused_moe" in line and "measured on this part" in line for line in out.splitlines())
    assert any("marlin" in line and "assumed from h20" in line for line in out.splitlines())
    assert "compute_fraction.fp8=0.41" in " ".join(out.split())       # a per-format figure names what it is
    code, out, err = cli("show", "hardware", "h100-sxm", "--format", "json")
    d = json.loads(out)
    assert d["generation"] == "hopper" and d["moe_default_family"] == "triton_fused_moe"
    figs = {f["name"]: f for f in d["kernel_figures"]}
    assert figs["gemm_transition_p"]["origin"] == "assumed from b200"
    assert figs["moe_families.triton_fused_moe.bandwidth_fraction"]["assumed"] is False
    assert figs["moe_families.triton_fused_moe.compute_fraction.fp8"]["value"] == pytest.approx(0.41)
    assert set(d["kernels"]["moe_families"]) == {"triton_fused_moe", "marlin"}


def test_list_hardware_json_carries_the_generation(cli):
    code, out, err = cli("list", "hardware", "--format", "json")
    assert code == 0, err
    assert {r["name"]: r["generation"] for r in json.loads(out)}["b200"] == "blackwell"


def _kernels(**changes) -> dict:
    data = load_hardware("h100-sxm").kernels.model_dump()
    data.update(changes)
    return data


def test_the_single_moe_figures_are_views_of_the_default_family_and_calibration_writes_through():
    hw = load_hardware("h100-sxm")
    fam = hw.kernels.moe_families["triton_fused_moe"]
    assert hw.kernels.moe_call_latency_s.value == fam.latency_s.value
    assert hw.kernels.moe_bandwidth_fraction.value == fam.bandwidth_fraction.value
    KernelFigures.model_validate(hw.kernels.model_dump())                        # a dump round-trips
    new = hw.with_kernels(source="calibrated", moe_call_latency_s=2e-5, moe_bandwidth_fraction=0.6)
    assert new.kernels.moe_families["triton_fused_moe"].latency_s.value == 2e-5
    assert new.kernels.moe_call_latency_s.value == 2e-5
    assert new.kernels.moe_families["triton_fused_moe"].bandwidth_fraction.value == 0.6
    assert new.with_efficiency(memory=0.8).kernels == new.kernels                 # survives a spec rebuild


@pytest.mark.parametrize("changes,message", [
    ({"moe_call_latency_s": {"value": 9e-5, "source": "stale", "verified": "unverified"}}, "view of"),
    ({"moe_default_family": "flashinfer_trtllm"}, "moe_default_family"),
    ({"moe_families": {}, "moe_default_family": None, "moe_call_latency_s": None}, "moe_families"),
])
def test_inconsistent_moe_figures_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        KernelFigures.model_validate(_kernels(**changes))


def test_a_user_spec_with_a_misspelled_family_figure_or_empty_measured_on_is_refused():
    data = load_hardware("h100-sxm").model_dump()
    data["kernels"]["moe_families"]["triton_fused_moe"]["latency"] = data["kernels"]["moe_families"][
        "triton_fused_moe"].pop("latency_s")
    with pytest.raises(ValueError, match="latency"):
        HardwareSpec.model_validate(data)
    data = load_hardware("h100-sxm").model_dump()
    data["kernels"]["kernel_floor_s"]["measured_on"] = []
    with pytest.raises(ValueError, match="measured_on"):
        HardwareSpec.model_validate(data)


def test_a_spec_without_a_generation_still_loads(tmp_path):
    data = load_hardware("h100-sxm").model_dump(mode="json")
    data.pop("generation")
    hw = HardwareSpec.model_validate(data)
    assert hw.generation_name is None


def test_with_kernels_names_the_figures_it_knows():
    with pytest.raises(SpecError, match="unknown kernel figure"):
        load_hardware("h100-sxm").with_kernels(moe_families=1.0)
