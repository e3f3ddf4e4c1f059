"""Fit the decode-attention figures of the hardware specs to published decode-only attention timings.

    python scripts/fit_decode_attention.py            fit, print each fit and its error, write the specs
    python scripts/fit_decode_attention.py --check    fit again; fail (exit 1) if a spec would change

Data: the rows of measurements/kernels/attention_queries.csv with one query per sequence over a paged GQA cache (MLA
kernels have figures of their own), their heads and head size given, at least ``MIN_BATCH`` sequences and
``MIN_CONTEXT`` cached tokens (where the kernel floor is small beside the cache read), at least ``MIN_ROWS`` of them
per part and cache width. A 16-bit cache fits the
``decode_attention_*`` figures; an 8-bit one, which the kernel dequantises, the ``decode_attention_fp8_*`` figures
(Hopper's FlashAttention-3 reaches 0.50-0.67 of the bandwidth over it, Blackwell's trtllm-gen decode 0.78-0.81:
measurements/kernels/README.md). The model is dsdsim's decode attention
(``dsdsim.cost.timing``): the cache streams at BW * eta_max * c / (c + ramp) for c cached tokens per sequence, so
t = batch * (c + ramp) * kv_bytes_per_token / (BW * eta_max). eta_max and ramp are fitted by least squares on log
time. A part without such rows takes, per cache width, the figures of the nearest fitted part of its own generation by
memory bandwidth and compute-capability major where both specs state one (engines pick the decode kernel by it): H100 NVL and PCIe,
H200 NVL, GH200 and H20 take H100 SXM's or H200 SXM's FlashAttention-3 figures, L4, L40S and L20 the RTX 4090's, the
RTX 5090 the RTX PRO 6000's (both GB202, not B200's trtllm-gen),
marked unverified and measured_on the fitted part; ``--transfer`` prints how well each fitted part's rows are read by
its nearest other fitted part's figures, the rule's test on rows those figures never saw. Parts of a generation with
no fitted part keep their figures.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fit_gemm import write_specs     # the specs written one way (scripts/ is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "measurements" / "kernels" / "attention_queries.csv"
SPECS = ROOT / "hw_specs"
MIN_ROWS, MIN_BATCH, MIN_CONTEXT = 20, 16, 256
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
# the figures each cache width is fitted to: a 16-bit cache, and an 8-bit one (dequantised in the kernel)
FIGURES = {2: ("decode_attention_bandwidth_fraction", "decode_attention_ramp_tokens"),
           1: ("decode_attention_fp8_bandwidth_fraction", "decode_attention_fp8_ramp_tokens")}


def rows_by_part(path: Path = DATA, width: int = 2) -> dict[str, list[dict]]:
    """The decode rows of each part over a cache of ``width`` bytes per element, where a part has enough."""
    out: dict[str, list[dict]] = {}
    with path.open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if (r["q_per_seq"] == "1" and r["attention"].startswith("gqa") and r["num_kv_heads"] and r["head_dim"]
                    and KV_BYTES.get(r["kv_dtype"]) == width
                    and int(r["batch"]) >= MIN_BATCH and int(r["context"]) >= MIN_CONTEXT):
                out.setdefault(r["part"], []).append(r)
    return {p: rs for p, rs in out.items() if len(rs) >= MIN_ROWS}


def fit(bandwidth: float, rows: list[dict]) -> tuple[float, float, float]:
    """(eta_max, ramp tokens, median |pred/meas - 1|)."""
    t = np.array([float(r["time_us"]) * 1e-6 for r in rows])

    def pred(x):
        return predicted(rows, bandwidth, x[0], x[1])

    res = least_squares(lambda x: np.log(pred(x) / t), [0.9, 80.0], bounds=([0.3, 0.0], [1.0, 5000.0]))
    return float(res.x[0]), float(res.x[1]), float(np.median(np.abs(pred(res.x) / t - 1.0)))


def predicted(rows: list[dict], bandwidth: float, eta: float, ramp: float) -> np.ndarray:
    """Each row's decode-attention seconds at the figures (eta_max, ramp) on a part of ``bandwidth`` B/s."""
    n = np.array([float(r["batch"]) for r in rows])
    c = np.array([float(r["context"]) for r in rows])
    per_token = np.array([2 * int(r["num_kv_heads"]) * int(r["head_dim"]) * KV_BYTES[r["kv_dtype"]] for r in rows])
    return n * (c + ramp) * per_token / (bandwidth * eta)


def _major(hw) -> str | None:
    return hw.compute_capability.value.split(".")[0] if hw.compute_capability is not None else None


def _same_kernels(a, b) -> bool:
    """Whether two parts of one generation run the same decode kernels: the same compute-capability major where both
    specs state one (engines pick attention kernels by it: Blackwell's datacenter parts, 10.x, run trtllm-gen, its
    GB202 parts, 12.0, do not)."""
    return _major(a) is None or _major(b) is None or _major(a) == _major(b)


def nearest(hw, fitted: list) -> object | None:
    """The fitted part (a HardwareSpec among ``fitted``) of ``hw``'s generation nearest to it in memory bandwidth
    (log ratio; name order breaks ties), or None where its generation has none."""
    same = [f for f in fitted if f.generation_name is not None and f.generation_name == hw.generation_name
            and f.name != hw.name and _same_kernels(f, hw)]
    return min(same, key=lambda f: (abs(math.log(f.bandwidth / hw.bandwidth)), f.name), default=None)


