"""Fit the dense-GEMM figures of the hardware specs to published M sweeps, and write them into hw_specs/.

    python scripts/fit_gemm.py            fit, print each fit and its errors, write the specs
    python scripts/fit_gemm.py --check    fit again; fail (exit 1) if a spec would change

Data: measurements/kernels/gemm_m.csv (published GEMM call times over M for LLM layer shapes, each row with its source;
see measurements/kernels/README.md and docs/kernel_shapes.md). For each (part, weight format) with at least
``MIN_ROWS`` rows not marked excluded, the cost model's own GEMM equation (dsdsim.cost.timing.gemm_rates: the p-norm of
compute and memory time, plus a fixed latency per call, plus the launch gap where the harness replays a graph) is
fitted by least squares on log time: the compute fraction, the bandwidth fraction and the latency; the transition
exponent is fixed per format (``TRANSITION_P``: a free p trades off against the compute fraction on fp8, whose
dynamic activation quantisation the latency then holds; docs/kernel_shapes.md "The fits"), and an fp8 fit's bandwidth
fraction is at most the same part's bf16 fit's (the same memory streams both; fp8 kernels are not faster at it). A part
without sweeps keeps its efficiency figures (``STAND_INS`` may name parts that take the nearest fitted part of their
generation, by memory bandwidth: none do, since power and clocks differ within a generation). NVIDIA parts from
Ampere on are fitted (the Hopper and Blackwell parts on aiconfigurator's sweeps, the RTX 4090 on LLMServingSim's
per-layer profile); AMD parts keep their efficiency figures: their sweeps fit no p >= 1 (docs/kernel_shapes.md).
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fit_kernels import _flow      # the spec files' flow-style YAML, written one way (scripts/ is on sys.path)

from dsdsim.cost.ops import Gemm
from dsdsim.cost.timing import gemm_rates, seconds
from dsdsim.specs.hardware import Figure, GemmFigures, HardwareSpec, Verified, load_hardware
from dsdsim.units import DType

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "measurements" / "kernels" / "gemm_m.csv"
SPECS = ROOT / "hw_specs"
MIN_ROWS = 40
TRANSITION_P = {"bf16": 3.0, "fp8": 1.5}
FORMATS = {"bf16": DType.bf16, "fp8": DType.fp8}
# parts without sweeps that take a fitted part's figures (same generation, datacenter parts): nearest by bandwidth
STAND_INS = ()         # no part takes another's figures: power and clocks differ even within a generation (H100 NVL, PCIe)
BOUNDS = {"compute": (0.05, 1.0), "bandwidth": (0.05, 1.0), "latency": (0.0, 5e-5)}


def read_rows(path: Path = DATA) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if not r["excluded"].strip() and r["dtype"] in FORMATS]
    for r in rows:
        if not r["time_us"]:
            raise SystemExit(f"{path.name}: a row of {r['source']} has no time_us")
    return rows


def graph_gap(row: dict, hw: HardwareSpec) -> float:
    """The launch gap a row's time includes: a graph replay's (the part's graphed gap); kernel-only times none."""
    return hw.launch_overhead_s.value if "graph" in row["timing"].lower() else 0.0


def predict(hw: HardwareSpec, fmt: str, x: np.ndarray, rows: list[dict]) -> np.ndarray:
    compute, bandwidth, latency = (float(v) for v in x)
    src = f"fit candidate {fmt}"
    fig = GemmFigures(source=src, compute_fraction=Figure(value=compute, source=src, verified=Verified.fitted),
                      bandwidth_fraction=Figure(value=bandwidth, source=src, verified=Verified.fitted),
                      transition_p=Figure(value=TRANSITION_P[fmt], source=src, verified=Verified.derived),
                      latency_s=Figure(value=latency, source=src, verified=Verified.fitted))
    w = FORMATS[fmt]
    rates = gemm_rates(hw, fig, w)
    tile = int(hw.gemm_tile_m.value)
    out = []
    for r in rows:
        op = Gemm(int(r["K"]), int(r["N"]), w, DType.bf16, tile)
        out.append(seconds(rates, op.demand(float(r["M"])), graph_gap(r, hw)))
    return np.array(out)


def fit(hw: HardwareSpec, fmt: str, rows: list[dict], max_bandwidth: float = 1.0) -> tuple[np.ndarray, float, float]:
    """(compute, bandwidth, latency), median |pred/meas - 1| over all rows and over M >= 256; the bandwidth fraction
    at most ``max_bandwidth``."""
    measured = np.array([float(r["time_us"]) * 1e-6 for r in rows])
    lo = np.array([BOUNDS["compute"][0], BOUNDS["bandwidth"][0], BOUNDS["latency"][0]])
    hi = np.array([BOUNDS["compute"][1], min(BOUNDS["bandwidth"][1], max_bandwidth), BOUNDS["latency"][1]])
    res = least_squares(lambda x: np.log(predict(hw, fmt, x, rows) / measured), np.array([0.6, 0.95 * min(0.85, hi[1]), 2e-6]),
                        bounds=(lo, hi), x_scale=np.array([0.1, 0.1, 1e-6]))
    err = np.abs(predict(hw, fmt, res.x, rows) / measured - 1.0)
    big = np.array([float(r["M"]) >= 256 for r in rows])
    return res.x, float(np.median(err)), float(np.median(err[big]))


def _sources(rows: list[dict]) -> str:
    names = sorted({re.sub(r" \(HEAD [0-9a-f]+\)", "", r["source"]) for r in rows})
    return "; ".join(names)


def figures_block(fits: dict, part: str, measured_on: str) -> dict[str, dict]:
    """The ``kernels.gemm`` block of ``part`` (its own fits, or ``measured_on``'s)."""
    out = {}
    assumed = part != measured_on
    for fmt, (x, err, err_big, n, src) in fits[measured_on].items():
        verified = "unverified" if assumed else "fitted"
        source = (f"scripts/fit_gemm.py: least squares on log time over {n} rows of measurements/kernels/gemm_m.csv "
                  f"({src}), p fixed at {TRANSITION_P[fmt]:g}")
        note = (f"median |pred/meas - 1| {err:.3f} over the rows, {err_big:.3f} at M >= 256"
                + (f"; assumed from {measured_on} (the nearest fitted part of its generation by memory bandwidth)"
                   if assumed else ""))
        fig = lambda v, ver=verified: {"value": v, "source": source, "verified": ver, "note": note,  # noqa: E731
                                       "measured_on": [measured_on]}
        out[fmt] = {"source": f"dense {fmt} GEMMs ({'cuBLASLt' if fmt == 'bf16' else 'fp8 with dynamic activation quantisation'}): {src}",
                    "compute_fraction": fig(round(float(x[0]), 4)),
                    "bandwidth_fraction": fig(round(float(x[1]), 4)),
                    "transition_p": {"value": TRANSITION_P[fmt], "source": "docs/kernel_shapes.md (form a3: p fixed; "
                                     "a free p trades off against the compute fraction)", "verified": "derived",
                                     "measured_on": [measured_on]},
                    "latency_s": fig(float(f"{x[2]:.3g}"))}
    return out


def rewritten(text: str, block: dict[str, dict]) -> str:
    """The spec text with its ``kernels.gemm`` block replaced (inserted before ``all_reduce``, or at the end of the
    ``kernels`` section of a part with no collectives)."""
    lines, out, skipping = text.split("\n"), [], False
    kept = [line for line in lines if not line.startswith("  # dense GEMMs")]
    ends = [i for i, line in enumerate(kept) if line.startswith("  all_reduce:")]
    if not ends and "kernels:" in kept:       # the first line after the kernels section (or the end, past the blank)
        start = kept.index("kernels:") + 1
        ends = [next((i for i in range(start, len(kept)) if kept[i] and not kept[i][0].isspace()), len(kept))]
        while ends[0] > start and not kept[ends[0] - 1].strip():
            ends[0] -= 1
    for i, line in enumerate(kept):
        if skipping:
            if line.startswith("    "):
                continue
            skipping = False
        if line.startswith("  gemm:"):
            skipping = True
            continue
        if block and ends and i == ends[0]:
            out.append("  # dense GEMMs by weight format (dsdsim.cost.timing.gemm_rates), written by scripts/fit_gemm.py")
            out.append("  gemm:")
            for fmt, figs in block.items():
                out.append(f"    {fmt}:")
                out += [f"      {k}: {_flow(v)}" for k, v in figs.items()]
        out.append(line)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec would change")
    args = parser.parse_args(argv)
    rows = read_rows()
    fits: dict[str, dict] = {}
    for part in sorted({r["part"] for r in rows}):
        path = SPECS / f"{part}.yaml"
        if not path.exists():
            continue
        hw = load_hardware(path)
        if hw.generation_name not in ("ampere", "ada", "hopper", "blackwell"):     # NVIDIA: one GEMM equation
            continue
        for fmt in FORMATS:
            mine = [r for r in rows if r["part"] == part and r["dtype"] == fmt]
            if len(mine) < MIN_ROWS:
                continue
            # fp8 weights stream through the same memory as bf16 ones: an fp8 fit reaches at most the bf16 fit's
            # bandwidth fraction (its p-norm and latency otherwise trade bandwidth against the quantisation kernel)
            cap = fits.get(part, {}).get("bf16", (np.ones(3),))[0][1] if fmt == "fp8" else 1.0
            x, err, err_big = fit(hw, fmt, mine, cap)
            fits.setdefault(part, {})[fmt] = (x, err, err_big, len(mine), _sources(mine))
            print(f"{part:10s} {fmt:5s} n {len(mine):4d}  compute {x[0]:.3f}  bandwidth {x[1]:.3f}  latency "
                  f"{x[2] * 1e6:.2f} us  p {TRANSITION_P[fmt]:g}  median |err| {err:.3f} (M >= 256: {err_big:.3f})")
    updates = []
    for path in sorted(SPECS.glob("*.yaml")):
        hw = load_hardware(path)
        if hw.kernels is None:
            continue
        source = hw.name if hw.name in fits else None
        if source is None and hw.name in STAND_INS:
            same = [p for p in fits if load_hardware(SPECS / f"{p}.yaml").generation_name == hw.generation_name]
            if same:
                source = min(same, key=lambda p: (abs(load_hardware(SPECS / f"{p}.yaml").bandwidth - hw.bandwidth), p))
        block = figures_block(fits, hw.name, source) if source is not None else {}
        updates.append((path, rewritten(path.read_text(), block)))
    return write_specs(updates, args.check)


def write_specs(updates: list[tuple[Path, str]], check: bool) -> int:
    """Write each spec's new text (each written spec must load), or with ``check`` only compare; the exit code,
    after one line naming what changed or would."""
    changed = []
    for path, new in updates:
        if new != path.read_text():
            changed.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
                load_hardware(path)
    if check and changed:
        print("would change: " + ", ".join(map(str, changed)), file=sys.stderr)
        return 1
    print("unchanged" if not changed else "wrote " + ", ".join(map(str, changed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
