"""Output files: written whole or not at all, with the permissions the user's umask gives a new file, and JSON
written one way (``to_json``: numpy numbers and arrays, enums and paths as plain values; anything else refused).

A temporary file beside the target is written, given mode 0o666 & ~umask (mkstemp alone makes 0600), then
renamed over the target, so a reader never sees half a file and a failure leaves nothing behind. OS errors
become one-line DsdsimErrors naming the path.

The path ``-`` is standard output (the usual command-line convention): the content is written there whole, once
it is complete, and no file named ``-`` is created.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from dsdsim.errors import DsdsimError


def json_default(o):
    """The one rule for values json cannot write: numpy scalars and arrays as Python numbers and lists, enums as
    their values, paths as text; anything else is an error (a silent str() hid a wrong value in a report)."""
    from enum import Enum

    if isinstance(o, Enum):
        return o.value
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    if type(o).__module__ == "numpy":
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def to_json(data, indent: int = 2) -> str:
    """Indented JSON by ``json_default`` (what every command and report writes)."""
    import json

    return json.dumps(data, indent=indent, default=json_default)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


STDOUT = "-"


def is_stdout(path) -> bool:
    """Whether ``path`` is ``-``, standard output."""
    return path is not None and str(path) == STDOUT


def check_writable(path: Path) -> None:
    """Refuse, before any work, a path that cannot be written: a folder, a missing or read-only parent, or an
    existing file without write permission (checked on the mode bits, so it holds for root too)."""
    if is_stdout(path):
        return
    path = Path(path).expanduser()
    parent = path.resolve().parent
    if path.is_dir():
        raise DsdsimError(f"output path {path} is a directory; give a file name")
    if not parent.is_dir():
        raise DsdsimError(f"cannot write {path}: folder {parent} does not exist; create it or choose another path")
    if not os.access(parent, os.W_OK):
        raise DsdsimError(f"cannot write {path}: folder {parent} is not writable; choose another path")
    if path.exists():
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise DsdsimError(f"cannot write {path}: it is not a regular file")
        if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
            raise DsdsimError(f"cannot write {path}: the file is read-only; choose another path or make it writable")


@contextlib.contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` (mode from the umask). For ``-`` the
    temporary file is copied to standard output on success."""
    if is_stdout(path):
        with tempfile.TemporaryDirectory() as folder:
            tmp = Path(folder) / f"stdout{suffix}"
            yield tmp
            sys.stdout.flush()
            with open(tmp, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return
    path = Path(path).expanduser()
    check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=str(path.resolve().parent))
        os.close(fd)
    except OSError as exc:
        raise DsdsimError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        raise DsdsimError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write text or bytes to `path` whole or not at all (``-``: to standard output)."""
    if is_stdout(path):
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data)
        return
    with atomic_path(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
