"""Every `dsdsim ...` command in the README's bash blocks runs as written (in a scratch folder holding the few
files the commands name). Commands that need a GPU, an install, or a placeholder (`...`) are skipped with
their reason; the probe -> validate -> calibrate chain on a CPU runs as a slow test."""
from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
MEASURING = ("dsdsim probe", "dsdsim validate", "dsdsim calibrate --report out/")


def readme_commands() -> list[str]:
    """The dsdsim command lines of the README's ```bash blocks: continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            for part in line.split(" #")[0].split("&&"):          # `pip install . && dsdsim predict`
                part = part.strip()
                if part == "dsdsim" or part.startswith("dsdsim "):
                    commands.append(part)
    return commands


def skip_reason(command: str) -> str | None:
    if "--device cuda" in command:
        return "needs a CUDA device"
    if "..." in command:
        return "a placeholder for the user's own options"
    if "val/" in command or "h100-calibrated.yaml" in command:
        return "follows a GPU validation"
    return None


@pytest.fixture
def scratch(tmp_path, monkeypatch, clean_catalog):
    """A working folder with the files README commands name: a model config folder, vLLM /metrics text and a
    simulate result."""
    from test_acceptance import PROMETHEUS_SAMPLE

    (tmp_path / "my-model").mkdir()
    shutil.copy(REPO_ROOT / "model_specs" / "llama-3.2-1b.json", tmp_path / "my-model" / "config.json")
    (tmp_path / "vllm_metrics.txt").write_text(PROMETHEUS_SAMPLE)
    # what `dsdsim simulate --format json -o sim.json` writes, as far as `predict --batch-weights` reads it
    (tmp_path / "sim.json").write_text('{"policies": [{"name": "dsd", "batch_seconds": {"1": 0.5, "32": 2.0, '
                                       '"64": 6.0}}]}')
    # what `vllm bench serve --save-result --save-detailed` writes, as far as a trace replay reads it
    (tmp_path / "run.json").write_text('{"request_rate": 4.0, "burstiness": 1.0, "max_concurrency": null, '
                                       '"input_lens": [128, 256, 64], "output_lens": [32, 16, 48], '
                                       '"ttfts": [0.02, 0.03, 0.02], "itls": [[0.01], [0.01, 0.01], []], '
                                       '"errors": ["", "", ""]}')
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_has_commands():
    cmds = readme_commands()
    assert len(cmds) >= 20 and cmds[0] == "dsdsim predict"


QUICK = [c for c in readme_commands() if skip_reason(c) is None and not c.startswith(MEASURING)]


@pytest.mark.parametrize("command", QUICK)
def test_readme_command_runs(command, scratch, cli):
    code, out, err = cli(*shlex.split(command)[1:])
    assert code == 0, f"{command}\n{err[-2000:]}"
    assert out.strip() or err.strip()
    for target in re.findall(r"(?:-o|--plot) (\S+)", command):
        assert (scratch / target).exists(), f"{command} did not write {target}"


@pytest.mark.slow
def test_readme_cpu_measuring_chain_runs(cpu_measuring_chain):
    folder, ran = cpu_measuring_chain
    assert [command for command, _, _ in ran] == [c for c in readme_commands()
                                                   if skip_reason(c) is None and c.startswith(MEASURING)]
    assert len(ran) == 3
    for command, code, err in ran:
        assert code == 0, f"{command}\n{err[-2000:]}"
    assert (folder / "my-cpu-calibrated.yaml").exists()


def test_skipped_commands_are_only_the_gpu_block():
    skipped = [c for c in readme_commands() if skip_reason(c)]
    assert skipped and all(("cuda" in c) or ("val/" in c) or ("..." in c) or ("h100-calibrated" in c) for c in skipped)
    assert len(skipped) <= 5
