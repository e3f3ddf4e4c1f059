"""Engine specs: shipped files, the engine terms in a step, the reproducible corpus fit, and fitting an engine to a
user's few measured points (calibrate --measurements), with a synthetic engine of known figures as ground truth."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT
from dsdsim.cost.step import simulate_step
from dsdsim.specs.setup import resolve
from dsdsim.specs.catalog import engine_names, load_engine
from dsdsim.specs.hardware import Verified

FAMILIES = ("vllm", "sglang", "trtllm")


def _shipped():
    from dsdsim.specs.catalog import shipped_dir

    return sorted(p.stem for p in shipped_dir("engine_specs").glob("*.yaml"))


def test_shipped_engines_load_and_fitted_terms_name_train_cases_inside_their_range():
    from dsdsim.corpus.schema import load_corpus

    train = {c.id for _, c in load_corpus() if c.split.value == "train"}
    assert {"ideal", "vllm-0.7", "vllm-0.8.5-0.13", "vllm-0.14-0.23", "vllm-0.24"} <= set(_shipped())
    fitted_somewhere = 0
    for name in _shipped():
        spec = load_engine(name)
        if name == "ideal":
            assert not spec.terms and spec.cuda_graphs.capture_sizes is None
            continue
        assert spec.versions is not None, name
        for t in spec.terms:
            assert t.mechanism and t.source, (name, t.name)
            lo, hi = t.range
            assert lo <= t.value <= hi
            if t.fit:
                assert lo <= t.prior <= hi, (name, t.name)
            if t.verified is Verified.fitted:
                fitted_somewhere += 1
                assert t.cases and set(t.cases) <= train, f"{name}.{t.name} is fitted on non-train cases"
        if spec.fit is not None:
            assert set(spec.fit.cases) <= train
    assert fitted_somewhere >= 5


def test_version_ranges_of_one_engine_do_not_overlap_and_cover_their_releases():
    from dsdsim.specs.catalog import resolve_engine_name

    by_family: dict = {}
    for name in _shipped():
        spec = load_engine(name)
        if spec.versions is not None:
            by_family.setdefault(spec.name, []).append((name, spec))
    for family, specs in by_family.items():
        for i, (a, sa) in enumerate(specs):
            for b, sb in specs[i + 1:]:
                assert not (sa.versions.covers(sb.versions.first) or sb.versions.covers(sa.versions.first)), (a, b)
    assert resolve_engine_name("vllm@0.7.3") == "vllm-0.7"
    assert resolve_engine_name("vllm@0.8.4") == "vllm-0.8.0-0.8.4"
    assert resolve_engine_name("vllm@0.10.1") == "vllm-0.8.5-0.13"
    assert resolve_engine_name("vllm@0.13.2") == "vllm-0.8.5-0.13"
    assert resolve_engine_name("vllm@0.14.0") == "vllm-0.14-0.23"
    assert resolve_engine_name("vllm@0.27.1") == "vllm-0.24"
    assert resolve_engine_name("vllm@0.29.0") == "vllm-0.29"
    assert resolve_engine_name("vllm") == "vllm-0.29"          # the current release line
    assert resolve_engine_name("sglang@v0.4.10.post1") == "sglang-0.4.7-0.5.11"
    assert resolve_engine_name("sglang@0.4.4") == "sglang-0.4-0.4.4"
    assert resolve_engine_name("sglang@0.4.6") == "sglang-0.4.5-0.4.6"


@pytest.mark.parametrize("name,fragment", [
    ("vllm@0.0.1", "no vllm engine spec covers version 0.0.1; the shipped ranges are 0.1-0.7"),
    ("vllm@latest", "cannot read engine version 'latest'"),
    ("vlm", "did you mean vllm"),
])
def test_unknown_engine_versions_fail_in_one_line_naming_the_ranges(name, fragment):
    from dsdsim.errors import SpecError

    with pytest.raises(SpecError) as e:
        load_engine(name)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_release_past_the_checked_one_is_priced_with_a_warning_naming_the_spec(cli):
    """vllm@9.9 runs on the open vllm-0.29 spec, checked through 0.34: one warning line names the spec and the
    release it was checked at; a release it was checked at (0.34.1) says nothing."""
    code, out, err = cli("predict", "-e", "vllm@9.9", "-b", "1-4", "-f", "vllm")
    warns = [ln for ln in err.splitlines() if ln.startswith("dsdsim: warning:")]
    assert code == 0 and len(warns) == 1
    assert "vllm 9.9 is past the newest release the vllm-0.29 spec (>=0.29) was checked at (0.34" in warns[0]
    code, out, err = cli("predict", "-e", "vllm@0.34.1", "-b", "1-4", "-f", "vllm")
    assert code == 0 and "warning" not in err
    for name in ("vllm", "sglang", "trtllm"):     # every current release line says how far it was checked
        v = load_engine(name).versions
        assert v.last is None and v.checked_through and v.checked_source, name


@pytest.mark.parametrize("versions, fragment", [
    ({"first": "0.2", "last": "0.3", "checked_through": "0.3", "checked_source": "x"}, "for an open range"),
    ({"first": "0.2", "checked_through": "0.1", "checked_source": "x"}, "comes before first"),
    ({"first": "0.2", "checked_through": "0.4"}, "needs its checked_source"),
])
def test_checked_through_is_validated(versions, fragment):
    from pydantic import ValidationError

    from dsdsim.specs.engine import VersionRange

    with pytest.raises(ValidationError, match=fragment):
        VersionRange(**versions)


def test_ideal_engine_is_the_kernels_and_engines_only_add_time():
    base = dict(model="llama-3.1-8b", hardware="h100-sxm", drafter="eagle3", batch=np.array([1, 8, 64, 200]), k=3)
    ideal = simulate_step(**base, engine="ideal")
    assert np.allclose(ideal.step_time_s, ideal.kernel_time_s)
    for name in _shipped():
        if load_engine(name).name in FAMILIES:
            assert np.all(simulate_step(**base, engine=name).step_time_s >= ideal.step_time_s * (1 - 1e-12)), name


def _host_term_sum(spec, per, applies):
    from dsdsim.specs.engine import STEP_KINDS_OF

    return sum(t.value for t in spec.terms if t.runs_on.value == "host" and t.per.value == per
               and "speculative" in STEP_KINDS_OF[t.applies] and (applies is None or t.applies.value == applies))


def test_async_scheduling_hides_speculative_host_time_from_014_only():
    """vLLM PR #31998 (0.14): async scheduling covers EAGLE/MTP speculation; before, the host waits every step."""
    old, new = load_engine("vllm@0.13"), load_engine("vllm@0.20")
    b, k = 8, 3
    s_old = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, k, engine=old)
    s_new = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, k, engine=new)
    assert float(s_new.engine_time.host_exposed_s) == 0.0            # ~1 ms of host work under a ~9 ms step
    host = float(s_old.engine_time.host_s)
    assert host > 0 and float(s_old.engine_time.host_exposed_s) <= host
    # the host work of draft passes hides behind the passes' kernels; the rest is paid in full
    per_pass = _host_term_sum(old, "draft_pass", None) * k
    assert float(s_old.engine_time.host_exposed_s) >= host - per_pass - 1e-12
    # the engine option forces it either way (PR #25872 measured --async-scheduling on 0.10/0.11)
    forced = simulate_step(None, None, batch=b, k=k, setup=resolve("llama-3.1-8b", "h100-sxm", None, "eagle3",
                                                                     old, async_scheduling=True))
    assert float(forced.engine_time.host_exposed_s) == 0.0
    # EAGLE/MTP only: an n-gram server keeps the synchronous path
    ngram = simulate_step("llama-3.1-8b", "h100-sxm", None, "ngram", 64, 3, engine=new)
    assert float(ngram.engine_time.host_exposed_s) > 0


