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


def test_prediction_display_divides_by_the_same_server_as_the_table():
    """Every curve is G(B, K) over the goodput of a server without speculation, the divisor of the table's 'vs K=0'
    column: the dashed envelope reads the table's speedups, a K-table server's K = 0 rows (its off tier) sit below
    1.0, and batch sizes that do not fit are shaded in both panels."""
    import numpy as np

    from dsdsim.export.plots import PredictionDisplay
    from dsdsim.policy.predict import predict

    # 426: the largest batch that fits at context 1024, where the drafter's cache leaves room for K = 0 only
    p = predict("llama-3.1-8b", "h100-sxm", drafter="eagle3", batch_sizes=[1, 8, 64, 256, 426, 512, 1024])
    d = PredictionDisplay.from_prediction(p).plot()
    ax, ax_k = d.axes_
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    kv = list(p.k_values)
    plain = np.asarray(p.plain_goodput)
    np.testing.assert_allclose(lines["a server without speculation = 1"].get_ydata()[np.isfinite(plain)], 1.0)
    np.testing.assert_allclose(lines["K=3"].get_ydata(), p.goodput[kv.index(3)] / plain)
    envelope = lines["dynamic K (table)"].get_ydata()
    table = np.array([r.speedup_vs_vanilla if r.feasible else np.nan for r in p.rows], dtype=float)
    np.testing.assert_allclose(envelope, table)          # the plot and the table say the same speedups
    off = lines["K=0 (the table's off tier)"].get_ydata()
    assert np.nanmax(off) < 1.0                          # the off tier costs (vLLM issue #49548)
    assert p.table.k_per_batch[list(p.batch_sizes).index(426)] == 0 and envelope[4] < 1.0
    assert not np.all(p.table.k_per_batch >= 0)          # 1024 does not fit here ...
    assert ax.patches and ax_k.patches                   # ... and is shaded in both panels
    assert "relative to a server without speculation" in ax.get_ylabel()


def test_a_tree_prediction_plot_names_the_tree_not_a_k():
    """A draft tree stands in the K axis as K = its steps: the plot names the tree (curve and table panel)."""
    from dsdsim.export.plots import PredictionDisplay
    from dsdsim.policy.predict import predict
    from dsdsim.specs.drafter import parse_draft_tree, parse_drafter, with_tree

    tree = with_tree(parse_drafter("eagle3"), parse_draft_tree("4,4,16"))
    p = predict(drafter=tree, engine="sglang", batch_sizes=[1, 8, 64], acceptance="al=3.2@tree")
    d = PredictionDisplay.from_prediction(p).plot()
    ax, ax_k = d.axes_
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "tree 4,4,16 (4 draft passes, 16 tokens verified)" in labels
    assert not any(lb.startswith("K=") for lb in labels)
    assert [t.get_text() for t in ax_k.get_yticklabels()] == ["none", "tree 4,4,16"]
    d.close()


def test_the_sensitivity_k_panel_has_its_own_key():
    from dsdsim.export.plots import SensitivityDisplay
    from dsdsim.plan import sensitivity

    frame = sensitivity("llama-3.1-8b", "h100-sxm", alphas=[0.6, 0.8], contexts=[1024], batch_sizes=[1, 16, 64])
    d = SensitivityDisplay.from_frame(frame, "t").plot()
    ax_k, ax_s = d.axes_
    assert [t.get_text() for t in ax_k.get_legend().get_texts()] == ["alpha 0.6", "alpha 0.8", "context 1024"]
    assert "no speculation" in ax_s.get_ylabel()
    d.close()
