"""The application, its command groups and the entry point that turns errors into one line.

A run registers only the command group it names (``dsdsim predict`` imports model.py, not the bench, catalog or
plot commands); help, --version and names that are not commands load every group.
"""
from __future__ import annotations

import gc
import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional

from dsdsim.cli.command import App, Exit, Option, UsageError, echo
from dsdsim.cli.options import SPECS_DIR_HELP
from dsdsim.errors import DsdsimError

app = App(
    name="dsdsim", no_args_is_help=True,
    help="How many draft tokens to speculate at each batch size: an analytical roofline simulator and K-policy "
         "designer for speculative decoding. Start with `dsdsim predict`.",
)
list_app = App(help="List the shipped (and your own) hardware and model specs.", no_args_is_help=True)
show_app = App(help="Show one spec in detail (table, or --format json).", no_args_is_help=True)
plot_app = App(help="Draw pictures (needs matplotlib: pip install 'dsdsim[plot]').", no_args_is_help=True)
app.add_group(list_app, name="list")
app.add_group(show_app, name="show")
app.add_group(plot_app, name="plot")


def _version(value: bool) -> None:
    if value:
        from dsdsim import __version__

        echo(f"dsdsim {__version__}")
        raise Exit()


@app.callback()
def _root(specs_dir: Optional[List[Path]] = Option(None, "--specs-dir", metavar="DIR", help=SPECS_DIR_HELP),
          version: bool = Option(False, "--version", "-V", callback=_version, is_eager=True,
                                 help="Print the version and exit")) -> None:
    if specs_dir:
        from dsdsim.specs.catalog import add_specs_dir

        for d in specs_dir:
            add_specs_dir(d)


# The modules that register each command, in the order of `dsdsim --help`.
COMMAND_MODULES = ("model", "simulate", "bench", "catalog", "engine", "plots")
_MODULES_OF = {
    **dict.fromkeys(("explain", "predict", "accuracy"), ("model",)),
    "plan": ("model", "simulate"),          # simulate.py gives plan its --simulate options
    "simulate": ("simulate",),
    **dict.fromkeys(("probe", "validate", "loop", "comm-check", "calibrate"), ("bench",)),
    "list": ("catalog", "engine"),
    "show": ("catalog", "engine"),
    "plot": ("plots",),
}


def load_commands(argv: Optional[list[str]] = None) -> None:
    """Register on `app` the command group that ``argv`` runs; every group when it names none (help, --version)
    or a name that is not a command (so the error can suggest one)."""
    for name in _MODULES_OF.get(_command_name(argv or []), COMMAND_MODULES):
        importlib.import_module(f"dsdsim.cli.{name}")
    for group in (app, list_app, show_app, plot_app):    # in help order, whichever group this process loaded first
        group.registered_commands.sort(key=_help_position)


def _help_position(command) -> int:
    return COMMAND_MODULES.index(command.callback.__module__.rsplit(".", 1)[-1])


_COMPUTE_GC_THRESHOLD = 100_000    # allocations between young collections (Python's default: 700)
_BLAS_THREADS = "OPENBLAS_NUM_THREADS"     # read by the OpenBLAS that numpy wheels ship, when numpy loads
_PYDANTIC_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"   # read by pydantic when it builds its first validator


def _measures(argv: list[str]) -> bool:
    """Whether ``argv`` runs a command that measures with torch (the bench group)."""
    return "bench" in _MODULES_OF.get(_command_name(argv), ())


def _command_name(argv: list[str]) -> Optional[str]:
    """The first argument that is not a root option (nor the value of --specs-dir)."""
    args = iter(argv)
    for a in args:
        if a == "--specs-dir":
            next(args, None)
        elif a == "--":
            return next(args, None)
        elif not a.startswith("-"):
            return a
    return None


def main(argv: Optional[list[str]] = None) -> None:
    """Run the CLI; user errors become one line on stderr and exit code 2.

    Without ``argv`` this runs the process's own command line, and the interpreter exits next. Start-up creates
    some 50,000 long-lived objects (modules, classes, schemas) that the cyclic collector would walk again and
    again, and once more at exit: a command that only computes runs with young collections every 100,000
    allocations instead of 700 (still collecting on a long sweep), and what is alive at the end is frozen
    (gc.freeze) so that the passes at exit skip it. Such a command also asks numpy's OpenBLAS for one thread
    (unless OPENBLAS_NUM_THREADS is set): the arrays here are small (the cost model calls no BLAS routine, a fit
    solves for a few parameters), while each idle OpenBLAS worker spins on a core for some 0.1 s after numpy
    loads, time that a 2-core machine takes from the run. Such a command loads no pydantic plugins either (unless
    PYDANTIC_DISABLE_PLUGINS is set): looking for them walks the entry points of every installed distribution,
    some 9 ms in a venv of 80 packages and more in a larger one, and dsdsim's specs want none. The commands that
    measure with torch keep the usual collector, threads and plugins, since their loops may leave tensors in
    cycles. In-process callers (``argv`` given, tests) find the collector and the environment as they left them.
    """
    own = argv is None
    thresholds = gc.get_threshold()
    if own and not _measures(sys.argv[1:]):
        gc.set_threshold(_COMPUTE_GC_THRESHOLD, *thresholds[1:])
        os.environ.setdefault(_BLAS_THREADS, "1")      # before numpy loads (commands import it lazily)
        os.environ.setdefault(_PYDANTIC_PLUGINS, "__all__")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("always", module=r"dsdsim\.")    # each one said, once per occurrence
            warnings.showwarning = _show_warning
            _run(argv)
    finally:
        if own:
            gc.freeze()
            gc.set_threshold(*thresholds)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """dsdsim's own warnings (a user spec shadowing a shipped one, an unreadable file skipped) as one line on
    stderr; other libraries' as Python shows them."""
    if category.__module__.startswith("dsdsim."):
        echo(f"dsdsim: warning: {message}", err=True)
    else:
        warnings._showwarning_orig(message, category, filename, lineno, file, line)


def _run(argv: Optional[list[str]]) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    load_commands(argv)
    try:
        rv = app.run(argv, prog_name="dsdsim")
    except Exit as exc:
        rv = exc.code
    except DsdsimError as exc:
        echo(f"dsdsim: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", err=True)
        sys.exit(2)
    except UsageError as exc:
        hint = f" (see `{exc.invocation.command_path} --help`)" if exc.invocation is not None else ""
        echo(f"dsdsim: error: {' '.join(exc.message.split())}{hint}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    if isinstance(rv, int) and rv:
        sys.exit(rv)
