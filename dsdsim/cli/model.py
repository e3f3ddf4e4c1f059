"""dsdsim explain | predict | plan | accuracy: the simulator and the K policy."""
from __future__ import annotations

from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Optional

from dsdsim.cli.app import app
from dsdsim.cli.command import Invocation, Option, echo
from dsdsim.cli.options import (PREDICT_OPTIONS, BatchSize, Context, DeploymentArgs, K, Model, Output, Plot, PredictFmt,
                                ShowFmt, ShowFormat, SimulatedArgs, TableFmt, TableFormat, TreeFamilyOpt,
                                step_from_options)
from dsdsim.cli.output import (check_png, check_writable, emit, is_stdout, output_format, show_or_write,
                               warn, with_progress)
from dsdsim.cli.params import takes, without
from dsdsim.defaults import DEFAULT_CONTEXT, DEFAULT_EXPLAIN_BATCH, DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_STEP_K
from dsdsim.errors import DsdsimError, comma_items
from dsdsim.export.prediction import PredictFormat
from dsdsim.export.render import to_json
from dsdsim.policy.options import PredictOptions


# --- explain ------------------------------------------------------------------------------------------


@app.command()
@takes(sim=SimulatedArgs, deploy=DeploymentArgs)
def explain(
    ctx: Invocation,
    sim: SimulatedArgs,
    deploy: DeploymentArgs,
    batch: BatchSize = DEFAULT_EXPLAIN_BATCH,
    k: K = DEFAULT_STEP_K,
    context: Context = DEFAULT_CONTEXT,
    k_table: bool = Option(False, "--k-table",
                           help="Price the step of a server running a dynamic K table at this K (what predict's rows "
                                "are; K = 0 is the table's off tier), not of a server with a fixed K"),
    fmt: ShowFmt = ShowFormat.table,
    output: Output = None,
) -> None:
    """Per-operator breakdown of one speculative step: FLOPs, bytes, intensity, time, what bounds it; the engine's
    terms (host time, speculative fixed cost, draft passes, rejection sampling, CUDA-graph padding) as their own rows.

    \b
    The step is a fixed-K server's (every step drafts K tokens); K = 0 a server without speculation. Where the
    engine reads a dynamic K table, predict prices the steps of a server running the table: --k-table prices that
    server at this K. The output names the server it priced.
    With --draft-tree, any K >= 1 is the tree (K = 0 plain decoding).

    \b
    Examples:
      dsdsim explain -m qwen3-30b-a3b -g h200-sxm -b 64 -k 3 -c 8192
      dsdsim explain -m deepseek-v3 -g h200-sxm --tp 8 --ep 8 --dp-attention -d mtp --draft-tree 3,4,8 -b 64
    """
    from dsdsim.export.render import explain_view
    from dsdsim.export.views import explain_step

    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    setup, step = step_from_options(sim, deploy.deployment(), batch, k, context, k_table)
    data = explain_step(step, setup)
    if fmt is ShowFormat.json:
        return emit(data.to_json(), output)
    show_or_write(explain_view(data), output)


# --- predict ------------------------------------------------------------------------------------------


