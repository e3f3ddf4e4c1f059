"""`dsdsim probe | validate | calibrate` on the command line: the committed CPU report recalibrates, and bad
arguments end in one line with exit code 2 before any measuring starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from dsdsim.cli import main
from dsdsim.specs.catalog import load_hardware

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "results" / "cpu"


def run(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    return exc.value.code


def one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


def test_calibrate_cli_from_committed_report(tmp_path, capsys):
    out = tmp_path / "cal.yaml"
    assert run(["calibrate", "-r", str(CPU / "report.json"), "-g", str(CPU / "probe-cpu.yaml"), "-o", str(out)]) in (0, None)
    spec = load_hardware(out)
    assert spec.efficiency.memory.verified.value == "measured"
    assert spec.efficiency.attention_memory is not None and spec.efficiency.vector_memory is not None
    text = capsys.readouterr().out
    assert "calibrated: n=" in text
    # the calibrated spec drives a prediction
    assert run(["predict", "-g", str(out), "-b", "1,2,4", "--format", "json"]) in (0, None)


@pytest.mark.parametrize("argv,fragment", [
    (["calibrate", "-r", "no_such_report.json", "-g", "h100-sxm", "-o", "x.yaml"], "no such file"),
    (["calibrate", "-r", str(CPU / "summary.md"), "-g", "h100-sxm", "-o", "x.yaml"], "not json"),
    (["calibrate", "-r", str(CPU / "loop.json"), "-g", "h100-sxm", "-o", "x.yaml"], "neither"),
    (["calibrate", "-r", str(CPU / "report.json"), "-g", "h100-sxm", "-o", "/nonexistent/dir/x.yaml"], "does not exist"),
    (["probe", "--device", "cpu", "-o", "/nonexistent/dir/p.yaml"], "does not exist"),
    (["probe", "--device", "cpu", "--threads", "0", "-o", "p.yaml"], "--threads"),
    (["validate", "-m", "no-such-model", "-g", "h100-sxm", "-o", "v"], "unknown model"),
    (["validate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--reduce", "0", "-o", "v"], "--reduce"),
])
def test_bench_commands_reject_bad_input(tmp_path, monkeypatch, capsys, argv, fragment):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert run(argv) == 2
    assert fragment.lower() in one_line(capsys).lower()
    assert list(tmp_path.iterdir()) == []          # nothing written


def test_validate_on_a_missing_gpu_is_one_line(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert run(["validate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--device", "cuda", "-o", str(tmp_path / "v")]) == 2
    assert "no cuda device" in one_line(capsys).lower()
