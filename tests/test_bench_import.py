"""torch is imported only inside dsdsim.bench: `import dsdsim` and the core never load it."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _loaded(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(sorted(m for m in ('torch', 'matplotlib')"
                          " if m in sys.modules))"], capture_output=True, text=True, cwd=ROOT, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_import_dsdsim_does_not_load_torch():
    assert _loaded("import dsdsim") == "[]"


def test_core_modules_do_not_load_torch():
    code = ("import dsdsim.cost.step, dsdsim.cost.layers, dsdsim.cost.drafts, dsdsim.specs.catalog, "
            "dsdsim.policy.acceptance, dsdsim.bench")
    assert _loaded(code) == "[]"


def test_bench_calibrate_needs_no_torch():
    """Calibrating from a report or a batch_stats file is pure numpy/scipy: usable without torch."""
    assert "torch" not in _loaded("import dsdsim.fit.calibrate")
