"""The files of a validation run (``dsdsim validate``): report.json (written atomically), summary.md, the
predicted-vs-measured plot (dsdsim.export.plots.AccuracyDisplay) and the calibrated hardware spec."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dsdsim.fit.summary import TableCheck, ValidationSummary
from dsdsim.units import format_percent

if TYPE_CHECKING:
    from dsdsim.fit.validation import ValidationReport


def write_report(report: ValidationReport, output_dir: str | Path) -> dict[str, Path]:
    """report.json, summary.md, predicted_vs_measured.png and calibrated.yaml in ``output_dir``."""
    from dsdsim.export.plots import AccuracyDisplay, save_png
    from dsdsim.fit.calibrate import write_calibrated_spec

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"report": out / "report.json", "summary": out / "summary.md", "plot": out / "predicted_vs_measured.png",
             "calibrated_spec": out / "calibrated.yaml"}
    write_json(paths["report"], report.data)
    paths["summary"].write_text(summary_markdown(report.data))
    display = AccuracyDisplay.from_points(report.points,
                                          title=f"{report.data['model_measured']} on {report.data['device_name']}")
    save_png(display.plot(), paths["plot"])
    display.close()
    write_calibrated_spec(report.calibrated_hardware, paths["calibrated_spec"])
    return paths


def write_json(path: Path, data: dict) -> None:
    """Write the report as JSON, whole or not at all (``dsdsim.files``)."""
    from dsdsim.files import to_json, write_atomic

    write_atomic(path, to_json(data, indent=1) + "\n")


def _frac(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def points_percent(x) -> str:
    """A figure already in percent (the validation report's *_pct_error): 4.2 -> '4.2%', None -> 'n/a'."""
    return format_percent(None if x is None else x / 100, missing="n/a")


def summary_markdown(data: dict) -> str:
    """summary.md of a report.json's content."""
    s = ValidationSummary.from_json(data["summary"])
    cal = data["calibration"]
    tc = TableCheck.from_json(data["table_check"])
    lines = [
        f"# dsdsim validation: {data['model']} on {data['device_name']}",
        "",
        f"- date {data['date']}, torch {data['torch_version']}, device `{data['device']}`, dtype {data['dtype']}, "
        f"drafter {data['drafter']}, predicted with hardware spec `{data['hardware']}` "
        f"({'CUDA-graph' if data.get('cuda_graphs') else 'eager'} launches)",
        f"- measured model: `{data['model_measured']}`; reduction: "
        + (", ".join(f"{k} {v}" for k, v in data["reduced"].items() if k != "note") if data["reduced"].get("factor", 1) > 1
           else "none (real layer dimensions)"),
        f"- grid: B {data['grid']['batches']}, K {data['grid']['ks']}, context {data['grid']['contexts']}; "
        f"whole steps B {data['grid'].get('spec_batches')}, K {data['grid'].get('spec_ks')}, context "
        f"{data['grid'].get('spec_contexts')}; {len(data['points'])} points",
        (f"- re-analysed {data['reanalysed']['date']} with the current cost model from measurements of "
         f"{data['reanalysed']['measured_on']} ({data['reanalysed']['note']})\n" if data.get("reanalysed") else "")
        + f"- timing: {data.get('timing', 'eager')}"
        + (f"; attention kernel {data['attention_backend']}" if data.get("attention_backend") else "")
        + (f"; MoE kernel {data['moe_kernel']}" if data.get("moe_kernel") else ""),
        f"- SM clock (MHz) start / end: {data.get('clocks', {}).get('sm_mhz_start')} / "
        f"{data.get('clocks', {}).get('sm_mhz_end')}",
        "",
        "## Errors (|predicted - measured| / measured)",
        "",
        "| set | n | median | mean (MAPE) | max |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in (("uncalibrated, all points", "uncalibrated"), ("uncalibrated, held-out half", "uncalibrated_test"),
                       ("calibrated, train half", "calibrated_train"), ("calibrated, held-out half", "calibrated")):
        e = getattr(s, key)
        lines.append(f"| {label} | {e.n} | {points_percent(e.median_abs_pct_error)} | {points_percent(e.mape)} | "
                     f"{points_percent(e.max_abs_pct_error)} |")
    lines += ["", "By kind:", "", "| kind | n | uncalibrated median | calibrated held-out median | median pred/meas (uncal.) |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for kind, e in s.by_kind.items():
        u, c = e.uncalibrated, e.calibrated_test
        ratio = u.median_ratio_pred_over_meas
        lines.append(f"| {kind} | {u.n} | {points_percent(u.median_abs_pct_error)} | {points_percent(c.median_abs_pct_error)} | "
                     f"{float('nan') if ratio is None else ratio:.2f} |")
    lines += ["", "By how it was measured (an operator alone, one whole forward pass, or a whole speculative step):", "",
              "| measured as | n | uncalibrated median | uncalibrated max | calibrated held-out median | "
              "calibrated held-out max |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for how, e in s.by_measurement.items():
        u, c = e.uncalibrated, e.calibrated_test
        lines.append(f"| {how} | {u.n} | {points_percent(u.median_abs_pct_error)} | {points_percent(u.max_abs_pct_error)} | "
                     f"{points_percent(c.median_abs_pct_error)} | {points_percent(c.max_abs_pct_error)} |")
    so = cal.get("step_overhead_s")
    if "compute_efficiency" not in cal:
        lines += ["", "## Calibration", "", f"- not calibrated: {cal.get('error')}"]
        cal = {**cal, "compute_efficiency": float("nan"), "memory_efficiency": float("nan"),
               "launch_overhead_s": float("nan"), "gemm_tile_m": "-"}
    lines += ["", "## Calibration (fitted on the train half)", "",
              f"- compute efficiency {cal['compute_efficiency']:.3f}; memory efficiency: GEMM weights "
              f"{cal['memory_efficiency']:.3f}, attention KV {_frac(cal.get('attention_memory_efficiency'))}, "
              f"vector kernels {_frac(cal.get('vector_memory_efficiency'))}",
              f"- launch overhead {cal['launch_overhead_s'] * 1e6:.2f} us per kernel, GEMM tile m {cal['gemm_tile_m']}"
              + (f", step overhead {so * 1e6:.1f} us" if so is not None else "")
              + (f"; per-kernel cost fitted on {cal['per_kernel_cost_fitted_on']}" if cal.get("per_kernel_cost_fitted_on") else ""),
              *(["- kernel figures: " + ", ".join(f"{k} {v:.3g}" for k, v in cal["kernels"].items())]
                if cal.get("kernels") else []),
              "", "## K table check", "",
              f"Acceptance {tc.acceptance}; measured step = {tc.measured_from}.", ""]

    def num(x) -> str:              # regret: goodput given up, as a percentage like every figure beside it
        return format_percent(x, 2, missing="n/a")

    for t in tc.tables:
        lines += [f"Context {t.context}:", "",
                  "| B | K best (measured) | K predicted | regret | K predicted (calibrated) | regret (calibrated) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in t.per_batch:
            lines.append(f"| {r.batch} | {r.k_best_measured} | {r.k_predicted_uncalibrated} | "
                         f"{num(r.regret_uncalibrated)} | {'' if r.k_predicted_calibrated is None else r.k_predicted_calibrated} | "
                         f"{num(r.regret_calibrated)} |")
        lines.append("")
    lines += [f"Mean regret {num(tc.mean_regret)} of goodput (max {num(tc.max_regret)}); calibrated "
              f"{num(tc.mean_regret_calibrated)} (max {num(tc.max_regret_calibrated)})."]
    comp = tc.composition
    if comp is not None and comp.n:
        lines.append(f"Sum of separately timed operators / whole pass timed at once: median "
                     f"{comp.median_sum_of_ops_over_step:.2f} (range {comp.min:.2f}-{comp.max:.2f}).")
    errs = data.get("errors") or []
    if errs:
        lines += ["", f"## Items that failed or were skipped ({len(errs)})", ""]
        lines += [f"- {e['what']}: {e['error']}" for e in errs[:40]]
        if len(errs) > 40:
            lines.append(f"- ... and {len(errs) - 40} more (see report.json)")
    lines.append("")
    return "\n".join(lines)

