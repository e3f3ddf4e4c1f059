"""The public measurement corpus and `dsdsim accuracy`.

Ground truth: docs/reference/measurements.md (the training list, copied verbatim from the project's reference
notes). Every numbered item there is in the corpus as split: train, and every figure a train case reads
directly appears in that item's text. The regression guard compares the train-split median |error| with the
value committed in measurements/baseline.json.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT

CORPUS = REPO_ROOT / "measurements"
TRAIN_LIST = REPO_ROOT / "docs" / "reference" / "measurements.md"


def _items() -> dict[int, str]:
    """Numbered items of the training list -> their text (up to the next item or heading)."""
    text = TRAIN_LIST.read_text(encoding="utf-8")
    parts = re.split(r"(?m)^(\d+)\. ", text)
    return {int(n): re.split(r"(?m)^## ", body)[0] for n, body in zip(parts[1::2], parts[2::2])}


@pytest.fixture(scope="module")
def corpus():
    from dsdsim.corpus.schema import load_corpus

    return load_corpus(CORPUS)


@pytest.fixture(scope="module")
def report():
    from dsdsim.corpus.evaluate import accuracy

    return accuracy()


# --- the corpus against the training list --------------------------------------------------------------


def test_every_item_of_the_training_list_is_in_the_corpus(corpus):
    items = _items()
    assert sorted(items) == list(range(1, 35)), "the training list has items 1-34"
    covered = {c.train_list_item for _, c in corpus if c.split.value == "train"}
    assert covered == set(items), f"items without a train case: {sorted(set(items) - covered)}"


def test_train_figures_read_directly_appear_in_their_item(corpus):
    items = _items()
    for _, case in corpus:
        m = case.measured
        if case.split.value != "train" or m.value is None or m.derived_from:
            continue
        text = items[case.train_list_item]
        for v in filter(None, (m.value, m.value_high)):
            pct = f"{100 * v:.0f}"
            forms = {f"{v:g}", f"{v:.2f}", f"{v:.1f}", f"{100 * v:.1f}%", pct + "%", pct + "–", pct + " %",
                     f"{v:,.0f}", f"{v:,.1f}", f"{v:,.2f}"}
            assert any(f in text for f in forms), f"{case.id}: {v} is not in item {case.train_list_item}"


def test_train_cases_of_the_listed_sources_are_train_and_the_rest_test(corpus):
    train = [c for _, c in corpus if c.split.value == "train"]
    test = [c for _, c in corpus if c.split.value == "test"]
    assert len(train) >= 95 and len(test) >= 20
    assert all(c.train_list_item is None for c in test)


def test_every_evaluated_case_names_shipped_specs(corpus):
    from dsdsim.specs.catalog import hardware_names, model_names

    for _, c in corpus:
        if c.not_evaluated is None:
            assert c.conditions.model in model_names(), c.id
            assert c.conditions.hardware in hardware_names(), c.id


def test_every_case_states_how_acceptance_is_handled(corpus):
    for _, c in corpus:
        a = c.acceptance
        m = c.measured
        step_times = m.quantity.value == "step_time_ratio" or (m.ratio_of is not None and m.ratio_of.value == "step_ms")
        if c.not_evaluated is None and c.conditions.k > 0 and not step_times:
            assert a.handling.value in ("reported", "fitted", "cancels", "assumed"), c.id
        if a.handling.value == "assumed":        # a stated assumption names where it comes from, and is no fit
            assert a.note and (a.al or a.alpha) and a.fit_group is None, c.id


def test_every_serving_engine_case_names_the_version_it_ran_and_a_spec_covers_it(corpus):
    from dsdsim.corpus.evaluate import case_engine
    from dsdsim.specs.catalog import load_engine

    for _, c in corpus:
        k = c.conditions
        if k.engine in ("vllm", "vllm-mrv2", "sglang", "tensorrt-llm"):
            assert k.engine_version and k.engine_version_stated, c.id
            if c.not_evaluated is None:
                assert load_engine(case_engine(c)).versions.covers(k.engine_version), c.id


def test_acceptance_is_never_fitted_jointly_with_engine_figures(corpus):
    """Engine terms are fitted only on step-level cases whose acceptance is reported, cancels or is not needed; the
    end-to-end cases (predicted through the serving simulation) enter no engine fit."""
    from dsdsim.corpus.evaluate import all_case_steps
    from dsdsim.fit.engine import fit_cases

    steps = all_case_steps(corpus)
    cases = fit_cases(corpus, steps)
    assert len(cases) >= 60          # 69 when the 13 whole-run figures became end-to-end cases (baseline.json)
    assert all(c.acceptance.handling.value != "fitted" and c.split.value == "train" for _, c in cases)
    assert not any(c.conditions.serving is not None for _, c in cases)


# --- schema errors: one line naming the file and the field ----------------------------------------------

GOOD = {"source": {"title": "t", "url": "https://example.org"}, "cases": [{
    "id": "x-1", "where": "table 1", "tag": "primary", "split": "test",
    "conditions": {"engine": "vllm", "engine_version": "0.8.4", "engine_version_stated": "inferred from date 2025-04",
                   "hardware": "h100-sxm", "hardware_stated": "H100", "model": "llama-3.1-8b",
                   "model_stated": "Llama-3.1-8B", "batch_size": 1, "context_tokens": 256, "context_note": "stated"},
    "acceptance": {"handling": "not-needed"}, "measured": {"quantity": "tokens_per_s", "value": 150.0}}]}


def _write(tmp_path: Path, data, name="src.yaml") -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return folder


def _bad(mutate):
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    return data


BAD = [
    (lambda d: d["cases"][0]["conditions"].update(batch=1), "cases.0.conditions.batch: unknown field"),
    (lambda d: d["cases"][0].update(split="training"), "cases.0.split"),
    (lambda d: d["cases"][0]["measured"].update(value=-3), "cases.0.measured.value"),
    (lambda d: d["cases"][0]["measured"].update(quantity="speedup"), "cases.0.measured.quantity"),
    (lambda d: d["cases"][0]["acceptance"].update(handling="reported"), "needs al or alpha"),
    (lambda d: d["cases"][0]["acceptance"].update(handling="fitted"), "needs a fit_group"),
    (lambda d: d["cases"][0]["acceptance"].update(handling="assumed"), "handling 'assumed' needs al or alpha"),
    (lambda d: d["cases"][0]["acceptance"].update(handling="assumed", al=2.0), "needs a note naming where"),
    (lambda d: d["cases"][0]["conditions"].update(k=3, drafter="eagle"), "depends on acceptance"),
    (lambda d: d["cases"][0]["conditions"].pop("context_tokens"), "conditions.context_tokens"),
    (lambda d: d["cases"][0].update(train_list_item=3), "train cases name their train_list_item"),
    (lambda d: d["cases"][0].update(id="Has Spaces"), "id 'Has Spaces'"),
    (lambda d: d.pop("source"), "source: required field is missing"),
]


@pytest.mark.parametrize("mutate,fragment", BAD, ids=[b[1] for b in BAD])
def test_malformed_file_gives_one_line_naming_file_and_field(tmp_path, mutate, fragment):
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.errors import SpecError

    folder = _write(tmp_path, _bad(mutate))
    with pytest.raises(SpecError) as exc:
        load_corpus(folder)
    msg = str(exc.value)
    assert "\n" not in msg and "src.yaml" in msg and fragment in msg, msg


def test_good_file_loads(tmp_path):
    from dsdsim.corpus.schema import load_corpus

    (case,) = [c for _, c in load_corpus(_write(tmp_path, GOOD))]
    assert case.id == "x-1" and case.measured.value == 150.0


def test_duplicate_ids_and_mixed_fit_groups_are_refused(tmp_path):
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.errors import SpecError

    folder = _write(tmp_path, GOOD, "a.yaml")
    _write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(SpecError, match="already used in a.yaml"):
        load_corpus(folder)


def test_single_case_fit_group_is_refused(tmp_path):
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.errors import SpecError

    def one_fitted(d):
        d["cases"][0]["conditions"].update(k=2, drafter="eagle")
        d["cases"][0]["acceptance"] = {"handling": "fitted", "fit_group": "g"}

    with pytest.raises(SpecError, match="at least 2"):
        load_corpus(_write(tmp_path, _bad(one_fitted)))


# --- the evaluation ---------------------------------------------------------------------------------------


def test_predicted_quantities_follow_their_definitions():
    from dsdsim.corpus.evaluate import predict_quantity, tau_of_alpha
    from dsdsim.corpus.schema import Quantity

    t, t0, tau = 0.012, 0.010, 2.5
    assert predict_quantity(Quantity.itl_ms, 4, tau, t, t0) == pytest.approx(4.8)
    assert predict_quantity(Quantity.tokens_per_s, 4, tau, t, t0) == pytest.approx(4 * 2.5 / 0.012)
    assert predict_quantity(Quantity.speedup_vs_no_sd, 4, tau, t, t0) == pytest.approx(2.5 * 0.010 / 0.012)
    assert predict_quantity(Quantity.step_time_ratio, 4, None, t, t0) == pytest.approx(1.2)
    assert tau_of_alpha(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_fitted_alpha_recovers_a_known_acceptance():
    """Cases generated from alpha 0.7 (with the model's own step times) give back alpha 0.7."""
    from dsdsim.corpus.evaluate import CaseTimes, fit_alpha, predict_quantity, tau_of_alpha
    from dsdsim.corpus.schema import Case, Quantity

    base = json.loads(json.dumps(GOOD["cases"][0]))
    members = []
    for k, (t, t0) in ((2, (0.011, 0.010)), (4, (0.013, 0.010)), (6, (0.016, 0.010))):
        truth = predict_quantity(Quantity.speedup_vs_no_sd, 1, tau_of_alpha(0.7, k), t, t0)
        base.update(id=f"c{k}", conditions={**base["conditions"], "k": k, "drafter": "eagle"},
                    acceptance={"handling": "fitted", "fit_group": "g"},
                    measured={"quantity": "speedup_vs_no_sd", "value": truth})
        members.append((Case.model_validate(base), CaseTimes(t, t0, True, "dense", "eagle")))
    assert fit_alpha(members) == pytest.approx(0.7, abs=1e-4)


def test_report_covers_every_evaluated_case_once(corpus, report):
    ids = [c.id for c in report.cases]
    assert len(ids) == len(set(ids)) == len(corpus)
    for c in report.cases:
        if c.not_evaluated is None:
            assert c.predicted > 0 and c.rel_error == pytest.approx(c.predicted / c.measured - 1)
        else:
            assert c.predicted is None and c.rel_error is None


def test_train_median_error_is_no_worse_than_the_committed_baseline(report):
    """Step-level and end-to-end train cases each against their own committed baseline."""
    base = json.loads((CORPUS / "baseline.json").read_text())
    assert base["reason"].strip()
    for key, n_key, median_key in (("train_step", "train_n", "train_median_abs_rel_error"),
                                   ("train_e2e", "train_e2e_n", "train_e2e_median_abs_rel_error")):
        s = report.summary[key]
        assert s.n == base[n_key], f"the {key} split changed size: re-baseline on purpose, with a reason"
        assert s.median_abs_rel_error <= base[median_key], (
            f"{key} median |error| {s.median_abs_rel_error:.4f} is worse than the baseline "
            f"{base[median_key]:.4f} ({base['reason']})")
    whole = report.summary["train"]
    assert whole.n == base["train_n"] + base["train_e2e_n"]


def test_engine_filter_keeps_only_that_engine():
    from dsdsim.corpus.evaluate import accuracy

    r = accuracy(split="test", measured_on="sglang")
    assert r.cases and {c.engine for c in r.cases} == {"sglang"} and {c.split for c in r.cases} == {"test"}
    assert r.summary["train"].n == 0


# --- the command ------------------------------------------------------------------------------------------


def test_accuracy_json_contract(cli):
    code, out, err = cli("accuracy", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    for case in d["cases"]:
        assert {"id", "source", "split", "quantity", "measured", "predicted", "rel_error"} <= set(case)
    for split in ("train", "test"):
        assert set(d["summary"][split]) == {"n", "median_abs_rel_error", "max_abs_rel_error"}
        assert d["summary"][split]["n"] == sum(1 for c in d["cases"] if c["split"] == split and c["predicted"])


def test_accuracy_table_prints_cases_and_summary(cli):
    code, out, err = cli("accuracy", "--split", "train", "--measured-on", "magicdec")
    assert code == 0, err
    assert "magicdec-selfspec-h100-p8000-b64" in out and "median |err|" in out and "alpha" in out


def test_accuracy_csv_and_plot(cli, tmp_path):
    pytest.importorskip("matplotlib")
    csv_path, png = tmp_path / "a.csv", tmp_path / "a.png"
    code, out, err = cli("accuracy", "--format", "csv", "-o", csv_path, "--plot", png)
    assert code == 0, err
    assert csv_path.read_text().splitlines()[0].startswith("id,source,split,quantity,measured,predicted,rel_error")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv,fragment", [
    (["--split", "validation"], "--split"),
    (["--measured-on", "tgi"], "no measurement case was measured on 'tgi'"),
    (["--engine", "tgi"], "unknown engine 'tgi'"),
    (["--plot", "{tmp}/a.jpg"], "ending in .png"),
    (["-f", "json", "-o", "{tmp}/x.txt"], "--format json writes .json"),
    (["--format", "json", "-o", "{tmp}/missing/x.json"], "does not exist"),
    (["--corpus", "{tmp}/nowhere"], "does not exist"),
    (["--corpus", "{bad}", "--format", "json", "-o", "{tmp}/out.json"], "cases.0.conditions.batch: unknown field"),
])
def test_accuracy_bad_input_one_line_exit_2_nothing_written(cli, tmp_path, argv, fragment):
    bad = _write(tmp_path, _bad(lambda d: d["cases"][0]["conditions"].update(batch=1)))
    args = [a.replace("{tmp}", str(tmp_path)).replace("{bad}", str(bad)) for a in argv]
    code, out, err = cli("accuracy", *args)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dsdsim: error:") and fragment in lines[0], err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


