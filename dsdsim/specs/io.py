"""Reading spec files (YAML or JSON) with one-line errors, YAML read once per content.

Parsing YAML is the slow part of reading a spec: importing PyYAML costs some 90 M instructions (its scanner's
regular expressions are compiled at import) and building the Python objects of a file runs in Python even with
the C loader. So each YAML text that parses to plain JSON data (what every spec is) is kept as JSON under the hash
of its bytes, in ``$DSDSIM_CACHE_DIR`` (default ``$XDG_CACHE_HOME/dsdsim``, else ``~/.cache/dsdsim``; empty to
keep nothing), and the same text read again, in any process, is ``json.loads`` of that file: the same data, with
no staleness to check since another text has another hash. A text that Python's json cannot give back as it is
(integer keys, dates, NaN) is parsed every time; a cache that cannot be written or read is passed by in silence.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from dsdsim.errors import DsdsimError, SpecError

CACHE_ENV = "DSDSIM_CACHE_DIR"
_CACHE_FORMAT = "parsed-yaml-1"     # the folder under the cache dir; another layout gets another name
_CACHE_KEEP = 512                   # entries kept: a write past this removes the oldest half


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
    return parse_yaml(text, str(path))


def parse_yaml(text: str, where: str) -> object:
    """YAML ``text`` parsed with safe semantics (from the cache when this text was parsed before); a syntax
    problem is one SpecError line naming ``where``."""
    entry = _cache_entry(text)
    if entry is not None:
        try:
            return json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass                    # absent (the usual miss), or cut short by a full disk: parse the text
    import yaml

    try:
        # the C loader when PyYAML was built with libyaml (several times faster), same safe semantics
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise SpecError(f"{where}: YAML nested too deeply to be a spec file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise SpecError(f"{where}: malformed YAML{at}: {problem}") from None
    if entry is not None:
        _keep(entry, data)
    return data


def cache_dir() -> Path | None:
    """Where parsed YAML is kept; None when ``DSDSIM_CACHE_DIR`` is set empty."""
    given = os.environ.get(CACHE_ENV)
    if given is not None:
        return Path(given).expanduser() / _CACHE_FORMAT if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dsdsim" / _CACHE_FORMAT


def _cache_entry(text: str) -> Path | None:
    from hashlib import blake2b

    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{blake2b(text.encode('utf-8'), digest_size=20).hexdigest()}.json"


def _keep(entry: Path, data: object) -> None:
    """Write ``data`` as JSON at ``entry`` when JSON gives back exactly ``data`` (atomically: a reader never sees
    half a file); nothing on any failure."""
    try:
        encoded = json.dumps(data, ensure_ascii=False)      # .inf as Python's json writes it, Infinity
        if json.loads(encoded) != data:
            return                  # integer keys, NaN (unequal to itself): parse this text each time
    except (TypeError, ValueError, RecursionError):
        return                      # a date, a set
    import tempfile

    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(encoded)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(entry.parent)
    except OSError:
        pass


def _prune(folder: Path) -> None:
    """Keep the cache to ``_CACHE_KEEP`` entries: past that, the oldest half (by modification time) goes."""
    entries = [e for e in os.scandir(folder) if e.name.endswith(".json")]
    if len(entries) <= _CACHE_KEEP:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for e in entries[: len(entries) // 2]:
        try:
            os.unlink(e.path)
        except OSError:
            pass


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
