"""Reading spec files (YAML or JSON) with one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

from dsdsim.errors import DsdsimError, SpecError


def read_text(path, what: str) -> tuple[Path, str]:
    """(the path, its UTF-8 text) of a user's input file; a missing or unreadable file is one DsdsimError line
    naming ``what`` (``table file``, ``trace file``)."""
    p = Path(str(path))
    if not p.is_file():
        raise DsdsimError(f"{what} {str(path)!r} not found")
    try:
        return p, p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DsdsimError(f"cannot read {what} {p}: {exc}") from None


def read_structured(path: Path) -> object:
    """Parse a .yaml/.yml/.json file; any read or syntax problem becomes a one-line SpecError."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, expected a spec file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")     # a leading byte-order mark, as some editors save, is still UTF-8
    except UnicodeDecodeError:
        if b"\x00" in raw:
            raise SpecError(f"{path}: not a text file (binary content); expected YAML or JSON") from None
        raise SpecError(f"{path} is not UTF-8 text: save it as UTF-8") from None
    if not text.strip():
        raise SpecError(f"{path}: file is empty; expected YAML or JSON")
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise SpecError(f"{path}: JSON nested too deeply to be a spec file") from None
    import yaml

    try:
        # the C loader when PyYAML was built with libyaml (several times faster), same safe semantics
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise SpecError(f"{path}: YAML nested too deeply to be a spec file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise SpecError(f"{path}: malformed YAML{at}: {problem}") from None


def validated(model_cls, data: object, where: str):
    """``model_cls`` validated from a mapping read from a file: one SpecError line naming ``where`` and the field."""
    from pydantic import ValidationError

    from dsdsim.errors import kind_of, pydantic_one_line

    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a mapping of fields at the top level, got {kind_of(data)}")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise SpecError(pydantic_one_line(exc, where)) from None
