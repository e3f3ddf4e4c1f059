"""The typer application, its command groups and the entry point that turns errors into one line."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from dsdsim.cli.options import SPECS_DIR_HELP
from dsdsim.errors import DsdsimError

app = typer.Typer(
    name="dsdsim", no_args_is_help=True, add_completion=False, rich_markup_mode=None,
    help="How many draft tokens to speculate at each batch size: an analytical roofline simulator and K-policy "
         "designer for speculative decoding. Start with `dsdsim predict`.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
list_app = typer.Typer(help="List the shipped (and your own) hardware and model specs.", no_args_is_help=True)
show_app = typer.Typer(help="Show one spec in detail (table, or --format json).", no_args_is_help=True)
plot_app = typer.Typer(help="Draw pictures (needs matplotlib: pip install 'dsdsim[plot]').", no_args_is_help=True)
app.add_typer(list_app, name="list")
app.add_typer(show_app, name="show")
app.add_typer(plot_app, name="plot")


def _version(value: bool) -> None:
    if value:
        from dsdsim import __version__

        typer.echo(f"dsdsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(specs_dir: Optional[List[Path]] = typer.Option(None, "--specs-dir", metavar="DIR", help=SPECS_DIR_HELP),
          version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="Print the version and exit")) -> None:
    from dsdsim.specs.catalog import add_specs_dir

    for d in specs_dir or []:
        add_specs_dir(d)


def _click_exceptions():
    """(ClickException, NoArgsIsHelpError, Abort) classes: typer >= 0.2x bundles its own click, older uses click."""
    try:
        from typer._click import exceptions as exc_mod
    except ImportError:  # typer that depends on the click package
        import click.exceptions as exc_mod
    no_args = getattr(exc_mod, "NoArgsIsHelpError", None)
    abort = getattr(exc_mod, "Abort", None)
    classes = (exc_mod.ClickException,)
    try:
        import click.exceptions as click_exc  # both may be present; errors may come from either

        classes = classes + (click_exc.ClickException,)
        no_args = no_args or getattr(click_exc, "NoArgsIsHelpError", None)
        abort = abort or click_exc.Abort
    except ImportError:
        pass
    return classes, no_args, abort


def main(argv: Optional[list[str]] = None) -> None:
    """Run the CLI; user errors become one line on stderr and exit code 2."""
    import dsdsim.cli  # noqa: F401  (registers every command on `app`)

    click_errors, no_args_error, abort_error = _click_exceptions()
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="dsdsim", standalone_mode=False)
    except DsdsimError as exc:
        typer.echo(f"dsdsim: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click/typer usage errors, from whichever click is in use
        if no_args_error is not None and isinstance(exc, no_args_error):
            ctx = getattr(exc, "ctx", None)
            typer.echo(ctx.get_help() if ctx is not None else "dsdsim --help")
            sys.exit(0)
        if abort_error is not None and isinstance(exc, abort_error):
            typer.echo("dsdsim: aborted", err=True)
            sys.exit(130)
        if not isinstance(exc, click_errors):
            raise
        msg = " ".join(exc.format_message().split())
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        typer.echo(f"dsdsim: error: {msg}{hint}", err=True)
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    if isinstance(rv, int) and rv:
        sys.exit(rv)
