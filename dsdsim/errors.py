"""The one error type users see: a single line naming the problem and how to fix it.

The CLI prints ``DsdsimError`` messages without a traceback and exits with code 2.
"""
from __future__ import annotations

import math


class DsdsimError(ValueError):
    """Bad input: a malformed spec, an unknown name, an out-of-range argument."""


class SpecError(DsdsimError):
    """A hardware, model or drafter spec that cannot be used."""


def finite_number(value, what: str) -> float:
    """``value`` as a finite float, or a DsdsimError naming ``what`` (user input: a CLI argument, a file's field)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise DsdsimError(f"{what} must be finite, got {value!r}")
    return v


def whole_number(value, what: str, allow_negative: bool = False) -> int:
    """``value`` as an int when it is a whole number (>= 0 unless ``allow_negative``), else a DsdsimError naming
    ``what``. Truth values are not numbers here (``True`` as a batch size is a mistake, not 1)."""
    bound = "" if allow_negative else " ≥ 0"
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise DsdsimError(f"{what} must be a whole number{bound}, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise DsdsimError(f"{what} must be a whole number{bound}, got {value!r}") from None
    if not (math.isfinite(v) and v == round(v)) or (v < 0 and not allow_negative):
        raise DsdsimError(f"{what} must be a whole number{bound}, got {value!r}")
    return int(v)


def pydantic_one_line(exc, where: str) -> str:
    """Condense a pydantic ValidationError into one line: 'where: field.path: message'."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__") or "(top level)"
        msg = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (check spelling; extra fields are not allowed)"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        parts.append(f"{loc}: {msg}")
    more = "" if len(exc.errors()) <= 3 else f" (+{len(exc.errors()) - 3} more)"
    return f"{where}: " + "; ".join(parts) + more
