"""The kernel-shape figures of a hardware spec (``kernels`` block), measured: fitted to the probe's sweeps.

Each fit inverts the cost model's own equation (dsdsim.cost.timing) on the sweep it measures:

    kernel floor      a 1x128x128 GEMM: t = launch + floor (the GEMM's work is nanoseconds)
    GEMM transition   GEMM over M on real layer shapes: t = launch + max(floor, (t_c^p + t_m^p)^(1/p)),
                      t_c = 2mkn / peak, t_m = bytes / bandwidth; p by least squares on log time
    decode attention  t = launch + (B c + B ramp) * kv_bytes_per_token / (bandwidth * eta_max): a line in the
                      context c per variant, slope -> eta_max, intercept -> ramp tokens
The MLA figures need an MLA decode kernel (FlashMLA) and the fused-MoE figures a fused-MoE kernel, which the
probe does not run (its MLA-like points are plain matmuls): they are taken from a reference spec and marked
unverified; ``dsdsim calibrate`` on a validation fits the MoE ones. Pure numpy/scipy: no torch here.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

NOT_PROBED = ("mla_attention_bandwidth_fraction", "mla_attention_ramp_tokens", "moe_call_latency_s",
              "moe_bandwidth_fraction", "moe_compute_fraction")


def kernel_floor_s(tiny_gemm_s: float, launch_s: float, lowest_s: float = 1e-8) -> float:
    """Kernel floor from a tiny GEMM timed the way the launch was (both graph-replayed, or both eager)."""
    return float(max(tiny_gemm_s - launch_s, lowest_s))


def gemm_transition_p(points: Sequence[dict], peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                      launch_s: float, floor_s: float) -> Optional[float]:
    """The p-norm exponent that best reproduces the GEMM M-sweep (points: flops, bytes, seconds), in [1, 16]."""
    from scipy.optimize import minimize_scalar

    pts = [p for p in points if p.get("seconds") and p.get("flops") and p.get("bytes")]
    if len(pts) < 3 or peak_flops_per_s <= 0 or bandwidth_bytes_per_s <= 0:
        return None
    tc = np.array([p["flops"] for p in pts]) / peak_flops_per_s
    tm = np.array([p["bytes"] for p in pts]) / bandwidth_bytes_per_s
    meas = np.log([p["seconds"] for p in pts])

    def loss(p: float) -> float:
        hi, lo = np.maximum(tc, tm), np.minimum(tc, tm)
        work = hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)
        return float(np.sum((np.log(launch_s + np.maximum(work, floor_s)) - meas) ** 2))

    return float(minimize_scalar(loss, bounds=(1.0, 16.0), method="bounded").x)


def attention_ramp(points: Sequence[dict], bandwidth_bytes_per_s: float, launch_s: float
                   ) -> Optional[tuple[float, float]]:
    """(eta_max, ramp tokens) from decode-attention points of one variant and batch over context (points: batch,
    context, kv_bytes, seconds): t - launch = (B c + B ramp) kv_bytes_per_token / (BW eta_max)."""
    pts = sorted((p for p in points if p.get("seconds") and p.get("kv_bytes")), key=lambda p: p["context"])
    if len({p["context"] for p in pts}) < 2:
        return None
    c = np.array([p["context"] for p in pts], dtype=float)
    t = np.array([p["seconds"] for p in pts]) - launch_s
    per_token = np.array([p["kv_bytes"] / (p["batch"] * p["context"]) for p in pts])       # bytes per token
    batch = np.array([p["batch"] for p in pts], dtype=float)
    x = batch * per_token / bandwidth_bytes_per_s                # seconds per token per unit of 1/eta
    slope, intercept = np.polyfit(c * x, t, 1)                    # t = (1/eta) c x + (ramp/eta) x
    if slope <= 0:
        return None
    eta = float(np.clip(1.0 / slope, 0.01, 1.2))
    ramp = float(np.clip(intercept / (slope * float(np.mean(x))), 1.0, 1e6))
    return eta, ramp


def fit_kernel_figures(sweeps: dict, peak_flops_per_s: float, bandwidth_bytes_per_s: float, launch_s: float,
                       graphs: bool) -> dict[str, tuple[float, str]]:
    """{figure name: (value, how it was measured)} for what the sweeps determine. ``sweeps``: name -> list of
    point dicts (as the probe writes them); ``launch_s``: the launch cost of the same timing mode."""
    mode = "graph" if graphs else "eager"
    out: dict[str, tuple[float, str]] = {}
    floor = None
    for p in sweeps.get("kernel_floor", []):
        if p.get("kernel", "").startswith("gemm") and p.get("mode") == mode and p.get("seconds"):
            floor = kernel_floor_s(p["seconds"], launch_s)
            out["kernel_floor_s"] = (floor, f"1x128x128 GEMM ({mode}) {p['seconds'] * 1e6:.2f} us less the "
                                            f"{launch_s * 1e6:.2f} us launch")
    p_fit = gemm_transition_p(sweeps.get("gemm_m", []), peak_flops_per_s, bandwidth_bytes_per_s, launch_s,
                              floor or 0.0)
    if p_fit is not None:
        out["gemm_transition_p"] = (p_fit, f"least squares on log time over {len(sweeps.get('gemm_m', []))} GEMM "
                                           "M-sweep points (llama-3.1-8b layer shapes)")
    pts = fastest_per_context(sweeps.get("decode_attention", []), variants=("gqa_attend", "gqa_packed"))
    fit = attention_ramp(pts, bandwidth_bytes_per_s, launch_s)
    if fit is not None:
        how = (f"line in context over {len(pts)} contexts (q = 1, batch {pts[0]['batch']}, the faster of SDPA's GQA "
               "path and the packed call at each)")
        out["decode_attention_bandwidth_fraction"] = (fit[0], how)
        out["decode_attention_ramp_tokens"] = (fit[1], how)
    return out


def fastest_per_context(points: Sequence[dict], variants: Sequence[str], q_len: int = 1) -> list[dict]:
    """At each context, the fastest of the given kernel variants (an engine runs its best decode kernel)."""
    best: dict[int, dict] = {}
    for p in points:
        if p.get("variant") in variants and p.get("q_len") == q_len and p.get("seconds"):
            c = p["context"]
            if c not in best or p["seconds"] < best[c]["seconds"]:
                best[c] = p
    return [best[c] for c in sorted(best)]