@app.command()
@takes(PREDICT_OPTIONS, sim=SimulatedArgs, deploy=DeploymentArgs, options=PredictOptions)
def predict(
    ctx: Invocation,
    sim: SimulatedArgs,
    deploy: DeploymentArgs,
    options: PredictOptions,
    contexts: Optional[str] = Option(None, "--contexts",
                                     help="Context axis: a comma list (1024,8192,32768) gives the K table over "
                                          "batch x context (table or json)"),
    tree_family: TreeFamilyOpt = None,
    fmt: PredictFmt = PredictFormat.table,
    output: Output = None,
    plot: Plot = None,
    force: bool = Option(False, "--force", help="Write an engine table (vllm, sglang, trtllm) even where the "
                                                "engine could not use it (it would not start, ignore it, or the "
                                                "table never beats a server without speculation); refused "
                                                "otherwise, with the reason"),
) -> None:
    """Best number of draft tokens K at every batch size, as a table an engine accepts: the fewest batch ranges
    within --tolerance (0.5%) of the best K's goodput at every batch size; where that is more than --max-ranges
    (5), the table of that many ranges with the most goodput, and what it gives up (--max-ranges 0: the exact best).

    \b
    Examples:
      dsdsim predict
      dsdsim predict -m llama-3.1-70b -g h100-sxm --tp 8 -a 0.8,0.7,0.6 --format vllm
      dsdsim predict --max-ranges 3 --batch-weights sim.json     # 3 ranges where simulate's server runs
      dsdsim predict -m qwen3-30b-a3b -g h200-sxm --expert-overlap 0 --plot k.png   # independent routing
      dsdsim predict --draft-tree 4,4,16 -a al=3.2@tree --format sglang
      dsdsim predict -m deepseek-v3 -g h200-sxm --tp 8 --ep 8 --dp-attention -d mtp -a al=2.4@2
      dsdsim predict -m qwen3-30b-a3b -g h100-sxm --tp 4 -e sglang@0.5.6 --tree-family "3,3,4@2.017;4,4,16@2.542"
    """
    from dsdsim.export.prediction import render
    from dsdsim.policy.predict import predict as run_predict

    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    if tree_family is not None:
        return _predict_tree_family(ctx, sim, deploy, options, tree_family, fmt, output, plot)
    from dsdsim.policy.options import parse_tolerance

    options = replace(options, tolerance=parse_tolerance(options.tolerance))   # a bad value fails first
    if (ctx.given("tolerance") and ctx.given("max_ranges") and options.tolerance == 0
            and options.max_ranges not in (None, 0)):
        raise DsdsimError(f"--tolerance 0 asks for the exact table and --max-ranges {options.max_ranges} for at most "
                          f"{options.max_ranges} ranges: give one of them")
    _check_plot(plot, output)
    target = dict(model=sim.model, hardware=sim.hardware, deployment=deploy.deployment(), drafter=sim.drafter_spec(),
                  engine=sim.engine)
    if contexts is not None:
        if ctx.given("context"):
            raise DsdsimError("give either --context (one length) or --contexts (a list), not both")
        for name, option, why in (("plot", "--plot", "draws one context"),
                                  ("acceptance_band", "--acceptance-band", "adds a robust K to one table"),
                                  ("fixed_k", "--fixed-k", "sets the comparison column of one table")):
            if ctx.given(name):
                raise DsdsimError(f"{option} {why}; the --contexts grid shows the table's K only: drop one of them")
        return _predict_contexts(contexts, fmt, output, options=options, **target)
    p = run_predict(**target, options=options)
    text = None if fmt is PredictFormat.table else render(p, fmt, force=force)
    if text is not None:
        _warn_about_table(p, fmt)
    if plot is not None:
        from dsdsim.export.plots import PredictionDisplay, save_png

        save_png(PredictionDisplay.from_prediction(p).plot(), plot)
        echo(f"wrote {plot}", err=True)
    if text is not None:
        return emit(text, output)
    from dsdsim.export.render import prediction_view

    show_or_write(prediction_view(p), output)


def _check_plot(plot: Optional[Path], output: Optional[Path]) -> None:
    """--plot: a writable .png path (or -) that does not share standard output with the predict output."""
    if plot is None:
        return
    check_png(plot, "--plot")
    if is_stdout(plot) and (output is None or is_stdout(output)):
        raise DsdsimError("--plot - and the predict output would both go to standard output; write one to a file")


def _warn_about_table(p, fmt: PredictFormat) -> None:
    """Formats other than the table carry no notes: say on stderr which table was exported and what the tolerance
    gave up; for an engine table also where it ends, how gaps were filled and where the engine would ignore it."""
    from dsdsim.export.prediction import ENGINE_TABLES, table_summary, table_warnings, tolerance_merged

    if fmt in ENGINE_TABLES:
        last = p.last_feasible_batch
        if last is not None and last < int(p.batch_sizes[-1]):
            warn(f"batch sizes above {last} do not fit in memory at context {p.context}; the table ends at {last} "
                 "(engines use its last K beyond it)")
        for note in p.notes:
            if note.startswith("K table:"):
                warn(note)
        for line in table_warnings(p, fmt):
            warn(line)
    if fmt is not PredictFormat.vllm_batch_stats:
        echo(f"dsdsim: {table_summary(p)}" + (" (--max-ranges 0: the exact table)" if tolerance_merged(p) else ""),
             err=True)


