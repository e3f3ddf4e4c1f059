"""The wheel carries every shipped spec, and an installed dsdsim finds them without the source checkout.

Ground truth: the files under hw_specs/, model_specs/ and measurements/ in this repository. The wheel is built from a copy of
the checkout (so the build leaves no build/ or *.egg-info behind), installed into a private folder, and asked
for its catalog from a working directory that is not the checkout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import yaml

from conftest import REPO_ROOT, SHIPPED_HW, SHIPPED_MODELS

SHIPPED_MEASUREMENTS = sorted(p.name for p in (REPO_ROOT / "measurements").iterdir() if p.suffix in (".yaml", ".json"))

pytest.importorskip("setuptools")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("dsdsim", "hw_specs", "model_specs", "measurements", "engine_specs"):
        shutil.copytree(REPO_ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO_ROOT / name).exists():
            shutil.copy2(REPO_ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.fail(f"wheel build failed: {r.stderr[-2000:]}")
    wheels = list(out.glob("dsdsim-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_every_shipped_spec(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for stem in SHIPPED_HW:
        assert f"dsdsim/hw_specs/{stem}.yaml" in names, stem
    for stem in SHIPPED_MODELS:
        assert f"dsdsim/model_specs/{stem}.json" in names, stem
    for stem in SHIPPED_MEASUREMENTS:
        assert f"dsdsim/measurements/{stem}" in names, stem
    for stem in sorted(p.stem for p in (REPO_ROOT / "engine_specs").glob("*.yaml")):
        assert f"dsdsim/engine_specs/{stem}.yaml" in names, stem
    # the published kernel timings the hardware specs' MoE families were fitted on, and their fit
    for name in sorted(p.name for p in (REPO_ROOT / "measurements" / "kernels").iterdir()):
        assert f"dsdsim/measurements/kernels/{name}" in names, name
    # the request traces of measured runs the corpus's end-to-end cases replay
    for name in sorted(p.name for p in (REPO_ROOT / "measurements" / "traces").iterdir()):
        assert f"dsdsim/measurements/traces/{name}" in names, name
    for module in ("dsdsim/__init__.py", "dsdsim/cli/__init__.py", "dsdsim/cli/model.py", "dsdsim/specs/catalog.py",
                   "dsdsim/cost/step.py"):
        assert module in names, module
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "dsdsim = dsdsim.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


CATALOG_CHECK = """
import json
from dsdsim.specs import catalog
from dsdsim.corpus.schema import load_corpus
from dsdsim.policy.intervals import shipped_intervals
print(json.dumps({"intervals": shipped_intervals() is not None, "vllm": catalog.load_engine("vllm@0.10.1").label,
                  "hw_dir": str(catalog.shipped_dir("hw_specs")), "model_dir": str(catalog.shipped_dir("model_specs")),
                  "hw": catalog.hardware_names(), "models": catalog.model_names(),
                  "module": catalog.__file__, "h100_bw": catalog.load_hardware("h100-sxm").bandwidth,
                  "corpus_dir": str(catalog.shipped_dir("measurements")), "n_cases": len(load_corpus()),
                  "yaml": __import__("sys").modules.get("yaml") is not None}))
"""


def test_wheel_contains_every_module_of_the_package(wheel):
    """Every .py under dsdsim/ is in the wheel: a subpackage missing from pyproject's package list is a wheel that
    imports in the checkout and fails once installed."""
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "dsdsim").rglob("*.py")
                     if "__pycache__" not in p.parts)
    assert [m for m in modules if m not in names] == []


def test_installed_wheel_finds_its_specs(wheel, tmp_path):
    import json

    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                        str(site), str(wheel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSDSIM_SPECS_DIRS")}
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", CATALOG_CHECK], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert Path(d["module"]).is_relative_to(site), "imported the checkout, not the wheel"
    assert Path(d["hw_dir"]) == site / "dsdsim" / "hw_specs"
    assert Path(d["model_dir"]) == site / "dsdsim" / "model_specs"
    assert d["hw"] == SHIPPED_HW
    assert d["models"] == SHIPPED_MODELS
    assert d["h100_bw"] == 3.35e12
    assert Path(d["corpus_dir"]) == site / "dsdsim" / "measurements"
    assert d["intervals"], "the installed package reads the intervals fitted beside its corpus"
    assert d["vllm"], "an engine version resolves inside the installed package"
    assert not d["yaml"], "the installed package reads its YAML specs pre-parsed (yaml-parsed.jsonl shipped)"
    assert d["n_cases"] == sum(len(yaml.safe_load(p.read_text())["cases"]) for p in (REPO_ROOT / "measurements").glob("*.yaml"))


def test_shipped_dir_in_the_checkout():
    from dsdsim.specs.catalog import shipped_dir

    assert sorted(p.stem for p in shipped_dir("hw_specs").glob("*.yaml")) == SHIPPED_HW
    assert sorted(p.stem for p in shipped_dir("model_specs").glob("*.json")) == SHIPPED_MODELS


def test_test_extra_installs_the_build_backend():
    """The README's `pip install -e ".[test]" && python3 -m pytest` runs this file's wheel build offline
    (--no-build-isolation), so the test extra must carry every build requirement (a fresh venv has an old
    setuptools and no wheel)."""
    import re

    try:
        import tomllib
    except ImportError:                      # Python 3.10
        tomllib = pytest.importorskip("tomli")
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    name = re.compile(r"[A-Za-z0-9_.-]+")
    test_extra = {name.match(r).group(0).lower() for r in data["project"]["optional-dependencies"]["test"]}
    for req in data["build-system"]["requires"]:
        assert name.match(req).group(0).lower() in test_extra, req
    assert "wheel" in test_extra
