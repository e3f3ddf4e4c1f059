"""The shipped YAML specs are read pre-parsed (dsdsim.specs.io.PARSED, written by scripts/parse_specs.py): the
lines are what PyYAML reads from the files as they are, a file that no longer matches its line (edited in a
checkout) or a user's own YAML is parsed by PyYAML, and nothing is written anywhere."""
from __future__ import annotations

import json

import pytest

from dsdsim.errors import SpecError
from dsdsim.specs import io
from conftest import REPO_ROOT

FOLDERS = ("hw_specs", "engine_specs", "measurements")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_shipped_yaml_file_has_its_line_and_the_line_is_pyyamls_reading(folder):
    import yaml

    d = REPO_ROOT / folder
    lines = [json.loads(line) for line in (d / io.PARSED).read_text(encoding="utf-8").splitlines()]
    files = sorted(d.glob("*.yaml"))
    assert [x["file"] for x in lines] == [f.name for f in files], \
        "stale: run python scripts/parse_specs.py after editing a shipped YAML file"
    for entry, f in zip(lines, files):
        text = f.read_bytes().decode("utf-8-sig")
        assert entry["blake2b"] == io.text_hash(text), f"{f.name} changed: run python scripts/parse_specs.py"
        assert entry["data"] == yaml.safe_load(text), f.name                  # PyYAML's own reading
        assert io.read_structured(f) == entry["data"]


def test_the_script_agrees_with_the_shipped_lines():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "parse_specs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("unchanged") == len(FOLDERS)


def test_a_file_that_no_longer_matches_its_line_is_parsed_as_it_is(tmp_path):
    src = REPO_ROOT / "hw_specs" / "h100-sxm.yaml"
    (tmp_path / io.PARSED).write_text((REPO_ROOT / "hw_specs" / io.PARSED).read_text(encoding="utf-8"),
                                      encoding="utf-8")
    copy = tmp_path / "h100-sxm.yaml"
    copy.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    assert io.read_structured(copy)["name"] == "h100-sxm"                     # matches: read from the line
    copy.write_text(src.read_text(encoding="utf-8").replace("name: h100-sxm", "name: edited", 1), encoding="utf-8")
    assert io.read_structured(copy)["name"] == "edited"                       # edited: parsed, not the line


def test_each_read_gives_fresh_objects():
    f = REPO_ROOT / "engine_specs" / "vllm-0.29.yaml"
    a = io.read_structured(f)
    a["name"] = "changed"
    assert io.read_structured(f)["name"] == "vllm"


@pytest.mark.parametrize("text", ["1: one\n", "when: 2026-12-01\n", "x: .nan\n"],
                         ids=["integer keys", "a date", "NaN"])
def test_what_json_cannot_give_back_cannot_be_shipped_pre_parsed(text):
    with pytest.raises(SpecError, match="what JSON cannot give back"):
        io.parsed_line("x.yaml", text)


def test_malformed_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(SpecError, match="bad.yaml: malformed YAML at line"):
        io.read_structured(bad)


def test_a_run_writes_nothing_under_home_and_reads_no_yaml(tmp_path):
    """predict, on the shipped specs, imports no PyYAML and leaves an empty home folder empty."""
    from conftest import run_subprocess

    home = tmp_path / "home"
    home.mkdir()
    code = ("import sys\nfrom dsdsim.cli import main\ntry:\n    main(['predict', '-b', '1-8'])\nexcept SystemExit:\n"
            "    pass\nprint('YAML', 'yaml' in sys.modules)\n")
    r = run_subprocess("-c", code, env_extra={"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "YAML False"
    assert list(home.iterdir()) == []