# what --tree-family cannot be given with, and why (each tree brings its own acceptance length)
_NOT_WITH_TREE_FAMILY = (
    ("draft_tree", "--draft-tree", "gives one tree"), ("acceptance", "--acceptance", "gives one acceptance"),
    ("fixed_k", "--fixed-k", "sets a chain length to compare with"),
    ("max_distinct_k", "--max-distinct-k", "limits a chain's K table"), ("max_k", "--max-k", "limits a chain's K"),
    ("acceptance_band", "--acceptance-band", "moves a chain's alphas"), ("tolerance", "--tolerance",
                                                                         "merges a K table's ranges"),
    ("contexts", "--contexts", "gives a K table per context"))


def _predict_tree_family(ctx, sim: SimulatedArgs, deploy: DeploymentArgs, options: PredictOptions, text: str,
                         fmt: PredictFormat, output: Optional[Path], plot: Optional[Path]) -> None:
    """The best tree of a family (or plain decoding) per batch size: table, json or csv; --plot draws each tree's
    goodput and the choice per batch range."""
    from dsdsim.export import trees as views
    from dsdsim.policy.trees import parse_tree_family, predict_tree_family

    for name, option, why in _NOT_WITH_TREE_FAMILY:
        if ctx.given(name):
            raise DsdsimError(f"{option} {why}; --tree-family brings its trees, each with its measured acceptance "
                              f"length: drop {option}")
    early = views.early_refusal(fmt)
    if early is not None:
        raise DsdsimError(early)
    _check_plot(plot, output)
    family = parse_tree_family(text)
    p = predict_tree_family(sim.model, sim.hardware, deploy.deployment(), sim.drafter_spec(), family=family,
                            engine=sim.engine, context=options.context, batch_sizes=options.batch_sizes)
    rendered = None if fmt is PredictFormat.table else views.render(p, fmt)   # a refused format fails before the plot
    if plot is not None:
        from dsdsim.export.plots import TreeFamilyDisplay, save_png

        save_png(TreeFamilyDisplay.from_prediction(p).plot(), plot)
        echo(f"wrote {plot}", err=True)
    if rendered is None:
        return show_or_write(views.family_table(p), output)
    emit(rendered, output)


def _predict_contexts(text: str, fmt: PredictFormat, output: Optional[Path], **kwargs) -> None:
    """The K table over (batch range x context range): one prediction per context length."""
    from dsdsim.export.render import context_grid_dict, context_grid_table
    from dsdsim.policy.predict import predict_context_grid

    from dsdsim.errors import comma_items

    try:
        ctxs = [int(c) for c in comma_items(text, f"--contexts {text!r}", "1024,8192,32768")]   # checked by the grid
    except ValueError as exc:
        if isinstance(exc, DsdsimError):
            raise
        raise DsdsimError(f"cannot read --contexts {text!r}; write a comma list such as 1024,8192,32768") from None
    if not ctxs or min(ctxs) < 0:
        raise DsdsimError("--contexts needs one or more context lengths >= 0, e.g. 1024,8192")
    if len(set(ctxs)) != len(ctxs):
        raise DsdsimError(f"--contexts {text!r} names a context length twice")
    if fmt not in (PredictFormat.table, PredictFormat.json):
        raise DsdsimError("--contexts gives a batch x context table: use --format table or json")
    preds = predict_context_grid(ctxs, **kwargs)
    if fmt is PredictFormat.json:
        return emit(to_json(context_grid_dict(ctxs, preds)), output)
    show_or_write(context_grid_table(ctxs, preds), output)


# --- plan ---------------------------------------------------------------------------------------------


