"""Pictures (matplotlib, imported only when a plot is asked for).

Display objects follow scikit-learn's pattern: ``PredictionDisplay.from_prediction(p).plot(ax=None)`` keeps
the figure and axes for restyling; ``.save(path)`` writes a PNG.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from dsdsim.errors import DsdsimError


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise DsdsimError("plotting needs matplotlib: pip install 'dsdsim[plot]'") from None
    return plt


class _Display:
    """Shared by the displays: ``save(path)`` draws (if not yet drawn) and writes a PNG."""

    figure_: Any

    def plot(self, *args, **kwargs):  # pragma: no cover - each display defines it
        raise NotImplementedError

    def save(self, path: Path) -> Path:
        if self.figure_ is None:
            self.plot()
        self.figure_.savefig(path, dpi=120)
        return Path(path)


@dataclass
class PredictionDisplay(_Display):
    """Goodput relative to plain decoding per K, with the dynamic-K envelope, and K* vs batch size below.

    Top: G(B, K) / G(B, 0) for every K (plain decoding is the flat line at 1.0), so where speculation stops
    paying is where a curve crosses 1.0; the table's choice is the dashed envelope. Batch sizes where nothing
    fits in memory are shaded. Bottom: the table's K per batch size (and the unconstrained K* where a
    ``--max-distinct-k`` limit changed it)."""

    prediction: Any
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_prediction(cls, prediction) -> "PredictionDisplay":
        return cls(prediction)

    def plot(self, axes=None) -> "PredictionDisplay":
        plt = _plt()
        p = self.prediction
        if axes is None:
            fig, axes = plt.subplots(2, 1, figsize=(8, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
        else:
            fig = axes[0].figure
        ax, ax_k = axes
        b = np.asarray(p.batch_sizes, dtype=float)
        kv = list(p.k_values)
        g0 = p.goodput[kv.index(0)] if 0 in kv else np.full(b.shape, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = p.goodput / g0                                        # (K, B), NaN where either does not fit
        cmap = plt.get_cmap("viridis", len(kv))
        for i, k in enumerate(kv):
            if k == 0:
                ax.plot(b, rel[i], color="black", lw=1.2, label="K=0 (plain decoding) = 1")
            else:
                ax.plot(b, rel[i], color=cmap(i), lw=1.0, alpha=0.85, label=f"K={k}")
        table_k = np.asarray(p.table.k_per_batch)
        chosen = np.array([rel[kv.index(k), j] if k >= 0 else np.nan for j, k in enumerate(table_k)])
        ax.plot(b, chosen, color="crimson", lw=2.5, ls="--", label="dynamic K (table)")
        ax.set_xscale("log", base=2)
        ax.set_ylabel("goodput relative to plain decoding")
        s = p.setup
        drafter = s.drafter.label if s.drafter is not None else "no drafter"
        ax.set_title(f"{s.model.name} on {s.hardware.name} (tp {s.deployment.tp}), {drafter}, "
                     f"context {p.context}", fontsize=10)
        fits = table_k >= 0
        if b.size > 1:
            ax.set_xlim(b[0], b[-1])
        if not fits.any():
            for a in (ax, ax_k):
                a.axvspan(b[0], b[-1], color="0.85", alpha=0.7, lw=0)
            ax.text(0.5, 0.5, f"no batch size fits in memory at context {p.context}", transform=ax.transAxes,
                    ha="center", va="center", color="crimson")
        else:
            last = int(b[fits][-1])
            stop = [int(bb) for bb, k in zip(b, table_k) if k == 0]
            if stop:    # the smallest batch from which the table stops speculating
                ax_k.axvline(stop[0], color="gray", ls=":", lw=1)
                ax.axvline(stop[0], color="gray", ls=":", lw=1)
                ax.annotate(f"K*=0 from B={stop[0]}", (stop[0], 1.0), xytext=(4, 6), textcoords="offset points",
                            fontsize=7, color="dimgray")
            finite = rel[np.isfinite(rel)]
            if finite.size:
                lo, hi = float(finite.min()), float(finite.max())
                pad = 0.05 * max(hi - lo, 0.1)
                ax.set_ylim(min(lo, 1.0) - pad, max(hi, 1.0) + pad)
            if not fits.all():
                after = b[~fits & (b > last)]
                if after.size:
                    for a in (ax, ax_k):
                        a.axvspan(after[0], b[-1], color="0.85", alpha=0.7, lw=0)
                    ax.text(0.99, 0.02, f"shaded: B >= {int(after[0])} does not fit in memory", fontsize=7,
                            color="dimgray", transform=ax.transAxes, ha="right", va="bottom")
        ax.axhline(1.0, color="black", lw=0.6, alpha=0.5)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="upper right")
        k_plot = np.where(table_k >= 0, table_k, np.nan)
        ax_k.step(b, k_plot, where="post", color="crimson", label="table")
        k_best = np.asarray(p.k_best)
        if np.any((k_best != table_k) & fits):
            ax_k.step(b, np.where(k_best >= 0, k_best, np.nan), where="post", color="gray", ls=":",
                      label="best K per batch (no limit on distinct K)")
            ax_k.legend(fontsize=7, loc="upper right")
        ax_k.set_ylabel("K*")
        ax_k.set_xlabel("batch size")
        ax_k.set_yticks(range(0, int(max(kv)) + 1))
        ax_k.grid(True, alpha=0.3)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, (ax, ax_k)
        return self


@dataclass
class RooflineDisplay(_Display):
    """The hardware roofline (bf16 and, where present, fp8) with a step's operators placed on it."""

    step: Any
    figure_: Any = None
    ax_: Any = None

    @classmethod
    def from_step(cls, step) -> "RooflineDisplay":
        return cls(step)

    def plot(self, ax=None) -> "RooflineDisplay":
        plt = _plt()
        from dsdsim.units import DType

        st = self.step
        hw = st.hardware
        if ax is None:
            fig, ax = plt.subplots(figsize=(8, 5.5))
        else:
            fig = ax.figure
        bw = hw.bandwidth
        x = np.logspace(-1, 4, 200)
        for dtype, ls in ((DType.bf16, "-"), (DType.fp8, "--")):
            if dtype in hw.peak_flops_per_s:
                peak = hw.peak(dtype)
                ax.plot(x, np.minimum(peak, bw * x), ls=ls, color="gray", label=f"roof {dtype.value} (datasheet)")
        for phase, marker in (("verify", "o"), ("draft", "^")):
            for t in getattr(st, phase).op_times:
                count = float(np.asarray(t.op.count).reshape(-1)[0])
                nbytes = float(np.asarray(t.op.bytes).reshape(-1)[0])
                time_s = float(np.asarray(t.time_s).reshape(-1)[0]) / max(count, 1e-12)
                flops = float(np.asarray(t.op.flops).reshape(-1)[0])
                if count == 0 or nbytes <= 0 or flops <= 0 or time_s <= 0:
                    continue
                ax.scatter(flops / nbytes, flops / time_s, marker=marker, s=18, alpha=0.7,
                           label=None)
                if time_s * count / float(np.asarray(st.step_time_s).reshape(-1)[0]) > 0.05:
                    ax.annotate(t.op.name.split(".")[-1], (flops / nbytes, flops / time_s), fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved FLOP/s (predicted)")
        ax.set_title(f"{hw.name}: {st.model.name}, B={int(np.asarray(st.batch).reshape(-1)[0])}, "
                     f"K={int(np.asarray(st.k).reshape(-1)[0])} (o verify, ^ draft)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        self.figure_, self.ax_ = fig, ax
        return self



def save_png(display, path: Optional[Path]) -> Optional[Path]:
    """Render to a temporary file and rename, so a failed plot leaves nothing behind."""
    if path is None:
        return None
    from dsdsim.export.files import atomic_path

    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        display.save(tmp)
    return path


@dataclass
class SensitivityDisplay(_Display):
    """How K* and the dynamic-K speedup move with acceptance (colour) and context (line style).

    Built from ``dsdsim.plan.sensitivity(...)`` (one row per alpha, context, batch size)."""

    frame: Any
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_frame(cls, frame) -> "SensitivityDisplay":
        return cls(frame)

    def plot(self, axes=None) -> "SensitivityDisplay":
        plt = _plt()
        df = self.frame
        if axes is None:
            fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        else:
            fig = axes[0].figure
        ax_k, ax_s = axes
        alphas = sorted(df["alpha"].unique())
        contexts = sorted(df["context"].unique())
        cmap = plt.get_cmap("plasma", len(alphas) + 1)
        styles = ["-", "--", ":", "-."]
        for i, a in enumerate(alphas):
            for j, c in enumerate(contexts):
                sub = df[(df["alpha"] == a) & (df["context"] == c)].sort_values("batch_size")
                kw = dict(color=cmap(i), ls=styles[j % len(styles)], lw=1.4)
                label = f"alpha {a:g}, context {c}"
                ax_k.step(sub["batch_size"], sub["k"], where="post", label=label, **kw)
                ax_s.plot(sub["batch_size"], sub["speedup_vs_vanilla"], label=label, **kw)
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch size")
            ax.grid(True, alpha=0.3)
        ax_k.set_ylabel("K*")
        ax_s.set_ylabel("dynamic-K speedup vs K=0")
        ax_s.axhline(1.0, color="gray", lw=0.8)
        ax_s.legend(fontsize=7)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, (ax_k, ax_s)
        return self
