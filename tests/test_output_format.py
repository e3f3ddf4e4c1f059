"""`-o` behaves the same in every command: the format is --format, else the file's suffix; a mismatch is one line on
stderr, exit 2, and no file."""
from __future__ import annotations

import json

import pytest

PLAN = ["plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "30", "-b", "1,8,64"]
EXPLAIN = ["explain", "-b", "8"]
PREDICT = ["predict", "-b", "1,8,64"]


@pytest.mark.parametrize("argv", [EXPLAIN, PREDICT, PLAN], ids=lambda a: a[0])
@pytest.mark.parametrize("suffix", [".json", ".txt", ".csv"])
def test_suffix_chooses_the_format_when_format_is_not_given(cli, tmp_path, argv, suffix):
    out = tmp_path / f"out{suffix}"
    code, _, err = cli(*argv, "-o", out)
    if argv is EXPLAIN and suffix == ".csv":                  # explain writes table or json only
        assert code == 2 and len(err.strip().splitlines()) == 1 and "does not write csv" in err
        assert not out.exists()
        return
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    if suffix == ".json":
        json.loads(text)
    elif suffix == ".csv":
        assert "," in text.splitlines()[0] and "┃" not in text
    else:                                                      # the table as plain text, no colour codes
        assert "\x1b[" not in text and "┃" in text


@pytest.mark.parametrize("argv", [EXPLAIN, PREDICT, PLAN], ids=lambda a: a[0])
def test_format_and_suffix_that_disagree_are_an_error(cli, tmp_path, argv):
    out = tmp_path / "out.csv"
    code, stdout, err = cli(*argv, "--format", "json", "-o", out)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--format json writes .json" in err and "out.csv" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_engine_formats_write_json_files(cli, tmp_path):
    ok = tmp_path / "k.json"
    assert cli(*PREDICT, "-f", "vllm", "-o", ok)[0] == 0
    assert "num_speculative_tokens_per_batch_size" in ok.read_text() or json.loads(ok.read_text())
    bad = tmp_path / "k.csv"
    assert cli(*PREDICT, "-f", "sglang", "-o", bad)[0] == 2 and not bad.exists()


def test_unknown_suffix_needs_format(cli, tmp_path):
    out = tmp_path / "out.result"
    code, _, err = cli(*PREDICT, "-o", out)
    assert code == 2 and "add --format" in err and not out.exists()
    assert cli(*PREDICT, "-f", "json", "-o", out)[0] == 0
    json.loads(out.read_text())


@pytest.mark.parametrize("argv, name", [
    (["calibrate", "--measurements", "points.csv", "--name", "mine"], "spec.json"),
    (["probe", "--device", "cpu"], "spec.csv"),
    (["plot", "roofline"], "fig.json"),
])
def test_single_format_commands_refuse_another_formats_suffix(cli, tmp_path, argv, name):
    out = tmp_path / name
    code, _, err = cli(*argv, "-o", out)
    assert code == 2 and len(err.strip().splitlines()) == 1 and not out.exists()
