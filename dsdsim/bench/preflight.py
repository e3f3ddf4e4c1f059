"""What a validation run needs, checked before any work: one line naming what is missing.

Imports nothing of dsdsim (its CLI itself needs pydantic & co, which a GPU box may lack), so it can run first:
``python3 -m dsdsim.bench.preflight --device cuda`` prints ``preflight ok: ...`` and exits 0, or
``preflight failed: missing ...`` and exits 3.
"""
from __future__ import annotations

import importlib
import sys
from typing import Optional

# (import name, what to install); pydantic 2 and the packages it imports at run time, then the rest
REQUIRED = (("pydantic", "pydantic>=2"), ("pydantic_core", "pydantic-core"), ("annotated_types", "annotated-types"),
            ("typing_inspection", "typing-inspection"), ("typing_extensions", "typing-extensions"),
            ("numpy", "numpy"), ("scipy", "scipy"), ("yaml", "pyyaml"), ("rich", "rich"),
            ("matplotlib", "matplotlib"),
            ("torch", "torch (a CPU-only machine: pip install torch --index-url https://download.pytorch.org/whl/cpu)"))


def missing_packages(required=REQUIRED) -> list[str]:
    """Install names of the required packages that do not import (with the import error's first line)."""
    out = []
    for module, install in required:
        try:
            importlib.import_module(module)
        except Exception as exc:                     # ImportError, or a broken install raising anything else
            out.append(f"{install} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    return out


def device_problem(device: str) -> Optional[str]:
    """Why ``device`` cannot be measured, or None."""
    if not device.startswith("cuda"):
        return None
    try:
        import torch
    except Exception:
        return "torch does not import"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no GPU visible, or a CPU-only torch build)"
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        return f"{device}: only {torch.cuda.device_count()} CUDA device(s) visible"
    return None


def describe(device: str) -> str:
    import torch

    parts = [f"python {sys.version.split()[0]}", f"torch {torch.__version__}"]
    if device.startswith("cuda"):
        dev = torch.device(device)
        parts += [f"cuda {torch.version.cuda}", torch.cuda.get_device_name(dev),
                  f"{torch.cuda.get_device_properties(dev).total_memory / 2 ** 30:.0f} GiB"]
    return ", ".join(parts)


def check(device: str = "cpu") -> tuple[bool, str]:
    """(ok, one line)."""
    miss = missing_packages()
    if miss:
        return False, "preflight failed: missing " + "; ".join(miss)
    problem = device_problem(device)
    if problem:
        return False, f"preflight failed: {problem}"
    return True, f"preflight ok: {describe(device)}"


def main(argv: Optional[list[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    device = args[args.index("--device") + 1] if "--device" in args else "cpu"
    ok, line = check(device)
    print(line, flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    raise SystemExit(main())
