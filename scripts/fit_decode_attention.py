"""Fit the decode-attention figures of the hardware specs to published decode-only attention timings.

    python scripts/fit_decode_attention.py            fit, print each fit and its error, write the specs
    python scripts/fit_decode_attention.py --check    fit again; fail (exit 1) if a spec would change

Data: the rows of measurements/kernels/attention_queries.csv timed in the kernels vLLM runs (``FITTED_LIBRARY``)
with one query per sequence over a paged GQA cache (MLA kernels have figures of their own), their heads and head
size given, at least ``MIN_BATCH`` sequences and ``MIN_CONTEXT`` cached tokens (where the kernel floor is small
beside the cache read), at least ``MIN_ROWS`` of them per part and cache width. The model is dsdsim's decode
attention (``dsdsim.cost.timing``): the cache streams at BW * eta_max * c / (c + ramp) for c cached tokens per
sequence, so t = batch * (c + ramp) * kv_bytes_per_token / (BW * eta_max); eta_max and ramp are fitted by least
squares on log time.

* A 16-bit cache fits the ``decode_attention_*`` pair; an 8-bit one, which the kernel dequantises, the
  ``decode_attention_fp8_*`` pair, and where its rate follows the head size (Hopper's FlashAttention-3: one
  fraction leaves 18-21% median error) ``decode_attention_fp8_head_dim_fractions``, one ramp shared, kept where it
  saves more than ``HEAD_MIN_GAIN`` of median error (measurements/kernels/README.md).
* A part without rows takes, per cache width, the figures of the nearest fitted part of its generation by memory
  bandwidth, with the same compute-capability major where both specs state one (engines pick the decode kernel by
  it): H100 NVL and PCIe and H20 take H100 SXM's, H200 NVL and GH200 H200 SXM's, L4, L40S and L20 the RTX 4090's,
  the RTX 5090 the RTX PRO 6000's (both GB202, not B200's trtllm-gen). They are marked unverified and measured_on
  the fitted part. They move as fractions of bandwidth, or as the bytes/s they reach where the fitted parts of the
  generation read each other's rows better that way (``rate_transfers``: Hopper over an 8-bit cache, a kernel
  bound by its SMs). Parts of a generation with no fitted part keep their figures.
* Printed beside: each fitted part's rows read by its nearest other fitted part's figures (the transfer rule tried
  on rows those figures never saw), and another engine's build of the kernels (``CROSS_CHECK``: SGLang 0.5.14 on
  H100 / H200), which is not fitted.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fit_gemm import write_specs     # the specs written one way (scripts/ is on sys.path)

from dsdsim.specs.hardware import nearest_head_size
from dsdsim.units import median_abs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "measurements" / "kernels" / "attention_queries.csv"
SPECS = ROOT / "hw_specs"
MIN_ROWS, MIN_BATCH, MIN_CONTEXT = 20, 16, 256
# an 8-bit cache's fraction by head size (decode_attention_fp8_head_dim_fractions): fitted over the head sizes with at
# least MIN_HEAD_ROWS rows, one ramp shared, and kept where it lowers the part's median |error| by more than
# HEAD_MIN_GAIN (the rule fit_kernels.py keeps a fused-MoE compute fraction by)
MIN_HEAD_ROWS, HEAD_MIN_GAIN = 20, 0.02
HEAD_FIGURE = "decode_attention_fp8_head_dim_fractions"
KV_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
# the kernels the figures describe: vLLM's (its attention backends as vLLM builds them); another engine's build of the
# same kernels (SGLang 0.5.14's FlashAttention-3 and Triton decode on H100 / H200) is printed beside, not fitted
FITTED_LIBRARY = "vLLM"
CROSS_CHECK = "SGLang"
# the figures each cache width is fitted to: a 16-bit cache, and an 8-bit one (dequantised in the kernel)
FIGURES = {2: ("decode_attention_bandwidth_fraction", "decode_attention_ramp_tokens"),
           1: ("decode_attention_fp8_bandwidth_fraction", "decode_attention_fp8_ramp_tokens")}


def rows_by_part(path: Path = DATA, width: int = 2, library: str = FITTED_LIBRARY) -> dict[str, list[dict]]:
    """The decode rows of each part over a cache of ``width`` bytes per element timed in ``library`` (a prefix),
    where a part has enough."""
    out: dict[str, list[dict]] = {}
    with path.open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if (r["library"].startswith(library) and r["q_per_seq"] == "1" and r["attention"].startswith("gqa")
                    and r["num_kv_heads"] and r["head_dim"]
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
    return float(res.x[0]), float(res.x[1]), median_abs(pred(res.x) / t - 1.0)


def predicted(rows: list[dict], bandwidth: float, eta, ramp: float) -> np.ndarray:
    """Each row's decode-attention seconds at the figures (eta_max, ramp) on a part of ``bandwidth`` B/s; ``eta``
    one fraction or an array of one per row."""
    n = np.array([float(r["batch"]) for r in rows])
    c = np.array([float(r["context"]) for r in rows])
    per_token = np.array([2 * int(r["num_kv_heads"]) * int(r["head_dim"]) * KV_BYTES[r["kv_dtype"]] for r in rows])
    return n * (c + ramp) * per_token / (bandwidth * eta)


def etas_of(rows: list[dict], eta: float, by_head: dict[int, float]) -> np.ndarray:
    """Each row's fraction: by its head size where ``by_head`` has fractions, else ``eta``."""
    if not by_head:
        return np.full(len(rows), eta)
    return np.array([by_head[nearest_head_size(by_head, int(r["head_dim"]))] for r in rows])


