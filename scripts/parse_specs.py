"""Write the shipped YAML specs pre-parsed (``dsdsim.specs.io.PARSED`` in hw_specs/, engine_specs/ and
measurements/): one JSON line per YAML file, its name, the hash of its text and its data as PyYAML reads it, so a
run reads the shipped specs without importing PyYAML and writes no cache. Run it after editing a shipped YAML file
(``tests/test_spec_files.py`` fails until the lines match the files); ``--check`` only reports.

    python scripts/parse_specs.py [--check]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsdsim.specs.io import PARSED, parsed_line  # noqa: E402

FOLDERS = ("hw_specs", "engine_specs", "measurements")


def parsed_text(folder: Path) -> str:
    """The PARSED file of ``folder``: a line per .yaml file, in name order."""
    lines = [parsed_line(f.name, f.read_bytes().decode("utf-8-sig")) for f in sorted(folder.glob("*.yaml"))]
    return "".join(line + "\n" for line in lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report stale folders, write nothing (exit 1 if any)")
    args = ap.parse_args(argv)
    stale = []
    for name in FOLDERS:
        folder = ROOT / name
        text = parsed_text(folder)
        target = folder / PARSED
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            print(f"{name}/{PARSED}: unchanged ({text.count(chr(10))} files)")
            continue
        stale.append(name)
        if args.check:
            print(f"{name}/{PARSED}: stale")
            continue
        target.write_text(text, encoding="utf-8")
        print(f"{name}/{PARSED}: written ({text.count(chr(10))} files)")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