def test_a_workers_own_host_term_is_paid_by_its_drafters_only():
    """SGLang's spec-v1 DFlashWorker (PR #16818) is its own class beside EAGLEWorker: a DFlash step pays
    dflash_step, not eagle_step / eagle_per_request; an EAGLE-3 step the other way round. The host time exposed
    (no overlap on 0.4-0.5.11) differs by exactly the terms each worker pays."""
    from dsdsim.specs.engine import EngineParams

    spec = load_engine("sglang@0.5.10")
    terms = {t.name: t for t in spec.terms}
    assert terms["dflash_step"].paid_by("dflash") and not terms["dflash_step"].paid_by("eagle3")
    assert terms["eagle_step"].paid_by("eagle3") and not terms["eagle_step"].paid_by("dflash")
    b = 8
    host = {}
    for kind in ("dflash", "eagle3"):
        p = EngineParams.of(spec, drafter_kind=kind)
        step_host, seq_host = p.speculative.host_s[0], p.speculative.host_s[1]
        host[kind] = step_host + b * seq_host
    shared = terms["schedule_and_prepare"].value + b * terms["per_request"].value
    assert host["dflash"] == pytest.approx(shared + terms["dflash_step"].value, rel=1e-9)
    assert host["eagle3"] == pytest.approx(shared + terms["eagle_step"].value + b * terms["eagle_per_request"].value,
                                           rel=1e-9)


def test_a_term_names_real_drafter_kinds_and_speculative_steps():
    from pydantic import ValidationError

    from dsdsim.specs.engine import EngineTerm

    base = dict(name="x", component="drafter", runs_on="host", per="step", applies="speculative", value=1e-3,
                range=(0, 2e-3), source="s", verified="secondary", mechanism="m")
    assert EngineTerm(**base, drafters=("dflash",)).paid_by(None)        # a step of unknown kind pays it
    with pytest.raises(ValidationError, match="drafter kinds"):
        EngineTerm(**base, drafters=("dflsh",))
    with pytest.raises(ValidationError, match="speculative steps"):
        EngineTerm(**{**base, "applies": "plain"}, drafters=("dflash",))


def test_the_off_tier_of_a_dynamic_table_is_not_a_plain_server():
    """vllm-project/vllm issue #49548: the K = 0 tier still runs the drafter's first pass and the speculative
    bookkeeping; a version without dynamic tables (0.14-0.23) has no off tier."""
    for b in (2, 64):
        plain = simulate_step("llama-3.1-8b", "h100-sxm", None, None, b, 0, engine="vllm@0.27")
        off = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, 0, engine="vllm@0.27", dynamic=True)
        assert float(off.draft.time_s) > 0 and float(off.step_time_s) > float(plain.step_time_s)
        same = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, 0, engine="vllm@0.20", dynamic=True)
        base = simulate_step("llama-3.1-8b", "h100-sxm", None, None, b, 0, engine="vllm@0.20")
        assert float(same.step_time_s) == pytest.approx(float(base.step_time_s), rel=1e-12)


