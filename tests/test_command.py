"""The command-line framework (dsdsim.cli.command): how a command line is split into options and arguments, the
values each type takes, the wording of usage errors (click's, which dsdsim's users and tests knew), and help."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, List, Optional

import pytest

from dsdsim.cli.command import App, Argument, Exit, Invocation, Option, UsageError


class Fmt(str, Enum):
    table = "table"
    json = "json"


Size = Annotated[int, Option("--size", "-s", help="How many")]


def _app(seen: dict) -> App:
    app = App(name="t", help="A test tool.\n\nIts second paragraph.", no_args_is_help=True)
    sub = App(help="Things to list.", no_args_is_help=True)
    app.add_group(sub, "list")

    @app.command()
    def run(ctx: Invocation,
            size: Size = 1,
            rate: float = Option(0.5, "--rate", "-r", help="A share"),
            fmt: Fmt = Option(Fmt.table, "--format", "-f", help="table | json"),
            eager: bool = Option(False, "--eager", "-e", help="No graphs"),
            sweeps: bool = Option(True, "--sweeps/--no-sweeps", help="Also sweep"),
            out: Optional[Path] = Option(None, "--output", "-o", help="Where"),
            extra: Optional[List[Path]] = Option(None, "--extra", help="Repeatable"),
            rounds: Optional[int] = Option(None, "--rounds", min=1, help="At least one")) -> None:
        """Run it once.

        \b
        Example:
          t run -s 4
        """
        seen.update(size=size, rate=rate, fmt=fmt, eager=eager, sweeps=sweeps, out=out, extra=extra, rounds=rounds,
                    typed=sorted(n for n in ("size", "rate", "eager", "sweeps") if ctx.given(n)))

    @app.command("show-one")
    def show_one(name: str = Argument(..., help="A name"), output: Path = Option(..., "--output", "-o")) -> None:
        """Show one thing in detail, a first sentence longer than the column of the command list."""
        seen.update(name=name, output=output)

    @sub.command("models")
    def models() -> None:
        """Every model."""
        seen["models"] = True

    return app


def _run(*argv: str) -> dict:
    seen: dict = {}
    _app(seen).run(list(argv), prog_name="t")
    return seen


def _error(*argv: str) -> str:
    with pytest.raises(UsageError) as info:
        _app({}).run(list(argv), prog_name="t")
    return info.value.message


def _help(capsys, *argv: str) -> str:
    capsys.readouterr()
    try:
        _app({}).run(list(argv), prog_name="t")
    except Exit as exc:
        assert exc.code == 0
    return capsys.readouterr().out


# --- splitting the command line ---------------------------------------------------------------------------


def test_defaults_when_nothing_is_typed():
    seen = _run("run")
    assert (seen["size"], seen["rate"], seen["fmt"], seen["eager"], seen["sweeps"], seen["out"], seen["extra"],
            seen["rounds"]) == (1, 0.5, Fmt.table, False, True, None, None, None)
    assert seen["typed"] == []


@pytest.mark.parametrize("argv", [["--size", "4"], ["--size=4"], ["-s", "4"], ["-s4"]])
def test_every_spelling_of_an_option_value(argv):
    assert _run("run", *argv)["size"] == 4


def test_short_flags_cluster_and_the_last_may_take_the_rest_as_its_value():
    seen = _run("run", "-es8")
    assert seen["eager"] is True and seen["size"] == 8


def test_values_that_look_like_options_are_taken_by_the_option_before_them():
    assert _run("run", "--rate", "-1")["rate"] == -1.0
    assert _run("run", "-o", "-")["out"] == Path("-")
    assert _run("run", "--output", "-1%")["out"] == Path("-1%")
    assert _run("run", "-o", "-x")["out"] == Path("-x")
    seen = _run("run", "-eo", "--sweeps")
    assert seen["eager"] is True and seen["out"] == Path("--sweeps") and seen["sweeps"] is True


def test_the_last_value_wins_and_a_repeatable_option_keeps_them_all():
    seen = _run("run", "-s", "2", "-s", "3", "--extra", "a", "--extra", "b")
    assert seen["size"] == 3 and seen["extra"] == [Path("a"), Path("b")]


def test_a_repeatable_option_takes_every_word_up_to_the_next_option():
    """``--measurements run-*.json``: the shell gives the files as words after one option."""
    seen = _run("run", "--extra", "a", "b", "c", "-s", "4", "--extra", "d", "--eager")
    assert seen["extra"] == [Path("a"), Path("b"), Path("c"), Path("d")] and seen["size"] == 4 and seen["eager"]
    assert _error("run", "--extra") == "Option '--extra' requires an argument."


def test_a_flag_and_its_off_switch():
    assert _run("run", "--no-sweeps")["sweeps"] is False
    assert _run("run", "--no-sweeps", "--sweeps")["sweeps"] is True


def test_typed_options_are_told_from_defaults():
    assert _run("run", "-s", "1", "--eager")["typed"] == ["eager", "size"]      # -s 1 is typed, though the default
    assert _run("run", "--no-sweeps")["typed"] == ["sweeps"]


def test_an_argument_and_the_double_dash():
    seen = _run("show-one", "-o", "x.txt", "--", "-odd-name")
    assert seen == {"name": "-odd-name", "output": Path("x.txt")}


def test_a_group_in_a_group():
    assert _run("list", "models") == {"models": True}


# --- usage errors, in click's words -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["run", "--size", "four"], "Invalid value for '--size' / '-s': must be a whole number, got 'four'"),
    (["run", "--size", "1.5"], "Invalid value for '--size' / '-s': must be a whole number, got '1.5'"),
    (["run", "--rate", "half"], "Invalid value for '--rate' / '-r': must be a number, got 'half'"),
    (["run", "-f", "csv"], "Invalid value for '--format' / '-f': 'csv' is not one of 'table', 'json'."),
    (["run", "--rounds", "0"], "Invalid value for '--rounds': must be >= 1, got '0'"),
    (["run", "--size"], "Option '--size' requires an argument."),
    (["run", "--eager=yes"], "Option '--eager' does not take a value."),
    (["run", "-ez"], "No such option: -z"),
    (["run", "-es"], "Option '-s' requires an argument."),
    (["run", "--sizes", "2"], "No such option: --sizes (did you mean --size?)"),
    (["run", "--no-eager"], "No such option: --no-eager (did you mean --eager?)"),
    (["run", "surplus", "more"], "Got unexpected extra arguments (surplus more)"),
    (["show-one", "-o", "x"], "Missing argument 'NAME'."),
    (["show-one", "n"], "Missing option '--output' / '-o'."),
    (["rnu"], "No such command 'rnu'. (did you mean 'run'?)"),
    (["list", "hardware"], "No such command 'hardware'."),
])
def test_usage_errors(argv, message):
    assert _error(*argv) == message


def test_a_value_typed_is_checked_before_a_missing_option_is_reported():
    assert _error("show-one", "n", "-o") == "Option '-o' requires an argument."


def test_the_error_knows_its_command_path():
    with pytest.raises(UsageError) as info:
        _app({}).run(["list", "models", "--x"], prog_name="t")
    assert info.value.invocation.command_path == "t list models"


def test_an_eager_option_runs_before_other_values_are_checked(capsys):
    app = App(name="t")
    said = []

    def version(value: bool) -> None:
        if value:
            said.append("v1")
            raise Exit()

    @app.callback()
    def root(version: bool = Option(False, "--version", callback=version, is_eager=True)) -> None:
        pass

    @app.command()
    def run(size: Size = 1) -> None:
        pass

    with pytest.raises(Exit):
        app.run(["--version", "run", "--size", "x"], prog_name="t")
    assert said == ["v1"]


# --- help -------------------------------------------------------------------------------------------------


def test_no_arguments_print_the_group_help(capsys):
    out = _help(capsys)
    assert out.startswith("Usage: t [OPTIONS] COMMAND [ARGS]...\n\n  A test tool.\n\n  Its second paragraph.\n")
    commands = out.split("Commands:\n", 1)[1].splitlines()
    assert commands[0].split() == ["run", "Run", "it", "once."]
    assert commands[1].startswith("  show-one") and commands[1].endswith("...") and len(commands[1]) <= 78
    assert commands[2].split() == ["list", "Things", "to", "list."]


def test_command_help_lays_out_options_with_their_defaults(capsys):
    out = _help(capsys, "run", "--help")
    assert out.startswith("Usage: t run [OPTIONS]\n\n  Run it once.\n\n  Example:\n    t run -s 4\n\nOptions:\n")
    rows = {line.split()[0].rstrip(","): line for line in out.split("Options:\n", 1)[1].splitlines()}
    assert rows["-s"].split() == ["-s,", "--size", "INTEGER", "How", "many", "[default:", "1]"]
    assert rows["-f"].split()[2] == "[table|json]" and "[default: table]" in rows["-f"]
    assert "[default" not in rows["-e"] and rows["-e"].split()[:3] == ["-e,", "--eager", "No"]
    assert "--sweeps / --no-sweeps" in rows["--sweeps"] and "[default: sweeps]" in rows["--sweeps"]
    assert "INTEGER RANGE" in rows["--rounds"] and "[x>=1]" in rows["--rounds"]
    assert rows["-h"].split() == ["-h,", "--help", "Show", "this", "message", "and", "exit."]
    starts = {row.index(text) for row, text in ((rows["-s"], "How"), (rows["-e"], "No"), (rows["-h"], "Show"))}
    assert len(starts) == 1                    # the help texts start in one column
    assert max(len(line) for line in out.splitlines()) <= 78


def test_an_argument_is_listed_and_required(capsys):
    out = _help(capsys, "show-one", "-h")
    assert out.startswith("Usage: t show-one [OPTIONS] NAME\n")
    assert "Arguments:\n  NAME  A name  [required]\n" in out
    assert "-o, --output PATH  [required]" in out


def test_help_is_shown_even_when_other_values_are_wrong(capsys):
    assert _help(capsys, "run", "--size", "x", "--help").startswith("Usage: t run")


def test_help_wraps_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    out = _help(capsys, "run", "--help")
    assert max(len(line) for line in out.splitlines()) <= 58


def test_a_type_the_command_line_cannot_read_is_refused_when_the_command_is_read():
    app = App(name="t")

    @app.command()
    def run(size: complex = Option(1j, "--size")) -> None:
        pass

    with pytest.raises(TypeError, match="option 'size': the command line reads"):
        app.run(["run"], prog_name="t")
