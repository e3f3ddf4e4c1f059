"""Fit the fused-MoE kernel families of the hardware specs to published timings, and write them into hw_specs/.

    python scripts/fit_kernels.py            fit, print the fits and their held-out errors, write the specs
    python scripts/fit_kernels.py --check    fit again; fail (exit 1) if a spec or the fit summary would change

Data: measurements/kernels/fused_moe.csv (published fused-MoE call times at decode sizes, each row with its source;
see measurements/kernels/README.md). Every (family, part) with at least ``MIN_ROWS`` fittable rows is fitted by
dsdsim.fit.kernels.MoEFamilyFit, the cost model's own equation (dsdsim.cost.timing.moe_family_rates); the optional
shape terms are chosen by leave-one-shape-out error (select_terms), whose held-out errors are printed and kept in
measurements/kernels/fused_moe_fit.json. A fit whose bandwidth fraction exceeds the HBM peak is reported and not
written. A part without its own fit gets, per family, the figures of the nearest fitted part of its generation
(by memory bandwidth), marked unverified and measured_on that part; a generation with no fitted part takes
those of ``FALLBACK_GENERATION``. Parts no family runs on (Gaudi, TPU) keep the single MoE figures.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dsdsim.fit.kernels import (COMPUTE_ROWS_PER_EXPERT, FITTABLE, MAX_SHAPE_FOLDS, MoEFamilyFit, MoERow, held_out,
                                kept_compute_formats, moe_row_seconds, read_moe_rows, select_terms)
from dsdsim.units import median_abs
from dsdsim.specs.hardware import HardwareSpec, MoEFamilyFigures, load_hardware

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "measurements" / "kernels" / "fused_moe.csv"
SUMMARY = ROOT / "measurements" / "kernels" / "fused_moe_fit.json"
SPECS = ROOT / "hw_specs"
MIN_ROWS = 5                  # rows of one (family, part) below which no fit is tried (2 figures + a held-out shape)
MAX_BANDWIDTH_FRACTION = 1.0  # above the HBM peak: the fit absorbs something else (L2 reuse, a shape term)


def _fig(value: float, source: str, verified: str, note: str | None = None) -> dict:
    return {"value": value, "source": source, "verified": verified, **({"note": note} if note else {})}


# What each family is, and the figures counted from its code (not fitted). Sources: the engines' MoE code as the
# research notes read it (kernel chains per call, §3 of the notes behind measurements/kernels/README.md).
FAMILIES = {
    "triton_fused_moe": {
        "source": "vLLM fused_moe / SGLang fused_moe_triton: the default MoE path for bf16 and fp8 on NVIDIA (vLLM "
                  "oracle/unquantized.py; SGLang --moe-runner-backend auto on Hopper, sgl-project/sglang issue #18388)",
        "weight_formats": ["bf16", "fp16", "fp8", "int8"],
        "kernels": _fig(6, "vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts_impl: "
                           "topk_softmax, moe_align_block_size, GEMM1, silu_and_mul, GEMM2, moe_sum", "secondary"),
        "quantised_kernels": _fig(2, "same file: per_token_group_quant of each GEMM's input on the fp8 block path",
                                  "secondary"),
        "tile_m": _fig(16, "vllm-project/vllm fused_moe get_default_config: BLOCK_SIZE_M 16 when M <= E (decode); "
                           "tuned configs/*.json use 16 at small M", "secondary"),
    },
    "flashinfer_trtllm": {
        "source": "FlashInfer trtllm_*_moe (TRT-LLM-gen kernels, SM100/SM103): SGLang's default for FP8/FP4 MoE on "
                  "Blackwell from sgl-project/sglang PR #11816; vLLM FLASHINFER_TRTLLM (fused_moe/oracle/fp8.py)",
        "weight_formats": ["bf16", "fp8", "nvfp4", "fp4", "mxfp4"],
        "kernels": _fig(4, "flashinfer-ai/flashinfer benchmarks/bench_moe_deepseek.py (PR #5301): routing, GEMM1 with "
                           "fused activation, GEMM2, finalize", "secondary"),
        "quantised_kernels": _fig(1, "flashinfer-ai/flashinfer PR #5301: the BF16 -> FP8/FP4 activation quant runs "
                                     "before the timed op (sgl-project/sglang PR #32699: per_token_group_quant in "
                                     "the decode prelude)", "secondary"),
        "tile_m": _fig(8, "vllm-project/vllm flashinfer_trtllm_moe calculate_tile_tokens_dim: tokens per CTA tile "
                          "8..64, the next power of 2 of tokens per expert (8 at decode)", "secondary"),
    },
    "flashinfer_cutlass": {
        "source": "FlashInfer cutlass_fused_moe: vLLM FLASHINFER_CUTLASS (fp8 oracle; auto-selected on Hopper in "
                  "vllm-project/vllm issue #34249); SGLang opt-in",
        "weight_formats": ["bf16", "fp8", "nvfp4", "fp4", "mxfp4"],
        "kernels": _fig(5, "flashinfer-ai/flashinfer issue #1734, #3014: routing, expand/permute, GEMM1, GEMM2, "
                           "finalize", "unverified"),
        "quantised_kernels": _fig(1, "flashinfer-ai/flashinfer issue #1734: FP4 activation quantize with the "
                                     "swizzled scale layout", "unverified"),
        "tile_m": _fig(64, "assumed: CUTLASS grouped-GEMM tiles at least 64 rows (Hopper wgmma m64; the SM120 port "
                           "notes of jaim12005/spark-vllm-mxfp4-docker quote a 128-row MoE tile)", "unverified"),
    },
    "marlin": {
        "source": "vLLM / SGLang fused_marlin_moe: the weight-only int4 / mxfp4 (W4A16) MoE path on Ampere and "
                  "Hopper (vLLM fused_moe oracle order, MARLIN last; flagos-ai/FlagGems PR #3222)",
        "weight_formats": ["int4", "mxfp4"],
        "kernels": _fig(6, "vllm-project/vllm fused_marlin_moe: topk, moe_align_block_size, GEMM1, silu_and_mul, "
                           "GEMM2, moe_sum (the chain of fused_moe)", "unverified"),
        "quantised_kernels": _fig(0, "W4A16: activations stay bf16", "derived"),
        "tile_m": _fig(8, "vllm-project/vllm fused_marlin_moe: block_size_m chosen from 8..64 by tokens per expert "
                          "(8 at decode)", "unverified"),
    },
    "aiter": {
        "source": "ROCm/aiter fused_moe (ck 2-stage / asm): vLLM with VLLM_ROCM_USE_AITER=1, SGLang with "
                  "SGLANG_USE_AITER=1 (set in the ROCm images)",
        "weight_formats": ["bf16", "fp16", "fp8", "int8", "mxfp4"],
        "kernels": _fig(4, "ROCm/aiter fused_moe: topk_softmax, moe_sorting, stage1 (gate/up + act), stage2 (down); "
                           "aiter #3526", "secondary"),
        "quantised_kernels": _fig(1, "ROCm/aiter fused_moe: activation quant before stage1 on the fp8 paths",
                                  "secondary"),
        "tile_m": _fig(16, "assumed: the CDNA MFMA 16x16 instruction's M (the aiter tuned CSVs' block_m is not in "
                           "the stored excerpts)", "unverified"),
    },
}
DEFAULT_FAMILY = ("triton_fused_moe", "aiter")     # the first a spec has: the engines' default (MoEKernels.default)

# Parts measured but not in the catalog, and the spec the fit times them with (same HBM bandwidth and peaks)
STAND_INS = {"a100-pcie-40gb": "a100-sxm-40gb",    # both 1,555 GB/s HBM2, 312 TFLOP/s bf16 (NVIDIA A100 datasheet)
             "h800": "h100-sxm"}                   # 3.35 TB/s HBM3, H100 SXM peaks; NVLink cut (NVIDIA H800 brief)
SM100 = ("b200", "b300", "gb200")                  # TRT-LLM-gen and FlashInfer's SM100 CUTLASS MoE kernels run here
FAMILY_RUNS = {"flashinfer_trtllm": lambda hw: hw.name in SM100,
               "flashinfer_cutlass": lambda hw: hw.name in SM100 or hw.generation_name == "hopper"}
# A generation with no fitted part: Ada (SM89) runs the Ampere (SM80) Triton / mma.sync m16n8k16 code paths
FALLBACK_GENERATION = {"ada": "ampere"}


@dataclass
class FamilyFit:
    """One (family, part) fit and what it was fitted on."""

    family: str
    part: str
    spec: str                         # the catalog spec the rows were timed with
    rows: list[MoERow]
    fit: MoEFamilyFit | None          # None: too few rows, or no spec
    terms: tuple[str, ...]
    held_out: list                    # HeldOut folds
    status: str                       # "fitted", or why not written

    @property
    def written(self) -> bool:
        return self.status == "fitted"


def _family_start(name: str) -> MoEFamilyFigures:
    """The family's counted figures, with placeholder latency and bandwidth (the fit replaces them)."""
    placeholder = _fig(1e-5, "placeholder before the fit", "unverified")
    return MoEFamilyFigures.model_validate({**FAMILIES[name], "latency_s": placeholder,
                                            "bandwidth_fraction": {**placeholder, "value": 0.7}})


