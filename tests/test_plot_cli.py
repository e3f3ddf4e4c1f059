"""Plots from the CLI: files appear, are PNGs, and bad arguments leave nothing behind."""
from __future__ import annotations

import pytest

from dsdsim.cli import main


def run(argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
        raise SystemExit(0)
    return exc.value.code


@pytest.mark.parametrize("argv", [
    ["plot", "sensitivity", "--alphas", "0.6,0.9", "--contexts", "1024", "-b", "1-64"],
    ["plot", "roofline", "-m", "qwen3-30b-a3b", "-g", "h200-sxm", "--batch", "16", "--k", "3"],
    ["predict", "-b", "1-64", "--plot"],
])
def test_plot_commands_write_png(tmp_path, argv):
    out = tmp_path / "fig.png"
    argv = [*argv, str(out)] if argv[-1] == "--plot" else [*argv, "-o", str(out)]
    assert run(argv) in (0, None)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]       # no temporary file left behind


def test_sensitivity_bad_alpha_leaves_no_file(tmp_path, capsys):
    out = tmp_path / "s.png"
    assert run(["plot", "sensitivity", "--alphas", "1.5", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside [0, 1]" in err[0]
    assert not out.exists()
