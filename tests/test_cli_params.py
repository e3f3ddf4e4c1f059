"""Command parameters derived from option objects (dsdsim.cli.params): the fields become options with their
declarations and defaults, the command receives the built object, and a field without a declaration is refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

import pytest

from dsdsim.cli.command import App, Exit, Invocation, Option, UsageError
from dsdsim.cli.params import takes

Tp = Annotated[int, Option("--tp", help="tensor-parallel GPUs")]


@dataclass(frozen=True)
class _Parallel:
    tp: Tp = 1
    eager: Annotated[bool, Option("--eager")] = False


@dataclass(frozen=True)
class _Policy:            # an API object: plain types, declarations given by the CLI
    context: int = 8192
    max_k: Optional[int] = None


_DECLARED = {"context": Annotated[int, Option("--context", "-c")],
             "max_k": Annotated[Optional[int], Option("--max-k")]}


def _app(seen: list):
    app = App()

    @app.command()
    @takes(_DECLARED, parallel=_Parallel, policy=_Policy)
    def run(ctx: Invocation, name: str = Option("x", "--name"), parallel: _Parallel = None,
            policy: _Policy = None) -> None:
        seen.append((name, parallel, policy, ctx.given("context")))

    @app.command()
    def other() -> None:
        pass

    return app


def _help(app: App, argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(Exit):
        app.run(argv, prog_name="t")
    return capsys.readouterr().out


def test_fields_become_options_and_the_command_gets_the_objects():
    seen: list = []
    _app(seen).run(["run", "--tp", "4", "-c", "100", "--eager", "--name", "y"], prog_name="t")
    assert seen == [("y", _Parallel(tp=4, eager=True), _Policy(context=100, max_k=None), True)]


def test_defaults_come_from_the_option_objects():
    seen: list = []
    _app(seen).run(["run"], prog_name="t")
    assert seen == [("x", _Parallel(), _Policy(), False)]


def test_help_lists_each_field_once_in_the_parameter_place(capsys):
    out = _help(_app([]), ["run", "--help"], capsys)
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


def test_fields_left_out_take_their_defaults():
    from dsdsim.cli.params import without

    seen: list = []
    app = App()

    @app.command()
    @takes(parallel=without(_Parallel, "eager"))
    def run(parallel: _Parallel = None) -> None:
        seen.append(parallel)

    app.run(["run", "--tp", "2"], prog_name="t")
    assert seen == [_Parallel(tp=2, eager=False)]
    with pytest.raises(UsageError, match="No such option: --eager"):
        app.run(["run", "--eager"], prog_name="t")
    with pytest.raises(TypeError, match="no field"):
        without(_Parallel, "pp")


# --- the real commands ------------------------------------------------------------------------------------

_DEPLOYMENT_FLAGS = ("--tp", "--ep", "--dtype", "--kv-dtype", "--expert-overlap", "--eager", "--memory-utilization",
                     "--dp-attention")


@pytest.mark.parametrize("command", [["explain"], ["predict"], ["plot", "roofline"], ["plot", "sensitivity"]])
def test_every_simulating_command_takes_the_same_deployment_options(cli, command):
    code, out, err = cli(*command, "--help")
    assert code == 0, err
    for flag in _DEPLOYMENT_FLAGS + ("--model", "--hardware", "--drafter", "--engine"):
        assert flag in out, (command, flag)


def test_plan_takes_the_deployment_options_but_not_parallelism_from_them(cli):
    code, out, err = cli("plan", "--help")
    assert code == 0, err
    for flag in ("--dtype", "--kv-dtype", "--memory-utilization", "--dp-attention", "--acceptance", "--max-k"):
        assert flag in out, flag
    for flag in ("--tp ", "--ep ", "--hardware", "--tolerance", "--fixed-k"):   # candidates carry tp, ep, hardware
        assert flag not in out, flag


def test_plan_runs_every_candidate_in_the_weight_format_asked_for(cli):
    import json

    from dsdsim.plan import plan_rows
    from dsdsim.specs.deployment import Deployment
    from dsdsim.units import DType

    args = ("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--itl-slo-ms", "20", "-b", "1,8,64", "-f", "json")
    rows = {}
    for dtype in ("bf16", "fp8"):
        code, out, err = cli(*args, "--dtype", dtype)
        assert code == 0, err
        rows[dtype] = json.loads(out)["candidates"][0]
    (fp8,) = plan_rows("llama-3.1-8b", ["h100-sxm"], 20, batch_sizes="1,8,64", deployment=Deployment(dtype=DType.fp8))
    assert rows["fp8"]["tokens_per_s_dsd"] == pytest.approx(fp8.tokens_per_s_dsd, rel=1e-12)
    assert rows["fp8"]["tokens_per_s_dsd"] != pytest.approx(rows["bf16"]["tokens_per_s_dsd"], rel=1e-3)


def test_explain_reads_the_memory_utilization_it_now_takes(cli):
    import json

    got = {}
    for share in ("0.9", "0.5"):
        code, out, err = cli("explain", "-b", "8", "--memory-utilization", share, "-f", "json")
        assert code == 0, err
        got[share] = json.dumps(json.loads(out)["memory"], sort_keys=True)
    assert got["0.9"] != got["0.5"]


def test_the_drafter_help_lists_every_registered_kind():
    from dsdsim.cli.options import DRAFTER_HELP
    from dsdsim.specs.drafters import forms

    assert DRAFTER_HELP == forms() + " (or none)"


def test_the_command_line_options_load_no_spec_models():
    import subprocess
    import sys

    code = "import sys, dsdsim.cli.options; print(sorted(m for m in sys.modules if m.startswith('dsdsim.specs')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
