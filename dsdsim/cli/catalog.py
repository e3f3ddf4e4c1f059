"""dsdsim list models|hardware and dsdsim show model|hardware: what the catalog knows."""
from __future__ import annotations

import typer

from dsdsim.cli.app import list_app, show_app
from dsdsim.cli.options import ShowFmt, ShowFormat
from dsdsim.cli.output import emit, show
from dsdsim.export.render import to_json


@list_app.command("models")
def list_models(fmt: ShowFmt = ShowFormat.table) -> None:
    """Every known model: family, parameters, active parameters, attention pattern, KV bytes per token.

    \b
    Example:
      dsdsim list models --format json
    """
    from dsdsim.export.render import models_table
    from dsdsim.report import model_summary
    from dsdsim.specs.catalog import iter_models

    rows = [model_summary(m) for m in iter_models()]
    _render_rows(rows, fmt, models_table)


@list_app.command("hardware")
def list_hardware(fmt: ShowFmt = ShowFormat.table) -> None:
    """Every known accelerator: memory, bandwidth, dense bf16 peak, ridge point.

    \b
    Example:
      dsdsim list hardware --format json
    """
    from dsdsim.export.render import hardware_table
    from dsdsim.report import hardware_summary
    from dsdsim.specs.catalog import iter_hardware

    rows = [hardware_summary(h) for h in iter_hardware()]
    _render_rows(rows, fmt, hardware_table)


def _render_rows(rows: list, fmt: ShowFormat, table) -> None:
    """A catalog listing as JSON, or as the rich ``table`` of its rows."""
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    show(table(rows))


@show_app.command("model")
def show_model(name: str = typer.Argument(..., help="A model name (dsdsim list models) or a path to a config.json"),
               fmt: ShowFmt = ShowFormat.table) -> None:
    """One model: structure, parameter counts and KV-cache bytes per token, as dsdsim understood the config.

    \b
    Example:
      dsdsim show model ./Llama-3.1-8B/   (a folder holding config.json)
    """
    from dsdsim.export.render import kv_table
    from dsdsim.report import model_summary
    from dsdsim.specs.catalog import load_model

    m = load_model(name)
    data = model_summary(m)
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    show(kv_table(f"Model {m.name}", data))


@show_app.command("hardware")
def show_hardware(name: str = typer.Argument(..., help="A hardware name (dsdsim list hardware) or a YAML/JSON path"),
                  fmt: ShowFmt = ShowFormat.table) -> None:
    """One accelerator: capacities, dense peaks per dtype, ridge points, efficiencies and overheads.

    \b
    Example:
      dsdsim show hardware h200-sxm -f json
    """
    from dsdsim.export.render import kv_table
    from dsdsim.report import hardware_summary
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware(name)
    data = hardware_summary(hw)
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    show(kv_table(f"Hardware {hw.name}", data))
