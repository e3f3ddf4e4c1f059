"""Foundation: every shipped spec loads; bad input fails with one line, exit code 2 and no traceback.

Ground truth here is the shipped files themselves (each hardware YAML must validate; each model config's own
num_hidden_layers / hidden_size / vocab_size must survive the parse) and the error contract of dsdsim.cli:
"Bad input ends with one line on stderr naming the problem and the fix, exit code 2, no traceback".
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO_ROOT, SHIPPED_HW, SHIPPED_MODELS
from dsdsim.errors import DsdsimError, SpecError
from dsdsim.specs.catalog import hardware_names, load_hardware, load_model, model_names
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.hf_config import model_from_hf_config
from dsdsim.specs.model import ModelSpec
from dsdsim.units import DType

H100_YAML = (REPO_ROOT / "hw_specs" / "h100-sxm.yaml").read_text()


def _config(name: str) -> dict:
    return json.loads((REPO_ROOT / "model_specs" / f"{name}.json").read_text())


# --- shipped specs ------------------------------------------------------------------------------------


def test_shipped_lists_match_the_catalog(clean_catalog):
    assert len(SHIPPED_HW) == 26, ("24 accelerators from the first issue, the L20 of measurements.md item 22 and the "
                                   "RTX PRO 6000 of LLMServingSim's serving runs")
    assert hardware_names() == SHIPPED_HW
    assert model_names() == SHIPPED_MODELS


@pytest.mark.parametrize("name", SHIPPED_HW)
def test_every_shipped_hardware_file_loads(name):
    hw = load_hardware(name)
    assert isinstance(hw, HardwareSpec) and hw.name == name
    # SI units: capacities of 16 GB .. 1 TB, HBM/GDDR bandwidth 0.1 .. 20 TB/s
    assert 16e9 <= hw.memory_capacity <= 1e12
    assert 1e11 <= hw.bandwidth <= 2e13
    assert DType.bf16 in hw.peak_flops_per_s
    # dense bf16 ridge points of real parts: tens to a few hundred FLOP/byte
    assert 10 < hw.ridge_point(DType.bf16) < 600
    for fig in (hw.memory_bytes, hw.memory_bandwidth_bytes_per_s, *hw.peak_flops_per_s.values()):
        assert fig.source.strip(), f"{name}: every figure keeps a source"
    # the same file by path gives the same spec
    assert load_hardware(str(REPO_ROOT / "hw_specs" / f"{name}.yaml")) == hw


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_every_shipped_config_round_trips_through_the_parser(name):
    m = load_model(name)
    assert isinstance(m, ModelSpec) and m.name == name
    raw = _config(name)
    text = raw.get("text_config", raw) if "text_config" in raw else raw
    # the config's own figures survive the parse
    assert m.num_layers == text["num_hidden_layers"]
    assert m.hidden_size == text["hidden_size"]
    assert m.vocab_size == (text.get("vocab_size") or raw.get("vocab_size"))
    assert m.params_active <= m.params_total
    # every model caches keys and values, except a drafter whose layers all read its target's cache
    shared = text.get("num_kv_shared_layers", 0) == text["num_hidden_layers"]
    assert (m.kv_bytes_per_token(DType.bf16) == 0) if shared else (m.kv_bytes_per_token(DType.bf16) > 0)
    # parsing the dict again gives an identical, frozen spec
    again = model_from_hf_config(raw, name=name, source=m.source)
    assert again == m
    with pytest.raises(Exception):
        m.hidden_size = 1  # frozen


def test_llama_kv_bytes_per_token_by_hand():
    # Llama-3.1-8B: 32 layers x (K and V) x 8 KV heads x 128 head dim x 2 bytes (bf16) = 131072 bytes
    assert load_model("llama-3.1-8b").kv_bytes_per_token(DType.bf16) == 32 * 2 * 8 * 128 * 2 == 131072


# --- bad input: one line, exit 2, no traceback ---------------------------------------------------------


def _hw_variant(old: str, new: str) -> str:
    assert old in H100_YAML, old
    return H100_YAML.replace(old, new, 1)


def _model_variant(**changes) -> str:
    d = _config("qwen3-30b-a3b")
    for k, v in changes.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v
    return json.dumps(d)


BINARY = b"\x89PNG\r\n\x1a\n\x00\xff\xfe\xfd" + bytes(range(256))

# (case id, command kind, file name, content, a phrase the one-line message must contain)
BAD_INPUTS = [
    ("malformed-yaml", "hardware", "bad.yaml", "name: x\n  oops: [\n", "malformed YAML"),
    ("malformed-json", "model", "bad.json", '{"model_type": "llama",', "malformed JSON"),
    ("empty-yaml", "hardware", "empty.yaml", "", "empty"),
    ("empty-json", "model", "empty.json", "   \n", "empty"),
    ("binary-yaml", "hardware", "blob.yaml", BINARY, "binary"),
    ("binary-json", "model", "blob.json", BINARY, "binary"),
    ("top-level-list", "hardware", "list.yaml", "- 1\n- 2\n", "mapping"),
    ("missing-field", "hardware", "missing.yaml",
     "\n".join(line for line in H100_YAML.splitlines() if not line.startswith("memory_bandwidth_bytes_per_s")),
     "memory_bandwidth_bytes_per_s"),
    ("misspelled-field", "hardware", "typo.yaml",
     _hw_variant("memory_bandwidth_bytes_per_s:", "memory_bandwith_bytes_per_s:"), "memory_bandwith_bytes_per_s"),
    ("extra-field", "hardware", "extra.yaml", H100_YAML + "\ncolour: green\n", "colour"),
    ("negative-bandwidth", "hardware", "neg.yaml",
     _hw_variant("memory_bandwidth_bytes_per_s: {value: 3.35e+12", "memory_bandwidth_bytes_per_s: {value: -3.35e+12"),
     "memory_bandwidth_bytes_per_s"),
    ("bandwidth-in-GB/s", "hardware", "gbs.yaml",
     _hw_variant("memory_bandwidth_bytes_per_s: {value: 3.35e+12", "memory_bandwidth_bytes_per_s: {value: 3350"),
     "bytes/s"),
    # H100 SXM's SPARSE bf16 figure (2x dense 989.4 TFLOP/s) on its own 3.35 TB/s: ridge 591 FLOP/byte
    ("sparse-peak", "hardware", "sparse.yaml", _hw_variant("bf16: {value: 989.4e+12", "bf16: {value: 1979e+12"),
     "sparse"),
    ("sparse-peak-alone", "hardware", "sparse2.yaml",
     re.sub(r"peak_flops_per_s:\n(  .*\n)+", "peak_flops_per_s:\n  bf16: {value: 1979.0e+12, source: x, verified: vendor}\n",
            H100_YAML), "sparse"),
    ("missing-source", "hardware", "nosrc.yaml",
     _hw_variant('memory_bytes: {value: 80.0e+9, source: "https://www.nvidia.com/en-us/data-center/h100/", ',
                 "memory_bytes: {value: 80.0e+9, "), "source"),
    ("unknown-model-type", "model", "next.json", _model_variant(model_type="qwen3_next"), "qwen3_next"),
    ("linear-attention", "model", "linear.json", _model_variant(linear_num_key_heads=16), "linear_num_key_heads"),
    ("model-missing-field", "model", "nohidden.json", _model_variant(hidden_size=None), "hidden_size"),
    ("model-not-an-object", "model", "list.json", "[1, 2, 3]", "JSON object"),
    ("model-bad-number", "model", "badnum.json", _model_variant(num_hidden_layers="forty-eight"), "num_hidden_layers"),
    ("no-such-file", "hardware", None, None, "does not exist"),
]


def _assert_one_line_error(code: int, out: str, err: str, phrase: str) -> None:
    assert code == 2, (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("dsdsim: error:"), lines[0]
    assert phrase.lower() in lines[0].lower(), (phrase, lines[0])
    assert out == ""


@pytest.mark.parametrize("case,kind,fname,content,phrase", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_spec_file_gives_one_line_exit_2(cli, tmp_path, case, kind, fname, content, phrase):
    if fname is None:
        path = tmp_path / "nowhere" / "gpu.yaml"
    else:
        path = tmp_path / fname
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = cli("show", kind, str(path), "--format", "json")
    _assert_one_line_error(code, out, err, phrase)


@pytest.mark.parametrize("case,kind,fname,content,phrase",
                         [c for c in BAD_INPUTS if c[2] is not None], ids=[c[0] for c in BAD_INPUTS if c[2]])
def test_bad_spec_file_raises_spec_error_in_the_library(tmp_path, case, kind, fname, content, phrase):
    path = tmp_path / fname
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    load = load_hardware if kind == "hardware" else load_model
    with pytest.raises(SpecError) as info:
        load(str(path))
    assert "\n" not in str(info.value)
    assert isinstance(info.value, DsdsimError)


@pytest.mark.parametrize("kind,name,expected", [
    ("model", "llama-3.1-8", "llama-3.1-8b"),
    ("model", "qwen3-30b", "qwen3-30b-a3b"),
    ("hardware", "h100", "h100-sxm"),
    ("hardware", "mi300", "mi300x"),
])
def test_unknown_name_lists_close_names(cli, kind, name, expected):
    code, out, err = cli("show", kind, name)
    _assert_one_line_error(code, out, err, expected)
    assert f"dsdsim list {'models' if kind == 'model' else 'hardware'}" in err


def test_unknown_name_with_nothing_close_still_one_line(cli):
    code, out, err = cli("show", "model", "zzzzzz")
    _assert_one_line_error(code, out, err, "unknown model")
    assert "did you mean" not in err


def test_lookup_is_exact_never_fuzzy():
    # STYLE item 11: a near-miss is an error, not the longest substring match
    with pytest.raises(SpecError):
        load_model("llama-3.1")
    with pytest.raises(SpecError):
        load_hardware("H100-SXM")


# --- user spec folders -----------------------------------------------------------------------------------


def _user_folder(root: Path) -> Path:
    d = root / "myspecs"
    d.mkdir()
    (d / "my-gpu.yaml").write_text(_hw_variant("name: h100-sxm", "name: my-gpu")
                                   .replace("value: 3.35e+12", "value: 4.0e+12", 1))
    cfg = _config("llama-3.2-1b")
    cfg["num_hidden_layers"] = 4
    (d / "my-model.json").write_text(json.dumps(cfg))
    return d


def test_specs_dir_option_adds_user_specs(cli, clean_catalog, tmp_path):
    d = _user_folder(tmp_path)
    code, out, err = cli("--specs-dir", str(d), "show", "hardware", "my-gpu", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "my-gpu" and data["memory_bandwidth_bytes_per_s"] == 4.0e12
    code, out, err = cli("--specs-dir", str(d), "show", "model", "my-model", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["num_layers"] == 4
    code, out, err = cli("--specs-dir", str(d), "list", "models", "--format", "json")
    names = {r["name"] for r in json.loads(out)}
    assert names == set(SHIPPED_MODELS) | {"my-model"}
    code, out, err = cli("--specs-dir", str(d), "list", "hardware", "--format", "json")
    assert {r["name"] for r in json.loads(out)} == set(SHIPPED_HW) | {"my-gpu"}


def test_specs_dir_that_does_not_exist(cli, clean_catalog, tmp_path):
    code, out, err = cli("--specs-dir", str(tmp_path / "nope"), "list", "models")
    _assert_one_line_error(code, out, err, "does not exist")


def test_env_specs_dirs(clean_catalog, tmp_path, monkeypatch):
    d = _user_folder(tmp_path)
    assert "my-gpu" not in hardware_names()
    monkeypatch.setenv("DSDSIM_SPECS_DIRS", str(d))
    assert "my-gpu" in hardware_names() and "my-model" in model_names()
    assert load_hardware("my-gpu").bandwidth == 4.0e12
    assert load_model("my-model").num_layers == 4
    # shipped names still resolve, and the user folder is searched as well (not instead)
    assert load_model("llama-3.1-8b").num_layers == 32


def test_env_specs_dirs_through_the_cli_subprocess(tmp_path):
    from conftest import run_subprocess

    d = _user_folder(tmp_path)
    r = run_subprocess("-m", "dsdsim", "show", "hardware", "my-gpu", "--format", "json",
                       env_extra={"DSDSIM_SPECS_DIRS": str(d)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == "my-gpu"
