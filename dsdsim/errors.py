"""The one error type users see: a single line naming the problem and how to fix it.

The CLI prints ``DsdsimError`` messages without a traceback and exits with code 2.
"""
from __future__ import annotations

import math


class DsdsimError(ValueError):
    """Bad input: a malformed spec, an unknown name, an out-of-range argument."""


class ArgumentWarning(UserWarning):
    """Arguments each valid alone that, together, give a correct result the user may not mean (a draft model no
    smaller than its target, acceptance for more positions than K, a calibration fitted on another deployment):
    one line on stderr from the CLI, the result still written."""


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


def kind_of(value) -> str:
    """What a value read from a file is, in the words of YAML and JSON (not Python's type names)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value!r:.60}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "something else"


# pydantic's error types -> what was wrong, in words (``got`` is filled with the value the file holds)
_PLAIN = {
    "extra_forbidden": "unknown field (check spelling; extra fields are not allowed)",
    "missing": "required field is missing",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping of fields",
    "model_type": "must be a mapping of fields",
    "model_attributes_type": "must be a mapping of fields",
}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
           "less_than_equal": ("le", "<=")}
_PREFIXES = ("Value error, ", "Assertion failed, ")       # pydantic's own prefixes on a validator's message


def pydantic_message(err: dict) -> str:
    """One entry of a pydantic ``ValidationError.errors()`` in plain words: what the field must be and what it
    holds (the kind of value, which matters in a file: text, a number, a list), without pydantic's wording
    ("Input should be ...", "Value error, ...")."""
    kind, ctx, msg = err.get("type", ""), err.get("ctx") or {}, str(err.get("msg", "invalid"))
    got = "" if "input" not in err or kind == "missing" else f", got {kind_of(err['input'])}"
    if kind in ("extra_forbidden", "missing"):
        return _PLAIN[kind]
    if kind in _PLAIN:
        return _PLAIN[kind] + got
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"must be {sign} {ctx.get(key)}{got}"
    if kind in ("enum", "literal_error") and "expected" in ctx:
        return f"must be one of {ctx['expected']}{got}"
    if kind in ("too_short", "too_long"):
        n = ctx.get("min_length" if kind == "too_short" else "max_length")
        bound = "at least" if kind == "too_short" else "at most"
        return f"must hold {bound} {n} item{'s' if n != 1 else ''}, got {ctx.get('actual_length')}"
    for prefix in _PREFIXES:
        if msg.startswith(prefix):
            return msg[len(prefix):]
    if msg.startswith("Input should be "):
        return "must be " + msg[len("Input should be "):] + got
    return msg


def pydantic_location(loc) -> str:
    """A field's path in a file, its keys and list positions (from 0) joined by dots: ``cases.3.conditions.tp``;
    "" for the file as a whole."""
    return ".".join(str(p) for p in loc if p != "__root__")


def pydantic_one_line(exc, where: str) -> str:
    """Condense a pydantic ValidationError into one line: 'where: field.path: message' (a check of the whole file
    or of one entry reads 'where: message' or 'where: entry: message')."""
    parts = []
    for err in exc.errors()[:3]:
        loc = pydantic_location(err.get("loc", ()))
        msg = pydantic_message(err)
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = "" if len(exc.errors()) <= 3 else f" (+{len(exc.errors()) - 3} more)"
    return f"{where}: " + "; ".join(parts) + more


def comma_items(text: str, what: str, example: str) -> list[str]:
    """The items of a comma list, stripped; an empty one (two commas in a row, one at an end) is one clear error,
    as the batch sizes have it. ``what`` names the list in the message (``--contexts '1024,,8192'``)."""
    items = [part.strip() for part in str(text).split(",")]
    if any(not part for part in items):
        raise DsdsimError(f"{what} has an empty item (two commas in a row, or one at an end); e.g. {example}")
    return items


def first_repeat(values):
    """The first value a list holds twice, or None: lists of batch sizes, contexts, loads, candidates, acceptance
    values and policies each name a value once (README "Arguments checked against each other")."""
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    return None
