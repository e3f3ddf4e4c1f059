"""Rewrite the golden outputs the tests hold the package to, and say what changed.

    python scripts/regen_goldens.py            rewrite tests/golden/cli_json.json, tests/golden/weights.json,
                                              tests/data/step_reference.json and the README's table of fitted
                                              engine terms; print a summary per file
    python scripts/regen_goldens.py --check    rewrite nothing; exit 1 if a golden would change

Run it after a change that is meant to move numbers (a refit, a new figure, a model fix), read the summary (which
cases moved, by how much at most) and say why in the commit; a golden that moves after a change meant to keep
every number is a defect, not a golden to regenerate. measurements/baseline.json is not a golden: it is lowered by
hand, with a reason, when the model improves.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
CLI = TESTS / "golden" / "cli_json.json"
WEIGHTS = TESTS / "golden" / "weights.json"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TESTS))


def _run(argv: list[str]) -> str:
    from dsdsim.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise SystemExit(f"dsdsim {' '.join(argv)} exited {exc.code}") from None
    return out.getvalue()


def _largest_change(old, new) -> tuple[int, float]:
    """(numbers that differ, the largest relative difference) between two JSON values."""
    if isinstance(old, dict) and isinstance(new, dict):
        parts = [_largest_change(old.get(k), new.get(k)) for k in set(old) | set(new)]
        return sum(p[0] for p in parts), max((p[1] for p in parts), default=0.0)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        parts = [_largest_change(a, b) for a, b in zip(old, new)]
        return sum(p[0] for p in parts), max((p[1] for p in parts), default=0.0)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        if old == new or (math.isnan(old) and math.isnan(new)):
            return 0, 0.0
        rel = abs(new - old) / max(abs(old), 1e-300)
        return (0, 0.0) if rel <= 1e-12 else (1, rel)       # the tests' own tolerance
    return (0, 0.0) if old == new else (1, math.inf)


def cli_goldens() -> dict:
    cases = json.loads(CLI.read_text())
    return {name: {"argv": c["argv"], "stdout": _run(c["argv"])} for name, c in cases.items()}


def weights_golden() -> dict:
    from _weights_snapshot import snapshot

    return json.loads(json.dumps(snapshot(), sort_keys=True))


def step_reference() -> dict:
    from step_reference_cases import compute

    return json.loads(json.dumps(compute(), sort_keys=True))


def fitted_terms_readme(text: str) -> str:
    """The README with its fitted-terms table (between the markers) rebuilt from the shipped engine specs."""
    from dsdsim.cli.engine import FITTED_TERMS_BEGIN, FITTED_TERMS_END, fitted_terms_markdown

    start, end = text.index(FITTED_TERMS_BEGIN), text.index(FITTED_TERMS_END)
    return text[:start] + FITTED_TERMS_BEGIN + "\n" + fitted_terms_markdown() + "\n" + text[end:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a golden would change")
    args = ap.parse_args(argv)
    from step_reference_cases import REFERENCE

    from parse_specs import main as parse_specs

    changed = []
    if parse_specs(["--check"] if args.check else []):     # the shipped YAML as a run reads it, first
        changed.append("yaml-parsed.jsonl")
    for path, build, dump in ((CLI, cli_goldens, lambda d: json.dumps(d, indent=2) + "\n"),
                              (WEIGHTS, weights_golden, lambda d: json.dumps(d, indent=1, sort_keys=True) + "\n"),
                              (Path(REFERENCE), step_reference, lambda d: json.dumps(d, sort_keys=True))):
        old = json.loads(path.read_text())
        new = build()
        if path == CLI:
            moved = {k: _largest_change(json.loads(old[k]["stdout"]), json.loads(new[k]["stdout"])) for k in new}
        else:
            moved = {k: _largest_change(old.get(k), new[k]) for k in new}
        moved = {k: v for k, v in moved.items() if v[0]}
        rel = path.relative_to(ROOT)
        if not moved:
            print(f"{rel}: unchanged")
            continue
        changed.append(rel)
        print(f"{rel}: {len(moved)} of {len(new)} entries change")
        for k, (n, r) in sorted(moved.items()):
            print(f"  {k}: {n} numbers, largest relative change {'(a key or text changed)' if r == math.inf else f'{100 * r:.2f}%'}")
        if not args.check:
            path.write_text(dump(new))
    readme = ROOT / "README.md"
    text = readme.read_text()
    new_text = fitted_terms_readme(text)
    if new_text != text:
        changed.append(readme.relative_to(ROOT))
        print("README.md: the fitted engine terms table changes")
        if not args.check:
            readme.write_text(new_text)
    else:
        print("README.md: the fitted engine terms table is unchanged")
    if args.check and changed:
        print("would change: " + ", ".join(map(str, changed)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