@app.command()
@takes(PREDICT_OPTIONS, sim=without(SimulatedArgs, "model", "hardware"), deploy=without(DeploymentArgs, "tp", "ep", "pp"),
       options=without(PredictOptions, "fixed_k", "max_distinct_k", "acceptance_band", "tolerance"))
def plan(
    ctx: Invocation,
    model: Model = DEFAULT_MODEL,
    candidates: str = Option(DEFAULT_HARDWARE, "--candidates", "-g",
                             help="Comma list of HARDWARE[:tpN[:epM][:ppK]] (tp, ep, pp default 1), e.g. "
                                  "h100-sxm:tp8,h200-sxm:tp4"),
    itl_slo_ms: Optional[float] = Option(None, "--itl-slo-ms", metavar="MS",
                                         help="Per-sequence inter-token latency target (ms); with --simulate, the "
                                              "--slo's tpot when not given"),
    sim: SimulatedArgs = None,
    deploy: DeploymentArgs = None,
    options: PredictOptions = None,
    target_tokens_per_s: Optional[float] = Option(None, "--target-tokens-per-s",
                                                  help="Aggregate output rate to size the fleet for"),
    price_per_gpu_hour: Optional[float] = Option(None, "--price-per-gpu-hour",
                                                 help="Your price per GPU-hour (no prices are shipped)"),
    fmt: TableFmt = TableFormat.table,
    output: Output = None,
) -> None:
    """Capacity planning: per candidate GPU and parallelism, the operating point (batch, K) with the most tokens/s
    whose inter-token latency meets the SLO, with and without dynamic speculation; tokens/s per GPU there, GPUs
    for a target rate and cost per million tokens.

    \b
    Example:
      dsdsim plan -m llama-3.1-70b -g h100-sxm:tp4,h100-sxm:tp8,h200-sxm:tp4 --itl-slo-ms 30 \\
          --target-tokens-per-s 50000 --price-per-gpu-hour 2.5
      dsdsim plan -m deepseek-v3 -g h200-sxm:tp8:ep8 --dp-attention -d mtp -a al=2.4@2 --itl-slo-ms 50
    """
    from dsdsim.plan import plan_rows, require_a_valid_candidate

    if itl_slo_ms is None:
        raise DsdsimError("plan needs --itl-slo-ms MS, the per-sequence inter-token latency target in milliseconds "
                          "(e.g. --itl-slo-ms 30)")
    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    spec = sim.drafter_spec()
    drafter = "none" if spec is None else spec.label + (f" ({spec.tree.label})" if spec.tree is not None else "")
    dep = deploy.deployment()
    rows = with_progress("planning candidates", lambda progress: plan_rows(
        model, comma_items(candidates, f"--candidates {candidates!r}", "h100-sxm:tp8,h200-sxm:tp4"), itl_slo_ms,
        drafter=spec, engine=sim.engine,
        deployment=dep, options=options, target_tokens_per_s=target_tokens_per_s,
        price_per_gpu_hour=price_per_gpu_hour, progress=progress))
    require_a_valid_candidate(rows)     # a plan without one operating point is an error, in every format
    recs = [r.to_dict() for r in rows]
    if fmt is TableFormat.json:
        return emit(to_json({"model": model, "itl_slo_ms": itl_slo_ms, "context": options.context, "drafter": drafter,
                             "dp_attention": dep.dp_attention, "candidates": recs}), output)
    if fmt is TableFormat.csv:
        from dsdsim.export.engines import table_csv

        return emit(table_csv(recs), output)
    from dsdsim.export.render import plan_table

    layout = ", data-parallel attention" if dep.dp_attention else ""
    show_or_write(plan_table(f"{model}: ITL SLO {itl_slo_ms:g} ms, context {options.context}, drafter {drafter}{layout}",
                             rows),
                  output)


# --- accuracy -----------------------------------------------------------------------------------------


class AccuracySplit(str, Enum):
    train = "train"
    test = "test"
    all = "all"