def _sources(rows: list[dict]) -> str:
    return "; ".join(sorted({r["source"] for r in rows}))


@dataclass(frozen=True)
class DecodeFit:
    """One part's fitted pair for one cache width, and what it was fitted on."""
    part: str
    width: int
    eta: float
    ramp: float
    rows: int
    error: float
    sources: str


def rewritten(text: str, f: DecodeFit, assumed_by: str | None = None) -> str:
    """The spec text with ``f``'s pair of figures (FIGURES[f.width]): replaced where present, the fp8 pair added after
    the 16-bit ramp where absent. ``assumed_by`` names the part the text is of where that is not ``f.part`` (a
    part without rows of its own): the figures are then unverified there and say whose they are."""
    fraction, ramp_name = FIGURES[f.width]
    src = (f"scripts/fit_decode_attention.py: least squares on log time over {f.rows} decode-only rows of "
           f"measurements/kernels/attention_queries.csv ({f.sources})")
    note = f"median |pred/meas - 1| {f.error:.3f}"
    if assumed_by is not None:
        note += f"; assumed from {f.part} (the nearest fitted part of its generation by memory bandwidth)"
    verified = "fitted" if assumed_by is None else "unverified"
    lines = (f'  {fraction}: {{value: {f.eta:.3f}, source: "{src}", verified: {verified}, note: "{note}", '
             f'measured_on: [{f.part}]}}',
             f'  {ramp_name}: {{value: {f.ramp:.0f}, source: "{src}", verified: {verified}, '
             f'note: "each sequence costs as if {f.ramp:.0f} more cached tokens were read; {note}", '
             f'measured_on: [{f.part}]}}')
    if re.search(rf"^  {fraction}: ", text, flags=re.M) is None:       # a pair the spec does not have yet
        anchor = re.search(r"^  decode_attention_ramp_tokens: \{.*\}$", text, flags=re.M)
        return text[:anchor.end()] + "\n" + "\n".join(lines) + text[anchor.end():]
    text = re.sub(rf"^  {fraction}: \{{.*\}}$", lambda _: lines[0], text, flags=re.M)
    return re.sub(rf"^  {ramp_name}: \{{.*\}}$", lambda _: lines[1], text, flags=re.M)


def fits_by_width() -> dict[int, dict[str, DecodeFit]]:
    """Every part's fit, per cache width, printed as it is made."""
    from dsdsim.specs.hardware import load_hardware

    out: dict[int, dict[str, DecodeFit]] = {}
    for width, cache in ((2, "16-bit"), (1, "8-bit")):
        for part, rows in sorted(rows_by_part(width=width).items()):
            path = SPECS / f"{part}.yaml"
            if not path.exists():
                continue
            eta, ramp, err = fit(load_hardware(path).bandwidth, rows)
            print(f"{part:13s} {cache} cache  n {len(rows):4d}  eta_max {eta:.3f}  ramp {ramp:.0f} tokens  "
                  f"median |err| {err:.3f}")
            out.setdefault(width, {})[part] = DecodeFit(part, width, eta, ramp, len(rows), err, _sources(rows))
    return out


def transfer_errors(fits: dict[int, dict[str, DecodeFit]], specs: dict[str, object]) -> list[tuple]:
    """(width, part, figures' part, rows, median |pred/meas - 1|) of each fitted part's rows read by the figures of
    its nearest other fitted part: the transfer rule tried on rows those figures never saw."""
    out = []
    for width, by_part in fits.items():
        fitted = [specs[p] for p in by_part]
        for part, own in sorted(by_part.items()):
            near = nearest(specs[part], fitted)
            if near is None:
                continue
            rows = rows_by_part(width=width)[part]
            f = by_part[near.name]
            t = np.array([float(r["time_us"]) * 1e-6 for r in rows])
            err = float(np.median(np.abs(predicted(rows, specs[part].bandwidth, f.eta, f.ramp) / t - 1.0)))
            out.append((width, part, near.name, len(rows), err))
    return out


def main(argv: list[str] | None = None) -> int:
    from dsdsim.specs.hardware import load_hardware

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec would change")
    args = parser.parse_args(argv)
    fits = fits_by_width()
    specs = {path.stem: load_hardware(path) for path in sorted(SPECS.glob("*.yaml"))}
    for width, part, near, n, err in transfer_errors(fits, specs):
        print(f"transfer: {part:13s} {8 * width}-bit rows ({n}) read by {near}'s figures: median |err| {err:.3f}")
    updates = []
    for name, hw in specs.items():
        path, text = SPECS / f"{name}.yaml", (SPECS / f"{name}.yaml").read_text()
        for width in sorted(fits, reverse=True):           # the 16-bit pair first: the 8-bit one is placed after it
            by_part = fits[width]
            if name in by_part:
                text = rewritten(text, by_part[name])
            elif hw.kernels is not None and (near := nearest(hw, [specs[p] for p in by_part])) is not None:
                text = rewritten(text, by_part[near.name], assumed_by=name)
        updates.append((path, text))
    return write_specs(updates, args.check)


if __name__ == "__main__":
    sys.exit(main())
