#!/usr/bin/env python3
"""Fit the shipped engine specs (engine_specs/*.yaml) on the TRAIN split of the measurement corpus.

    python3 scripts/fit_engines.py                 # refit and rewrite vllm, sglang, trtllm
    python3 scripts/fit_engines.py --check         # refit and fail if a file would change (reproducibility)
    python3 scripts/fit_engines.py --date 2026-01-31

Each engine is fitted on the train cases measured on it (``dsdsim.corpus.evaluate.ENGINE_OF_CASE``), the kernel
model held fixed, by bounded least squares (``dsdsim.corpus.fit``). Test cases are never read. The date in the
provenance is ``--date``, else the date already in the file, so running the script twice writes the same files.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsdsim.corpus.fit import engine_train_cases, fit_engine  # noqa: E402
from dsdsim.corpus.schema import load_corpus  # noqa: E402
from dsdsim.specs.engine import engine_yaml, load_engine_file  # noqa: E402

# Which figures each engine's train cases can determine (fewer figures than cases, none two cases cannot tell
# apart). host_step_s stays at its sourced value where plain steps hide host time (async scheduling): in a
# speculative step it adds exactly like spec_fixed_s, so the data cannot split the two.
FITTED = {
    "vllm": ("spec_fixed_s", "draft_pass_s", "host_per_sequence_s", "rejection_per_token_s"),
    "sglang": ("spec_fixed_s", "draft_pass_s", "host_per_sequence_s", "rejection_per_token_s"),
    "trtllm": ("spec_fixed_s", "host_per_sequence_s"),
}
HEADER = ("# Engine spec (dsdsim/specs/engine.py). Figures marked 'fitted' are written by scripts/fit_engines.py\n"
          "# from the train split of measurements/; edit the other figures here, then rerun the script.\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", help="date written into the provenance (default: the file's, else today)")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a file would change")
    ap.add_argument("--engines", nargs="*", default=list(FITTED), help="engines to fit (default: all)")
    args = ap.parse_args(argv)
    corpus = load_corpus()
    changed = []
    for name in args.engines:
        path = ROOT / "engine_specs" / f"{name}.yaml"
        spec = load_engine_file(path)
        date = args.date or (spec.fit.date if spec.fit else dt.date.today().isoformat())
        cases = engine_train_cases(corpus, name)
        fit = fit_engine(spec, cases, FITTED[name], date)
        text = engine_yaml(fit.spec, HEADER)
        old = path.read_text(encoding="utf-8")
        med = fit.spec.fit.median_abs_residual
        print(f"{name}: {len(fit.cases)} train cases; "
              + ", ".join(f"{k}={v:.3g}" for k, v in fit.values.items())
              + f"; median |residual| {100 * med:.1f}%, max {100 * fit.spec.fit.max_abs_residual:.1f}%")
        if text != old:
            changed.append(path.name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and changed:
        print("would change: " + ", ".join(changed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
