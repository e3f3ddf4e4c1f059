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


def test_a_cpu_without_native_bf16_validates_in_fp32():
    """The probe of a CPU with AVX2 only measures its bf16 GEMMs far below its fp32 ones (software conversion,
    ~1 GFLOP/s against ~90): a validation there runs in fp32, which the roofline can follow; a CPU with native bf16
    (the committed probe, 504 GFLOP/s bf16) and any GPU keep the model's bf16. Picking it needs no torch."""
    from dsdsim.bench.validate import native_dtype
    from dsdsim.specs.catalog import load_hardware, load_model
    from dsdsim.units import DType

    model = load_model("llama-3.1-8b")
    native = load_hardware(ROOT / "results" / "cpu" / "probe-cpu.yaml")
    assert native_dtype(model, native, cuda=False) is DType.bf16
    bf16 = native.peak_flops_per_s[DType.bf16]
    peaks = {**native.peak_flops_per_s, DType.bf16: bf16.model_copy(update={"value": 0.96e9})}
    emulated = native.model_copy(update={"peak_flops_per_s": peaks})
    assert native_dtype(model, emulated, cuda=False) is DType.fp32
    assert native_dtype(model, emulated, cuda=True) is DType.bf16
    assert native_dtype(model, load_hardware("h100-sxm"), cuda=False) is DType.bf16
    assert "torch" not in _loaded("from dsdsim.bench.validate import native_dtype")