def test_kernel_count_terms_are_timed_at_the_hardwares_small_kernel():
    from dsdsim.cost.engine import term_seconds
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware("h100-sxm")
    eager = hw.kernels.kernel_floor_s.value + hw.eager_launch_overhead_s.value
    step = simulate_step("llama-3.1-8b", hw, None, "eagle3", 4, 3, engine="vllm@0.20")
    terms = dict((t.name, s) for t, s in term_seconds(step.engine, step))
    assert terms["rejection_sampler"] == pytest.approx(step.engine.term("rejection_sampler").value * eager)
    assert terms["draft_pass_small_ops"] == pytest.approx(step.engine.term("draft_pass_small_ops").value * eager * 3)


def test_cuda_graph_padding_by_tokens_and_eager_beyond_the_largest_capture():
    old = load_engine("vllm@0.10")        # capture by tokens up to 512
    s = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", np.array([3, 100, 200]), 3, engine=old)
    assert list(s.verify_padded_tokens) == [16.0, 400.0, 800.0]     # 12 -> 16; 400 captured; 800 eager, unpadded
    assert list(s.verify_graphed) == [True, True, False]
    # from 0.14 (FULL decode graphs) the capture sizes are rounded up to multiples of K + 1 (here 3: 8 -> 9,
    # 16 -> 18), so 3 sequences of 3 tokens replay the 9-token graph unpadded where 0.13 padded them to 16
    b = np.array([3, 5, 100])
    assert list(simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, 2, engine=old).verify_padded_tokens) \
        == [16.0, 16.0, 304.0]
    new = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, 2, engine="vllm@0.20")
    assert list(new.verify_padded_tokens) == [9.0, 18.0, 306.0]
    assert all(new.verify_graphed)


