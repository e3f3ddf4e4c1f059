"""The parsed-YAML cache of dsdsim.specs.io: a text read again gives the same data without PyYAML; what JSON
cannot give back is parsed each time; a cache that is off, unwritable or damaged changes nothing but the time."""
from __future__ import annotations

import json

import pytest

from dsdsim.errors import SpecError
from dsdsim.specs import io
from conftest import REPO_ROOT


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(io.CACHE_ENV, str(tmp_path))
    return tmp_path / io._CACHE_FORMAT


def _entries(folder):
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def test_a_shipped_spec_parses_to_the_same_data_from_the_cache(cache):
    import yaml

    text = (REPO_ROOT / "hw_specs" / "h100-sxm.yaml").read_text(encoding="utf-8")
    first = io.parse_yaml(text, "h100-sxm.yaml")
    assert first == yaml.safe_load(text)                     # PyYAML's own reading, the ground truth
    [entry] = _entries(cache)
    assert json.loads(entry.read_text(encoding="utf-8")) == first
    entry.write_text(json.dumps({"read": "from the cache"}), encoding="utf-8")
    assert io.parse_yaml(text, "h100-sxm.yaml") == {"read": "from the cache"}     # the entry is what is read
    assert io.parse_yaml(text + "\n# edited\n", "h100-sxm.yaml") == first          # another text: parsed


@pytest.mark.parametrize("text", ["1: one\n2: two\n", "when: 2026-12-01\n", "x: .nan\n"],
                         ids=["integer keys", "a date", "NaN"])
def test_what_json_cannot_give_back_is_parsed_each_time(cache, text):
    import yaml

    assert repr(io.parse_yaml(text, "t.yaml")) == repr(yaml.safe_load(text))
    assert _entries(cache) == []


def test_infinity_is_kept(cache):
    assert io.parse_yaml("max_bytes: .inf\n", "t.yaml") == {"max_bytes": float("inf")}
    assert len(_entries(cache)) == 1
    assert io.parse_yaml("max_bytes: .inf\n", "t.yaml") == {"max_bytes": float("inf")}


def test_an_empty_setting_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(io.CACHE_ENV, "")
    assert io.cache_dir() is None
    assert io.parse_yaml("a: 1\n", "t.yaml") == {"a": 1}
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_cache_is_passed_by(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(io.CACHE_ENV, str(blocker))
    assert io.parse_yaml("a: 1\n", "t.yaml") == {"a": 1}
    assert io.parse_yaml("a: 1\n", "t.yaml") == {"a": 1}


def test_a_damaged_entry_is_parsed_again_and_replaced(cache):
    io.parse_yaml("a: [1, 2]\n", "t.yaml")
    [entry] = _entries(cache)
    entry.write_text('{"a": [1,', encoding="utf-8")          # cut short
    assert io.parse_yaml("a: [1, 2]\n", "t.yaml") == {"a": [1, 2]}
    assert json.loads(entry.read_text(encoding="utf-8")) == {"a": [1, 2]}


def test_malformed_yaml_is_one_line_and_not_kept(cache):
    with pytest.raises(SpecError, match=r"t.yaml: malformed YAML at line 2"):
        io.parse_yaml("a: 1\n b: [\n", "t.yaml")
    assert _entries(cache) == []


def test_the_cache_keeps_a_bounded_number_of_entries(cache, monkeypatch):
    monkeypatch.setattr(io, "_CACHE_KEEP", 8)
    for i in range(30):
        assert io.parse_yaml(f"i: {i}\n", "t.yaml") == {"i": i}
    assert 4 <= len(_entries(cache)) <= 8
    assert not [p for p in cache.iterdir() if p.suffix != ".json"]     # no temporary file left behind


def test_the_default_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv(io.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert io.cache_dir() == tmp_path / "dsdsim" / io._CACHE_FORMAT
