"""`dsdsim list` / `dsdsim show` against hand-checked figures, in-process and as a real subprocess; import cost.

Ground truth: the H100 SXM datasheet figures in hw_specs/h100-sxm.yaml (80 GB, 3.35 TB/s, 989.4 TFLOP/s dense
bf16; nvidia.com/en-us/data-center/h100), and Llama-3.1-8B's config.json (32 layers, 8 KV heads of 128;
8,030,261,248 weights in the published safetensors index, huggingface.co/meta-llama/Llama-3.1-8B).
"""
from __future__ import annotations

import json

import pytest

from conftest import SHIPPED_HW, SHIPPED_MODELS, run_subprocess


def test_show_hardware_json(cli):
    code, out, err = cli("show", "hardware", "h100-sxm", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["name"] == "h100-sxm"
    assert d["memory_bytes"] == 80.0e9
    assert d["memory_bandwidth_bytes_per_s"] == 3.35e12
    peaks = d["peak_flops_per_s"]
    assert peaks["bf16"] == 989.4e12 and peaks["fp8"] == 1978.9e12
    assert all(isinstance(v, float) and v > 0 for v in peaks.values())
    ridge = d["ridge_point_flop_per_byte"]
    assert set(ridge) == set(peaks)
    assert ridge["bf16"] == pytest.approx(989.4e12 / 3.35e12, rel=1e-12)   # 295.3 FLOP/byte


@pytest.mark.parametrize("name", SHIPPED_HW)
def test_show_every_hardware_json_is_consistent(cli, name):
    code, out, err = cli("show", "hardware", name, "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    for dtype, peak in d["peak_flops_per_s"].items():
        assert d["ridge_point_flop_per_byte"][dtype] == pytest.approx(peak / d["memory_bandwidth_bytes_per_s"])


def test_show_model_json(cli):
    code, out, err = cli("show", "model", "llama-3.1-8b", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["name"] == "llama-3.1-8b"
    assert d["family"] == "llama"
    assert d["num_layers"] == 32
    # 32 layers x 2 (K, V) x 8 KV heads x 128 dims x 2 bytes
    assert d["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2 == 131072
    # the published safetensors total; dense, so every weight is active
    assert d["params_total"] == 8_030_261_248
    assert d["params_active"] == d["params_total"]


def test_show_moe_model_json(cli):
    code, out, err = cli("show", "model", "qwen3-30b-a3b", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["family"] == "qwen3_moe" and d["num_experts"] == 128 and d["experts_per_token"] == 8
    assert d["params_active"] < d["params_total"] / 5
    # 48 layers x 2 x 4 KV heads x 128 dims x 2 bytes (config.json: num_key_value_heads 4, head_dim 128)
    assert d["kv_bytes_per_token"] == 48 * 2 * 4 * 128 * 2


@pytest.mark.parametrize("kind", ["model", "hardware"])
def test_show_table_format(cli, kind):
    name = "llama-3.1-8b" if kind == "model" else "h100-sxm"
    code, out, err = cli("show", kind, name)
    assert code == 0, err
    assert name in out


def test_list_models_names_every_shipped_model(cli):
    code, out, err = cli("list", "models")
    assert code == 0, err
    for name in SHIPPED_MODELS:
        assert name in out, name
    code, out, err = cli("list", "models", "--format", "json")
    assert code == 0, err
    assert sorted(r["name"] for r in json.loads(out)) == SHIPPED_MODELS


def test_list_hardware_names_every_shipped_part(cli):
    code, out, err = cli("list", "hardware")
    assert code == 0, err
    for name in SHIPPED_HW:
        assert name in out, name
    code, out, err = cli("list", "hardware", "--format", "json")
    assert sorted(r["name"] for r in json.loads(out)) == SHIPPED_HW


def test_list_models_as_a_real_command():
    r = run_subprocess("-m", "dsdsim", "list", "models", env_extra={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    for name in SHIPPED_MODELS:
        assert name in r.stdout, name


def test_bad_input_as_a_real_command():
    r = run_subprocess("-m", "dsdsim", "show", "model", "llama-3.1-8")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "llama-3.1-8b" in r.stderr


@pytest.mark.parametrize("argv", [("show", "model", "llama-3.1-8b", "--format", "yaml"), ("no-such-command",),
                                  ("explain", "--batch", "many")])
def test_usage_errors_exit_2_in_one_line(argv):
    r = run_subprocess("-m", "dsdsim", *argv)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr


@pytest.mark.parametrize("argv", [(), ("list",)])
def test_no_arguments_prints_help_without_a_traceback(argv):
    r = run_subprocess("-m", "dsdsim", *argv)
    assert "Usage" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


IMPORT_CHECK = """
import sys
import dsdsim
from dsdsim import load_model, simulate_step
import dsdsim.cli
heavy = sorted(m for m in ("torch", "matplotlib", "pandas") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_import_dsdsim_does_not_load_torch_or_matplotlib():
    r = run_subprocess("-c", IMPORT_CHECK)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "none"
