"""Pictures (matplotlib, imported only when a plot is asked for).

Display objects follow scikit-learn's pattern: ``PredictionDisplay.from_prediction(p).plot(ax=None)`` keeps
the figure and axes for restyling; ``.save(path)`` writes a PNG (``save_png``: atomically).

    PredictionDisplay    goodput per K relative to plain decoding, and K* per batch size (predict --plot)
    TreeFamilyDisplay    goodput per draft tree of a family, and the tree chosen per batch range
                         (predict --tree-family --plot)
    RooflineDisplay      the hardware roofline with one step's operators on it (plot roofline)
    SensitivityDisplay   K* and the dynamic-K speedup against acceptance and context (plot sensitivity)
    AccuracyDisplay      predicted against measured, log-log: the public corpus (accuracy --plot) and a
                         validation run's points (validate's predicted_vs_measured.png)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.units import format_percent


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise DsdsimError("plotting needs matplotlib: pip install 'dsdsim[plot]'") from None
    return plt


def _stacked_panels(plt, axes, figsize: tuple, ratios: tuple):
    """(figure, top axes, bottom axes): two panels sharing the batch axis, or the caller's pair of axes."""
    if axes is None:
        fig, axes = plt.subplots(2, 1, figsize=figsize, sharex=True, gridspec_kw={"height_ratios": list(ratios)})
    else:
        fig = axes[0].figure
    return fig, axes[0], axes[1]


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

    def close(self) -> None:
        """Release the figure (pyplot keeps every open figure until closed)."""
        if self.figure_ is not None:
            _plt().close(self.figure_)


@dataclass
class PredictionDisplay(_Display):
    """Goodput relative to a server without speculation per K, with the dynamic-K envelope, and K* vs batch size.

    Top: G(B, K) / G_plain(B) for every K, G_plain the goodput of a server without speculation (the flat line at
    1.0; the same divisor as the table's 'vs K=0' column), so where speculation stops paying is where a curve
    crosses 1.0. A K-table server's K = 0 rows are its off tier, drawn dotted below 1.0 where the drafter's
    bookkeeping still costs; the table's choice is the dashed envelope. Batch sizes where nothing
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
        fig, ax, ax_k = _stacked_panels(plt, axes, (10, 8), (3, 1.3))
        b = np.asarray(p.batch_sizes, dtype=float)
        kv = list(p.k_values)
        g0 = np.asarray(p.plain_goodput, dtype=float) if 0 in kv else np.full(b.shape, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = p.goodput / g0                  # (K, B) against a server without speculation, NaN where none fits
        off_tier = p.plain_step_s is not None     # the K = 0 row is the table's off tier, not that server
        cmap = plt.get_cmap("viridis", len(kv))
        ax.plot(b, np.where(np.isfinite(g0), 1.0, np.nan), color="black", lw=1.2,
                label="a server without speculation = 1")
        for i, k in enumerate(kv):
            if k == 0 and off_tier:
                ax.plot(b, rel[i], color="black", lw=1.0, ls=":", label="K=0 (the table's off tier)")
            elif k > 0:
                ax.plot(b, rel[i], color=cmap(i), lw=1.0, alpha=0.85, label=_k_label(p, k))
        table_k = np.asarray(p.table.k_per_batch)
        chosen = np.array([rel[kv.index(k), j] if k >= 0 else np.nan for j, k in enumerate(table_k)])
        ax.plot(b, chosen, color="crimson", lw=2.5, ls="--",
                label="the table (tree or none)" if p.tree is not None else "dynamic K (table)")
        ax.set_xscale("log", base=2)
        ax.set_ylabel("goodput relative to a server without speculation")
        s = p.setup
        drafter = s.drafter.label if s.drafter is not None else "no drafter"
        ax.set_title(f"{s.model.name} on {s.hardware.name} (tp {s.deployment.tp}{_routing_label(s)}), {drafter}, "
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
                ax.annotate(f"table K=0 from B={stop[0]}", (stop[0], 1.0), xytext=(4, 6), textcoords="offset points",
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
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)   # beside the curves
        k_plot = np.where(table_k >= 0, table_k, np.nan)
        ax_k.step(b, k_plot, where="post", color="crimson",
                  label="the exported table" if p.tree is not None else "K of the exported table")
        k_best = np.asarray(p.k_best)
        if np.any((k_best != table_k) & fits):
            ax_k.step(b, np.where(k_best >= 0, k_best, np.nan), where="post", color="gray", ls=":",
                      label="K*: the best K per batch size")
            ax_k.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        ax_k.set_xlabel("batch size")
        if p.tree is not None:       # K = tree.steps stands for the tree: name it, not a chain's K
            ax_k.set_ylabel("draft")
            ax_k.set_yticks([0, p.tree.steps], ["none", p.tree.label])
        else:
            ax_k.set_ylabel("K")
            ax_k.set_yticks(range(0, int(max(kv)) + 1))
        ax_k.grid(True, alpha=0.3)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, (ax, ax_k)
        return self


def _k_label(prediction, k: int) -> str:
    """A curve's label: 'K=3' for a chain; for a draft tree (K = its steps stands for it) the tree and its tokens."""
    t = prediction.tree
    if t is None:
        return f"K={k}"
    return f"{t.label} ({t.steps} draft passes, {t.tokens} tokens verified)"


