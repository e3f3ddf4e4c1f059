"""dsdsim plot roofline | sensitivity: figures (matplotlib is imported only when a command draws)."""
from __future__ import annotations

import typer

from dsdsim.cli.app import plot_app
from dsdsim.cli.options import (BatchSize, Context, Drafter, DraftTreeOpt, Engine, Hardware, K, Model, PngOutput, Tp,
                                deployment_from_options, step_from_options)
from dsdsim.cli.output import check_png
from dsdsim.defaults import (DEFAULT_CONTEXT, DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_KV_DTYPE, DEFAULT_MODEL,
                             DEFAULT_ROOFLINE_BATCH, DEFAULT_SENSITIVITY_ALPHAS, DEFAULT_SENSITIVITY_BATCH_SIZES,
                             DEFAULT_SENSITIVITY_CONTEXTS, DEFAULT_STEP_K)
from dsdsim.errors import DsdsimError


@plot_app.command("roofline")
def plot_roofline(
    output: PngOutput,
    model: Model = DEFAULT_MODEL,
    hardware: Hardware = DEFAULT_HARDWARE,
    tp: Tp = 1,
    drafter: Drafter = DEFAULT_DRAFTER,
    draft_tree: DraftTreeOpt = None,
    batch: BatchSize = DEFAULT_ROOFLINE_BATCH,
    k: K = DEFAULT_STEP_K,
    context: Context = DEFAULT_CONTEXT,
    engine: Engine = DEFAULT_ENGINE,
) -> None:
    """The hardware roofline with the verify (and draft) step's operators placed on it (drafter ops as triangles).

    \b
    Example:
      dsdsim plot roofline -o roofline.png -m llama-3.1-8b -b 32 -k 3
    """
    from dsdsim.export.plots import RooflineDisplay, save_png

    check_png(output, "--output")
    dep = deployment_from_options(tp, 1, None, DEFAULT_KV_DTYPE, 0.0)
    step = step_from_options(model, hardware, dep, drafter, draft_tree, batch, k, context, engine)
    save_png(RooflineDisplay.from_step(step).plot(), output)
    typer.echo(f"wrote {output}", err=True)


@plot_app.command("sensitivity")
def plot_sensitivity(
    output: PngOutput,
    model: Model = DEFAULT_MODEL,
    hardware: Hardware = DEFAULT_HARDWARE,
    tp: Tp = 1,
    drafter: Drafter = DEFAULT_DRAFTER,
    alphas: str = typer.Option(DEFAULT_SENSITIVITY_ALPHAS, "--alphas", help="Constant acceptance values to compare"),
    contexts: str = typer.Option(DEFAULT_SENSITIVITY_CONTEXTS, "--contexts", help="Context lengths to compare"),
    batch_sizes: str = typer.Option(DEFAULT_SENSITIVITY_BATCH_SIZES, "--batch-sizes", "-b", help="Batch sizes"),
    engine: Engine = DEFAULT_ENGINE,
) -> None:
    """How the K table and the speedup move when acceptance or context change (K* and speedup vs batch).

    \b
    Example:
      dsdsim plot sensitivity -o sens.png --alphas 0.6,0.8 --contexts 1024,8192
    """
    from dsdsim.plan import sensitivity
    from dsdsim.export.plots import SensitivityDisplay, save_png

    check_png(output, "--output")
    try:
        a_list = [float(x) for x in alphas.split(",") if x.strip()]
        c_list = [int(x) for x in contexts.split(",") if x.strip()]
    except ValueError:
        raise DsdsimError("--alphas takes numbers (0.6,0.8) and --contexts whole numbers (1024,8192)") from None
    if not a_list or not c_list:
        raise DsdsimError("--alphas and --contexts need at least one value each")
    dep = deployment_from_options(tp, 1, None, DEFAULT_KV_DTYPE, 0.0)
    frame = sensitivity(model, hardware, a_list, c_list, deployment=dep, drafter=drafter, batch_sizes=batch_sizes,
                        engine=engine)
    save_png(SensitivityDisplay.from_frame(frame, title=_setup_title(model, hardware, dep, drafter, engine)).plot(),
             output)
    typer.echo(f"wrote {output}", err=True)


def _setup_title(model: str, hardware: str, dep, drafter, engine) -> str:
    """'llama-3.1-8b on h100-sxm (tp 1), eagle3, engine vllm-0.24': what a plot's numbers were predicted for."""
    from dsdsim.specs.setup import resolve

    s = resolve(model, hardware, dep, drafter, engine)
    d = s.drafter.label if s.drafter is not None else "no drafter"
    eng = f", engine {s.engine.name}" + (f" {s.engine.versions.label}" if s.engine.versions is not None else "") \
        if s.engine is not None else ""
    return f"{s.model.name} on {s.hardware.name} (tp {s.deployment.tp}), {d}{eng}"
