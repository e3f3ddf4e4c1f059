"""Command parameters derived from option objects (dsdsim.cli.params): the fields become options with their
declarations and defaults, the command receives the built object, and a field without a declaration is refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

import pytest
import typer
from typer.testing import CliRunner

from dsdsim.cli.params import takes

Tp = Annotated[int, typer.Option("--tp", help="tensor-parallel GPUs")]


@dataclass(frozen=True)
class _Parallel:
    tp: Tp = 1
    eager: Annotated[bool, typer.Option("--eager")] = False


@dataclass(frozen=True)
class _Policy:            # an API object: plain types, declarations given by the CLI
    context: int = 8192
    max_k: Optional[int] = None


_DECLARED = {"context": Annotated[int, typer.Option("--context", "-c")],
             "max_k": Annotated[Optional[int], typer.Option("--max-k")]}


def _app(seen: list):
    app = typer.Typer()

    @app.command()
    @takes(_DECLARED, parallel=_Parallel, policy=_Policy)
    def run(ctx: typer.Context, name: str = typer.Option("x", "--name"), parallel: _Parallel = None,
            policy: _Policy = None) -> None:
        seen.append((name, parallel, policy, ctx.get_parameter_source("context").name))

    @app.command()
    def other() -> None:
        pass

    return app


def test_fields_become_options_and_the_command_gets_the_objects():
    seen: list = []
    result = CliRunner().invoke(_app(seen), ["run", "--tp", "4", "-c", "100", "--eager", "--name", "y"])
    assert result.exit_code == 0, result.output
    assert seen == [("y", _Parallel(tp=4, eager=True), _Policy(context=100, max_k=None), "COMMANDLINE")]


def test_defaults_come_from_the_option_objects():
    seen: list = []
    assert CliRunner().invoke(_app(seen), ["run"]).exit_code == 0
    assert seen == [("x", _Parallel(), _Policy(), "DEFAULT")]


def test_help_lists_each_field_once_in_the_parameter_place():
    out = CliRunner().invoke(_app([]), ["run", "--help"]).output
    for flag in ("--name", "--tp", "--eager", "--context", "--max-k"):
        assert out.count(flag) == 1, flag
    assert out.index("--name") < out.index("--tp") < out.index("--context")


def test_a_field_without_a_declaration_is_refused_at_import():
    with pytest.raises(TypeError, match="max_k has no command-line declaration"):
        @takes({"context": _DECLARED["context"]}, policy=_Policy)
        def run(policy: _Policy = None) -> None:
            pass


def test_an_option_declared_twice_is_refused():
    with pytest.raises(TypeError, match="declared twice"):
        @takes(parallel=_Parallel)
        def run(tp: int = 1, parallel: _Parallel = None) -> None:
            pass