def _routing_label(setup) -> str:
    """', expert overlap 0.35' where the setup prices routing locality (``DeploymentView.routing_label``)."""
    from dsdsim.export.deployment import deployment_view

    return deployment_view(setup.model, setup.deployment).routing_label


def _engine_label(setup) -> str:
    """'sglang 0.4-0.5.11', 'ideal', or 'kernels only' (no engine spec)."""
    e = setup.engine
    if e is None:
        return "kernels only"
    return f"{e.name} {e.versions.label}" if e.versions is not None else str(e.name)


_BAND_ALPHA = 0.13           # the shading of the batch ranges where a choice wins
_PLAIN_BAND = "0.55"         # plain decoding's band (its line is black)
_BAND_LABEL_SHARE = 0.08     # a band is named inside the panel when it spans this share of the log batch axis
_MAX_SPANS_SHOWN = 3         # batch ranges listed per choice in the legend


@dataclass
class TreeFamilyDisplay(_Display):
    """Goodput of every tree of a family and of plain decoding per batch size, and the choice per batch range.

    Top: G_i(B) = B · L_i / T_i(B) in tokens/s (log axes), one line per tree (its shape and measured acceptance
    length) and plain decoding in black; the choice per batch size is the thick crimson envelope beneath them.
    Bottom: the same lines relative to plain decoding (plain is the flat line at 1.0), where the crossovers are
    read. In both panels the batch ranges are shaded in the colour of the choice that wins them (named inside the
    bottom panel where the band is wide enough, and in the legend with its ranges); batch sizes where nothing fits
    are hatched.
    ``lines_``: the top panel's lines by choice label (``plain``, ``STEPS,TOPK,TOKENS``) and ``best``."""

    prediction: Any
    figure_: Any = None
    axes_: Any = None
    lines_: Any = None

    @classmethod
    def from_prediction(cls, prediction) -> "TreeFamilyDisplay":
        return cls(prediction)

    def _colors(self, plt) -> list:
        """A colour per choice: black for plain decoding, then tab10 (viridis past ten trees)."""
        n = len(self.prediction.family)
        tab = [c for c in _TAB10 if c != "tab:gray"]
        trees = tab[:n] if n <= len(tab) else [plt.get_cmap("viridis", n)(i) for i in range(n)]
        return ["black", *trees]

    def plot(self, axes=None) -> "TreeFamilyDisplay":
        plt = _plt()
        p = self.prediction
        fig, ax, ax_rel = _stacked_panels(plt, axes, (10.5, 8), (1.6, 1))
        b = np.asarray(p.batch_sizes, dtype=float)
        g = np.asarray(p.goodput, dtype=float)                           # (1 + N, B) tokens/s, NaN: no fit
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = g / g[0]                                               # (1 + N, B), plain decoding = 1
        colors = self._colors(plt)
        marker = "o" if b.size <= 12 else None                          # a handful of batch sizes: show the points
        labels = ["plain decoding (no speculation)", *(f"tree {m.label} (AL {m.length:g})" for m in p.family)]
        lines = {}
        for c, (name, label) in enumerate(zip(p.choices, labels)):
            kw = dict(color=colors[c], lw=1.4 if c == 0 else 1.2, marker=marker, ms=3, label=label)
            lines[name], = ax.plot(b, g[c], **kw)
            ax_rel.plot(b, rel[c], **kw)
        fits = p.choice >= 0
        cols = np.flatnonzero(fits)
        best_g = np.full(b.shape, np.nan)
        best_g[cols] = g[p.choice[cols], cols]
        best_rel = np.full(b.shape, np.nan)
        best_rel[cols] = rel[p.choice[cols], cols]
        best = dict(color="crimson", lw=6, alpha=0.3, solid_capstyle="butt", zorder=1.5,      # under the lines
                    marker=marker, ms=10, mew=0)
        lines["best"], = ax.plot(b, best_g, label="best choice per batch size", **best)
        ax_rel.plot(b, best_rel, **best)
        self._log_axes(ax, b, g)
        handles = list(lines.values()) + self._shade((ax, ax_rel), colors)
        s = p.setup
        ax.set_title(f"{s.model.name} on {s.hardware.name} (tp {s.deployment.tp}{_routing_label(s)}), "
                     f"engine {_engine_label(s)}, "
                     f"{s.drafter.label} draft trees, context {p.context}\n"
                     f"best draft tree (or plain decoding) per batch size; best single tree {p.best_single_label}",
                     fontsize=10)
        ax.set_ylabel("goodput (tokens/s, predicted)")
        ax_rel.set_ylabel("goodput relative to plain decoding")
        ax_rel.set_xlabel("batch size")
        ax_rel.axhline(1.0, color="black", lw=0.6, alpha=0.5)
        finite = rel[np.isfinite(rel)]
        if finite.size:
            lo, hi = min(float(finite.min()), 1.0), max(float(finite.max()), 1.0)
            pad = 0.06 * max(hi - lo, 0.1)
            ax_rel.set_ylim(lo - pad, hi + 2.5 * pad)                     # headroom for the band names
        for a in (ax, ax_rel):
            a.grid(True, which="both", alpha=0.3)
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  title="STEPS,TOPK,TOKENS (AL measured with it)", title_fontsize=7)
        fig.tight_layout()
        self.figure_, self.axes_, self.lines_ = fig, (ax, ax_rel), lines
        return self

    @staticmethod
    def _log_axes(ax, b: np.ndarray, g: np.ndarray) -> None:
        """Batch size on log2 and tokens/s on log10, labelled in plain numbers (1, 4, 1024; 1,000, 2,000); a
        y range of its own where nothing fits (a log axis cannot scale no data)."""
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        if b.size > 1:
            ax.set_xlim(b[0], b[-1])
        if not np.isfinite(g).any():
            ax.set_ylim(1.0, 10.0)

    def _shade(self, axes, colors) -> list:
        """Shade each batch range in its choice's colour and hatch what does not fit; the legend's patches."""
        from matplotlib.patches import Patch
        from matplotlib.transforms import blended_transform_factory

        from dsdsim.export.trees import choice_ranges, spans_text
        from dsdsim.policy.trees import PLAIN

        p = self.prediction
        ax, ax_rel = axes
        b = [int(x) for x in p.batch_sizes]
        fits = p.choice >= 0
        if not fits.any():
            for a in axes:
                a.axvspan(b[0], b[-1], facecolor="0.85", alpha=0.7, hatch="//", edgecolor="0.6", lw=0)
            ax.text(0.5, 0.5, f"no batch size fits in memory at context {p.context}", transform=ax.transAxes,
                    ha="center", va="center", color="crimson")
            return []
        after = [x for x, ok in zip(b, fits) if not ok and x > b[int(np.flatnonzero(fits)[-1])]]
        ranges = p.ranges()
        edges = [start for start, _, _ in ranges[1:]] + [after[0] if after else b[-1]]
        index = {name: c for c, name in enumerate(p.choices)}
        band = [_PLAIN_BAND, *colors[1:]]                 # black at the band alpha would read as 'disabled'
        span = np.log2(b[-1] / b[0]) if b[-1] > b[0] else 0.0
        top = blended_transform_factory(ax_rel.transData, ax_rel.transAxes)
        for (start, _, choice), right in zip(ranges, edges):
            start = max(start, b[0])                      # the first range starts at batch 1: draw what was evaluated
            if right <= start:
                continue
            for a in axes:
                a.axvspan(start, right, color=band[index[choice]], alpha=_BAND_ALPHA, lw=0)
            if span and np.log2(right / start) >= _BAND_LABEL_SHARE * span:
                ax_rel.text(np.sqrt(start * right), 0.97, choice, transform=top, ha="center", va="top", fontsize=8,
                            color="0.2")
        handles = []
        for choice, spans in choice_ranges(p).items():
            shown = spans_text(spans[:_MAX_SPANS_SHOWN]) + (", ..." if len(spans) > _MAX_SPANS_SHOWN else "")
            name = "plain decoding" if choice == PLAIN else choice
            handles.append(Patch(color=band[index[choice]], alpha=2 * _BAND_ALPHA,
                                 label=f"chosen: {name} (batch {shown})"))
        if after:
            for a in axes:
                a.axvspan(after[0], b[-1], facecolor="0.85", alpha=0.7, hatch="//", edgecolor="0.6", lw=0)
            handles.append(Patch(facecolor="0.85", hatch="//", edgecolor="0.6",
                                 label=f"B >= {after[0]}: does not fit in memory"))
        return handles


