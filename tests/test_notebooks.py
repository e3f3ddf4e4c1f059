"""Every notebook in notebooks/ runs top to bottom with nbclient (kernel python3, working directory notebooks/,
matplotlib backend Agg) and is committed without outputs.

The kernel imports dsdsim from this checkout (PYTHONPATH), so the notebooks exercise the working tree, not an
installed copy. The validation notebook also runs once against a synthetic results/ tree holding a CPU and a GPU
report, so both of its branches (report present / absent) are covered whatever is committed under results/.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = ["capacity_planning", "dense_vs_moe", "starter_tables", "validation"]
CELL_TIMEOUT_S = 120

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel inherits this process's environment: headless matplotlib, dsdsim from the checkout."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def _execute(path: Path, cwd: Path):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _stream_text(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                   if o.output_type == "stream")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: clear outputs before committing"


def test_every_notebook_is_tested():
    assert sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, kernel_env):
    nb = _execute(NOTEBOOK_DIR / f"{name}.ipynb", NOTEBOOK_DIR)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    if name == "capacity_planning":
        assert "EXAMPLE_PRICE_PER_GPU_HOUR" in "".join(c.source for c in nb.cells)
    if name == "validation" and not (ROOT / "results" / "cpu" / "report.json").is_file():
        assert "No validation report yet" in _stream_text(nb)


def _sample_report() -> dict:
    """A small report in the shape dsdsim.bench.validate writes (only the keys the notebook reads)."""
    err = {"n": 4, "median_abs_pct_error": 12.0, "mape": 15.0, "max_abs_pct_error": 30.0,
           "median_ratio_pred_over_meas": 0.95}
    points = []
    for i, kind in enumerate(["gemm", "gemm", "attention", "step"]):
        measured = 1e-4 * (i + 1)
        points.append({"kind": kind, "name": f"{kind}.{i}", "shape": {"m": i + 1}, "predicted_s": measured * 0.9,
                       "measured_s": measured, "calibrated_s": measured * 1.05, "p10_s": None, "p90_s": None,
                       "split": "test" if i % 2 else "train", "is_step": kind == "step", "components": []})
    return {
        "model": "llama-3.2-1b", "model_measured": "llama-3.2-1b/8", "hardware": "h200-sxm", "device": "cpu",
        "device_name": "test CPU", "date": "2026-01-01", "torch_version": "2.x", "threads": 1, "dtype": "bf16",
        "drafter": "eagle3", "cuda_graphs": False, "quick": True, "reduced": {"factor": 1},
        "grid": {"batches": [1, 4], "ks": [0, 3], "contexts": [512], "step_batches": [1], "step_ks": [0],
                 "warmup": 1, "repeats": 3},
        "points": points,
        "summary": {"uncalibrated": err, "uncalibrated_test": err, "calibrated_train": err, "calibrated": err,
                    "by_kind": {k: {"uncalibrated": err, "calibrated_test": err}
                                for k in ("gemm", "attention", "step")}},
        "calibration": {"compute_efficiency": 0.5, "memory_efficiency": 0.6, "launch_overhead_s": 1e-5,
                        "gemm_tile_m": 16, "step_overhead_s": 1e-3, "n_train": 2, "loss": "soft_l1", "cost": 0.1},
        "table_check": {"acceptance": "constant 0.7", "context": 512, "measured_from": "sum of operators",
                        "per_batch": [{"batch": 1, "k_best_measured": 3, "k_predicted_uncalibrated": 3,
                                       "regret_uncalibrated": 0.0, "k_predicted_calibrated": 3,
                                       "regret_calibrated": 0.0}],
                        "mean_regret": 0.0, "max_regret": 0.0, "mean_regret_calibrated": 0.0,
                        "max_regret_calibrated": 0.0, "composition": {"n": 0}},
    }


def test_validation_notebook_with_reports(tmp_path, kernel_env):
    """With results/cpu and results/gpu-*/<model>/report.json present, the notebook plots and summarises both."""
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    shutil.copy(NOTEBOOK_DIR / "validation.ipynb", nb_dir)
    for sub in ("cpu", "gpu-test/llama"):
        (tmp_path / "results" / sub).mkdir(parents=True)
        (tmp_path / "results" / sub / "report.json").write_text(json.dumps(_sample_report()))
    nb = _execute(nb_dir / "validation.ipynb", nb_dir)
    text = _stream_text(nb)
    assert "cpu: found" in text and "gpu-test/llama: found" in text
    assert "No validation report yet" not in text
    markdown = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if "data" in o and "text/markdown" in o["data"]]
    assert len(markdown) == 2          # summary_markdown of each report
