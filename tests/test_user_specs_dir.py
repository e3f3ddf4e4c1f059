"""A user specs folder (--specs-dir, DSDSIM_SPECS_DIRS): a file named like a shipped spec is said to shadow it, an
unreadable file fails only what asks for it; and name lookups are remembered by value, forgotten when the catalog
changes."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO_ROOT, SHIPPED_MODELS

BROKEN_JSON = '{"model_type": "llama", "hidden_size": \n'


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("dsdsim: warning:")]


def _folder(tmp_path, **files: str):
    d = tmp_path / "specs"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def test_a_user_model_named_like_a_shipped_one_warns_naming_both(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path)
    shutil.copy(REPO_ROOT / "model_specs" / "llama-3.1-8b.json", d / "llama-3.1-8b.json")
    code, out, err = cli("--specs-dir", d, "list", "models", "--format", "json")
    assert code == 0, err
    (line,) = _warnings(err)
    assert str(d / "llama-3.1-8b.json") in line and "shadows the shipped model spec 'llama-3.1-8b'" in line
    assert "model_specs/llama-3.1-8b.json" in line


def test_a_user_hardware_file_named_like_a_shipped_one_warns(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"h100-sxm.yaml": (REPO_ROOT / "hw_specs" / "h100-sxm.yaml").read_text()})
    code, out, err = cli("--specs-dir", d, "show", "hardware", "h100-sxm", "--format", "json")
    assert code == 0, err
    (line,) = _warnings(err)
    assert "h100-sxm.yaml" in line and "shadows the shipped hardware spec 'h100-sxm'" in line


def test_no_warning_without_shadowing(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"my-model.json": (REPO_ROOT / "model_specs" / "llama-3.1-8b.json").read_text()})
    code, out, err = cli("--specs-dir", d, "list", "models", "--format", "json")
    assert code == 0 and _warnings(err) == [], err


def test_a_broken_model_file_is_skipped_by_a_listing(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"broken.json": BROKEN_JSON,
                             "my-model.json": (REPO_ROOT / "model_specs" / "llama-3.1-8b.json").read_text()})
    code, out, err = cli("--specs-dir", d, "list", "models", "--format", "json")
    assert code == 0, err
    assert {r["name"] for r in json.loads(out)} == set(SHIPPED_MODELS) | {"my-model"}
    (line,) = _warnings(err)
    assert "skipped" in line and str(d / "broken.json") in line and "malformed JSON" in line


def test_a_broken_hardware_file_is_skipped_by_a_listing(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"badhw.yaml": "name: my-gpu\nmemory: [\n"})
    code, out, err = cli("--specs-dir", d, "list", "hardware", "--format", "json")
    assert code == 0, err
    assert "h100-sxm" in {r["name"] for r in json.loads(out)}
    (line,) = _warnings(err)
    assert "skipped" in line and "badhw.yaml" in line


def test_a_broken_file_does_not_fail_a_command_that_does_not_read_it(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"broken.json": BROKEN_JSON, "badhw.yaml": "name: my-gpu\nmemory: [\n"})
    code, out, err = cli("--specs-dir", d, "predict", "-m", "llama-3.1-8b", "-b", "1,8", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["model"] == "llama-3.1-8b"


def test_a_command_that_asks_for_the_broken_spec_fails_with_its_error(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"broken.json": BROKEN_JSON})
    for argv in (("show", "model", "broken"), ("predict", "-m", "broken")):
        code, out, err = cli("--specs-dir", d, *argv)
        assert code == 2 and out == ""
        lines = [line for line in err.splitlines() if not line.startswith("dsdsim: warning:")]
        assert len(lines) == 1 and lines[0].startswith("dsdsim: error:"), err
        assert str(d / "broken.json") in lines[0] and "malformed JSON" in lines[0]
        assert "Traceback" not in err


def test_a_broken_engine_file_does_not_fail_the_default_engine(cli, clean_catalog, tmp_path):
    d = _folder(tmp_path, **{"my-engine.yaml": "extends: vllm-0.24\nterms: [\n"})
    code, out, err = cli("--specs-dir", d, "predict", "-b", "1,8", "--format", "json")
    assert code == 0, err
    assert any("my-engine.yaml" in line and "skipped" in line for line in _warnings(err)), err
    code, out, err = cli("--specs-dir", d, "list", "engines", "--format", "json")
    assert code == 0, err
    assert "vllm-0.24" in {r["file"] for r in json.loads(out)}
    code, out, err = cli("--specs-dir", d, "show", "engine", "my-engine")
    assert code == 2 and "my-engine.yaml" in err and "Traceback" not in err


# --- lookups remembered by value ------------------------------------------------------------------------------


def test_specs_hash_by_value_and_keep_equality():
    from dsdsim.specs.catalog import load_engine, load_hardware, load_model
    from dsdsim.specs.deployment import Deployment

    a, b = Deployment(tp=2), Deployment(tp=2)
    assert a is not b and a == b and hash(a) == hash(b)
    hash(a)                                      # a kept hash is not a field: equal to one never hashed
    assert a == Deployment(tp=2) and a.model_dump() == Deployment(tp=2).model_dump()
    c = a.model_copy(update={"tp": 4})
    assert c != a and hash(c) == hash(Deployment(tp=4))
    hw = load_hardware("h100-sxm")               # dict fields (peaks per dtype) hash too
    assert hash(hw) == hash(hw.model_copy()) and hash(load_engine("vllm")) == hash(load_engine("vllm").model_copy())
    m = load_model("llama-3.1-8b")
    assert hash(m) == hash(m.model_copy()) and hash(m) != hash(load_model("llama-3.1-70b"))


def test_resolve_by_names_is_remembered_for_equal_inputs(clean_catalog):
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.drafter import parse_drafter
    from dsdsim.specs.setup import resolve

    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3")
    assert resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), "eagle3") is s
    by_spec = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), parse_drafter("eagle3"))
    assert by_spec == s and resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=1), parse_drafter("eagle3")) is by_spec
    assert resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=2), "eagle3") is not s
    assert parse_drafter("eagle3") is parse_drafter("eagle3")


def test_the_plan_is_built_once_for_equal_specs_built_anew(monkeypatch):
    from dsdsim.cost import step as step_module
    from dsdsim.cost.step import simulate_step, step_plan
    from dsdsim.specs import setup as setup_module
    from dsdsim.specs.deployment import Deployment

    builds = []
    real = step_module.pass_plan
    monkeypatch.setattr(step_module, "pass_plan", lambda *a, **kw: builds.append(1) or real(*a, **kw))
    step_plan.cache_clear()
    monkeypatch.setattr(setup_module, "_resolved", {})      # a new Setup (a Setup keeps its plan once built)
    first = simulate_step("qwen3-30b-a3b", "h100-sxm", Deployment(tp=2, ep=2), "eagle3", batch=8, k=3).step_time_s
    again = simulate_step("qwen3-30b-a3b", "h100-sxm", Deployment(tp=2, ep=2), "eagle3", batch=8, k=3).step_time_s
    assert len(builds) == 1 and first == again


def test_a_new_specs_folder_is_seen_by_a_remembered_name(cli, clean_catalog, tmp_path):
    from dsdsim.specs.catalog import add_specs_dir, load_model
    from dsdsim.specs.setup import resolve

    shipped = resolve("llama-3.1-8b", "h100-sxm").model
    assert load_model("llama-3.1-8b") is shipped
    d = _folder(tmp_path)
    data = json.loads((REPO_ROOT / "model_specs" / "llama-3.1-8b.json").read_text())
    data["num_hidden_layers"] = 4
    (d / "llama-3.1-8b.json").write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="shadows the shipped model spec"):
        add_specs_dir(d)
        assert load_model("llama-3.1-8b").num_layers == 4
    assert resolve("llama-3.1-8b", "h100-sxm").model.num_layers == 4


def test_a_rewritten_user_file_is_read_again(clean_catalog, tmp_path, monkeypatch):
    from dsdsim.specs.catalog import load_model
    from dsdsim.specs.setup import resolve

    d = _folder(tmp_path)
    data = json.loads((REPO_ROOT / "model_specs" / "llama-3.1-8b.json").read_text())
    path = d / "my-model.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv("DSDSIM_SPECS_DIRS", str(d))
    assert load_model("my-model").num_layers == 32 == resolve("my-model", "h100-sxm").model.num_layers
    data["num_hidden_layers"] = 16
    path.write_text(json.dumps(data, indent=2))          # another size: a new stamp even within one clock tick
    assert load_model("my-model").num_layers == 16 == resolve("my-model", "h100-sxm").model.num_layers
