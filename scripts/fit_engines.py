#!/usr/bin/env python3
"""Fit the engine terms marked ``fit: true`` in engine_specs/*.yaml on the TRAIN split of the measurement corpus.

    python3 scripts/fit_engines.py                 # refit and rewrite the engine spec files
    python3 scripts/fit_engines.py --check         # refit and fail if a file would change (reproducibility)
    python3 scripts/fit_engines.py --date 2026-12-01

Every train case is predicted with the engine spec of the engine version it was measured on; the terms those specs
mark ``fit: true`` are fitted jointly (``dsdsim.fit.engine.EngineFit``: kernel model fixed, priors from sources,
bounded by sourced ranges). A term a version inherits through ``extends`` is one figure, written into the file that
defines it. Test cases are never read, nor train cases whose acceptance would have to be fitted. The date in the
provenance is ``--date``, else the date already in the file, so running the script twice writes the same files.

It then holds out each source in turn (``dsdsim.fit.cv``) and writes the split-conformal intervals of the held-out
errors (``dsdsim.fit.intervals``) to measurements/intervals.json, which predict, explain and plan print. Those
intervals also read the end-to-end cases' serving simulations, which price their steps with the engine specs as the
process loaded them: where an engine spec changed, the script runs once more in a fresh process, so that one run
leaves files that ``--check`` accepts.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
SECOND_PASS = "DSDSIM_FIT_SECOND_PASS"      # set in the one fresh run that follows a run which changed engine specs
sys.path.insert(0, str(ROOT))

from dsdsim.corpus.evaluate import all_case_steps  # noqa: E402
from dsdsim.corpus.schema import load_corpus  # noqa: E402
from dsdsim.fit.engine import EngineFit, Parameter  # noqa: E402
from dsdsim.specs.io import read_structured  # noqa: E402

HEADER = ("# Engine spec (dsdsim/specs/engine.py). Terms with `fit: true` are fitted by scripts/fit_engines.py on the\n"
          "# train split of measurements/ (their value, verified and cases are written by it); edit the rest, then\n"
          "# rerun it. Other fields are sourced where they stand.\n")
METHOD = ("scripts/fit_engines.py: maximum a posteriori bounded least squares (scipy least_squares, Cauchy loss scale "
          "{scale} on log(predicted/measured), each fitted term pulled towards its sourced prior with weight {weight} "
          "per range), kernel model fixed; every train case predicted with its engine version's spec")


def _dump(data: dict) -> str:
    import yaml

    return HEADER + yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


def fitted_files(fit: EngineFit, date_of) -> dict[Path, str]:
    """Engine spec file -> its new text: fitted terms written where they are defined, provenance per spec."""
    from dsdsim.specs.catalog import shipped_dir

    folder = shipped_dir("engine_specs")
    out: dict[Path, str] = {}
    by_origin: dict[str, list[Parameter]] = {}
    for p in fit.parameters_:
        by_origin.setdefault(p.origin, []).append(p)
    stems = sorted(set(by_origin) | set(fit.spec_cases_))
    for stem in stems:
        path = folder / f"{stem}.yaml"
        if not path.is_file():
            continue
        data = read_structured(path)
        for p in by_origin.get(stem, []):
            for term in data.get("terms", []):
                if term["name"] == p.term:
                    cases = fit.cases_[p]
                    term["value"] = fit.values_[p]
                    term["verified"] = "fitted"
                    term["cases"] = list(cases)
                    term["note"] = (f"fitted by scripts/fit_engines.py on {len(cases)} train cases; sourced prior "
                                    f"{term['prior']:g}")
        ids = fit.spec_cases_.get(stem, ())
        if ids:
            res = {i: fit.residuals_[i] for i in ids}
            abs_res = [abs(v) for v in res.values()]
            data["fit"] = {"method": METHOD.format(scale=fit.loss_scale, weight=fit.prior_weight),
                           "date": date_of(data), "cases": list(ids), "residuals": res,
                           "median_abs_residual": round(median(abs_res), 4),
                           "max_abs_residual": round(max(abs_res), 4)}
        else:
            data.pop("fit", None)
        out[path] = _dump(data)
    return out


def intervals_path() -> Path:
    from dsdsim.policy.intervals import INTERVALS_FILE
    from dsdsim.specs.catalog import shipped_dir

    return Path(shipped_dir("measurements")) / INTERVALS_FILE


def intervals_text(corpus, steps) -> str:
    """The intervals of the held-out errors, as JSON (deterministic)."""
    import json

    from dsdsim.fit.cv import source_cv
    from dsdsim.fit.intervals import StepTimeIntervals

    from dsdsim.corpus.checks import checks
    from dsdsim.corpus.serving import serving_results

    cv = source_cv(corpus, steps)
    e2e, _ = serving_results(corpus)        # end-to-end cases enter no engine fit: their predictions are held out
    pairs = checks(corpus, list(cv.results) + list(e2e)).step_ratios
    iv = StepTimeIntervals().fit(cv.results, source=f"scripts/fit_engines.py: leave-one-source-out over "
                                 f"{len(cv.sources)} sources, {sum(s.n for s in cv.sources.values())} evaluated cases",
                                 pairs=pairs)
    if iv.table_.extra_time is not None:
        lo, hi, n = iv.table_.extra_time
        print(f"extra time of a speculative step, held out: x{lo:.2f} - x{hi:.2f} over {n} T(K)/T(0) pairs")
    print(f"intervals: {len(iv.strata_)} strata; median of per-source held-out medians "
          f"{100 * (cv.median_of_source_medians or 0):.1f}%")
    return json.dumps(iv.table_.to_dict(), indent=1) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", help="date written into the provenance (default: the file's, else today)")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if a file would change")
    args = ap.parse_args(argv)
    corpus = load_corpus()
    steps = all_case_steps(corpus)
    fit = EngineFit().fit(corpus, steps)
    today = dt.date.today().isoformat()

    def date_of(data: dict) -> str:
        return args.date or (data.get("fit") or {}).get("date") or today

    for p in fit.parameters_:
        print(f"{p.label}: {fit.values_[p]:.3g} on {len(fit.cases_[p])} cases")
    res = [abs(v) for v in fit.residuals_.values()]
    before = [abs(v) for v in fit.before_.values()]
    print(f"{len(res)} train cases: median |residual| {100 * median(res):.1f}% (at the priors {100 * median(before):.1f}%),"
          f" max {100 * max(res):.1f}%")
    changed = []
    files = fitted_files(fit, date_of)
    files[intervals_path()] = intervals_text(corpus, steps)
    for path, text in files.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            changed.append(path.name)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and changed:
        print("would change: " + ", ".join(changed), file=sys.stderr)
        return 1
    if changed:                 # the spec files a run reads pre-parsed (dsdsim.specs.io.PARSED) follow them
        from parse_specs import main as parse_specs

        parse_specs([])
    if any(name != intervals_path().name for name in changed) and not os.environ.get(SECOND_PASS):
        # the intervals just written read serving simulations priced with the engine specs from before this fit
        import subprocess

        print("engine specs changed: fitting once more in a fresh process, so the intervals read them")
        again = [sys.executable, str(Path(__file__).resolve())] + (["--date", args.date] if args.date else [])
        return subprocess.run(again, env=dict(os.environ, **{SECOND_PASS: "1"})).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