def fit_by_head(bandwidth: float, rows: list[dict]) -> tuple[dict[int, float], float, float] | None:
    """({head size: eta_max}, ramp tokens, median |pred/meas - 1|) over the head sizes with ``MIN_HEAD_ROWS`` rows
    or more (one ramp shared, least squares on log time); None where fewer than two head sizes have them."""
    counts: dict[int, int] = {}
    for r in rows:
        counts[int(r["head_dim"])] = counts.get(int(r["head_dim"]), 0) + 1
    heads = sorted(d for d, n in counts.items() if n >= MIN_HEAD_ROWS)
    if len(heads) < 2:
        return None
    t = np.array([float(r["time_us"]) * 1e-6 for r in rows])
    which = np.array([heads.index(nearest_head_size(dict.fromkeys(heads), int(r["head_dim"]))) for r in rows])

    def pred(x):
        return predicted(rows, bandwidth, np.asarray(x[:-1])[which], x[-1])

    res = least_squares(lambda x: np.log(pred(x) / t), [0.8] * len(heads) + [80.0],
                        bounds=([0.05] * len(heads) + [0.0], [1.0] * len(heads) + [5000.0]))
    return ({d: float(e) for d, e in zip(heads, res.x[:-1])}, float(res.x[-1]),
            median_abs(pred(res.x) / t - 1.0))


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
    by_head: dict = field(default_factory=dict)   # {head size: eta_max} where kept (an 8-bit cache), ramp shared
    single_error: float = 0.0                     # median |error| of the one fraction, where by_head is kept
    rate_scale: float = 1.0                       # assumed as the bytes/s reached on f.part: its BW over this part's


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
        if f.rate_scale != 1.0:
            note += (f" as the bytes/s it reaches there (x{f.rate_scale:.3f}: this kernel is bound by the SMs, not "
                     "the memory; fit_decode_attention.py prints the test)")
    verified = "fitted" if assumed_by is None else "unverified"
    lines = (f'  {fraction}: {{value: {f.eta:.3f}, source: "{src}", verified: {verified}, note: "{note}", '
             f'measured_on: [{f.part}]}}',
             f'  {ramp_name}: {{value: {f.ramp:.0f}, source: "{src}", verified: {verified}, '
             f'note: "each sequence costs as if {f.ramp:.0f} more cached tokens were read; {note}", '
             f'measured_on: [{f.part}]}}')
    if re.search(rf"^  {fraction}: ", text, flags=re.M) is None:       # a pair the spec does not have yet
        anchor = re.search(r"^  decode_attention_ramp_tokens: \{.*\}$", text, flags=re.M)
        text = text[:anchor.end()] + "\n" + "\n".join(lines) + text[anchor.end():]
    else:
        text = re.sub(rf"^  {fraction}: \{{.*\}}$", lambda _: lines[0], text, flags=re.M)
        text = re.sub(rf"^  {ramp_name}: \{{.*\}}$", lambda _: lines[1], text, flags=re.M)
    if f.width != 1:
        return text
    text = re.sub(rf"^  {HEAD_FIGURE}: \{{.*\}}\n", "", text, flags=re.M)
    if not f.by_head:
        return text
    head_note = (f"the fraction at each head size, one ramp shared (a head size between takes the nearest); median "
                 f"|pred/meas - 1| {f.error:.3f} against {f.single_error:.3f} with one fraction"
                 + ("" if assumed_by is None else
                    f"; assumed from {f.part} (the nearest fitted part of its generation by memory bandwidth)"
                    + ("" if f.rate_scale == 1.0 else f" as the bytes/s it reaches there (x{f.rate_scale:.3f})")))
    figs = ", ".join(f'"{d}": {{value: {e:.3f}, source: "{src}", verified: {verified}, note: "{head_note}", '
                     f'measured_on: [{f.part}]}}' for d, e in sorted(f.by_head.items()))
    anchor = re.search(rf"^  {ramp_name}: \{{.*\}}$", text, flags=re.M)
    return text[:anchor.end()] + f"\n  {HEAD_FIGURE}: {{{figs}}}" + text[anchor.end():]