def _catalog_spec(part: str) -> HardwareSpec | None:
    path = SPECS / f"{STAND_INS.get(part, part)}.yaml"
    return load_hardware(path) if path.exists() else None


def fit_groups(rows: list[MoERow]) -> list[FamilyFit]:
    usable = [r for r in rows if not r.excluded and r.covers in FITTABLE and r.family in FAMILIES]
    groups: dict[tuple[str, str], list[MoERow]] = {}
    for r in usable:
        groups.setdefault((r.family, r.part), []).append(r)
    out = []
    for (family, part), grp in sorted(groups.items()):
        spec = _catalog_spec(part)
        if spec is None or len(grp) < MIN_ROWS:
            why = "no spec for the part" if spec is None else f"{len(grp)} rows (< {MIN_ROWS})"
            out.append(FamilyFit(family, part, spec.name if spec else "", grp, None, (), [], why))
            continue
        start = _family_start(family)
        terms, folds = select_terms(grp, spec, start)
        fit = MoEFamilyFit(spec, start, terms).fit(grp)
        kept = kept_compute_formats(fit, grp)
        if kept != tuple(fit.compute_fractions_):        # refit without the others
            fit = MoEFamilyFit(spec, start, terms, kept).fit(grp)
            folds = held_out(grp, spec, start, terms, kept)
        status = ("fitted" if fit.bandwidth_fraction_ <= MAX_BANDWIDTH_FRACTION else
                  f"not written: bandwidth fraction {fit.bandwidth_fraction_:.2f} above the HBM peak")
        out.append(FamilyFit(family, part, spec.name, grp, fit, terms, folds, status))
    return out


