"""The command line as a whole: --version, one example in every command's help, help that renders as written."""
from __future__ import annotations

import pytest

import dsdsim

COMMANDS = [["explain"], ["predict"], ["plan"], ["accuracy"], ["probe"], ["validate"], ["loop"], ["comm-check"],
            ["calibrate"], ["list", "models"], ["list", "hardware"], ["show", "model"], ["show", "hardware"],
            ["plot", "roofline"], ["plot", "sensitivity"]]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(cli, flag):
    code, out, _ = cli(flag)
    assert code == 0 and out.strip() == f"dsdsim {dsdsim.__version__}"


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_every_command_has_an_example_that_names_itself(cli, argv):
    code, out, _ = cli(*argv, "--help")
    assert code == 0
    assert "Example" in out, out
    tail = out.split("Example", 1)[1]
    assert "dsdsim " + " ".join(argv) in " ".join(tail.split()), tail


def test_plan_help_keeps_its_line_continuation(cli):
    _, out, _ = cli("plan", "--help")
    lines = out.splitlines()
    i = next(j for j, line in enumerate(lines) if line.strip().startswith("dsdsim plan"))
    assert lines[i].rstrip().endswith("\\"), lines[i]
    assert lines[i + 1].strip().startswith("--target-tokens-per-s")


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_shared_options_have_the_same_flags_everywhere(argv):
    """An option named in several commands has one set of flags (e.g. -b is --batch-sizes or --batch-size)."""
    from dsdsim.cli import app, load_commands

    load_commands()                     # every group (a run registers only the one it names)
    cmd = app
    for word in argv:
        cmd = cmd.commands[word]
    canonical = {"--model": "-m", "--hardware": "-g", "--drafter": "-d", "--acceptance": "-a", "--context": "-c",
                 "--batch-sizes": "-b", "--batch-size": "-b", "--format": "-f", "--output": "-o"}
    for p in cmd.params():
        longs = [o for o in p.opts if o.startswith("--")]
        shorts = [o for o in p.opts if not o.startswith("--")]
        for long in longs:
            if long in canonical:
                assert canonical[long] in shorts, (argv, p.opts)