def fits_by_width() -> dict[int, dict[str, DecodeFit]]:
    """Every part's fit, per cache width, printed as it is made."""
    from dsdsim.specs.hardware import load_hardware

    out: dict[int, dict[str, DecodeFit]] = {}
    for width, cache in ((2, "16-bit"), (1, "8-bit")):
        for part, rows in sorted(rows_by_part(width=width).items()):
            path = SPECS / f"{part}.yaml"
            if not path.exists():
                continue
            bandwidth = load_hardware(path).bandwidth
            eta, ramp, err = fit(bandwidth, rows)
            print(f"{part:13s} {cache} cache  n {len(rows):4d}  eta_max {eta:.3f}  ramp {ramp:.0f} tokens  "
                  f"median |err| {err:.3f}")
            f = DecodeFit(part, width, eta, ramp, len(rows), err, _sources(rows))
            heads = fit_by_head(bandwidth, rows) if width == 1 else None
            if heads is not None:
                by_head, head_ramp, head_err = heads
                kept = head_err < err - HEAD_MIN_GAIN
                print(f"{'':13s} by head size: " + ", ".join(f"{d}: {e:.3f}" for d, e in sorted(by_head.items()))
                      + f"  ramp {head_ramp:.0f} tokens  median |err| {head_err:.3f}  "
                      + ("kept" if kept else f"not kept (saves under {HEAD_MIN_GAIN:.0%})"))
                if kept:      # the one fraction refitted at the shared ramp: it times an operator without a head size
                    t = np.array([float(r["time_us"]) * 1e-6 for r in rows])
                    one = float(np.exp(np.mean(np.log(predicted(rows, bandwidth, 1.0, head_ramp) / t))))
                    f = DecodeFit(part, width, one, head_ramp, len(rows), head_err, f.sources, by_head, err)
            out.setdefault(width, {})[part] = f
    return out


def transfer_errors(fits: dict[int, dict[str, DecodeFit]], specs: dict[str, object]) -> list[tuple]:
    """(width, part, figures' part, rows, median |pred/meas - 1|, the same with the figures read as the bytes/s they
    reach on their own part) of each fitted part's rows read by the figures of its nearest other fitted part: the
    transfer rule tried on rows those figures never saw."""
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
            eta, bw = etas_of(rows, f.eta, f.by_head), specs[part].bandwidth
            err = median_abs(predicted(rows, bw, eta, f.ramp) / t - 1.0)
            as_rate = median_abs(predicted(rows, bw, eta * near.bandwidth / bw, f.ramp) / t - 1.0)
            out.append((width, part, near.name, len(rows), err, as_rate))
    return out


