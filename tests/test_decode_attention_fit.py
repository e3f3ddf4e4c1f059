"""Decode-attention figures fitted on published decode-only attention timings (scripts/fit_decode_attention.py over
measurements/kernels/attention_queries.csv): the shipped figures reproduce each fitted part's rows, the fit script is
up to date, and the fp8-cache gap on Hopper is on record.

Ground truth: the committed rows (LLMServingSim's per-layer profiles on the RTX cards; aiconfigurator's vLLM 0.24.0
generation-attention sweeps on H100 SXM, H200 SXM, B200, B300 and GB200), each citing its source. The time of a
decode over n sequences of c cached tokens is the cost model's: n (c + ramp) kv_bytes_per_token / (BW eta_max).
"""
from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
from dsdsim.specs.catalog import load_hardware
from dsdsim.units import median_abs

DATA = REPO_ROOT / "measurements" / "kernels" / "attention_queries.csv"
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
SWEPT = ("h100-sxm", "h200-sxm", "b200", "b300", "gb200")       # aiconfigurator's vLLM 0.24.0 sweeps


def _rows(part: str, kv_dtype: str) -> list[dict]:
    with DATA.open(encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh) if r["part"] == part and r["kv_dtype"] == kv_dtype
                and r["q_per_seq"] == "1" and r["attention"].startswith("gqa") and r["num_kv_heads"]
                and r["head_dim"] and int(r["batch"]) >= 16 and int(r["context"]) >= 256]


def _errors(part: str, kv_dtype: str) -> np.ndarray:
    """predicted / measured - 1 of each row, with the part's shipped decode-attention figures."""
    hw = load_hardware(part)
    eta = hw.kernels.decode_attention_bandwidth_fraction.value
    ramp = hw.kernels.decode_attention_ramp_tokens.value
    out = []
    for r in _rows(part, kv_dtype):
        per_token = 2 * int(r["num_kv_heads"]) * int(r["head_dim"]) * KV_BYTES[r["kv_dtype"]]
        predicted = int(r["batch"]) * (int(r["context"]) + ramp) * per_token / (hw.bandwidth * eta)
        out.append(predicted / (float(r["time_us"]) * 1e-6) - 1.0)
    return np.array(out)


@pytest.mark.parametrize("part", SWEPT + ("rtx-4090", "rtx-pro-6000"))
def test_the_shipped_figures_reproduce_the_16_bit_rows_of_their_part(part):
    errors = _errors(part, "bf16")
    assert len(errors) >= 20
    assert median_abs(errors) <= 0.05, f"{part}: median |error| {median_abs(errors):.3f}"
    assert load_hardware(part).kernels.decode_attention_bandwidth_fraction.measured_on == (part,)


@pytest.mark.parametrize("part", SWEPT)
def test_the_figure_each_swept_part_carried_before_read_its_rows_fast(part):
    """The A100-class 0.93 / 82-token figure (microsoft/onnxruntime PR #21414) every one of them carried, unverified:
    4-11% too fast on their own rows, where the fitted figures are within 5%."""
    hw = load_hardware(part)
    rows = _rows(part, "bf16")
    old = np.array([int(r["batch"]) * (int(r["context"]) + 82) * 2 * int(r["num_kv_heads"]) * int(r["head_dim"]) * 2
                    / (hw.bandwidth * 0.93) / (float(r["time_us"]) * 1e-6) - 1.0 for r in rows])
    assert -0.12 <= np.median(old) <= -0.03
    assert median_abs(_errors(part, "bf16")) < median_abs(old)


@pytest.mark.xfail(strict=True, reason="an fp8 cache is priced at the 16-bit figure over half the bytes; vLLM's "
                                       "FlashAttention-3 on Hopper dequantises it at 0.50-0.67 of bandwidth "
                                       "(measurements/kernels/README.md), so those steps read 22-40% fast")
@pytest.mark.parametrize("part", ["h100-sxm", "h200-sxm"])
def test_hopper_fp8_cache_decode(part):
    assert median_abs(_errors(part, "fp8")) <= 0.10


@pytest.mark.parametrize("part", ["b200", "b300", "gb200"])
def test_blackwell_fp8_cache_decode_is_within_the_16_bit_figure(part):
    """trtllm-gen decode streams an fp8 cache at 0.78-0.81 of bandwidth, near the 16-bit figure (0.82-0.85)."""
    assert median_abs(_errors(part, "fp8")) <= 0.08


def test_the_fit_script_is_up_to_date():
    out = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "fit_decode_attention.py"), "--check"],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout[-2000:]
