"""dsdsim list models|hardware and dsdsim show model|hardware: what the catalog knows."""
from __future__ import annotations

from dsdsim.cli.app import list_app, show_app
from dsdsim.cli.command import Argument
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
    from dsdsim.export.views import model_summary
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
    from dsdsim.export.views import hardware_summary
    from dsdsim.specs.catalog import iter_hardware

    rows = [{**hardware_summary(h), "generation": h.generation_name} for h in iter_hardware()]
    _render_rows(rows, fmt, hardware_table)


def _render_rows(rows: list, fmt: ShowFormat, table) -> None:
    """A catalog listing as JSON, or as the ``table`` of its rows."""
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    show(table(rows))


@show_app.command("model")
def show_model(name: str = Argument(..., help="A model name (dsdsim list models) or a path to a config.json"),
               fmt: ShowFmt = ShowFormat.table) -> None:
    """One model: structure, parameter counts and KV-cache bytes per token, as dsdsim understood the config.

    \b
    Example:
      dsdsim show model ./Llama-3.1-8B/   (a folder holding config.json)
    """
    from dsdsim.export.render import kv_table
    from dsdsim.export.views import model_summary
    from dsdsim.specs.catalog import load_model

    m = load_model(name)
    data = model_summary(m)
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    show(kv_table(f"Model {m.name}", data))


@show_app.command("hardware")
def show_hardware(name: str = Argument(..., help="A hardware name (dsdsim list hardware) or a YAML/JSON path"),
                  fmt: ShowFmt = ShowFormat.table) -> None:
    """One accelerator: capacities, dense peaks per dtype, ridge points, efficiencies and overheads, and each kernel
    figure with where it was measured (this part, or assumed from another), the fused-MoE kernel families included.

    \b
    Example:
      dsdsim show hardware h200-sxm -f json
    """
    from dsdsim.export.render import kv_table
    from dsdsim.export.views import hardware_summary
    from dsdsim.specs.catalog import load_hardware
    from dsdsim.specs.hardware import kernel_figure_origins

    hw = load_hardware(name)
    origins = kernel_figure_origins(hw)
    data = {**hardware_summary(hw), "generation": hw.generation_name,
            "kernel_figures": [_origin_json(o) for o in origins],
            "moe_default_family": hw.kernels.moe_default_family if hw.kernels is not None else None}
    if fmt is ShowFormat.json:
        return emit(to_json(data), None)
    from dsdsim.export.text import Group

    plain = {k: v for k, v in data.items() if k not in ("kernels", "kernel_figures")}
    tables = [kv_table(f"Hardware {hw.name}", plain)]
    if origins:
        tables += [_figures_table(hw.name, [o for o in origins if not o.name.startswith("moe_families.")]),
                   _families_table(hw.name, [o for o in origins if o.name.startswith("moe_families.")],
                                   data["moe_default_family"])]
    show(Group(*tables))


def _origin(o) -> str:
    """'this part', 'assumed from b200', or 'not stated'."""
    if o.assumed is None:
        return "not stated"
    return "assumed from " + ", ".join(o.measured_on) if o.assumed else "measured on this part"


def _origin_json(o) -> dict:
    return {"name": o.name, "value": o.value, "measured_on": list(o.measured_on) if o.measured_on else None,
            "assumed": o.assumed, "origin": _origin(o), "verified": o.verified.value, "source": o.source}


def _figures_table(name: str, origins: list):
    from dsdsim.export.text import Table

    from dsdsim.export.render import format_field

    t = Table(title=f"Kernel figures of {name} (sources: --format json)")
    for col in ("figure", "value", "measured"):
        t.add_column(col)
    for o in origins:
        t.add_row(o.name, format_field(o.name.rsplit(".", 1)[-1], o.value), _origin(o))
    return t


def _families_table(name: str, origins: list, default):
    """One row per fused-MoE family: its figures, and where they were measured."""
    from dsdsim.export.text import Table

    from dsdsim.export.render import format_field

    t = Table(title=f"Fused-MoE kernel families of {name} (default: {default or 'none: single figures'})")
    for col in ("family", "figures", "measured"):
        t.add_column(col)
    by_family: dict[str, list] = {}
    for o in origins:
        by_family.setdefault(o.name.split(".")[1], []).append(o)
    for family, figs in by_family.items():
        labels = [o.name.split(".", 2)[2] for o in figs]      # moe_families.<family>.<figure>[.<weight format>]
        values = ", ".join(f"{label}={format_field(label.split('.')[0], o.value)}" for label, o in zip(labels, figs))
        fitted = {_origin(o) for o in figs if o.measured_on}
        t.add_row(family, values, "; ".join(sorted(fitted)) or "not stated")
    return t


