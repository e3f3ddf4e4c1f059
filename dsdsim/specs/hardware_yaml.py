"""Hardware specs as YAML files in the hw_specs/ format (torch-free: used by probe and calibrate)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from dsdsim.specs.hardware import HardwareSpec


def spec_yaml(spec: HardwareSpec, header: Optional[str] = None) -> str:
    """The spec in the hw_specs/ YAML format (enums as strings, one figure per line)."""
    import yaml

    data = spec.model_dump(mode="json", exclude_none=True)
    lines = [f"# {line}" for line in (header or "").splitlines()]
    for key, value in data.items():
        if key in ("peak_flops_per_s", "efficiency"):
            lines.append(f"{key}:")
            for sub, fig in value.items():
                lines.append(f"  {sub}: {_flow(fig)}")
        elif isinstance(value, dict):
            lines.append(f"{key}: {_flow(value)}")
        else:
            lines.append(yaml.safe_dump({key: value}, default_flow_style=True, width=10 ** 6).strip()[1:-1])
    return "\n".join(lines) + "\n"


def _flow(d: dict) -> str:
    import yaml

    return yaml.safe_dump(d, default_flow_style=True, width=10 ** 6, sort_keys=False).strip()


def write_spec(spec: HardwareSpec, path: str | Path, header: Optional[str] = None) -> Path:
    """Write ``spec`` as YAML (hw_specs format) and check that it loads back identically."""
    from dsdsim.specs.hardware import load_hardware

    from dsdsim.files import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, spec_yaml(spec, header))
    back = load_hardware(path)
    if back != spec:
        raise RuntimeError(f"{path}: the written spec does not load back identically")
    return path
