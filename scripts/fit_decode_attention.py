"""Fit the decode-attention figures of the hardware specs to published decode-only attention timings.

    python scripts/fit_decode_attention.py            fit, print each fit and its error, write the specs
    python scripts/fit_decode_attention.py --check    fit again; fail (exit 1) if a spec would change

Data: the rows of measurements/kernels/attention_queries.csv with one query per sequence over a 16-bit paged GQA cache
(MLA kernels have figures of their own), their
heads and head size given, at least ``MIN_BATCH`` sequences and ``MIN_CONTEXT`` cached tokens (where the kernel floor
is small beside the cache read), at least ``MIN_ROWS`` of them per part. The figures describe a 16-bit cache: the fp8
rows are kept beside them and not fitted (Hopper's FlashAttention-3 dequantises an fp8 cache at 0.50-0.67 of the
bandwidth, Blackwell's trtllm-gen decode at 0.78-0.81: measurements/kernels/README.md). The model is dsdsim's decode attention
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
KV_BYTES = {"bf16": 2, "fp16": 2}          # the cache formats the figures describe (fp8 rows are not fitted)


def rows_by_part(path: Path = DATA) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    with path.open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if (r["q_per_seq"] == "1" and r["attention"].startswith("gqa") and r["num_kv_heads"] and r["head_dim"]
                    and r["kv_dtype"] in KV_BYTES
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


def rewritten(text: str, eta: float, ramp: float, n: int, err: float, sources: str, part: str) -> str:
    src = (f"scripts/fit_decode_attention.py: least squares on log time over {n} decode-only rows of "
           f"measurements/kernels/attention_queries.csv ({sources})")
    note = f"median |pred/meas - 1| {err:.3f}"
    text = re.sub(r"  decode_attention_bandwidth_fraction: \{.*\}",
                  f'  decode_attention_bandwidth_fraction: {{value: {eta:.3f}, source: "{src}", verified: fitted, '
                  f'note: "{note}", measured_on: [{part}]}}', text)
    return re.sub(r"  decode_attention_ramp_tokens: \{.*\}",
                  f'  decode_attention_ramp_tokens: {{value: {ramp:.0f}, source: "{src}", verified: fitted, '
                  f'note: "each sequence costs as if {ramp:.0f} more cached tokens were read; {note}", '
                  f'measured_on: [{part}]}}', text)


def main(argv: list[str] | None = None) -> int:
    from dsdsim.specs.hardware import load_hardware

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec would change")
    args = parser.parse_args(argv)
    updates = []
    for part, rows in sorted(rows_by_part().items()):
        path = SPECS / f"{part}.yaml"
        if not path.exists():
            continue
        eta, ramp, err = fit(load_hardware(path).bandwidth, rows)
        print(f"{part:13s} n {len(rows):4d}  eta_max {eta:.3f}  ramp {ramp:.0f} tokens  median |err| {err:.3f}")
        updates.append((path, rewritten(path.read_text(), eta, ramp, len(rows), err, _sources(rows), part)))
    return write_specs(updates, args.check)


if __name__ == "__main__":
    sys.exit(main())