# --- drafters --------------------------------------------------------------------------------------------------

_ENGINES = (("vllm", "vLLM"), ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM"))


def drafter_summary(info) -> dict:
    """What `list drafters` and `show drafter` print (and their JSON): the -d form, how it is costed, K's limit,
    the acceptance convention and how each engine runs it (its method there, or why it cannot)."""
    engines = {}
    for key, _ in _ENGINES:
        run = info.engines.get(key)
        engines[key] = ({"method": run.method, "refusal": run.refusal, "source": run.source or None}
                        if run is not None else {"method": None, "refusal": "dsdsim knows no method there",
                                                 "source": None})
    own = info.default_acceptance
    if own is not None:
        example = f"mean acceptance length {own[0]:g} at K={own[1]}: {own[2]}"
    else:
        from dsdsim.policy.acceptance import DEFAULT_ACCEPTANCE

        example = "none of its own: the generic example, " + DEFAULT_ACCEPTANCE.source.split(";")[0]
        example += "; a tree needs its measured length" if info.trees else ""
    return {"kind": info.name, "form": info.form, "aliases": list(info.aliases), "summary": info.summary,
            "draft_passes": info.passes.value, "max_k": info.max_k, "max_k_source": info.max_k_source,
            "trees": info.trees, "acceptance": info.acceptance, "example_acceptance": example, "engines": engines}


def _engine_cell(e: dict) -> str:
    if e["refusal"]:
        return "no"
    return e["method"] or "yes"


@list_app.command("drafters")
def list_drafters(fmt: ShowFmt = ShowFormat.table) -> None:
    """Every drafter kind `-d` takes: its form, how dsdsim costs it, its largest K, whether it drafts trees, and
    each engine's method for it (no: the engine cannot run its K table; `dsdsim show drafter KIND` says why).

    \b
    Example:
      dsdsim list drafters --format json
    """
    from dsdsim.export.text import Table
    from dsdsim.specs.drafters import REGISTRY

    rows = [drafter_summary(info) for info in REGISTRY.values()]
    if fmt is ShowFormat.json:
        return emit(to_json(rows), None)
    t = Table(title="Drafters: -d FORM (dsdsim show drafter KIND for sources and each engine's reason)")
    for col, kw in (("form", {"no_wrap": True}), ("what", {"max_width": 48}), ("passes", {}), ("max K", {"justify": "right"}),
                    ("trees", {}), *((label, {}) for _, label in _ENGINES)):
        t.add_column(col, **kw)
    for r in rows:
        t.add_row(r["form"], r["summary"], r["draft_passes"], str(r["max_k"]), "yes" if r["trees"] else "no",
                  *(_engine_cell(r["engines"][key]) for key, _ in _ENGINES))
    show(t)


@show_app.command("drafter")
def show_drafter(name: str = Argument(..., help="A drafter kind or -d form: eagle3, mtp, dflash, self-spec, ..."),
                 fmt: ShowFmt = ShowFormat.table) -> None:
    """One drafter kind: its -d form and aliases, how dsdsim costs it, K's limit and its source, what its acceptance
    figures mean, and how vLLM, SGLang and TensorRT-LLM run it (the method, or the engine's reason it cannot)."""
    from dsdsim.errors import DsdsimError
    from dsdsim.export.render import kv_table
    from dsdsim.specs.drafters import REGISTRY

    head = name.strip().lower().partition(":")[0]
    info = next((i for i in REGISTRY.values() if head == i.name or head in i.aliases), None)
    if info is None:
        raise DsdsimError(f"unknown drafter {name!r}; the kinds are {', '.join(i.name for i in REGISTRY.values())} "
                          "(dsdsim list drafters)")
    d = drafter_summary(info)
    if fmt is ShowFormat.json:
        return emit(to_json(d), None)
    rows = {k: v for k, v in d.items() if k not in ("engines", "aliases")}
    if d["aliases"]:
        rows["aliases"] = ", ".join(d["aliases"])
    for key, label in _ENGINES:
        e = d["engines"][key]
        text = f"cannot: {e['refusal']}" if e["refusal"] else (e["method"] or "runs it")
        rows[label] = text + (f" ({e['source']})" if e["source"] else "")
    show(kv_table(f"Drafter {info.name}", rows))
