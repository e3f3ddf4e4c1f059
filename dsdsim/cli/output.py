"""Where command output goes: stdout or a file written atomically, progress bars, torch checks.

Bad input ends with one line on stderr naming the problem and the fix, exit code 2, no traceback, and no file
written half-way.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from dsdsim.cli.command import Invocation, echo
from dsdsim.errors import DsdsimError
from dsdsim import files


def _width() -> int:
    """The page width: the terminal's COLUMNS where wider than 140 characters (a file or a pipe gets 140)."""
    return max(140, int(os.environ.get("COLUMNS", "0") or 0))


def _styled() -> bool:
    """Bold and red on a terminal, unless NO_COLOR is set or TERM=dumb (https://no-color.org); FORCE_COLOR asks
    for them in a pipe too."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def show(renderable) -> None:
    """Print a table, a line or a group of them (``dsdsim.export.text``) to stdout."""
    from dsdsim.export.text import to_text

    sys.stdout.write(to_text(renderable, _width(), styled=_styled()))


def warn(message: str) -> None:
    """One line on stderr; the command goes on."""
    echo(f"dsdsim: warning: {message}", err=True)


is_stdout = files.is_stdout          # `-o -`: standard output, for every command that writes


def check_writable(path: Optional[Path]) -> None:
    """Fail early (before any work) when an output path cannot be written (``-`` is standard output)."""
    if path is not None:
        files.check_writable(path)


def check_png(path: Path, option: str) -> None:
    """A writable path ending in .png (plots are written as PNG), or ``-`` for standard output."""
    check_writable(path)
    if is_stdout(path):
        return
    if path.suffix.lower() != ".png":
        raise DsdsimError(f"{option} writes a PNG; give a file name ending in .png (got {path})")


_KNOWN_SUFFIXES = (".json", ".csv", ".txt", ".png", ".yaml", ".yml")


def check_fixed_format(path: Optional[Path], what: str, suffixes: tuple[str, ...]) -> None:
    """A writable path for a command that writes one format (``what``): a suffix that names another format is an
    error; an unknown suffix (or none) is accepted."""
    if path is None or is_stdout(path):
        return
    check_writable(path)
    suffix = Path(path).suffix.lower()
    if suffix in _KNOWN_SUFFIXES and suffix not in suffixes:
        raise DsdsimError(f"-o {path} ends in {suffix}, but this command writes {what}: name the file "
                          f"{' or '.join(suffixes)}")


write_atomic = files.write_atomic


def emit(text: str, output: Optional[Path]) -> None:
    """Text to stdout (no ``output``, or ``-``), or to `output` (atomically) with a 'wrote' line on stderr."""
    if output is None or is_stdout(output):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        write_atomic(output, text if text.endswith("\n") else text + "\n")
        echo(f"wrote {output}", err=True)


# what each --format writes, by file suffix; a format missing here has no suffix of its own
FORMAT_SUFFIXES = {"table": ".txt", "json": ".json", "csv": ".csv", "vllm": ".json", "vllm-batch-stats": ".json",
                   "sglang": ".json", "trtllm": ".json"}
_SUFFIX_FORMATS = {".txt": "table", ".json": "json", ".csv": "csv"}


def output_format(ctx: Invocation, fmt, output: Optional[Path]):
    """The format to write: ``--format`` when given, else the one the ``-o`` file's suffix names (.json, .csv,
    .txt for the table as plain text). A ``--format`` whose suffix differs from a known suffix of ``-o`` is an
    error (nothing is written); a file with another suffix takes ``--format`` as given."""
    if output is None or is_stdout(output):
        return fmt
    kind = type(fmt)
    suffix = Path(output).suffix.lower()
    named = _SUFFIX_FORMATS.get(suffix)
    if not ctx.given("fmt"):
        if named is None:
            known = ", ".join(f"{s} ({f})" for s, f in _SUFFIX_FORMATS.items())
            raise DsdsimError(f"cannot tell the format of -o {output} from its suffix: add --format or name the "
                              f"file {known}")
        try:
            return kind(named)
        except ValueError:
            raise DsdsimError(f"-o {output}: this command does not write {named}; its formats are "
                              f"{' | '.join(f.value for f in kind)}") from None
    wanted = FORMAT_SUFFIXES.get(fmt.value)
    if named is not None and wanted is not None and suffix != wanted:
        raise DsdsimError(f"--format {fmt.value} writes {wanted} files but -o {output} ends in {suffix}: rename the "
                          f"file or change --format")
    return fmt


def plain_text(renderable) -> str:
    """Tables and lines as plain text, no colour codes (what the table format writes to a file)."""
    from dsdsim.export.text import to_text

    return to_text(renderable, _width())


def show_or_write(renderable, output: Optional[Path]) -> None:
    """The table format: on stdout (no ``output``, or ``-``), or as plain text into ``output``."""
    if output is None or is_stdout(output):
        show(renderable)
    else:
        emit(plain_text(renderable), output)


def with_progress(label: str, run):
    """Run `run(progress)`; a transient progress bar on a terminal when it takes more than about a second."""
    if not sys.stderr.isatty():
        return run(None)
    import time

    from rich.console import Console
    from rich.progress import Progress

    start = time.monotonic()
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None, visible=False)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, visible=time.monotonic() - start > 1.0)

        return run(progress)


def with_status(label: str, run):
    """Run `run()` under a transient spinner on a terminal (work that reports no steps, such as a fit)."""
    if not sys.stderr.isatty():
        return run()
    from rich.console import Console

    with Console(stderr=True).status(label):
        return run()


def need_torch() -> None:
    """One line naming the install that fits: the CPU wheel from PyTorch's index (a plain ``pip install torch``
    pulls a multi-GB CUDA build on Linux), or the ``validate`` extra (torch from PyPI, CUDA) on a GPU machine."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise DsdsimError("this command measures with torch, which is not installed: on a CPU, pip install torch "
                          "--index-url https://download.pytorch.org/whl/cpu; on a GPU, pip install "
                          "'dsdsim[validate]'") from None


def check_device(device: str) -> None:
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DsdsimError(f"--device {device}: no CUDA device is visible to torch; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise DsdsimError(f"--device {device!r} is not supported; use cpu or cuda (cuda:N)")