# --- layering and messages -------------------------------------------------------------------------------


def test_checks_and_evaluate_import_one_way():
    """evaluate.py runs the checks; checks.py reads the CaseResult type from results.py, never from evaluate.py
    (not even for type checking), so the two modules form no circle."""
    import ast

    import dsdsim.corpus.checks as checks_module

    tree = ast.parse(Path(checks_module.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "dsdsim.corpus.evaluate" not in imported, imported
    assert "dsdsim.corpus.results" in imported
    from dsdsim.corpus.evaluate import CaseResult
    from dsdsim.corpus.results import CaseResult as Shared

    assert CaseResult is Shared


@pytest.mark.parametrize("mutate,fragment", [
    (lambda d: d["cases"][0].update(train_list_item=3), "src.yaml: cases.0: train cases name their train_list_item"),
    (lambda d: d["cases"][0]["measured"].update(value="fast"), "cases.0.measured.value: must be a number, got the "
                                                               "text 'fast'"),
    (lambda d: d.update(cases=[]), "cases: must hold at least 1 item, got 0"),
])
def test_schema_errors_speak_of_the_file_and_field_not_pydantic(tmp_path, mutate, fragment):
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.errors import SpecError

    with pytest.raises(SpecError) as exc:
        load_corpus(_write(tmp_path, _bad(mutate)))
    msg = str(exc.value)
    assert fragment in msg, msg
    for word in ("Value error", "Input should", "(top level)", "List should"):
        assert word not in msg, msg


def test_a_corpus_file_that_is_not_utf8_says_so(tmp_path):
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.errors import SpecError

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "src.yaml").write_bytes(yaml.safe_dump(GOOD, allow_unicode=True).replace("t", "caf\xe9", 1)
                                      .encode("latin-1"))
    with pytest.raises(SpecError, match=r"src\.yaml is not UTF-8 text: save it as UTF-8$"):
        load_corpus(folder)


def test_an_assumed_acceptance_is_used_as_stated_named_and_kept_out_of_every_fit(tmp_path):
    """A source that gives no acceptance gets one from another source, named in the case (``handling: assumed``):
    the case is predicted at that AL exactly as if it were reported (tau 2.18 at K = 2 here, hand-checked against
    the reported twin), says 'assumed', and enters no engine fit."""
    from dsdsim.corpus.evaluate import all_case_steps, evaluate, reported_tau
    from dsdsim.corpus.schema import load_corpus
    from dsdsim.fit.engine import fit_cases

    def twin(handling: str, cid: str) -> dict:
        d = json.loads(json.dumps(GOOD))["cases"][0]
        d["id"], d["split"], d["train_list_item"] = cid, "train", 25
        d["conditions"].update(k=2, drafter="eagle3")
        d["acceptance"] = {"handling": handling, "al": 2.18, "note": "another source's AL, same drafter and K"}
        return d

    data = {"source": GOOD["source"], "cases": [twin("assumed", "x-assumed"), twin("reported", "x-reported")]}
    corpus = load_corpus(_write(tmp_path, data))
    (assumed, reported) = [c for _, c in corpus]
    assert reported_tau(assumed) == (2.18, None, "AL 2.18 assumed")
    by_id = {r.id: r for r in evaluate(corpus)[0]}
    assert by_id["x-assumed"].predicted == by_id["x-reported"].predicted
    assert by_id["x-assumed"].acceptance == "AL 2.18 assumed"
    steps = all_case_steps(corpus)
    assert [c.id for _, c in fit_cases(corpus, steps)] == ["x-reported"]


def test_the_readme_deepseek_r1_table_is_what_accuracy_prints(report):
    """The README's DeepSeek-R1 (dstack) table quotes measured / predicted TPOT and TTFT p50 and their errors: each
    figure is the report's, rounded as printed (a stale table fails here)."""
    import re

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rows = [ln for ln in text.split("#### DeepSeek-R1 on one 8-GPU node")[1].splitlines() if ln.startswith("| 8×")]
    stacks = {"H200, vLLM": "h200-vllm", "H200, SGLang": "h200-sglang", "MI300X, vLLM": "mi300x-vllm",
              "MI300X, SGLang": "mi300x-sglang"}
    columns = [("tpot", 4, 1.0), ("tpot", 32, 1.0), ("tpot", 128, 1.0), ("ttft", 4, 1.0), ("ttft", 128, 1e-3)]
    by_id = {c.id: c for c in report.cases}
    assert len(rows) == 4
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        stack = next(v for k, v in stacks.items() if k in cells[0])
        for cell, (what, clients, scale) in zip(cells[1:], columns):
            m = re.match(r"([\d,.]+) / ([\d,.]+)(?: \w+)? \(([−-]?\d+)%\)", cell)
            assert m, cell
            case = by_id[f"dstack-dsr1-{stack}-c{clients}-{what}-p50"]
            for shown, value in ((m.group(1), case.measured), (m.group(2), case.predicted)):
                digits = len(shown.split(".")[1]) if "." in shown else 0
                assert abs(float(shown.replace(",", "")) - value * scale) <= 0.5 * 10 ** -digits + 1e-9, (cell, value)
            assert int(m.group(3).replace("−", "-")) == round(100 * case.rel_error), (cell, case.rel_error)
    # the offline throughputs, as the paragraph after the table sums them up
    ratios = {(cid.split("-")[2] + "-" + cid.split("-")[3], int(cid.split("-n")[-1].split("-")[0])): 1 + r.rel_error
              for cid, r in by_id.items() if "-offline-" in cid}
    small = [v for (_, n), v in ratios.items() if n <= 128]
    sglang_h200 = [v for (stack, n), v in ratios.items() if n >= 256 and stack == "h200-sglang"]
    others = [v for (stack, n), v in ratios.items() if n >= 256 and stack != "h200-sglang"]
    said = (f"{min(small):.1f}-{max(small):.1f}× the measured at 32-128 prompts",
            f"read −{round(100 * (1 - min(sglang_h200)))}% to +{round(100 * (max(sglang_h200) - 1))}%",
            f"other three stacks {min(others):.1f}-{max(others):.1f}× too high")
    flat = " ".join(text.split())
    assert all(p in flat for p in said), said


def test_the_readme_summary_table_is_what_accuracy_prints(report):
    """The README's accuracy summary ("The summary as printed": split, group, n, median and max |error|) is the
    report's, row for row (a stale table fails here)."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("The summary as printed")[1].split("```")[1]
    shown = [tuple(c.strip() for c in ln.strip("│").split("│"))
             for ln in block.splitlines() if ln.startswith("│")]
    want = []
    for split, s in report.summary.items():
        groups = [("all", s)] + [(f"{g.axis}={g.value}", g.summary) for g in report.groups if g.split == split]
        want += [(split, name, str(x.n), f"{100 * x.median_abs_rel_error:.1f}%", f"{100 * x.max_abs_rel_error:.1f}%")
                 for name, x in groups if x.n]
    assert shown == want


def test_the_readme_quotes_the_minimax_runs_as_accuracy_gives_them(report):
    """The README's paragraph on the test split quotes the MiniMax-M2.5 runs without speculation at concurrency 4 and
    64 (the vLLM EAGLE-3-on-AMD blog, 4x MI355X): the report's errors, formatted as the README writes them."""
    text = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    err = {c.id: c.rel_error for c in report.cases}
    lo, hi = (err[f"vllm-blog-eagle3-amd-minimax-m25-mi355x-tp4-nospec-c{c}-run-tps"] for c in (4, 64))
    assert f"are read: {100 * lo:+.1f}% at concurrency 4 to {100 * hi:+.1f}% at 64." in text


def test_the_readme_leave_one_source_out_table_is_what_accuracy_prints():
    """The README's held-out table (each source's n, median and max |error| with the source held out of every fit)
    and the median of those medians are `dsdsim accuracy --cv source`'s, as printed (a stale table fails here)."""
    import re

    from dsdsim.fit.cv import accuracy_with_source_cv

    cv = accuracy_with_source_cv().cv
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### The error to expect: leave one source out")[1].split("### ")[0]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines()
            if ln.startswith("| ") and not ln.startswith(("| source", "| ---"))]
    by_name = {re.sub(r"^https://github\.com/|^https://", "", k): v for k, v in cv.sources.items()}
    assert len(rows) == sum(1 for v in cv.sources.values() if v.median_abs_rel_error is not None)
    for name, split, n, med, mx in rows:
        s = by_name[name]
        assert (split, int(n)) == (s.split, s.n), name
        assert (med, mx) == (f"{100 * s.median_abs_rel_error:.1f}%", f"{100 * s.max_abs_rel_error:.1f}%"), name
    assert f"Median of the per-source medians **{100 * cv.median_of_source_medians:.1f}%**" in section


