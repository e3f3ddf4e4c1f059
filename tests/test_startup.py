"""What a run loads: `dsdsim predict` only the simulator, the policy and its own command group (never torch, the
plots, the measurement corpus, the bench commands or a rendering library: dsdsim draws its own tables);
`dsdsim --help` not even numpy. Checked on sys.modules in a
fresh interpreter, never by timing."""
from __future__ import annotations

import pytest

from conftest import run_subprocess

LOADED_AFTER = """
import sys
sys.argv = ["dsdsim", *{argv!r}]
from dsdsim.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
watch = {watch!r}
print("LOADED", ",".join(sorted(m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in watch))))
"""

HEAVY = ["torch", "matplotlib", "pandas", "dsdsim.corpus", "dsdsim.bench", "dsdsim.export.plots", "dsdsim.plan"]
OTHER_GROUPS = ["dsdsim.cli.bench", "dsdsim.cli.catalog", "dsdsim.cli.engine", "dsdsim.cli.plots"]


def _loaded(argv: list[str], watch: list[str]) -> list[str]:
    r = run_subprocess("-c", LOADED_AFTER.format(argv=argv, watch=watch))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("LOADED"))
    return [m for m in line.split(" ", 1)[1].split(",") if m]


def test_predict_loads_neither_torch_nor_plots_nor_the_other_command_groups():
    assert _loaded(["predict"], HEAVY + OTHER_GROUPS) == []


@pytest.mark.parametrize("argv", [["predict"], ["explain"], ["list", "engines"], ["show", "hardware", "h100-sxm"]],
                         ids=" ".join)
def test_tables_print_without_rich(argv):
    """rich is for progress bars on a terminal only: the tables are drawn by dsdsim.export.text."""
    assert _loaded(argv, ["rich"]) == []


@pytest.mark.parametrize("argv", [["--help"], ["predict", "--help"]], ids=" ".join)
def test_help_loads_no_numpy(argv):
    assert _loaded(argv, HEAVY + ["numpy"]) == []


def test_load_commands_knows_the_module_of_every_command():
    """The table that lets a run import one command group names, for each command, the module registering it."""
    from dsdsim.cli import app, load_commands
    from dsdsim.cli.app import COMMAND_MODULES, _MODULES_OF

    load_commands()
    assert set(app.commands) == set(_MODULES_OF)

    def module(callback) -> str:
        return callback.__module__.rsplit(".", 1)[-1]

    for command in app.registered_commands:
        assert module(command.callback) in _MODULES_OF[command.name]
    for name, group in app.groups.items():
        registering = {module(c.callback) for c in group.registered_commands}
        assert registering == set(_MODULES_OF[name])
    assert {m for ms in _MODULES_OF.values() for m in ms} == set(COMMAND_MODULES)


def test_in_process_runs_leave_the_garbage_collector_as_they_found_it(cli):
    import gc

    frozen, thresholds = gc.get_freeze_count(), gc.get_threshold()
    for argv in (["--version"], ["list", "engines"], ["predict", "-b", "1,2"]):
        assert cli(*argv)[0] == 0
        assert gc.isenabled() and gc.get_freeze_count() == frozen and gc.get_threshold() == thresholds


def test_predict_reads_the_shipped_specs_without_pyyaml():
    """The shipped YAML specs are read pre-parsed (dsdsim.specs.io.PARSED): even a first run imports no PyYAML."""
    first = run_subprocess("-c", LOADED_AFTER.format(argv=["predict"], watch=["yaml"]))
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "LOADED "
