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
time. Parts without such rows keep their figures.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
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
    n = np.array([float(r["batch"]) for r in rows])
    c = np.array([float(r["context"]) for r in rows])
    per_token = np.array([2 * int(r["num_kv_heads"]) * int(r["head_dim"]) * KV_BYTES[r["kv_dtype"]] for r in rows])
    t = np.array([float(r["time_us"]) * 1e-6 for r in rows])

    def pred(x):
        return n * (c + x[1]) * per_token / (bandwidth * x[0])

    res = least_squares(lambda x: np.log(pred(x) / t), [0.9, 80.0], bounds=([0.3, 0.0], [1.0, 5000.0]))
    return float(res.x[0]), float(res.x[1]), float(np.median(np.abs(pred(res.x) / t - 1.0)))


def _sources(rows: list[dict]) -> str:
    return "; ".join(sorted({r["source"] for r in rows}))


def rewritten(text: str, eta: float, ramp: float, n: int, err: float, sources: str, part: str,
              width: int = 2) -> str:
    """The spec text with the fitted pair of ``width``'s figures (FIGURES): replaced where present, the fp8 pair
    added after the 16-bit ramp where absent."""
    fraction, ramp_name = FIGURES[width]
    src = (f"scripts/fit_decode_attention.py: least squares on log time over {n} decode-only rows of "
           f"measurements/kernels/attention_queries.csv ({sources})")
    note = f"median |pred/meas - 1| {err:.3f}"
    lines = (f'  {fraction}: {{value: {eta:.3f}, source: "{src}", verified: fitted, note: "{note}", '
             f'measured_on: [{part}]}}',
             f'  {ramp_name}: {{value: {ramp:.0f}, source: "{src}", verified: fitted, '
             f'note: "each sequence costs as if {ramp:.0f} more cached tokens were read; {note}", '
             f'measured_on: [{part}]}}')
    if re.search(rf"^  {fraction}: ", text, flags=re.M) is None:       # a pair the spec does not have yet
        anchor = re.search(r"^  decode_attention_ramp_tokens: \{.*\}$", text, flags=re.M)
        return text[:anchor.end()] + "\n" + "\n".join(lines) + text[anchor.end():]
    text = re.sub(rf"^  {fraction}: \{{.*\}}$", lambda _: lines[0], text, flags=re.M)
    return re.sub(rf"^  {ramp_name}: \{{.*\}}$", lambda _: lines[1], text, flags=re.M)


def main(argv: list[str] | None = None) -> int:
    from dsdsim.specs.hardware import load_hardware

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec would change")
    args = parser.parse_args(argv)
    texts: dict[Path, str] = {}
    for width, cache in ((2, "16-bit"), (1, "8-bit")):
        for part, rows in sorted(rows_by_part(width=width).items()):
            path = SPECS / f"{part}.yaml"
            if not path.exists():
                continue
            eta, ramp, err = fit(load_hardware(path).bandwidth, rows)
            print(f"{part:13s} {cache} cache  n {len(rows):4d}  eta_max {eta:.3f}  ramp {ramp:.0f} tokens  "
                  f"median |err| {err:.3f}")
            texts[path] = rewritten(texts.get(path, path.read_text()), eta, ramp, len(rows), err, _sources(rows),
                                    part, width)
    return write_specs(list(texts.items()), args.check)


if __name__ == "__main__":
    sys.exit(main())