def test_the_readme_quotes_the_recipe_cookbook_and_inferencemax_runs_as_accuracy_gives_them(report):
    """The README's section on the serving runs of SGLang's cookbook, vLLM's recipes, GPUStack and InferenceMAX: its
    summary sentence is the report's, and every error its two tables print is one of those cases' errors."""
    import re
    import statistics

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("#### Recipe, cookbook and InferenceMAX runs")[1].split("#### ")[0]
    new = [c for c in report.cases if c.rel_error is not None and c.id.startswith(
        ("sglang-cookbook-", "vllm-recipes-", "gpustack-", "inferencemax-"))]

    def med(cases) -> str:
        return f"{100 * statistics.median(abs(c.rel_error) for c in cases):.1f}%"

    by = {q: [c for c in new if getattr(c.quantity, "value", c.quantity) == q] for q in ("tpot_p50_ms", "e2e_latency_ms",
                                                                  "run_tokens_per_s", "ttft_p50_ms")}
    said = (f"Over the {len(new)} cases the median error is {med(new)} (TPOT p50 {med(by['tpot_p50_ms'])}, mean "
            f"latency {med(by['e2e_latency_ms'])}, throughput {med(by['run_tokens_per_s'])}, TTFT p50 "
            f"{med(by['ttft_p50_ms'])}).")
    assert said in " ".join(section.split())
    errors = {f"{100 * c.rel_error:+.0f}%" for c in new}
    shown = re.findall(r"\(([+-]\d+%)\)", "\n".join(ln for ln in section.splitlines() if ln.startswith("|")))
    assert shown and set(shown) <= errors, sorted(set(shown) - errors)
