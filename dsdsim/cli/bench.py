"""dsdsim probe | validate | loop | comm-check | calibrate: measuring with torch (imported only when one runs)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

from dsdsim.cli.app import app
from dsdsim.cli.command import Option, echo
from dsdsim.cli.options import (Context, Device, Drafter, Engine, Ep, Hardware, KvDType, Model, OptionalHardware, Tp,
                                WeightDType)
from dsdsim.cli.output import (check_device, check_fixed_format, check_writable, need_torch, show,
                               with_status, write_atomic)
from dsdsim.defaults import (DEFAULT_CONTEXT, DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_KV_DTYPE,
                             DEFAULT_LOOP_BATCH, DEFAULT_LOOP_K, DEFAULT_LOOP_NEW_TOKENS, DEFAULT_MODEL)
from dsdsim.errors import DsdsimError
from dsdsim.export.render import kv_table, to_json


@app.command()
def probe(
    device: Device = "cpu",
    output: Path = Option(Path("probe.yaml"), "--output", "-o", help="Hardware spec YAML to write"),
    name: Optional[str] = Option(None, "--name", help="Spec name (default: from the device name)"),
    threads: int = Option(1, "--threads", help="torch threads on a CPU (validate uses the same)"),
    quick: bool = Option(False, "--quick", help="Smaller sweeps (a few seconds on a CPU)"),
    sweeps: bool = Option(True, "--sweeps/--no-sweeps",
                          help="Also run the sweeps (GEMM over M, decode attention over context, kernel "
                               "floor, copy sizes) into SPEC.sweeps.json beside the spec"),
) -> None:
    """Measure a device (streaming bandwidth, matmul peak per dtype, launch overhead eager and under CUDA
    graphs) into a hardware spec that every command accepts (`-g probe.yaml`); every figure is flagged
    measured, with date and torch version. The sweeps go to a JSON file beside the spec.
    Example: dsdsim probe --device cuda --name h200-sxm@measured -o h200-sxm@measured.yaml"""
    if str(output) == "-":
        raise DsdsimError("probe writes a spec file and its sweeps beside it; give -o a file name, not - (stdout)")
    check_fixed_format(output, "a hardware spec (YAML)", (".yaml", ".yml"))
    if threads < 1:
        raise DsdsimError(f"--threads must be >= 1, got {threads}")
    need_torch()
    check_device(device)
    from dsdsim.bench.probe import run_probe, sweeps_path
    from dsdsim.specs.catalog import load_hardware

    path = run_probe(device, output, name, lambda msg: echo(f"  {msg}", err=True), threads, sweeps=sweeps,
                     quick=quick)
    spec = load_hardware(path)
    echo(f"wrote {path}" + (f" and {sweeps_path(path)}" if sweeps else ""), err=True)
    show(kv_table(f"Probed {spec.name}", {
        "memory_bandwidth_bytes_per_s": spec.bandwidth,
        "peak_flops_per_s": {d.value: f.value for d, f in spec.peak_flops_per_s.items()},
        "launch_overhead_s": spec.launch_overhead_s.value,
        "eager_launch_overhead_s": spec.eager_launch_overhead_s.value}))


def _no_drafter(drafter: str) -> bool:
    return drafter.strip().lower() in ("none", "")


def _check_validated(drafter: str) -> None:
    """A drafter whose passes dsdsim.bench builds in torch (the registry's ``validated`` kinds), or none."""
    from dsdsim.specs.drafter import parse_drafter
    from dsdsim.specs.drafters import validated_kinds

    if _no_drafter(drafter):
        return
    d = parse_drafter(drafter)
    if not d.info.validated:
        kinds = validated_kinds()
        raise DsdsimError(f"validate times the drafter passes of {' and '.join(kinds)}, not {d.label}; use "
                          f"{' or '.join(f'-d {k}' for k in kinds)} or -d none")


@app.command()
def validate(
    model: Model = DEFAULT_MODEL,
    hardware: Hardware = ...,
    device: Device = "cpu",
    quick: bool = Option(False, "--quick", help="Small grid (well under 2 minutes on a laptop CPU)"),
    output: Path = Option(Path("validation"), "--output", "-o", help="Folder for report.json, summary.md, plot"),
    drafter: Drafter = DEFAULT_DRAFTER,
    reduce: Optional[int] = Option(None, "--reduce",
                                   help="Divide widths by this factor where the real layer is too big "
                                        "(default: 1 on GPU, 2 on CPU, 4 with --quick on CPU)"),
    layers: Optional[int] = Option(None, "--layers",
                                   help="Keep only the first N layers (real widths; predictions use the "
                                        "same truncated model), e.g. a large MoE on one GPU"),
    grid: Optional[str] = Option(None, "--grid",
                                 help="Measurement grid: quick, full, gpu or tiny (default: gpu on CUDA, "
                                      "quick with --quick, else full)"),
    time_budget: Optional[float] = Option(None, "--time-budget", min=1.0,
                                          help="Seconds of measuring at most; items past it are skipped and "
                                               "listed, and the report is still complete"),
    reanalyse: Optional[Path] = Option(None, "--reanalyse",
                                       help="Measure nothing: re-predict, re-calibrate and re-check the K "
                                            "table of this report.json with the current cost model"),
) -> None:
    """Time the model's real operator shapes, whole passes and whole speculative steps (draft passes + verify
    pass + rejection sampling) with torch, compare with the prediction, calibrate on half the points and report
    the error on the other half, and check the predicted K table's regret on the measured whole steps.

    On a GPU every item is captured in a CUDA graph and replayed (kernel time, as engines run decode steps).
    Example: dsdsim validate -m llama-3.1-8b -g h200-sxm --device cuda -o val/"""
    if str(output) == "-":
        raise DsdsimError("validate writes a folder (report.json, summary.md, a plot); give -o a folder, not - (stdout)")
    if output.exists() and not output.is_dir():
        raise DsdsimError(f"--output {output} is a file; give a folder")
    check_writable(output / "report.json" if output.is_dir() else output)
    if reduce is not None and reduce < 1:
        raise DsdsimError(f"--reduce must be >= 1, got {reduce}")
    if layers is not None and layers < 1:
        raise DsdsimError(f"--layers must be >= 1, got {layers}")
    from dsdsim.bench.grid import GRIDS

    if grid is not None and grid not in GRIDS:
        raise DsdsimError(f"--grid {grid!r} is unknown; use one of {', '.join(GRIDS)}")
    if reanalyse is not None:
        _reanalyse(reanalyse, hardware, output)
        return
    _check_validated(drafter)                 # before torch: a wrong drafter is wrong on any machine
    from dsdsim.specs.catalog import load_hardware, load_model

    load_model(model)          # resolve names before any measuring (unknown names fail in one line)
    load_hardware(hardware)
    need_torch()
    check_device(device)
    from dsdsim.bench.validate import run_validate

    created = not output.exists()
    output.mkdir(parents=True, exist_ok=True)
    try:
        rep = run_validate(model, hardware, device, quick, output, show_progress=sys.stderr.isatty(),
                           progress_lines=True, drafter=None if _no_drafter(drafter) else drafter, reduce=reduce,
                           layers=layers, grid=GRIDS[grid] if grid else None, time_budget_s=time_budget)
    except (ValueError, KeyboardInterrupt) as exc:
        if created and output.is_dir() and not any(output.iterdir()):
            output.rmdir()                     # nothing measured: leave no empty folder behind
        if isinstance(exc, ValueError) and not isinstance(exc, DsdsimError):
            raise DsdsimError(str(exc).splitlines()[0] if str(exc) else "validate failed") from None
        raise
    _print_validation(rep)


def _print_validation(rep) -> None:
    from dsdsim.export.validation import points_percent as pct

    s = rep.summary
    for e, label in ((s.uncalibrated, "uncalibrated (all points)"), (s.calibrated, "calibrated (held-out half)")):
        show(f"{label}: n={e.n}, median |error| {pct(e.median_abs_pct_error)}, MAPE {pct(e.mape)}, "
             f"max {pct(e.max_abs_pct_error)}")
    whole = s.by_measurement.get("spec_step")
    if whole is not None:
        u, c = whole.uncalibrated, whole.calibrated_test
        show(f"whole speculative steps: n={u.n}, median |error| {pct(u.median_abs_pct_error)} uncalibrated, "
             f"{pct(c.median_abs_pct_error)} calibrated held-out (max {pct(c.max_abs_pct_error)})")
    tc = rep.table_check
    if tc.per_batch or tc.contexts:
        from dsdsim.units import format_percent

        cal = (f"; calibrated mean {format_percent(tc.mean_regret_calibrated, 2)}, "
               f"max {format_percent(tc.max_regret_calibrated, 2)}" if tc.mean_regret_calibrated is not None else "")
        show(f"K-table regret, goodput given up ({tc.measured_from.split(' (')[0]}): mean "
             f"{format_percent(tc.mean_regret, 2)}, max {format_percent(tc.max_regret, 2)}{cal}")
    if rep.errors:
        show(f"{len(rep.errors)} item(s) failed or were skipped: see 'errors' in the report")
    from dsdsim.fit.calibrate import implausible_figures

    for line in implausible_figures(rep.calibrated_hardware):     # the calibrated spec marks the same figures
        echo(f"warning: {line}", err=True)
    for what, path in rep.paths.items():
        show(f"{what}: {path}")


def _reanalyse(report: Path, hardware: str, output: Path) -> None:
    from dsdsim.bench.validate import reanalyse
    from dsdsim.specs.catalog import load_hardware

    if not report.is_file():
        raise DsdsimError(f"--reanalyse {report}: no such file")
    load_hardware(hardware)
    try:
        rep = reanalyse(report, hardware, output)
    except (KeyError, ValueError) as exc:
        raise DsdsimError(f"--reanalyse {report}: {exc}") from None
    _print_validation(rep)


@app.command()
def loop(
    device: Device = "cpu",
    k: int = Option(DEFAULT_LOOP_K, "--k", "-k", help="Draft tokens per step (K >= 1)"),
    batch: int = Option(DEFAULT_LOOP_BATCH, "--batch-size", "--batch", "-b", help="Sequences decoded together"),
    new_tokens: int = Option(DEFAULT_LOOP_NEW_TOKENS, "--new-tokens", help="Tokens generated per sequence"),
    hardware: OptionalHardware = None,
    seed: int = Option(0, "--seed", help="Seed of the random weights (prompts and samples follow it)"),
    output: Optional[Path] = Option(None, "--output", "-o", help="Write the result as JSON to this file"),
) -> None:
    """Run a real speculative-decoding loop (draft -> verify -> rejection sampling, batched, KV caches) on small
    random-weight models; report per-position acceptance, the measured tau against the acceptance model's, and
    step times; -g predicts the loop's step time with that spec. Example: dsdsim loop --device cuda -k 4 -b 32 -o loop.json"""
    check_fixed_format(output, "JSON", (".json",))
    if k < 1:
        raise DsdsimError(f"--k must be >= 1 for a speculative loop, got {k}")
    if batch < 1 or new_tokens < 1:
        raise DsdsimError("--batch and --new-tokens must be >= 1")
    need_torch()
    check_device(device)
    from dsdsim.bench.loop import run_loop

    if hardware is not None:
        from dsdsim.specs.catalog import load_hardware

        load_hardware(hardware)
    res = run_loop(k=k, batch=batch, new_tokens=new_tokens, hardware=hardware, device=device, seed=seed,
                   prompt=max(16, k + 2))
    data = res.to_json()
    data["device"] = device
    if output is not None:
        write_atomic(output, to_json(data) + "\n")
        echo(f"wrote {output}", err=True)
    show(kv_table(f"speculative loop K={k}, B={batch} on {device}", {
        "alpha per position": ", ".join(f"{a:.3f}" for a in res.alpha), "tau measured": f"{res.tau_measured:.3f}",
        "tau from alpha (model)": f"{res.tau_model:.3f}", "step ms (median)": f"{res.step_s_median * 1e3:.3f}",
        "predicted step ms": "-" if res.predicted_step_s is None else f"{res.predicted_step_s * 1e3:.3f}"}))


@app.command("comm-check")
def comm_check(
    backend: str = Option("gloo", "--backend", help="nccl (GPU) or gloo (CPU)"),
    device: str = Option("cpu", "--device", help="torch device of this rank: cpu, cuda, cuda:1 "
                                                "(LOCAL_RANK picks the GPU under torchrun)"),
    output: Optional[Path] = Option(None, "--output", "-o", help="Write the result as JSON to this file"),
    world_size: int = Option(1, "--world-size", "-n",
                             help="1: the one-process check; N > 1: N spawned ranks time all-reduce sizes "
                                  "and a tensor-parallel MLP against the link model (N GPUs for nccl)"),
    hardware: OptionalHardware = None,
) -> None:
    """Prove the collective code path: with one process, init_process_group, all_reduce (small and 64 MiB,
    timed), barrier, destroy; with --world-size N, an all-reduce sweep and a tensor-parallel MLP over N ranks
    (-g: the spec whose link figures the sweep is compared with).
    Example: dsdsim comm-check --backend nccl --device cuda -o comm.json"""
    check_fixed_format(output, "JSON", (".json",))
    if backend not in ("nccl", "gloo"):
        raise DsdsimError(f"--backend {backend!r}: use nccl (GPU) or gloo (CPU)")
    if world_size < 1:
        raise DsdsimError(f"--world-size must be >= 1, got {world_size}")
    need_torch()
    check_device(device)
    if backend == "nccl" and not device.startswith("cuda"):
        raise DsdsimError("--backend nccl needs --device cuda (NCCL runs on GPUs); use --backend gloo on a CPU")
    if world_size > 1:
        _comm_sweep(backend, world_size, hardware, output)
        return
    from dsdsim.bench.distributed import nccl_smoke

    res = nccl_smoke(device=device, backend=backend)
    if output is not None:
        write_atomic(output, to_json(res.to_json()) + "\n")
        echo(f"wrote {output}", err=True)
    show(kv_table(f"{backend} world-size-1 check on {device}",
                  {k: v for k, v in res.to_json().items() if not isinstance(v, (dict, list))}))
    if not res.ok:
        raise DsdsimError(f"{backend} check failed: {res.error}")


def _comm_sweep(backend: str, world_size: int, hardware: Optional[str], output: Optional[Path]) -> None:
    import torch

    from dsdsim.bench.distributed import run_distributed

    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise DsdsimError(f"--world-size {world_size} with nccl needs {world_size} GPUs; "
                          f"{torch.cuda.device_count()} visible")
    if hardware is not None:
        from dsdsim.specs.catalog import load_hardware

        load_hardware(hardware)
    rep = run_distributed(backend, world_size, hardware)
    if output is not None:
        write_atomic(output, to_json(rep.to_json()) + "\n")
        echo(f"wrote {output}", err=True)
    echo(to_json(rep.to_json()))


@app.command()
def calibrate(
    report: Optional[Path] = Option(None, "--report", "-r",
                                    help="A validation report.json, or a vLLM batch_stats JSON of measured step "
                                         "times per (B, K): fits the HARDWARE spec"),
    measurements: Optional[List[Path]] = Option(
        None, "--measurements", help="Your measured points: vllm bench serve --save-result JSON files, SGLang "
                                     "bench_serving JSON lines (K in the file name: run-k3.jsonl), or a CSV "
                                     "batch_size,k,context,itl_ms,acceptance_length (itl_ms per output token); "
                                     "one or more after it (a shell glob), mixed K and batch: fits the "
                                     "deployment's shape and writes an engine spec"),
    replay: bool = Option(False, "--replay",
                          help="--measurements: fit through the serving simulation, replaying each run saved "
                               "with vllm bench serve --save-detailed (its requests, client limit and arrivals) "
                               "at the figures being fitted; prints each run's measured vs replayed mean TPOT"),
    plan: Optional[int] = Option(None, "--plan", metavar="N",
                                 help="Say which N (batch, K) points to measure to pin the figures "
                                      "--measurements fits, with the command lines that measure them"),
    hardware: OptionalHardware = None,
    output: Optional[Path] = Option(None, "--output", "-o",
                                    help="Calibrated spec YAML to write (--plan: a .json plan or a .sh script)"),
    model: Optional[str] = Option(None, "--model", "-m", help="Model that was measured"),
    drafter: Drafter = DEFAULT_DRAFTER,
    context: Context = DEFAULT_CONTEXT,
    tp: Tp = 1,
    ep: Ep = 1,
    dtype: WeightDType = None,
    kv_dtype: KvDType = DEFAULT_KV_DTYPE,
    engine: Engine = DEFAULT_ENGINE,
    max_batch: Optional[int] = Option(None, "--max-batch", help="--plan: the largest batch to measure (default "
                                      "512, or the largest that fits)"),
    name: Optional[str] = Option(None, "--name", help="Name of the calibrated spec (default: "
                                 "HARDWARE@calibrated-YYYY-MM-DD for a report)"),
    date: Optional[str] = Option(None, "--date", help="Date written into the fit's provenance (default today)"),
    allow_other_device: bool = Option(False, "--allow-other-device",
                                      help="Calibrate even when the report was measured on another device "
                                           "than the spec describes"),
) -> None:
    """Fit a spec to measurements and write it; or say what to measure.

    \b
    --measurements: five figures of the deployment, fitted to a few (batch, K) points, each starting at its
      shipped value (the prior) and bounded: the HBM bandwidth fraction, the compute fraction of large GEMMs, the
      launch gap per kernel, and factors on the engine release's per-step and per-token terms (maximum a
      posteriori, soft-L1 loss). Prints each figure beside its prior and bounds (and which sit on a bound), every
      point measured vs fitted with its leave-one-out error, and writes one engine spec --name that predict,
      explain, simulate and plan take (--engine FILE).
    --replay (with --measurements): a serving run's mean TPOT is no steady step (the batch ramps and drains,
      prefills land in some steps); each run saved with --save-detailed is replayed through the simulator at the
      fitted figures and the fit's targets are corrected by measured / replayed, two rounds (about a second a run
      a round); the figures kept are the round's whose replays have the smallest median error.
    --plan N: the N points that pin those figures best (greedy D-optimal design over the feasible batch x K grid)
      and the vllm bench serve (SGLang bench_serving with --engine sglang, TensorRT-LLM's benchmark_serving with
      --engine trtllm) command lines that measure them.
    --report: efficiencies (compute; memory for GEMMs, attention and vector kernels), launch and step overhead and
      the GEMM tile of the hardware spec -g; a report is fitted on its train half and scored on the held-out half.
      A warning names each fitted figure past its bound (an efficiency above 1 is written as 1; a step overhead
      above 5 ms or a launch above 100 us is kept): the spec marks it verified: unverified with the reason.
    \b
    Examples:
      dsdsim calibrate --plan 6 -m llama-3.1-70b -g h100-sxm --tp 8
      dsdsim calibrate --measurements dsdsim-b*-k*.json -m llama-3.1-70b -g h100-sxm --tp 8 --name my-vllm -o my-vllm.yaml
      dsdsim calibrate --measurements run-*.json --replay -m llama-3.1-8b -g h100-sxm --name my-vllm -o my-vllm.yaml
      dsdsim calibrate -r out/report.json -g my-cpu.yaml -o my-cpu-calibrated.yaml"""
    import json as _json

    if sum(x is not None and x != [] for x in (report, measurements, plan)) != 1:
        raise DsdsimError("give exactly one of --plan N (which points to measure), --measurements (fit your points) "
                          "or --report (fit a hardware spec to a validation report)")
    if replay and not measurements:
        raise DsdsimError("--replay fits through the simulator the runs given with --measurements; add "
                          "--measurements RUN.json ... (vllm bench serve --save-result --save-detailed files)")
    from dsdsim.cli.options import deployment_from_options

    if plan is not None:
        from dsdsim.cli.engine import calibrate_plan

        dep = deployment_from_options(tp, ep, dtype, kv_dtype, 0.0)
        return calibrate_plan(plan, model or DEFAULT_MODEL, hardware or DEFAULT_HARDWARE, dep, drafter, engine,
                              context, max_batch, 256, output)
    if output is None:
        raise DsdsimError("calibrate needs --output FILE.yaml (the calibrated spec it writes)")
    check_fixed_format(output, "a spec (YAML)", (".yaml", ".yml"))
    if measurements:
        from dsdsim.cli.engine import calibrate_measurements

        dep = deployment_from_options(tp, ep, dtype, kv_dtype, 0.0)
        return calibrate_measurements(measurements, model or DEFAULT_MODEL, hardware or DEFAULT_HARDWARE, dep,
                                      drafter, engine, context, name, output, date, replay)
    if hardware is None:
        raise DsdsimError("calibrate --report needs --hardware (the spec the report was predicted with)")
    if not report.is_file():
        raise DsdsimError(f"--report {report}: no such file")
    try:
        data = _json.loads(report.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DsdsimError(f"--report {report}: not JSON; give a validation report.json or a batch_stats file") from None
    if not isinstance(data, dict) or not ("points" in data or "batch_stats" in data):
        raise DsdsimError(f"--report {report}: has neither 'points' (validation report) nor 'batch_stats'")
    if "batch_stats" in data and model is None:
        raise DsdsimError("calibrating from a batch_stats file needs --model (the model that was measured)")
    from dsdsim.fit.calibrate import implausible_figures, run_calibrate
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(hardware)
    if "points" in data and not allow_other_device:
        _check_same_device(data, hw, report)
    if name is None:
        import datetime

        name = f"{hw.name}@calibrated-{datetime.date.today().isoformat()}"
    if data.get("partial"):
        echo(f"warning: --report {report} is partial (the run stopped after its {data.get('stage', 'first')} "
             "stage): calibrating on what it measured, and the spec's sources say so", err=True)
    try:
        spec, summary = with_status(f"fitting {name} to {report.name}", lambda: run_calibrate(
            report, hardware, output, model=model, drafter=drafter, context=context, name=name))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DsdsimError):
            raise
        raise DsdsimError(f"--report {report}: cannot calibrate from it ({exc})") from None
    for line in implausible_figures(spec):     # one line each; the written figure says the same
        echo(f"warning: {line}", err=True)
    echo(f"wrote {output}", err=True)
    from dsdsim.export.validation import points_percent as pct

    for key, e in (("uncalibrated", summary.uncalibrated), ("calibrated", summary.calibrated)):
        if e.n:
            show(f"{key}: n={e.n}, median |error| {pct(e.median_abs_pct_error)}, MAPE {pct(e.mape)}")
    show("fitted: " + ", ".join(f"{k}={v:.3g}" for k, v in summary.fitted.items() if isinstance(v, (int, float))))


def _check_same_device(report: dict, hw, path: Path) -> None:
    """A validation report calibrates only the spec of the device it was measured on."""
    used, device, device_name = report.get("hardware"), str(report.get("device", "")), report.get("device_name")
    if used is not None and used != hw.name:
        raise DsdsimError(f"--report {path} was predicted with {used!r}, not {hw.name!r}; calibrate that spec "
                          "(or pass --allow-other-device)")
    measured_on = hw.measured.device_name if hw.measured is not None else None
    if measured_on is not None and device_name is not None and measured_on != device_name:
        raise DsdsimError(f"--report {path} was measured on {device_name}, but {hw.name} describes {measured_on}; "
                          "pass --allow-other-device to calibrate it anyway")
    if measured_on is None and device.startswith("cpu"):
        raise DsdsimError(f"--report {path} was measured on a CPU ({device_name or 'cpu'}), but {hw.name} is a "
                          "shipped accelerator spec; probe the CPU (dsdsim probe) and calibrate that spec, or pass "
                          "--allow-other-device")
