"""Shared test helpers: the repository root, the CLI run in-process, a catalog reset between tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_HW = sorted(p.stem for p in (REPO_ROOT / "hw_specs").glob("*.yaml"))
SHIPPED_MODELS = sorted(p.stem for p in (REPO_ROOT / "model_specs").glob("*.json"))

@pytest.fixture
def cli(capsys):
    """Run `dsdsim ARGV` in-process; returns (exit_code, stdout, stderr)."""
    from dsdsim.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main([str(a) for a in argv])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_error(code: int, err: str, fragment: str) -> None:
    """A bad input's answer: exit 2 and one line, ``dsdsim: error: ...``, that names ``fragment``."""
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsdsim: error: "), err
    assert fragment.lower() in lines[0].lower(), (fragment, lines[0])


def run_subprocess(*args: str, env_extra: dict | None = None, cwd: Path | None = None,
                   timeout: float = 60) -> subprocess.CompletedProcess:
    """`python ARGS` in a fresh interpreter that imports dsdsim from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=str(cwd or REPO_ROOT), timeout=timeout)


@pytest.fixture
def clean_catalog(monkeypatch):
    """User spec folders added during a test (--specs-dir, DSDSIM_SPECS_DIRS) do not leak into other tests."""
    from dsdsim.specs import catalog

    monkeypatch.setattr(catalog, "_user_dirs", [])
    monkeypatch.delenv(catalog.ENV_SPECS_DIRS, raising=False)
    catalog._index.cache_clear()
    yield catalog
    catalog._index.cache_clear()


@pytest.fixture(scope="session")
def cpu_measuring_chain(tmp_path_factory):
    """The README's probe -> validate --quick -> calibrate chain on this CPU, run once per session in a folder of
    its own (a few minutes of torch timing on two cores): ``(folder, [(command, exit code, stderr), ...])``. The
    README test checks the exit codes; the validation tests read what the chain wrote."""
    import contextlib
    import io
    import shlex

    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from dsdsim.cli import main
    from dsdsim.specs import catalog
    from test_readme_commands import MEASURING, readme_commands, skip_reason

    folder = tmp_path_factory.mktemp("cpu-chain")
    chain = [c for c in readme_commands() if skip_reason(c) is None and c.startswith(MEASURING)]
    ran, here, user_dirs = [], Path.cwd(), list(catalog._user_dirs)
    os.chdir(folder)
    try:
        for command in chain:
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                try:
                    main(shlex.split(command)[1:])
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            ran.append((command, code, err.getvalue()))
            if code:
                break
    finally:
        os.chdir(here)
        catalog._user_dirs[:] = user_dirs
        catalog._index.cache_clear()
    return folder, ran
