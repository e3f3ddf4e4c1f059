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


def test_prediction_display_plots_goodput_relative_to_plain_decoding():
    """K = 0 is the flat line at 1.0, every K curve is G(B, K) / G(B, 0), the envelope follows the table, and batch
    sizes that do not fit are shaded in both panels."""
    import numpy as np

    from dsdsim.export.plots import PredictionDisplay
    from dsdsim.policy.predict import predict

    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle3", batch_sizes=[1, 8, 64, 256, 512, 1024])
    d = PredictionDisplay.from_prediction(p).plot()
    ax, ax_k = d.axes_
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    kv = list(p.k_values)
    g0 = p.goodput[kv.index(0)]
    np.testing.assert_allclose(lines["K=0 (plain decoding) = 1"].get_ydata()[np.isfinite(g0)], 1.0)
    np.testing.assert_allclose(lines["K=3"].get_ydata(), p.goodput[kv.index(3)] / g0)
    envelope = lines["dynamic K (table)"].get_ydata()
    assert np.nanmin(envelope) >= 1.0 - 1e-12          # the table never does worse than plain decoding
    assert not np.all(p.table.k_per_batch >= 0)          # 1024 does not fit here ...
    assert ax.patches and ax_k.patches                   # ... and is shaded in both panels
    assert "relative to plain decoding" in ax.get_ylabel()