def _first(x) -> float:
    """The scalar of a (possibly one-element array) step field."""
    return float(np.asarray(x, dtype=float).reshape(-1)[0])


def _step_label(step) -> str:
    """What the step verifies: 'K=3' for a chain, the tree and its token count for a draft tree, plain decoding."""
    d = step.drafter
    if d is None or _first(step.k) == 0:
        return "K=0 (plain decoding)"
    if d.tree is not None:
        return f"{d.tree.label}: {d.tree.steps} draft passes, {d.tree.tokens} draft tokens verified, {d.label}"
    return f"K={int(_first(step.k))}, {d.label}"


# one colour per operator kind (the legend names them); the marker says the phase
_KIND_COLORS = {"gemm": "tab:blue", "attention": "tab:red", "moe_experts": "tab:purple", "logits": "tab:green",
                "elementwise": "tab:orange", "sampling": "tab:brown", "embedding": "tab:pink"}
_PHASE_MARKERS = {"verify": "o", "draft": "^"}
_LABEL_SHARE = 0.05       # an operator is named on the plot when it takes at least this share of the step time
_LABEL_MERGE_DECADES = 0.12   # labelled operators closer than this (log10, both axes) share one label


def _merge_labels(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Operators that land on (nearly) the same spot get one label 'a, b, c' instead of overprinted text."""
    groups: list[list[tuple[float, float, str]]] = []
    for x, y, name in sorted(points, key=lambda t: (t[0], t[1])):
        for g in groups:
            gx, gy = np.log10(g[0][0]), np.log10(g[0][1])
            if abs(np.log10(x) - gx) < _LABEL_MERGE_DECADES and abs(np.log10(y) - gy) < _LABEL_MERGE_DECADES:
                if name not in [n for _, _, n in g]:
                    g.append((x, y, name))
                break
        else:
            groups.append([(x, y, name)])
    return [(g[0][0], g[0][1], ", ".join(n for _, _, n in g)) for g in groups]


@dataclass
class RooflineDisplay(_Display):
    """The hardware roofline (bf16 and, where present, fp8) with a step's operators placed on it: colour by
    operator kind, circles for the verify pass, triangles for the draft passes; the operators that take at least
    5% of the step are named (operators on the same spot share one label). Achieved FLOP/s is predicted:
    FLOPs per call / predicted time per call."""

    step: Any
    figure_: Any = None
    ax_: Any = None

    @classmethod
    def from_step(cls, step) -> "RooflineDisplay":
        return cls(step)

    def _points(self):
        """(phase, kind, name, intensity FLOP/byte, achieved FLOP/s, share of the step) per operator with work."""
        st = self.step
        total = _first(st.step_time_s)
        for phase in _PHASE_MARKERS:
            for t in getattr(st, phase).op_times:
                count, nbytes, flops = _first(t.op.count), _first(t.op.bytes), _first(t.op.flops)
                time_s = _first(t.time_s)
                if count == 0 or nbytes <= 0 or flops <= 0 or time_s <= 0:
                    continue
                per_call = time_s / count
                yield (phase, t.op.kind.value, t.op.name.split(".")[-1], flops / nbytes, flops / per_call,
                       time_s / total if total else 0.0)

    def plot(self, ax=None) -> "RooflineDisplay":
        plt = _plt()
        from matplotlib.lines import Line2D

        from dsdsim.units import DType

        st = self.step
        hw = st.hardware
        if ax is None:
            fig, ax = plt.subplots(figsize=(9.5, 5.8))
        else:
            fig = ax.figure
        bw = hw.bandwidth
        x = np.logspace(-1, 4, 200)
        handles = []
        for dtype, ls in ((DType.bf16, "-"), (DType.fp8, "--")):
            if dtype in hw.peak_flops_per_s:
                line, = ax.plot(x, np.minimum(hw.peak(dtype), bw * x), ls=ls, color="gray",
                                label=f"roof {dtype.value} (datasheet)")
                handles.append(line)
        pts = list(self._points())
        kinds = sorted({k for _, k, *_ in pts}, key=lambda k: (k not in _KIND_COLORS, k))
        extra = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
        colors = {k: _KIND_COLORS.get(k) or next(extra) for k in kinds}
        for phase, kind, _name, xi, yi, _share in pts:
            ax.scatter(xi, yi, marker=_PHASE_MARKERS[phase], s=26, alpha=0.8, color=colors[kind],
                       edgecolors="black" if phase == "draft" else "none", linewidths=0.4)
        named = _merge_labels([(xi, yi, name) for _, _, name, xi, yi, share in pts if share >= _LABEL_SHARE])
        for i, (xi, yi, text) in enumerate(named):
            ax.annotate(text, (xi, yi), xytext=(6, 8 if i % 2 == 0 else -12), textcoords="offset points",
                        fontsize=7, color="0.15",
                        arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
        handles += [Line2D([], [], ls="", marker="s", color=colors[k], label=k) for k in kinds]
        phases = {p for p, *_ in pts}
        handles += [Line2D([], [], ls="", marker=_PHASE_MARKERS[p], color="0.4", label=f"{p} pass")
                    for p in _PHASE_MARKERS if p in phases]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved FLOP/s (predicted)")
        ax.set_title(f"{hw.name}: {st.model.name}, B={int(_first(st.batch))}, context {int(_first(st.context))}\n"
                     f"{_step_label(st)}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  title=f"labelled: >= {_LABEL_SHARE:.0%} of the step time", title_fontsize=7)
        fig.tight_layout()
        self.figure_, self.ax_ = fig, ax
        return self


def save_png(display, path: Optional[Path]) -> Optional[Path]:
    """Render to a temporary file and rename, so a failed plot leaves nothing behind."""
    if path is None:
        return None
    from dsdsim.files import atomic_path

    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        display.save(tmp)
    return path


_MAX_LEGEND_LINES = 12     # past this many (alpha, context) lines the legend names colours and styles apart


@dataclass
class SensitivityDisplay(_Display):
    """How K* and the dynamic-K speedup move with acceptance (colour) and context (line style).

    Built from ``dsdsim.plan.sensitivity(...)`` (one row per alpha, context, batch size). ``title``: what was
    predicted (model, hardware, drafter); the speedup panel's legend sits outside it, one entry per line up to 12
    lines, else one per acceptance (colour) and one per context (line style); the K* panel carries the short key.
    Speedups are over a server without speculation."""

    frame: Any
    title: str = ""
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_frame(cls, frame, title: str = "") -> "SensitivityDisplay":
        return cls(frame, title)

    def plot(self, axes=None) -> "SensitivityDisplay":
        plt = _plt()
        from matplotlib.lines import Line2D

        df = self.frame
        if axes is None:
            fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
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
        ax_s.set_ylabel("dynamic-K speedup vs no speculation")
        ax_s.axhline(1.0, color="gray", lw=0.8)
        if len(alphas) * len(contexts) <= _MAX_LEGEND_LINES:
            handles, _ = ax_s.get_legend_handles_labels()
        else:
            handles = ([Line2D([], [], color=cmap(i), lw=2, label=f"alpha {a:g}") for i, a in enumerate(alphas)]
                       + [Line2D([], [], color="0.3", ls=styles[j % len(styles)], label=f"context {c}")
                          for j, c in enumerate(contexts)])
        ax_s.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        key = ([Line2D([], [], color=cmap(i), lw=2, label=f"alpha {a:g}") for i, a in enumerate(alphas)]
               + [Line2D([], [], color="0.3", ls=styles[j % len(styles)], label=f"context {c}")
                  for j, c in enumerate(contexts)])
        ax_k.legend(handles=key, fontsize=7, loc="lower left", title="colour: acceptance; line: context",
                    title_fontsize=7)                       # the K* panel's own key (the same lines as beside)
        if self.title:
            fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, (ax_k, ax_s)
        return self


BAND = 0.20     # the +/- band drawn around y = x


@frozen
class Series:
    """One set of (measured, predicted) pairs drawn with one colour and marker (hollow: ``filled`` False)."""

    label: str
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    color: str
    marker: str = "o"
    filled: bool = True


# the corpus' quantities: one marker each (any other quantity: an x)
_QUANTITY_MARKERS = {"itl_ms": "o", "step_ms": "s", "tokens_per_s": "^", "speedup_vs_no_sd": "D",
                     "step_time_ratio": "v", "ratio": "P",
                     # end to end, through the serving simulation
                     "e2e_latency_ms": "X", "tpot_p50_ms": "*", "run_tokens_per_s": "<"}
_SPLIT_COLORS = {"train": "tab:blue", "test": "tab:orange"}
_TAB10 = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
          "tab:olive", "tab:cyan")


@dataclass
class AccuracyDisplay(_Display):
    """Predicted against measured on log axes, with the y = x line and a +/-20% band.

    ``AccuracyDisplay.from_report(report)``: the public corpus (``dsdsim accuracy --plot``), colour by split and
    marker by quantity. ``AccuracyDisplay.from_points(points, title)``: a validation run's points
    (``dsdsim validate``), colour by kind, hollow as predicted by the spec, filled once calibrated."""

    series: tuple[Series, ...]
    title: str = ""
    xlabel: str = "measured"
    ylabel: str = "predicted"
    band: float = BAND
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_report(cls, report) -> "AccuracyDisplay":
        rows = [c for c in report.cases if c.predicted is not None]
        quantities = list(_QUANTITY_MARKERS) + sorted({c.quantity for c in rows} - set(_QUANTITY_MARKERS))
        series = []
        for split in ("train", "test"):
            for q in quantities:
                pts = [c for c in rows if c.split == split and c.quantity == q]
                if pts:
                    series.append(Series(f"{split}: {q} ({len(pts)})", tuple(c.measured for c in pts),
                                         tuple(c.predicted for c in pts), _SPLIT_COLORS[split],
                                         _QUANTITY_MARKERS.get(q, "x")))
        parts = [f"{k.replace('_e2e', ' end to end').replace('_step', ' per step')} n={v.n} median |err| "
                 f"{format_percent(v.median_abs_rel_error, 0)}" for k, v in report.summary.items() if v.n]
        errs = "\n".join(", ".join(parts[i:i + 2]) for i in range(0, len(parts), 2))
        return cls(tuple(series), title=f"Accuracy against public measurements\n{errs}",
                   xlabel="measured (public source)", ylabel="predicted by dsdsim (shipped defaults)")

    @classmethod
    def from_points(cls, points, title: str = "") -> "AccuracyDisplay":
        """Validation points (``dsdsim.fit.calibrate.Point``): per kind, the spec's prediction (hollow) and the
        calibrated one (filled), seconds per call."""
        colors = _TAB10
        series = []
        for i, kind in enumerate(sorted({p.kind for p in points})):
            ps = [p for p in points if p.kind == kind]
            meas = tuple(p.measured_s for p in ps)
            color = colors[i % len(colors)]
            series.append(Series(f"{kind} (spec)", meas, tuple(p.predicted_s for p in ps), color, filled=False))
            cal = [(p.measured_s, p.calibrated_s) for p in ps if p.calibrated_s is not None]
            if cal:
                series.append(Series(f"{kind} (calibrated)", tuple(m for m, _ in cal), tuple(c for _, c in cal),
                                     color))
        return cls(tuple(series), title=title or "predicted vs measured",
                   xlabel="measured time per call (s)", ylabel="predicted time per call (s)")

    def plot(self, ax=None) -> "AccuracyDisplay":
        plt = _plt()
        if ax is None:
            fig, ax = plt.subplots(figsize=(7, 6.5))
        else:
            fig = ax.figure
        for s in self.series:
            style = ({"color": s.color} if s.filled else {"facecolors": "none", "edgecolors": s.color})
            ax.scatter(s.measured, s.predicted, marker=s.marker, s=26, alpha=0.8, label=s.label, **style)
        values = [v for s in self.series for v in (*s.measured, *s.predicted) if v > 0]
        lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (0.1, 10.0)
        b = self.band
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
        ax.fill_between([lo, hi], [lo * (1 - b), hi * (1 - b)], [lo * (1 + b), hi * (1 + b)], color="grey",
                        alpha=0.2, label=f"±{b:.0%}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(self.xlabel)
        ax.set_ylabel(self.ylabel)
        ax.set_title(self.title, fontsize=10)
        ax.legend(fontsize=7, loc="upper left", ncol=2 if len(self.series) > 8 else 1)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, ax
        return self