def test_fit_script_is_reproducible():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "fit_engines.py"), "--check"],
                       capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_predict_json_names_the_engine_and_its_releases(cli):
    code, out, err = cli("predict", "-b", "1,8", "--max-k", "3", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["engine"] == {"name": "vllm", "source": "engine_specs/vllm-0.29.yaml", "versions": ">=0.29",
                           "runner": "v2"}
    code, out, err = cli("predict", "-b", "1,8", "--max-k", "3", "--format", "json", "--engine", "vllm@0.10.1")
    assert code == 0, err
    assert json.loads(out)["engine"]["source"] == "engine_specs/vllm-0.8.5-0.13.yaml"


def test_list_and_show_engines(cli):
    code, out, err = cli("list", "engines")
    assert code == 0 and all(n in out for n in ("vllm-0.8.5-0.13", "0.14-0.23", "sglang", "ideal")), err
    code, out, err = cli("show", "engine", "vllm@0.24", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["name"] == "vllm" and d["versions"]["first"] == "0.24" and d["source_file"] == "engine_specs/vllm-0.24.yaml"
    assert {"component", "runs_on", "per", "applies", "range", "mechanism", "on_bound"} <= set(d["terms"][0])
    code, out, err = cli("show", "engine", "vllm@0.10.1")
    assert code == 0 and "schedule_and_prepare" in out and "what each term is" in out, err


# --- calibrate --measurements ------------------------------------------------------------------------------


TRUTH = (1.05, 0.70, 1.3, 1.2, 1.0)     # the synthetic deployment: factors on bandwidth, compute, launch, engine terms


def _synthetic_points(pairs, noise=0.02, seed=0):
    """Step times of the shipped vLLM deployment with TRUTH's factors, per-token ITL at alpha 0.7, times up to
    +/-2% noise."""
    from dsdsim.fit.points import MeasuredPoint
    from dsdsim.fit.shape import StepModel
    from dsdsim.policy.acceptance import constant

    rng = np.random.default_rng(seed)
    model = StepModel(resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm"))
    out = []
    for b, k in pairs:
        t = float(model.step_s(np.array(TRUTH), [b], [k], [1024])[0])
        al = float(constant(0.7).tau(k))
        out.append(MeasuredPoint(b, k, 1024, 1e3 * t / al * (1 + rng.uniform(-noise, noise)), al))
    return out


def test_six_planned_points_predict_twenty_others_within_five_percent():
    """The figures of a deployment slower in compute and launches than the shipped spec are recovered from the six
    points --plan picks, and the written spec predicts 20 other (batch, K) points within 5% (noise 2%)."""
    from dsdsim.fit.points import merge_points
    from dsdsim.fit.shape import ShapeCalibration, StepModel, candidate_grid, plan_points

    setup = resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm")
    model = StepModel(setup)
    plan = plan_points(model, 6, *candidate_grid(model, 8, 1024))
    train = merge_points([(p, "row") for p in _synthetic_points([(q.batch, q.k) for q in plan.points])])
    cal = ShapeCalibration(setup).fit(train)
    assert len(cal.loo_error_) == 6
    compute = next(f for f in cal.figures_ if f.kind.name == "compute")
    assert compute.factor == pytest.approx(TRUTH[1], rel=0.1)
    spec = cal.engine_spec("mine", ["synthetic.csv"], "2026-06-01")
    others = [(b, k) for b in (2, 8, 24, 48, 128) for k in (1, 2, 4, 5)]
    assert len(others) == 20
    for p in _synthetic_points(others, noise=0.0, seed=1):
        t = float(simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", p.batch, p.k, 1024, engine=spec)
                  .step_time_s)
        assert t * 1e3 == pytest.approx(p.step_ms, rel=0.05), (p.batch, p.k)


def _csv(tmp_path, rows, header="batch_size,k,context,itl_ms,acceptance_length"):
    path = tmp_path / "points.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


GOOD = ["1,0,1024,7.4,1", "16,0,1024,8.1,1", "64,0,1024,11.2,1", "1,3,1024,4.6,2.3", "16,3,1024,5.4,2.3"]


def test_calibrate_measurements_writes_a_spec_that_predict_picks_up(cli, tmp_path):
    out = tmp_path / "mine.yaml"
    code, stdout, err = cli("calibrate", "--measurements", _csv(tmp_path, GOOD), "--name", "mine", "-o", out,
                            "--date", "2026-06-01")
    assert code == 0, err
    assert "leave-one-out" in stdout and out.is_file()
    spec = load_engine(out)
    assert spec.name == "mine" and spec.calibration is not None
    # every figure is printed beside its prior and bounds, as the spec file keeps them
    for f in spec.calibration.figures:
        assert f.label in stdout and f.range[0] <= f.value <= f.range[1]
    code, stdout, err = cli("predict", "--engine", out, "-b", "1,8", "--max-k", "3", "--format", "json")
    assert code == 0, err
    assert json.loads(stdout)["engine"]["name"] == "mine"


def test_calibrate_reads_vllm_bench_and_sglang_results(tmp_path):
    from dsdsim.fit.points import read_measurements

    vllm = tmp_path / "vllm.json"
    vllm.write_text(json.dumps({"max_concurrency": 16, "mean_tpot_ms": 5.4, "num_speculative_tokens": 3,
                                "spec_decode_acceptance_length": 2.3}))
    sglang = tmp_path / "sglang.jsonl"
    sglang.write_text("\n".join(json.dumps({"max_concurrency": b, "mean_tpot_ms": t, "accept_length": None})
                                for b, t in ((1, 7.4), (16, 8.1))) + "\n")
    pts = read_measurements([vllm, sglang], 2048)
    assert [(p.batch, p.k, p.context, p.step_ms) for p in pts] == [(1, 0, 2048, 7.4), (16, 0, 2048, 8.1),
                                                                   (16, 3, 2048, pytest.approx(12.42))]


@pytest.mark.parametrize("rows,fragment", [
    (GOOD[:2], "at least 3"),
    (GOOD[3:] + ["64,3,1024,8.9,2.3"], "no K = 0 point"),
    (GOOD + [GOOD[0]], "duplicate row"),
    (GOOD + ["1,0,1024,9.9,1"], "contradictory rows"),
    (GOOD + ["8,0,1024,0,1"], "itl_ms must be > 0"),
    (GOOD + ["8,3,1024,5.0,4.5"], "outside [1, K+1]"),
    (GOOD + ["8,0,1024,fast,1"], "itl_ms must be a number, got 'fast'"),
    (GOOD + ["8,0,1024,nan,1"], "itl_ms must be finite, got 'nan'"),
])
def test_calibrate_bad_input_one_line_exit_2_nothing_written(cli, tmp_path, rows, fragment):
    out = tmp_path / "mine.yaml"
    code, stdout, err = cli("calibrate", "--measurements", _csv(tmp_path, rows), "--name", "mine", "-o", out)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], err
    assert not out.exists()


def test_calibrate_refuses_a_shipped_name(cli, tmp_path):
    out = tmp_path / "vllm.yaml"
    code, _, err = cli("calibrate", "--measurements", _csv(tmp_path, GOOD), "--name", "vllm", "-o", out)
    assert code == 2 and "shipped engine spec" in err and not out.exists()


def test_per_layer_terms_count_where_vllm_cuts_its_piecewise_graphs():
    """vLLM cuts a forward pass into piecewise CUDA graphs at every attention, Mamba-2 and linear-attention op and at
    a sparse layer's indexer (``CompilationConfig._attention_ops``), each launched eagerly; FFN-only blocks add no
    cut. The counts come from the published configs themselves: Nemotron-H-8B's pattern ("M" Mamba-2, "*" attention,
    "-" MLP), DeepSeek-V3.2-Exp's 61 sparse layers (attention and indexer), Llama-3.1-8B's 32 layers."""
    from dsdsim.cost.engine import small_kernel_s, term_seconds
    from dsdsim.specs.catalog import load_model

    pattern = json.loads((REPO_ROOT / "model_specs" / "nemotron-h-8b.json").read_text())["hybrid_override_pattern"]
    cuts = pattern.count("M") + pattern.count("*")
    assert cuts == 28 and len(pattern) == 52
    assert load_model("nemotron-h-8b").graph_split_ops == cuts
    assert load_model("deepseek-v3.2-exp").graph_split_ops == 2 * 61
    assert load_model("llama-3.1-8b").graph_split_ops == 32
    step = simulate_step("nemotron-h-8b", "h100-sxm", None, "eagle3", 8, 3, engine="vllm@0.24", dynamic=True)
    paid = dict((t.name, s) for t, s in term_seconds(step.engine, step))
    assert paid["piecewise_attention"] == pytest.approx(cuts * small_kernel_s(step.hardware)[1], rel=1e-12)


def test_padding_of_one_point_is_floats_whatever_number_type_it_is_given():
    """One point (ints, numpy scalars or floats) pads to (float, bool); arrays pad to arrays with the same values.
    vLLM's capture sizes rounded to multiples of q = 4: 37 sequences x 4 tokens pad to 152 tokens, 38 x 4."""
    from dsdsim.cost.engine import padded_tokens

    g = load_engine("vllm").cuda_graphs
    for b, q in ((37, 4), (37.0, 4.0), (np.float64(37), np.int64(4))):
        tokens, graphed = padded_tokens(g, b, q)
        assert type(tokens) is float and type(graphed) is bool
        assert (tokens * 37, graphed) == pytest.approx((152.0, True))
    arr, on = padded_tokens(g, np.array([37.0, 38.0]), 4.0)
    assert arr.tolist() == pytest.approx([152 / 37, 4.0]) and on.tolist() == [True, True]


def test_the_readmes_fitted_terms_are_the_shipped_specs():
    """The README's table of fitted terms is generated (scripts/regen_goldens.py): a refit that leaves it stale
    fails here."""
    from dsdsim.cli.engine import FITTED_TERMS_BEGIN, FITTED_TERMS_END, fitted_terms_markdown

    text = (REPO_ROOT / "README.md").read_text()
    block = text[text.index(FITTED_TERMS_BEGIN) + len(FITTED_TERMS_BEGIN):text.index(FITTED_TERMS_END)].strip()
    assert block == fitted_terms_markdown()
    for stem in engine_names():
        for t in load_engine(stem).terms:
            if t.verified is Verified.fitted:
                assert f"| {t.name} |" in block


@pytest.mark.parametrize("engine, runner, label", [
    ("vllm@0.26", "v1", "engine vllm 0.24-0.28 (model runner V1)"),
    ("vllm@0.26", "v2", "engine vllm-mrv2 >=0.24 (model runner V2)"),
    ("vllm@0.31", "v1", "engine vllm 0.24-0.28 (model runner V1)"),     # VLLM_USE_V2_MODEL_RUNNER=0 through 0.33
    ("vllm", "v2", "engine vllm >=0.29 (model runner V2)"),
])
def test_the_model_runner_on_the_command_line(cli, engine, runner, label):
    """--model-runner prices the runner asked for, as VLLM_USE_V2_MODEL_RUNNER forces it, the same spec
    resolve(model_runner=...) picks."""
    from dsdsim.specs.setup import resolve

    code, out, err = cli("predict", "-b", "1-8", "-e", engine, "--model-runner", runner)
    assert code == 0, err
    assert label in out.splitlines()[0]
    s = resolve(engine=engine, model_runner=runner)
    assert s.engine.runner == runner


@pytest.mark.parametrize("argv, fragment", [
    (["-e", "vllm@0.34", "--model-runner", "v1"], "has no model runner V1 (removed in v0.34.0"),
    (["-e", "vllm@0.20", "--model-runner", "v2"], "no shipped vLLM spec prices model runner V2 for 0.20"),
    (["-e", "sglang", "--model-runner", "v1"], "has no model runner to choose"),
    (["--model-runner", "v3"], "write v1 or v2"),
])
def test_a_model_runner_that_does_not_exist_is_one_line(cli, argv, fragment):
    from conftest import one_line_error

    one_line_error(*cli("predict", "-b", "1-8", *argv)[::2], fragment)


def test_a_drafter_model_runner_v2_does_not_run_goes_to_v1_until_v1_is_removed(cli):
    """As docs/engine_graphs.md §1.4 reads vLLM's _get_v2_model_runner_unsupported_features: n-gram runs on model
    runner V1 through 0.29 and on V2 from 0.30; suffix decoding on V1 through 0.33 (unlisted at v0.33.0). predict
    says why its header names the 0.24-0.28 spec. v0.34.0 removed V1: suffix is priced on V2 there, with a warning;
    the API refuses a forced V1 there as the command line does. n-gram had been priced on V1 at every release,
    0.30-0.34 included."""
    import warnings

    from dsdsim.errors import ArgumentWarning, DsdsimError
    from dsdsim.specs.setup import resolve

    runner = {(d, e): resolve(drafter=d, engine=e).engine.runner
              for d in ("ngram", "suffix", "eagle3") for e in ("vllm@0.26", "vllm", "vllm@0.30", "vllm@0.33")}
    assert runner == {**{("ngram", e): "v1" for e in ("vllm@0.26", "vllm")},
                      **{("ngram", e): "v2" for e in ("vllm@0.30", "vllm@0.33")},
                      **{("suffix", e): "v1" for e in ("vllm@0.26", "vllm", "vllm@0.30", "vllm@0.33")},
                      **{("eagle3", e): "v2" for e in ("vllm@0.26", "vllm", "vllm@0.30", "vllm@0.33")}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve(drafter="suffix", engine="vllm@0.34").engine.runner == "v2"
        assert resolve(drafter="ngram", engine="vllm@0.34").engine.runner == "v2"
    texts = [str(w.message) for w in caught if issubclass(w.category, ArgumentWarning)]
    assert len(texts) == 1 and "vLLM 0.34 has no model runner V1" in texts[0] and "suffix drafting on V1 only" in texts[0]
    with pytest.raises(DsdsimError, match="has no model runner V1"):
        resolve(engine="vllm@0.34", model_runner="v1")
    code, out, err = cli("predict", "-b", "1-8", "-d", "ngram")
    text = " ".join(out.split())
    assert code == 0 and "vLLM runs ngram drafting on model runner V1 from 0.24 to 0.29" in text
    assert "give -e vllm@0.30 or later" in text
    code, out, err = cli("predict", "-b", "1-8", "-d", "eagle3", "-e", "vllm@0.26")
    assert code == 0 and "drafting on model runner V1" not in " ".join(out.split())
    code, out, err = cli("predict", "-b", "1-8", "-d", "suffix", "-e", "vllm@0.34")
    assert code == 0 and "engine vllm >=0.29 (model runner V2)" in out and "no model runner V1" in " ".join(err.split())


def test_a_k_table_server_on_model_runner_v1_graphs_the_unrounded_grid():
    """vLLM 0.24-0.28 model runner V1: a fixed-K server rounds its capture sizes to multiples of K + 1 (FULL decode
    graphs: 498 is the largest multiple of 3 the grid keeps, so B = 168 at K = 2, 504 tokens, runs eager), a server
    running a K table runs PIECEWISE graphs on the raw grid (504 tokens pad to the 512 capture: graphed;
    CompilationConfig.resolve_cudagraph_mode_and_sizes@v0.24.0 rounds only under FULL). Model runner V2 rounds both
    for its FULL graphs, and 0.25-0.28 replay the raw 512 as a PIECEWISE graph for both (piecewise_raw_sizes)."""
    fixed = simulate_step(engine="vllm@0.24", batch=168, k=2)
    table = simulate_step(engine="vllm@0.24", batch=168, k=2, dynamic=True)
    assert (fixed.verify_graphed, table.verify_graphed) == (False, True)
    assert (fixed.verify_padded_tokens, table.verify_padded_tokens) == (504.0, 512.0)
    v2 = [simulate_step(engine="vllm-mrv2", batch=168, k=2, dynamic=d) for d in (False, True)]
    assert [(s.verify_graphed, s.verify_piecewise, s.verify_padded_tokens) for s in v2] == [(True, True, 512.0)] * 2
    assert load_engine("vllm@0.24").cuda_graphs.dynamic_multiple_of_verify_tokens is False


def test_sglang_speculative_servers_run_48_requests_unless_told_and_predict_says_so(cli):
    """SGLang sets max_running_requests = 48 for EAGLE-family speculation (server_args.py
    _handle_speculative_decoding): a table past batch 48 is for a server started with --max-running-requests."""
    for name in ("sglang@0.4.10", "sglang@0.5.6", "sglang"):
        assert load_engine(name).speculative_max_requests.value == 48
    assert load_engine("vllm").speculative_max_requests is None
    code, out, _ = cli("predict", "-e", "sglang", "-b", "1-64", "-f", "json")
    notes = json.loads(out)["notes"]
    assert code == 0 and any("runs at most 48 requests on a speculative server" in n for n in notes)
    code, out, _ = cli("predict", "-e", "sglang", "-b", "1-48", "-f", "json")
    assert not any("runs at most 48" in n for n in json.loads(out)["notes"])


def test_simulate_says_when_sglangs_cap_holds_its_speculative_servers(cli):
    """simulate runs SGLang's speculative servers under the 48-request cap (SchedulerConfig.for_server) and says so,
    as predict does: at closed:64 their batch stays below the plain server's and the waiting shows in TTFT. Not
    said with --max-num-seqs (the user's limit) or without a speculative policy."""
    argv = ("simulate", "-e", "sglang", "--requests", "300", "--workload", "closed:64", "--input-len", "64",
            "--output-len", "32", "--executor", "local")
    code, out, _ = cli(*argv)
    text = " ".join(out.split())
    assert code == 0 and "runs at most 48 requests on a speculative server" in text
    assert "the speculative servers here run at most 48, a server without speculation 256" in text
    code, out, _ = cli(*argv, "-f", "json")
    d = json.loads(out)
    batch = {p["name"]: p["mean_batch"] for p in d["policies"]}
    assert batch["fixed:3"] < 48 < batch["none"]
    for extra in (("--max-num-seqs", "64"), ("--policies", "none")):
        code, out, _ = cli(*argv, *extra)
        assert code == 0 and "runs at most 48" not in " ".join(out.split())


def test_sglang_before_0_4_5_graphs_speculative_batches_1_to_32_exactly_and_the_draft_extend_eagerly():
    """SGLang 0.4.4 (the EAGLE-3 paper's release) sets disable_cuda_graph_padding for EAGLE and captures range(1, 33)
    for a speculative server (get_batch_sizes_to_capture@v0.4.4), with a pool of 32 requests; 0.4.5-0.4.6 pad to
    their first speculative list; neither has a draft-extend graph runner (v0.4.7). So at 0.4.4 every speculative
    batch to 32 replays an exact graph and batch 33 and up run eager (target and drafter), the plain server still pads;
    the first draft pass (the draft extend) runs eager at 0.4.4-0.4.6 and replays a graph from 0.4.7."""
    old = load_engine("sglang@0.4.4")
    assert old.speculative_max_requests.value == 32 and old.cuda_graphs.speculative_capture_sizes == tuple(range(1, 33))
    steps = {b: simulate_step(engine="sglang@0.4.4", batch=b, k=3) for b in (24, 32, 33, 48)}
    assert [steps[b].verify_graphed for b in (24, 32, 33, 48)] == [True, True, False, False]
    assert [steps[b].verify_padded_tokens for b in (24, 32, 33)] == [96.0, 128.0, 132.0]     # B x 4 tokens, unpadded
    assert simulate_step(engine="sglang@0.4.4", batch=33, k=0).verify_graphed           # the plain server pads to 40
    grid = simulate_step(engine="sglang@0.4.4", batch=np.array([32.0, 33.0]), k=np.array([3.0, 3.0]))
    assert list(grid.verify_graphed) == [True, False]
    assert grid.step_time_s[1] == pytest.approx(float(steps[33].step_time_s), rel=1e-12)
    for engine, flags in (("sglang@0.4.4", {False, True}), ("sglang@0.4.6", {False, True}), ("sglang@0.4.7", {True})):
        s = simulate_step(engine=engine, batch=8, k=3)
        assert {bool(t.cuda_graphs) for t in s.draft.op_times} == flags, engine     # the first pass eager, or none
    eager_first = simulate_step(engine="sglang@0.4.6", batch=8, k=3)
    graphed_first = simulate_step(engine="sglang@0.4.7", batch=8, k=3)
    assert eager_first.draft.time_s > graphed_first.draft.time_s


def test_sglang_speculative_steps_pad_to_the_speculative_capture_list():
    """SGLang captures a finer list for EAGLE-family servers (get_batch_sizes_to_capture@v0.4.10: range(1, 9) +
    range(10, 33, 2) + ...; ServerArgs._generate_cuda_graph_batch_sizes@v0.5.12 "less padding for smaller batch
    sizes"): at batch 9 a speculative step pads to 10 sequences, a plain step to the plain list's next size (16 on
    0.4.10's [1, 2, 4, 8, 16, ...], 12 on 0.5.12's [1, 2, 4, 8, 12, ...]). The point, the grid and the serving step
    agree."""
    from dsdsim.cost.mixed import MixedPricer
    from dsdsim.serve.step import ScheduledStep

    for engine, plain_size in (("sglang@0.4.10", 16), ("sglang", 12)):
        spec = simulate_step(engine=engine, batch=9, k=3)
        plain = simulate_step(engine=engine, batch=9, k=0)
        assert (spec.verify_padded_tokens, plain.verify_padded_tokens) == (40, plain_size)
        grid = simulate_step(engine=engine, batch=np.array([9.0, 9.0]), k=np.array([0.0, 3.0]))
        assert list(grid.verify_padded_tokens) == [plain_size, 40]
        assert grid.step_time_s[1] == pytest.approx(float(spec.step_time_s), rel=1e-12)
        pricer = MixedPricer(resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", engine))
        step = ScheduledStep(3, np.full(9, 1024.0), np.zeros(0), np.zeros(0))
        assert pricer.seconds(step) == pytest.approx(float(spec.step_time_s), rel=1e-12)
    assert load_engine("sglang@0.4.10").cuda_graphs.speculative_capture_sizes[:10] == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
    assert load_engine("vllm").cuda_graphs.speculative_capture_sizes is None


def test_model_runner_v2_before_0_29_replays_a_piecewise_graph_where_a_raw_size_comes_first():
    """vLLM model runner V2 0.25-0.28 (CudaGraphManager._init_candidates@v0.25.0: FULL graphs at round_up(size, q),
    PIECEWISE graphs at the raw sizes; dispatch takes the next token count's first graph): batch 11 at K = 4 is 55
    tokens, the raw size 56 comes before the FULL 60 (48 and 56 rounded to multiples of 5 are 50 and 60), so a
    PIECEWISE graph at 56 tokens, each of the model's split ops (attention) launched eagerly: the step adds
    split ops x (eager launch gap - graphed gap) over the same step with a FULL graph. At K = 3 (44 tokens: 48 is
    raw and FULL, FULL listed first) and from 0.29 (PR #53407, FULL first: 60 tokens) a FULL graph."""
    from dsdsim.cost.mixed import MixedPricer
    from dsdsim.serve.step import ScheduledStep
    from dsdsim.specs.catalog import load_hardware

    pw = simulate_step(engine="vllm@0.26", batch=11, k=4)
    assert (pw.verify_padded_tokens, pw.verify_graphed, pw.verify_piecewise) == (56.0, True, True)
    full = simulate_step(engine="vllm@0.26", batch=11, k=3)
    assert (full.verify_padded_tokens, full.verify_piecewise) == (48.0, False)
    later = simulate_step(engine="vllm", batch=11, k=4)
    assert later.verify_padded_tokens == pytest.approx(60.0) and not later.verify_piecewise
    from dataclasses import replace

    from dsdsim.cost.program import engine_params

    hw = load_hardware("h100-sxm")
    extra = pw.model.graph_split_ops * (hw.eager_launch_overhead_s.value - hw.launch_overhead_s.value)
    params = engine_params(pw.engine, pw.drafter)
    assert extra > 1e-4           # 32 split ops, 8 us more each
    assert pw.step_time_with(params) - replace(pw, verify_piecewise=False).step_time_with(params) == \
        pytest.approx(extra, rel=1e-9)   # host work hidden behind device time either way (async scheduling)
    # the grid and the serving step agree with the point
    grid = simulate_step(engine="vllm@0.26", batch=np.array([11.0, 11.0, 100.0]), k=np.array([3.0, 4.0, 2.0]))
    assert list(grid.verify_piecewise) == [False, True, True]            # 100 x 3 = 300: raw 304 before FULL 306
    assert grid.step_time_s[1] == pytest.approx(float(pw.step_time_s), rel=1e-12)
    pricer = MixedPricer(resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm@0.26"))
    step = ScheduledStep(4, np.full(11, 1024.0), np.zeros(0), np.zeros(0))
    assert pricer.seconds(step) == pytest.approx(float(pw.step_time_s), rel=1e-12)
    assert load_engine("vllm-mrv2").cuda_graphs.piecewise_raw_sizes and \
        not load_engine("vllm").cuda_graphs.piecewise_raw_sizes


def test_vllm_captures_to_1024_tokens_on_sm100_only():
    """vLLM from 0.29 (VllmConfig._set_cudagraph_sizes: the largest capture 1024 on SM100,
    is_device_capability_family(100)): B200 and B300 graph a fixed K = 1 server to 512 sequences, the RTX 5090
    (SM120, also Blackwell) and the H100 to 256; model runner V1 releases keep 512 tokens everywhere."""
    from dsdsim.cost.engine import graphs_on
    from dsdsim.specs.catalog import load_hardware

    vllm = load_engine("vllm").cuda_graphs
    tops = {hw: graphs_on(vllm, load_hardware(hw)).capture_sizes[-1] for hw in ("b200", "b300", "rtx-5090", "h100-sxm")}
    assert tops == {"b200": 1024, "b300": 1024, "rtx-5090": 512, "h100-sxm": 512}
    assert graphs_on(load_engine("vllm@0.26").cuda_graphs, load_hardware("b200")).capture_sizes[-1] == 512
    graphed = [simulate_step(hardware=hw, batch=400, k=1).verify_graphed for hw in ("b200", "h100-sxm")]
    assert graphed == [True, False]
    assert load_hardware("b300").compute_capability.family == "10"


def test_vllm_0_29_graphs_the_uniform_decode_batches_of_each_k():
    """From 0.29 the capture list holds n x (K + 1) for the grid's request counts (PR #50488): a fixed-K server
    graphs to 168 sequences at K = 2 and 72 at K = 6, where the rounded grid alone (0.26) stops at 166 and 71 (and
    0.26 replays the raw 512 as a PIECEWISE graph past them)."""
    from dsdsim.cost.engine import _multiples

    def limits(engine):
        g = load_engine(engine).cuda_graphs
        return [max(_multiples(g, float(k + 1))) // (k + 1) for k in range(8)]

    assert limits("vllm") == [512, 256, 168, 128, 100, 83, 72, 64]
    assert limits("vllm@0.26") == [512, 256, 166, 128, 100, 83, 71, 64]
    at_168 = [simulate_step(engine=e, batch=168, k=2) for e in ("vllm", "vllm@0.26")]
    assert [(s.verify_graphed, s.verify_piecewise) for s in at_168] == [(True, False), (True, True)]


def test_vllm_graphs_gpt_oss_to_1024_tokens():
    """vLLM 0.12+ raises GPT-OSS's largest capture to 1024 (GptOssForCausalLMConfig.verify_and_update_config);
    other models keep 512 on the same release and part."""
    from dsdsim.cost.engine import graphs_on
    from dsdsim.specs.setup import resolve

    def top(model, engine):
        s = resolve(model, "h100-sxm", None, "eagle3", engine)
        return graphs_on(s.engine.cuda_graphs, s.hardware, s.model.architecture).capture_sizes[-1]

    assert [top("gpt-oss-120b", e) for e in ("vllm@0.20", "vllm@0.26", "vllm")] == [1024, 1024, 1024]
    assert top("llama-3.1-8b", "vllm@0.20") == 512


def test_tensorrt_llm_before_1_0_is_priced_eager_and_says_so():
    """TensorRT-LLM's PyTorch backend ran without CUDA graphs unless configured before PR #5480 (first in 1.0):
    trtllm@0.20 and @0.21 are priced eager with one warning; 1.0 and the range as a whole replay graphs; an eager
    step costs the hardware's eager launch gap per kernel more than a graphed one."""
    import warnings

    from dsdsim.errors import ArgumentWarning

    def step(engine):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 8, 3, engine=engine)
        return s, [str(w.message) for w in caught if issubclass(w.category, ArgumentWarning)]

    (old, said), (new, quiet), (line, _) = step("trtllm@0.21"), step("trtllm@1.0"), step("trtllm")
    assert not old.verify_graphed and new.verify_graphed and line.verify_graphed
    assert len(said) == 1 and "0.21 ran without CUDA graphs" in said[0] and "trtllm@1.0" in said[0]
    assert not quiet
    assert old.step_time_s > new.step_time_s
    g = load_engine("trtllm").cuda_graphs
    assert [g.off_by_default(r) for r in ("0.20", "0.21.0", "1.0", "1.3.0rc27", None)] == [True, True, False, False,
                                                                                          False]


def test_model_runner_v1_graphs_the_drafters_first_pass_by_its_tokens():
    """vLLM model runner V1 (EagleProposer.propose) graphs the drafter's first pass over B x (K + 1) tokens only
    while they fit the largest capture (512 on an H100), the later passes while B does: at K = 3, batch 128 (512
    tokens) every pass replays a graph, batch 129 (516) runs its first pass eager and its later passes graphed. The
    extra time is the first pass's eager launch gaps, the same at one point, over a grid and in a serving step.
    Model runner V2 graphs the first pass as the target (batch 129 graphed, as before)."""
    from dsdsim.cost.mixed import MixedPricer
    from dsdsim.serve.step import ScheduledStep
    from dsdsim.specs.setup import resolve

    def passes(step):
        flags = {}
        for t in step.draft.op_times:
            flags.setdefault(t.op.name.split(".")[0], set()).add(bool(np.all(t.cuda_graphs)))
        return flags

    v1 = [simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", b, 3, engine="vllm@0.20") for b in (128, 129)]
    assert passes(v1[0]) == {"pass1": {True}, "passN": {True}}
    assert passes(v1[1]) == {"pass1": {False}, "passN": {True}}
    assert v1[1].draft.time_s > v1[0].draft.time_s
    grid = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", np.array([128.0, 129.0]), 3, engine="vllm@0.20")
    assert grid.step_time_s[1] == pytest.approx(v1[1].step_time_s, rel=1e-9)
    flags = {t.op.name.split(".")[0]: list(np.broadcast_to(t.cuda_graphs, (2,))) for t in grid.draft.op_times}
    assert flags == {"pass1": [True, False], "passN": [True, True]}
    # the serving step of 129 decodes at the point's context prices its first pass eager too
    pricer = MixedPricer(resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", "vllm@0.20"))
    serving = [pricer.seconds(ScheduledStep(3, np.full(b, 1024.0), np.zeros(0), np.zeros(0))) for b in (128, 129)]
    assert serving == pytest.approx([v.step_time_s for v in v1], rel=1e-6)
    v2 = simulate_step("llama-3.1-8b", "h100-sxm", None, "eagle3", 129, 3, engine="vllm")
    assert passes(v2) == {"pass1": {True}, "passN": {True}}
