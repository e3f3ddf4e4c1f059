"""dsdsim plot roofline | sensitivity: figures (matplotlib is imported only when a command draws)."""
from __future__ import annotations

from dsdsim.cli.app import plot_app
from dsdsim.cli.command import Option, echo
from dsdsim.cli.options import BatchSize, Context, DeploymentArgs, K, PngOutput, SimulatedArgs, step_from_options
from dsdsim.cli.output import check_png
from dsdsim.cli.params import takes, without
from dsdsim.defaults import (DEFAULT_CONTEXT, DEFAULT_ROOFLINE_BATCH, DEFAULT_SENSITIVITY_ALPHAS,
                             DEFAULT_SENSITIVITY_BATCH_SIZES, DEFAULT_SENSITIVITY_CONTEXTS, DEFAULT_STEP_K)
from dsdsim.errors import DsdsimError


@plot_app.command("roofline")
@takes(sim=SimulatedArgs, deploy=DeploymentArgs)
def plot_roofline(
    output: PngOutput,
    sim: SimulatedArgs,
    deploy: DeploymentArgs,
    batch: BatchSize = DEFAULT_ROOFLINE_BATCH,
    k: K = DEFAULT_STEP_K,
    context: Context = DEFAULT_CONTEXT,
) -> None:
    """The hardware roofline with the verify (and draft) step's operators placed on it (drafter ops as triangles).

    \b
    Example:
      dsdsim plot roofline -o roofline.png -m llama-3.1-8b -b 32 -k 3
    """
    from dsdsim.export.plots import RooflineDisplay, save_png

    check_png(output, "--output")
    _, step = step_from_options(sim, deploy.deployment(), batch, k, context)
    save_png(RooflineDisplay.from_step(step).plot(), output)
    echo(f"wrote {output}", err=True)


@plot_app.command("sensitivity")
@takes(sim=without(SimulatedArgs, "draft_tree"), deploy=DeploymentArgs)
def plot_sensitivity(
    output: PngOutput,
    sim: SimulatedArgs,
    deploy: DeploymentArgs,
    alphas: str = Option(DEFAULT_SENSITIVITY_ALPHAS, "--alphas", help="Constant acceptance values to compare"),
    contexts: str = Option(DEFAULT_SENSITIVITY_CONTEXTS, "--contexts", help="Context lengths to compare"),
    batch_sizes: str = Option(DEFAULT_SENSITIVITY_BATCH_SIZES, "--batch-sizes", "-b", help="Batch sizes"),
) -> None:
    """How the K table and the speedup move when acceptance or context change (K* and speedup vs batch).

    \b
    Example:
      dsdsim plot sensitivity -o sens.png --alphas 0.6,0.8 --contexts 1024,8192
    """
    from dsdsim.plan import sensitivity
    from dsdsim.export.plots import SensitivityDisplay, save_png

    check_png(output, "--output")
    from dsdsim.errors import comma_items, first_repeat

    a_items = comma_items(alphas, f"--alphas {alphas!r}", "0.6,0.8")
    c_items = comma_items(contexts, f"--contexts {contexts!r}", "1024,8192")
    try:
        a_list, c_list = [float(x) for x in a_items], [int(x) for x in c_items]
    except ValueError:
        raise DsdsimError("--alphas takes numbers (0.6,0.8) and --contexts whole numbers (1024,8192)") from None
    if not a_list or not c_list:
        raise DsdsimError("--alphas and --contexts need at least one value each")
    for what, values in (("--alphas", a_list), ("--contexts", c_list)):
        twice = first_repeat(values)
        if twice is not None:
            raise DsdsimError(f"{what} lists {twice:g} twice; list each value once")
    dep, drafter = deploy.deployment(), sim.drafter_spec()
    frame = sensitivity(sim.model, sim.hardware, a_list, c_list, deployment=dep, drafter=drafter,
                        batch_sizes=batch_sizes, engine=sim.engine)
    save_png(SensitivityDisplay.from_frame(frame, title=_setup_title(sim, dep, drafter)).plot(), output)
    echo(f"wrote {output}", err=True)


def _setup_title(sim: SimulatedArgs, dep, drafter) -> str:
    """'llama-3.1-8b on h100-sxm (tp 1), eagle3, engine vllm-0.24': what a plot's numbers were predicted for."""
    from dsdsim.specs.setup import resolve

    s = resolve(sim.model, sim.hardware, dep, drafter, sim.engine)
    d = s.drafter.label if s.drafter is not None else "no drafter"
    eng = f", engine {s.engine.name}" + (f" {s.engine.versions.label}" if s.engine.versions is not None else "") \
        if s.engine is not None else ""
    return f"{s.model.name} on {s.hardware.name} (tp {s.deployment.tp}), {d}{eng}"