# --- the figures each spec gets ---------------------------------------------------------------------------------


def _rows_source(g: FamilyFit) -> str:
    sources = sorted({r.source for r in g.rows})
    shapes = {}
    for r in g.rows:
        shapes.setdefault(r.shape, []).append(r.tokens)
    if len(shapes) > MAX_SHAPE_FOLDS:            # many shapes: name the models, as held_out folds them
        models: dict[str, list] = {}
        for r in g.rows:
            models.setdefault(r.model, []).append(r)
        shape_text = "; ".join(f"{m} ({len({r.shape for r in rs})} shapes) at T={min(r.tokens for r in rs):g}-"
                               f"{max(r.tokens for r in rs):g}" for m, rs in sorted(models.items()))
        return (f"scripts/fit_kernels.py: MoEFamilyFit on {len(g.rows)} rows of measurements/kernels/fused_moe.csv "
                f"({' | '.join(sources)}); models: {shape_text}")
    shape_text = "; ".join(f"{s} at T={min(t):g}-{max(t):g}" for s, t in sorted(shapes.items()))
    return (f"scripts/fit_kernels.py: MoEFamilyFit on {len(g.rows)} rows of measurements/kernels/fused_moe.csv "
            f"({' | '.join(sources)}); shapes: {shape_text}")


def _fit_note(g: FamilyFit) -> str:
    held = [e for h in g.held_out for e in h.errors]
    kind = "leave-one-shape-out" if len({r.shape for r in g.rows}) > 1 else "leave-one-row-out (one shape)"
    return (f"median |pred/meas - 1| {median_abs(g.fit.residuals_):.3f} on the fitted rows; {kind} "
            f"{median_abs(held):.3f} on {len(held)} held-out rows")


def _round(name: str, v: float) -> float:
    """Fractions to 3 decimals, latencies to 0.1 us, a per-expert time to 1 ns: the precision the data carry."""
    if name.endswith("fraction"):
        return round(v, 3)
    return round(v, 7) if name == "latency_s" else round(v, 9)


