"""Pictures of serving simulations (matplotlib, imported only when a plot is drawn; see dsdsim.export.plots).

    TimelineDisplay   requests in each engine step and the K it ran, against simulated time: one panel per policy
                      (simulate --plot)
    SweepDisplay      TPOT (p50 and p99) and output throughput against the load, one colour per policy
                      (simulate --sweep ... --plot)

Both keep ``figure_`` and ``axes_`` for restyling; ``save_png(display, path)`` (dsdsim.export.plots) writes a PNG
atomically. Titles name the model, hardware, drafter and workload; legends sit outside the data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from dsdsim.export.plots import _Display, _plt

_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


def policy_timeline(policy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds at each step's end, requests in the step, K of the step) of a PolicyResult, as float arrays; K is
    NaN for a step without a decoding request (prefill chunks only: nothing is verified). A step is drawn over the
    interval that ends at its end (``where="pre"``). A fleet's: its first replica's (the fleet's merged steps
    interleave the replicas' batches)."""
    tl = policy.replicas[0].timeline if policy.replicas else policy.timeline
    k = np.asarray(tl.k, dtype=float)
    k = np.where(np.asarray(tl.decoding) > 0, k, np.nan)
    return np.asarray(tl.t_end_s, dtype=float), np.asarray(tl.requests, dtype=float), k


@dataclass
class TimelineDisplay(_Display):
    """Requests in each step (left axis, filled) and the K the step ran (right axis, a step line) over simulated
    time, one panel per policy sharing the time axis, so a draining batch and where the K policy switches show side
    by side. ``title``: what was simulated (setup and workload)."""

    result: Any
    title: str = ""
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_result(cls, result, title: str = "") -> "TimelineDisplay":
        return cls(result, title)

    def plot(self, axes=None) -> "TimelineDisplay":
        plt = _plt()
        policies = list(self.result.policies)
        n = len(policies)
        if axes is None:
            fig, axes = plt.subplots(n, 1, figsize=(11, 1.2 + 2.3 * n), sharex=True, squeeze=False,
                                     layout="constrained")
            axes = list(axes[:, 0])
        else:
            axes = list(np.atleast_1d(axes))
            fig = axes[0].figure
        k_max = max([1.0] + [float(np.nanmax(policy_timeline(p)[2], initial=0.0)) for p in policies])
        b_max = max([1.0] + [float(np.max(policy_timeline(p)[1], initial=0.0)) for p in policies])
        twins = []
        for ax, p in zip(axes, policies):
            t, b, k = policy_timeline(p)
            ax.fill_between(t, b, step="pre", color="tab:blue", alpha=0.25, lw=0)
            ax.step(t, b, where="pre", color="tab:blue", lw=0.8, label="requests in the step")
            ax.set_ylim(0, b_max * 1.08)
            ax.set_ylabel("requests")
            ax.grid(True, alpha=0.3)
            one = f" (replica 1 of {len(p.replicas)})" if p.replicas else ""
            ax.set_title(f"policy {p.name}{one}", fontsize=9, loc="left")
            tk = ax.twinx()
            tk.step(t, k, where="pre", color="crimson", lw=1.0, label="K (draft tokens)")
            tk.set_ylim(-0.3, k_max + 0.6)
            tk.set_yticks(range(0, int(k_max) + 1))
            tk.set_ylabel("K", color="crimson")
            tk.tick_params(axis="y", colors="crimson")
            twins.append(tk)
        axes[-1].set_xlabel("simulated time (s)")
        handles = [axes[0].get_legend_handles_labels()[0][0], twins[0].get_legend_handles_labels()[0][0]]
        if self.title:
            fig.suptitle(self.title, fontsize=10)
        fig.legend(handles, [h.get_label() for h in handles], loc="outside lower center", ncol=2, fontsize=8,
                   frameon=False)
        self.figure_, self.axes_ = fig, (axes, twins)
        return self


@dataclass
class SweepDisplay(_Display):
    """TPOT against the load (p50 solid, p99 dashed) and output tokens/s against the load, one colour per policy.

    Built from a ``dsdsim.serve.sweep.SweepResult``; ``title``: the setup (model, hardware, drafter). The x axis is
    logarithmic when the loads span 8x or more."""

    sweep: Any
    title: str = ""
    figure_: Any = None
    axes_: Any = None

    @classmethod
    def from_sweep(cls, sweep, title: str = "") -> "SweepDisplay":
        return cls(sweep, title)

    def plot(self, axes=None) -> "SweepDisplay":
        plt = _plt()
        if axes is None:
            fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
        else:
            fig = axes[0].figure
        ax_t, ax_g = axes
        loads = np.array([p.load for p in self.sweep.points], dtype=float)
        names = list(dict.fromkeys(pr.name for pt in self.sweep.points for pr in pt.result.policies))
        for i, name in enumerate(names):
            color = _COLORS[i % len(_COLORS)]
            per = [{pr.name: pr for pr in pt.result.policies}.get(name) for pt in self.sweep.points]
            d = [None if pr is None else pr.to_dict() for pr in per]
            p50 = np.array([np.nan if x is None else x["tpot_ms"]["p50"] for x in d], dtype=float)
            p99 = np.array([np.nan if x is None else x["tpot_ms"]["p99"] for x in d], dtype=float)
            tok = np.array([np.nan if x is None else x["output_tokens_per_s"] for x in d], dtype=float)
            ax_t.plot(loads, p50, "-o", color=color, ms=4, lw=1.6, label=f"{name} p50")
            ax_t.plot(loads, p99, "--s", color=color, ms=3.5, lw=1.2, alpha=0.85, label=f"{name} p99")
            ax_g.plot(loads, tok, "-o", color=color, ms=4, lw=1.6, label=name)
        unit = self.sweep.loads.unit
        xlabel = ("offered load (requests/s, " + self.sweep.loads.kind + " arrivals)" if unit == "QPS"
                  else "concurrency (closed-loop clients)")
        for ax in (ax_t, ax_g):
            if loads.size and loads.max() / loads.min() >= 8:
                ax.set_xscale("log", base=2)
                ax.set_xticks(loads)
                ax.set_xticklabels([f"{v:g}" for v in loads])
            ax.set_xlabel(xlabel)
            ax.grid(True, which="both", alpha=0.3)
        ax_t.set_ylabel("TPOT (ms per output token)")
        ax_t.set_ylim(bottom=0)
        ax_t.set_title("time per output token: p50 (solid), p99 (dashed)", fontsize=9)
        ax_g.set_ylabel("output tokens/s")
        ax_g.set_ylim(bottom=0)
        ax_g.set_title("output throughput", fontsize=9)
        ax_t.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        ax_g.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        if self.title:
            fig.suptitle(self.title, fontsize=10)
        fig.tight_layout()
        self.figure_, self.axes_ = fig, (ax_t, ax_g)
        return self


def plot_title(setup_line: str, workload: Optional[str] = None) -> str:
    """A figure's title: the setup, then the workload when there is one."""
    return setup_line if not workload else f"{setup_line}\nworkload {workload}"
