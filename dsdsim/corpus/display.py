"""Predicted vs measured on log axes, with the y = x line and +/-20% bands (matplotlib imported on use)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BAND = 0.20     # the +/- band drawn around y = x


@dataclass
class AccuracyDisplay:
    """``AccuracyDisplay.from_report(report).plot(ax=None)``; ``save(path)`` writes a PNG (dsdsim.plot._Display)."""

    report: Any
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_report(cls, report) -> "AccuracyDisplay":
        return cls(report)

    def plot(self, ax=None) -> "AccuracyDisplay":
        from dsdsim.plot import _plt

        plt = _plt()
        if ax is None:
            fig, ax = plt.subplots(figsize=(7, 6.5))
        else:
            fig = ax.figure
        rows = [c for c in self.report.cases if c.predicted is not None]
        markers = {"itl_ms": "o", "step_ms": "s", "tokens_per_s": "^", "speedup_vs_no_sd": "D", "step_time_ratio": "v",
                   "ratio": "P"}
        quantities = list(markers) + sorted({c.quantity for c in rows} - set(markers))   # any other: an x
        colors = {"train": "tab:blue", "test": "tab:orange"}
        for split in ("train", "test"):
            for q in quantities:
                mk = markers.get(q, "x")
                pts = [c for c in rows if c.split == split and c.quantity == q]
                if pts:
                    ax.scatter([c.measured for c in pts], [c.predicted for c in pts], marker=mk, s=28, alpha=0.8,
                               color=colors[split], label=f"{split}: {q} ({len(pts)})")
        values = [v for c in rows for v in (c.measured, c.predicted)]
        lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (0.1, 10.0)
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
        ax.fill_between([lo, hi], [lo * (1 - BAND), hi * (1 - BAND)], [lo * (1 + BAND), hi * (1 + BAND)],
                        color="grey", alpha=0.2, label=f"±{BAND:.0%}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured (public source)")
        ax.set_ylabel("predicted by dsdsim (shipped defaults)")
        s = self.report.summary
        title = ", ".join(f"{k} n={v.n} median |err| {100 * v.median_abs_rel_error:.0f}%"
                          for k, v in s.items() if v.n)
        ax.set_title(f"Accuracy against public measurements\n{title}", fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, ax
        return self

    def save(self, path):
        if self.figure_ is None:
            self.plot()
        self.figure_.savefig(path, dpi=120)
        return path