def measured_family(g: FamilyFit) -> dict:
    """A fitted family's figures, measured on its part."""
    fam = g.fit.family_
    data = {k: v for k, v in FAMILIES[g.family].items()}
    source, note = _rows_source(g), _fit_note(g)
    for name in ("latency_s", "bandwidth_fraction") + g.terms:
        data[name] = {**_fig(_round(name, getattr(fam, name).value), source, "fitted", note), "measured_on": [g.part]}
    if fam.compute_fractions:
        compute_note = (f"{note}; the grouped GEMMs' fraction of the format's peak, fitted on the rows with at least "
                        f"{COMPUTE_ROWS_PER_EXPERT} rows per touched expert (compute-bound)")
        data["compute_fractions"] = {fmt.value: {**_fig(round(fig.value, 3), source, "fitted", compute_note),
                                                 "measured_on": [g.part]}
                                     for fmt, fig in fam.compute_fractions.items()}
    return data


def assumed_family(measured: dict, g: FamilyFit, hw: HardwareSpec) -> dict:
    """A fitted family's figures copied to another part: unverified there, measured_on the fitted part."""
    why = (f"assumed from {g.part} (the nearest fitted part of its generation by memory bandwidth)"
           if _generation(g) == hw.generation_name else
           f"assumed from {g.part}: no fitted {hw.generation_name} part; "
           f"{hw.generation_name} runs the {_generation(g)} kernel paths")

    def assumed(v: dict) -> dict:
        return {**v, "verified": "unverified", "note": f"{why}; {v['note']}"}

    out = {}
    for name, v in measured.items():
        if name == "compute_fractions":
            v = {fmt: assumed(fig) for fmt, fig in v.items()}
        elif isinstance(v, dict) and "measured_on" in v:
            v = assumed(v)
        out[name] = v
    return out


def _generation(g: FamilyFit) -> str | None:
    return load_hardware(SPECS / f"{g.spec}.yaml").generation_name


def _nearest(fits: list[FamilyFit], hw: HardwareSpec) -> FamilyFit | None:
    """The fit of the part nearest to ``hw`` in memory bandwidth (log ratio), its generation first, then the
    fallback generation's; name order breaks ties."""
    for generation in (hw.generation_name, FALLBACK_GENERATION.get(hw.generation_name or "")):
        same = [g for g in fits if generation is not None and _generation(g) == generation]
        if same:
            def distance(g: FamilyFit) -> tuple[float, str]:
                bw = load_hardware(SPECS / f"{g.spec}.yaml").bandwidth
                return abs(math.log(bw / hw.bandwidth)), g.part
            return min(same, key=distance)
    return None


def families_for(hw: HardwareSpec, fits: list[FamilyFit]) -> dict[str, dict]:
    """The kernel families ``hw`` gets: its own fits, else the nearest fitted part's, where the family runs."""
    out = {}
    for family in FAMILIES:
        runs = FAMILY_RUNS.get(family, lambda _: True)
        if not runs(hw):
            continue
        written = [g for g in fits if g.family == family and g.written]
        own = [g for g in written if g.part == hw.name]
        if own:
            out[family] = measured_family(own[0])
        elif (near := _nearest(written, hw)) is not None:
            out[family] = assumed_family(measured_family(near), near, hw)
    return out


# --- writing the specs ------------------------------------------------------------------------------------------

_LEGACY = ("  moe_call_latency_s:", "  moe_bandwidth_fraction:")


def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, str):
        return value if re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", value) else json.dumps(value)
    if isinstance(value, float) and value != int(value):
        return repr(value)
    return str(int(value)) if isinstance(value, (int, float)) else str(value)


def family_block(families: dict[str, dict]) -> list[str]:
    default = next(f for f in DEFAULT_FAMILY + tuple(families) if f in families)
    lines = [f"  moe_default_family: {default}",
             "  # fused-MoE kernel families (dsdsim.cost.timing.moe_family_rates), written by scripts/fit_kernels.py",
             "  moe_families:"]
    for name, figs in families.items():
        lines.append(f"    {name}:")
        lines += [f"      {k}: {_flow(v)}" for k, v in figs.items()]
    return lines


def rewritten(text: str, families: dict[str, dict]) -> str:
    """The spec text with its family block (and without the single MoE figures) where it gets families."""
    lines, out, skipping = text.split("\n"), [], False
    for line in lines:
        if skipping:
            if line.startswith("    ") or line.startswith("  # fused-MoE kernel families"):
                continue
            skipping = False
        if line.startswith("  moe_default_family:") or line.startswith("  # fused-MoE kernel families"):
            continue
        if line.startswith("  moe_families:"):
            skipping = True
            continue
        if families and line.startswith(_LEGACY):
            continue
        out.append(line)
        if families and line.startswith("  moe_compute_fraction:"):
            out += family_block(families)
    return "\n".join(out)


# --- the summary and the printout -------------------------------------------------------------------------------


