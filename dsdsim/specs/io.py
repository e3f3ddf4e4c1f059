"""Reading spec files (YAML or JSON) with one-line errors; the shipped YAML read without PyYAML.

Parsing YAML is the slow part of reading a spec: importing PyYAML costs some 90 M instructions (its scanner's
regular expressions are compiled at import) and building the Python objects of a file runs in Python even with
the C loader. So the shipped spec folders (``hw_specs``, ``engine_specs``, ``measurements``) hold their YAML files
pre-parsed, as JSON, in one file each (``PARSED``: one line per YAML file, its name, the hash of its bytes and its
data), written by ``scripts/parse_specs.py`` and held equal to PyYAML's reading by a test. A YAML file whose bytes
hash to its line is read from that line; any other (a user's own spec, a shipped file edited in a checkout) is
parsed by PyYAML each time. Nothing is written anywhere, the home folder included.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

from dsdsim.errors import DsdsimError, SpecError

PARSED = "yaml-parsed.jsonl"        # in a spec folder: {"file": NAME, "blake2b": HEX, "data": ...} per line


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
    data = pre_parsed(path, text)
    return parse_yaml(text, str(path)) if data is None else data


def parse_yaml(text: str, where: str) -> object:
    """YAML ``text`` parsed with safe semantics; a syntax problem is one SpecError line naming ``where``."""
    import yaml

    try:
        # the C loader when PyYAML was built with libyaml (several times faster), same safe semantics
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply to be a spec file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise SpecError(f"{where}: malformed YAML{at}: {problem}") from None


def text_hash(text: str) -> str:
    """The hash a pre-parsed line names its YAML file's text by."""
    from hashlib import blake2b

    return blake2b(text.encode("utf-8"), digest_size=20).hexdigest()


def pre_parsed(path: Path, text: str) -> object:
    """The data of YAML file ``path`` (its ``text``) from its folder's ``PARSED`` file, fresh objects each call;
    None where the folder has none, or no line for this text (another text hashes otherwise)."""
    lines = _parsed_lines(str(path.parent))
    line = lines.get(path.name) if lines else None
    if line is None or line[0] != text_hash(text):
        return None
    return json.loads(line[1])["data"]


@lru_cache(maxsize=16)
def _parsed_lines(folder: str) -> dict[str, tuple[str, str]]:
    """file name -> (its hash, its line) of ``folder``'s ``PARSED`` file ({} without one or when unreadable)."""
    out: dict[str, tuple[str, str]] = {}
    try:
        with open(os.path.join(folder, PARSED), encoding="utf-8") as fh:
            for line in fh:
                head = json.loads(line[:line.index(', "data":')] + "}") if ', "data":' in line else None
                if head is not None:
                    out[head["file"]] = (head["blake2b"], line)
    except (OSError, ValueError):
        return {}
    return out


def parsed_line(name: str, text: str) -> str:
    """The ``PARSED`` line of YAML file ``name`` with ``text`` (``scripts/parse_specs.py``): its name and hash first,
    so a reader finds a file's line without parsing the data of the others."""
    data = parse_yaml(text, name)
    try:
        encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        encoded = None
    if encoded is None or json.loads(encoded) != data:
        raise SpecError(f"{name}: its YAML holds what JSON cannot give back (integer keys, dates, NaN); "
                        "write it as strings")
    return json.dumps({"file": name, "blake2b": text_hash(text)}, ensure_ascii=False)[:-1] + ', "data": ' + encoded + "}"


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