@app.command()
def accuracy(
    ctx: Invocation,
    split: AccuracySplit = Option(AccuracySplit.all, "--split", help="train (may be fitted on), test (never "
                                  "fitted on) or all"),
    measured_on: Optional[str] = Option(None, "--measured-on", help="Only cases measured on this engine (the "
                                        "case's engine field: vllm, sglang, tensorrt-llm, gpt-fast, magicdec)"),
    engine: Optional[str] = Option(None, "--engine", "-e", help="Predict every case with this engine spec "
                                   "(name or YAML path; ideal = kernels only). Default: each case with the "
                                   "engine it was measured on (vllm, sglang, trtllm; ideal for compiled loops)"),
    fmt: TableFmt = TableFormat.table,
    plot: Optional[Path] = Option(None, "--plot", help="Also draw predicted vs measured (PNG, log axes)"),
    output: Output = None,
    corpus: Optional[Path] = Option(None, "--corpus", metavar="DIR",
                                    help="A folder of measurement YAML files (default: the shipped corpus)"),
    cv: Optional[str] = Option(None, "--cv", metavar="source|points[:N]",
                               help="source: the leave-one-source-out error (every fitted figure refitted "
                                    "without each source in turn, that source predicted): the error to expect "
                                    "on a setup no source measured. points[:N]: for every source grid of >= 8 "
                                    "(batch, K) points, calibrate on the N points `calibrate --plan N` picks "
                                    "(default 6) and score the rest and the K choice: the error to expect after "
                                    "measuring N points of your own"),
) -> None:
    """Predict every public measurement in the corpus with the shipped defaults (no calibration) and report the
    relative error per case, then the median and max |error| per split and per group.

    \b
    Examples:
      dsdsim accuracy
      dsdsim accuracy --split test --format json -o accuracy.json
      dsdsim accuracy --measured-on vllm --plot accuracy.png
      dsdsim accuracy --engine ideal          # kernels only: the gap the engine specs close
      dsdsim accuracy --cv source             # leave one source out, per source (seconds: one refit a source)
      dsdsim accuracy --cv points:6           # calibrated on 6 points of each source grid, the rest scored
    """
    from dsdsim.corpus.evaluate import accuracy as run_accuracy

    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    if plot is not None:
        check_png(plot, "--plot")
    points_n = None
    if cv is not None and (cv == "points" or cv.startswith("points:")):
        from dsdsim.errors import whole_number

        points_n = whole_number(cv.partition(":")[2] or "6", "--cv points:N")
        if points_n < 1:
            raise DsdsimError(f"--cv points:N needs N >= 1 points to calibrate on, got {points_n}")
    elif cv not in (None, "source"):
        raise DsdsimError(f"unknown cross-validation {cv!r}; use --cv source or --cv points[:N] (e.g. points:6)")
    if cv is not None and engine is not None:
        raise DsdsimError("--cv refits the shipped engine specs: it cannot be combined with one forced --engine")
    if cv is None:
        report = with_progress("predicting measurement cases",
                               lambda progress: run_accuracy(split.value, measured_on, corpus, progress=progress,
                                                             engine=engine))
    elif points_n is not None:
        from dsdsim.fit.cv import accuracy_with_points_cv

        report = with_progress(f"calibrating each source grid on {points_n} points",
                               lambda progress: accuracy_with_points_cv(split.value, measured_on, corpus, points_n,
                                                                        progress=progress))
    else:
        from dsdsim.fit.cv import accuracy_with_source_cv

        report = with_progress("refitting without each source",
                               lambda progress: accuracy_with_source_cv(split.value, measured_on, corpus,
                                                                        progress=progress))
    if plot is not None:
        from dsdsim.export.plots import AccuracyDisplay
        from dsdsim.export.plots import save_png

        save_png(AccuracyDisplay.from_report(report).plot(), plot)
        echo(f"wrote {plot}", err=True)
    if fmt is TableFormat.json:
        return emit(to_json(report.to_dict()), output)
    if fmt is TableFormat.csv:
        from dataclasses import asdict

        from dsdsim.export.engines import table_csv

        return emit(table_csv([asdict(c) for c in report.cases]), output)
    from dsdsim.export.render import accuracy_view

    show_or_write(accuracy_view(report), output)