def other_builds(specs: dict[str, object]) -> list[tuple]:
    """(part, kernel, cache width, head size, rows, eta_max fitted on them, median |error| of the shipped figures) of
    each engine build of the kernels that is not fitted (``CROSS_CHECK``): how far the figures carry to it."""
    out = []
    for width in (2, 1):
        for part, rows in sorted(rows_by_part(width=width, library=CROSS_CHECK).items()):
            hw = specs[part]
            kf = hw.kernels
            ramp = (kf.decode_attention_fp8_ramp_tokens if width == 1 else kf.decode_attention_ramp_tokens).value
            by_kernel: dict[tuple[str, int], list[dict]] = {}
            for r in rows:
                by_kernel.setdefault((r["kernel"], int(r["head_dim"])), []).append(r)
            for (kernel, head), rs in sorted(by_kernel.items()):
                eta, _ramp, _err = fit(hw.bandwidth, rs)
                shipped = (kf.fp8_decode_fraction(head) if width == 1
                           else kf.decode_attention_bandwidth_fraction.value)
                t = np.array([float(r["time_us"]) * 1e-6 for r in rs])
                err = median_abs(predicted(rs, hw.bandwidth, shipped, ramp) / t - 1.0)
                out.append((part, kernel, width, head, len(rs), eta, err))
    return out


def rate_transfers(transfers: list[tuple], specs: dict[str, object]) -> set[tuple[int, str]]:
    """The (cache width, generation) pairs whose fitted parts read each other's rows better with the figures taken
    as the bytes/s they reach than as a fraction of bandwidth (a kernel bound by its SMs, not its memory: Hopper's
    FlashAttention-3 over an 8-bit cache); the medians of the two readings over the generation's parts compared."""
    by: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for width, part, _near, _n, err, rate_err in transfers:
        by.setdefault((width, specs[part].generation_name), []).append((err, rate_err))
    return {key for key, errs in by.items()
            if np.median([r for _, r in errs]) < np.median([e for e, _ in errs]) - HEAD_MIN_GAIN}


def at_rate(f: DecodeFit, scale: float, cap: float) -> DecodeFit:
    """``f``'s fractions scaled by ``scale`` (the fitted part's bandwidth over this one's): the same bytes/s, up to
    ``cap`` (the part's 16-bit fraction: a kernel over an 8-bit cache streams the memory no faster)."""
    return replace(f, eta=min(f.eta * scale, cap), by_head={d: min(e * scale, cap) for d, e in f.by_head.items()},
                   rate_scale=scale)


def main(argv: list[str] | None = None) -> int:
    from dsdsim.specs.hardware import load_hardware

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec would change")
    args = parser.parse_args(argv)
    fits = fits_by_width()
    specs = {path.stem: load_hardware(path) for path in sorted(SPECS.glob("*.yaml"))}
    transfers = transfer_errors(fits, specs)
    for width, part, near, n, err, as_rate in transfers:
        print(f"transfer: {part:13s} {8 * width}-bit rows ({n}) read by {near}'s figures: median |err| {err:.3f} "
              f"(as the bytes/s they reach there: {as_rate:.3f})")
    as_rate = rate_transfers(transfers, specs)
    for width, generation in sorted(as_rate):
        print(f"{generation} {8 * width}-bit cache: figures move to a part without rows as the bytes/s they reach")
    for part, kernel, width, head, n, eta, err in other_builds(specs):
        print(f"other build: {part:9s} {kernel[:40]:40s} {8 * width:2d}-bit head {head:3d}  n {n:4d}  eta_max "
              f"{eta:.3f}  the shipped figures read them {err:.3f}")
    updates = []
    for name, hw in specs.items():
        path, text = SPECS / f"{name}.yaml", (SPECS / f"{name}.yaml").read_text()
        cap = 1.0                  # the 16-bit fraction the part gets: an 8-bit cache streams no faster
        for width in sorted(fits, reverse=True):           # the 16-bit pair first: the 8-bit one is placed after it
            by_part = fits[width]
            if name in by_part:
                f, assumed = by_part[name], None
            elif hw.kernels is not None and (near := nearest(hw, [specs[p] for p in by_part])) is not None:
                f, assumed = by_part[near.name], name
                if (width, hw.generation_name) in as_rate:
                    f = at_rate(f, near.bandwidth / hw.bandwidth, cap)
            else:
                continue
            cap = f.eta if width == 2 else cap
            text = rewritten(text, f, assumed_by=assumed)
        updates.append((path, text))
    return write_specs(updates, args.check)


if __name__ == "__main__":
    sys.exit(main())