def transfer(g: FamilyFit, fits: list[FamilyFit]) -> dict | None:
    """For rows not fitted on their own part: the error of the figures their part's spec gets (assumed from
    another part), a test of the transfer rule on data the figures never saw."""
    if g.written or not g.spec:
        return None
    hw = load_hardware(SPECS / f"{g.spec}.yaml")
    figs = families_for(hw, fits).get(g.family)
    if figs is None:
        return None
    fam = MoEFamilyFigures.model_validate(figs)
    errors = [moe_row_seconds(r, hw, fam) / r.time_s - 1.0 for r in g.rows]
    return {"figures_from": fam.latency_s.measured_on[0], "rows": len(errors),
            "median_abs_error": round(median_abs(errors), 4)}


def summary(fits: list[FamilyFit]) -> list[dict]:
    out = []
    for g in fits:
        d = {"family": g.family, "part": g.part, "spec": g.spec or None, "rows": len(g.rows),
             "shapes": sorted({r.shape for r in g.rows}), "status": g.status}
        if g.fit is not None:
            fam = g.fit.family_
            d["figures"] = {n: _round(n, getattr(fam, n).value) for n in ("latency_s", "bandwidth_fraction") + g.terms}
            d["figures"].update({f"compute_fraction.{fmt.value}": round(fig.value, 3)
                                 for fmt, fig in fam.compute_fractions.items()})
            d["median_abs_residual"] = round(median_abs(g.fit.residuals_), 4)
            d["max_abs_residual"] = round(float(np.max(np.abs(g.fit.residuals_))), 4)
            d["held_out"] = [{"shape": h.shape, "rows": h.rows, "median_abs_error": round(h.median_abs_error, 4)}
                             for h in g.held_out]
            d["held_out_median_abs_error"] = round(median_abs([e for h in g.held_out for e in h.errors]), 4)
        if (moved := transfer(g, fits)) is not None:
            d["assumed_figures"] = moved
        out.append(d)
    return out


def print_fits(fits: list[FamilyFit]) -> None:
    print(f"{'family':20s} {'part':16s} {'rows':>4s} {'shapes':>6s}  {'latency':>9s} {'bw frac':>7s}  "
          f"{'terms':30s} {'fit |e|':>7s} {'held-out |e|':>12s}  status")
    for d in summary(fits):
        figs = d.get("figures", {})
        extra = ", ".join(f"{k}={v:.3g}" for k, v in figs.items() if k not in ("latency_s", "bandwidth_fraction"))
        lat = f"{figs['latency_s'] * 1e6:7.1f}us" if figs else "-"
        bw = f"{figs['bandwidth_fraction']:.3f}" if figs else "-"
        fit_e = f"{d['median_abs_residual']:.3f}" if "median_abs_residual" in d else "-"
        held = f"{d['held_out_median_abs_error']:.3f}" if "held_out_median_abs_error" in d else "-"
        print(f"{d['family']:20s} {d['part']:16s} {d['rows']:4d} {len(d['shapes']):6d}  {lat:>9s} {bw:>7s}  "
              f"{extra or '-':30s} {fit_e:>7s} {held:>12s}  {d['status']}")
    for d in summary(fits):
        if "assumed_figures" in d:
            a = d["assumed_figures"]
            print(f"  {d['family']}/{d['part']}: {a['rows']} unfitted rows vs the figures assumed from "
                  f"{a['figures_from']}: median |e| {a['median_abs_error']:.3f}")
    for g in fits:
        for h in g.held_out if len({r.shape for r in g.rows}) > 1 else []:
            print(f"  held out {g.family}/{g.part}: {h.shape} ({h.rows} rows) median |e| {h.median_abs_error:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a spec or the fit summary would change")
    args = parser.parse_args(argv)
    fits = fit_groups(read_moe_rows(DATA))
    print_fits(fits)
    changed = []
    outputs = {SUMMARY: json.dumps(summary(fits), indent=1) + "\n"}
    for path in sorted(SPECS.glob("*.yaml")):
        hw = load_hardware(path)
        if hw.kernels is None:
            continue
        outputs[path] = rewritten(path.read_text(), families_for(hw, fits))
    for path, text in outputs.items():
        if not path.exists() or path.read_text() != text:
            changed.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and changed:
        print("would change: " + ", ".join(map(str, changed)), file=sys.stderr)
        return 1
    print(("unchanged" if not changed else "wrote " + ", ".join(map(str, changed))))
    if not args.check:
        for path in outputs:                        # every written spec loads
            if path.suffix == ".yaml":
                load_hardware(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
