"""The defects a new user hit (issue 12, section 3), one test or more each.

Each bad input must end in one line on stderr naming the problem (exit 2) or, where the input is usable,
in a one-line warning; nothing is silently dropped.
"""
from __future__ import annotations

import json

import pytest

from conftest import REPO_ROOT, one_line_error
from dsdsim.errors import DsdsimError
from dsdsim.policy.acceptance_input import parse_acceptance
from dsdsim.policy.predict import parse_batch_sizes


# --- 1. a huge batch range is refused before it is expanded ---------------------------------------------


def test_huge_batch_range_is_refused_before_any_work(cli, monkeypatch):
    import dsdsim.policy.predict as predict_module

    def never(*args, **kwargs):
        raise AssertionError("the grid was evaluated before the batch range was checked")

    monkeypatch.setattr(predict_module, "step_time_grid", never)
    code, _, err = cli("predict", "-b", "1-100000000")
    one_line_error(code, err, "absurd")


@pytest.mark.parametrize("text", ["1-100000000", "1-100000000:1000", "100000000", "1,2,99999999999999999999"])
def test_batch_bounds_are_checked_per_item(text):
    """Refused before the range is expanded: the parse allocates kilobytes, where 1e8 batch sizes would take 800 MB."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(DsdsimError, match="absurd"):
            parse_batch_sizes(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak


# --- 7. silently accepted or ignored input ----------------------------------------------------------------


@pytest.mark.parametrize("text, fragment", [
    ("1,,4", "empty item"), ("1,4,", "empty item"), (",1", "empty item"),
    ("１,2", "ASCII"), ("1-６４", "ASCII"), ("2.5", "cannot read"),
])
def test_batch_sizes_refuse_empty_items_and_other_digits(text, fragment):
    with pytest.raises(DsdsimError, match=fragment):
        parse_batch_sizes(text)


def test_batch_sizes_still_read_the_documented_forms():
    assert list(parse_batch_sizes("1-4")) == [1, 2, 3, 4]
    assert list(parse_batch_sizes("8, 1,2")) == [1, 2, 8]
    assert list(parse_batch_sizes("1-20:8")) == [1, 9, 17]


def test_contexts_and_context_together_is_an_error(cli):
    code, _, err = cli("predict", "--contexts", "1024,8192", "-c", "4096", "-b", "1,2")
    one_line_error(code, err, "not both")
    code, out, _ = cli("predict", "--contexts", "1024,8192", "-b", "1,2", "-f", "json")
    assert code == 0 and json.loads(out)["contexts"] == [1024, 8192]


def test_missing_specs_dir_in_the_environment_is_an_error(cli, clean_catalog, monkeypatch, tmp_path):
    monkeypatch.setenv("DSDSIM_SPECS_DIRS", str(tmp_path / "nope"))
    code, _, err = cli("predict", "-b", "1")
    one_line_error(code, err, "DSDSIM_SPECS_DIRS")


@pytest.mark.parametrize("text", ["０.８", "0.８,0.7", "al=２.5@3", "unconditional:0.６,0.4"])
def test_acceptance_refuses_non_ascii_digits(text):
    with pytest.raises(DsdsimError):
        parse_acceptance(text)


def test_acceptance_names_a_directory_as_such(tmp_path):
    with pytest.raises(DsdsimError, match="is a directory"):
        parse_acceptance(str(tmp_path))


def test_expert_overlap_on_a_dense_model_is_an_error(cli):
    code, _, err = cli("predict", "-b", "1", "--expert-overlap", "0.3")
    one_line_error(code, err, "dense")
    code, _, _ = cli("predict", "-b", "1", "-m", "qwen3-30b-a3b", "--expert-overlap", "0.3")
    assert code == 0


# --- 8. checkpoint folders and hub ids --------------------------------------------------------------------


def test_show_model_accepts_a_checkpoint_folder(cli, tmp_path):
    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text((REPO_ROOT / "model_specs" / "llama-3.1-8b.json").read_text())
    code, out, err = cli("show", "model", str(folder), "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "Llama-3.1-8B" and data["params_total"] > 8e9


def test_a_folder_without_config_json_says_so(cli, tmp_path):
    code, _, err = cli("show", "model", str(tmp_path))
    one_line_error(code, err, "no config.json")


def test_a_hub_id_says_it_is_not_fetched(cli):
    code, _, err = cli("predict", "-m", "meta-llama/Llama-3.1-8B", "-b", "1")
    one_line_error(code, err, "hub id")
    assert "config.json" in err


# --- 3. calibrating another device's spec; two specs with one name ------------------------------------------

CPU_RESULTS = REPO_ROOT / "results" / "cpu"


def test_calibrate_refuses_a_cpu_report_for_a_shipped_gpu_spec(cli, tmp_path):
    out = tmp_path / "x.yaml"
    code, _, err = cli("calibrate", "-r", CPU_RESULTS / "report.json", "-g", "h100-sxm", "-o", out)
    one_line_error(code, err, "allow-other-device")
    assert not out.exists()


def test_calibrate_names_the_spec_distinctly(cli, tmp_path):
    import datetime

    from dsdsim.specs.catalog import load_hardware

    out = tmp_path / "cal.yaml"
    code, _, err = cli("calibrate", "-r", CPU_RESULTS / "report.json", "-g", CPU_RESULTS / "probe-cpu.yaml",
                       "-o", out)
    assert code == 0, err
    spec = load_hardware(out)
    probed = load_hardware(CPU_RESULTS / "probe-cpu.yaml").name
    assert spec.name == f"{probed}@calibrated-{datetime.date.today().isoformat()}" != probed
    code, _, err = cli("calibrate", "-r", CPU_RESULTS / "report.json", "-g", "h100-sxm", "-o", out,
                       "--allow-other-device", "--name", "h100-on-my-cpu")
    assert code == 0, err
    assert load_hardware(out).name == "h100-on-my-cpu"


def test_two_hardware_specs_with_one_name_is_an_error_naming_both(cli, clean_catalog, tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    text = (REPO_ROOT / "hw_specs" / "h100-sxm.yaml").read_text()
    (folder / "x.yaml").write_text(text)                      # declares name: h100-sxm, like the shipped file
    code, _, err = cli("--specs-dir", folder, "list", "hardware")
    one_line_error(code, err, "two hardware specs are named 'h100-sxm'")
    assert "x.yaml" in err and "h100-sxm.yaml" in err


# --- 4. exports cover only what was evaluated and fits ------------------------------------------------------


def test_export_refuses_when_nothing_fits(cli):
    code, out, err = cli("predict", "-g", "l4", "-c", "100000", "--format", "vllm")    # within the 131072 window
    one_line_error(code, err, "no batch size fits")
    assert out == ""


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "trtllm"])
def test_default_table_ends_at_the_last_batch_that_fits(cli, fmt):
    from dsdsim.policy.predict import predict

    p = predict()
    last = p.last_feasible_batch
    assert last is not None and last < 1024            # the default grid runs past what fits on one H100
    assert not p.feasible[:, list(p.batch_sizes).index(last) + 1].any()
    code, out, err = cli("predict", "--format", fmt)
    assert code == 0
    assert f"table ends at {last}" in err and err.startswith("dsdsim: warning:")
    data = json.loads(out)
    if fmt == "vllm":
        assert data["num_speculative_tokens_per_batch_size"][-1][1] == last
    elif fmt == "sglang":
        assert max(int(b) for b in data) <= last
    else:
        assert max(int(b) for b in data["draft_len_schedule"]) <= last


def test_ranges_between_evaluated_sizes_are_stated(cli):
    code, out, err = cli("predict", "-b", "1,8,64,256", "--format", "vllm")
    assert code == 0
    assert "K of the evaluated size below" in err
    ranges = json.loads(out)["num_speculative_tokens_per_batch_size"]
    assert ranges[-1][1] == 256
    code, out, _ = cli("predict", "-b", "1,8,64,256", "--format", "json")
    assert any("K of the evaluated size below" in n for n in json.loads(out)["notes"])
    code, _, err = cli("predict", "-b", "1-64", "--format", "vllm")
    assert "evaluated size below" not in err                     # contiguous: nothing was filled


# --- 5. defaults adapt; only explicit conflicts are errors ----------------------------------------------------


def test_max_k_alone_lowers_the_fixed_k(cli):
    code, out, err = cli("predict", "--max-k", "2", "-b", "1,2", "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["fixed_k"] == 2 and data["grid"]["k_values"] == [0, 1, 2]


def test_medusa_alone_uses_its_head_count(cli):
    from dsdsim.specs.drafter import parse_drafter

    heads = parse_drafter("medusa").max_k
    code, out, err = cli("predict", "-d", "medusa", "-b", "1,2", "-f", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["grid"]["k_values"] == list(range(min(8, heads) + 1))
    assert data["fixed_k"] == min(3, heads)


@pytest.mark.parametrize("argv, fragment", [
    (["--max-k", "4", "--fixed-k", "6"], "fixed K"),
    (["-d", "medusa", "--max-k", "8"], "limit"),
])
def test_explicit_conflicts_are_still_errors(cli, argv, fragment):
    code, _, err = cli("predict", "-b", "1", *argv)
    one_line_error(code, err, fragment)


def test_plan_with_medusa_needs_no_max_k():
    from dsdsim.plan import plan_rows

    (r,) = plan_rows("llama-3.1-8b", ["h100-sxm"], 50.0, drafter="medusa", batch_sizes="1-16")
    assert r.feasible


# --- 6. no tracebacks, nothing left behind; output files get the user's umask ------------------------------


def test_validate_with_an_unsupported_drafter_leaves_no_folder(cli, tmp_path):
    out = tmp_path / "val"
    code, _, err = cli("validate", "-d", "mtp", "-g", "h100-sxm", "--quick", "-o", out)
    one_line_error(code, err, "eagle3")
    assert not out.exists()


@pytest.fixture
def without_torch(monkeypatch):
    """As on a machine without torch: ``import torch`` raises ImportError (a None entry in sys.modules)."""
    import sys

    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)


def test_validate_names_a_wrong_drafter_before_asking_for_torch(cli, tmp_path, without_torch):
    """The README's test command on a fresh machine: the drafter error comes first, torch or not."""
    out = tmp_path / "val"
    code, _, err = cli("validate", "-d", "mtp", "-g", "h100-sxm", "--quick", "-o", out)
    one_line_error(code, err, "eagle3")
    assert "torch" not in err and not out.exists()


@pytest.mark.parametrize("argv", [["validate", "-g", "h100-sxm", "--quick"], ["probe", "-o", "p.yaml"],
                                  ["loop"], ["comm-check"]], ids=lambda a: a[0])
def test_without_torch_the_hint_names_the_cpu_wheel(cli, tmp_path, monkeypatch, without_torch, argv):
    """A plain `pip install torch` pulls a multi-GB CUDA build on Linux: the hint names PyTorch's CPU index."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(*argv)
    one_line_error(code, err, "--index-url https://download.pytorch.org/whl/cpu")
    assert "dsdsim[validate]" in err
    assert list(tmp_path.iterdir()) == []


def test_output_onto_a_read_only_file(cli, tmp_path):
    target = tmp_path / "ro.json"
    target.write_text("keep me\n")
    target.chmod(0o444)
    code, _, err = cli("predict", "-b", "1", "-f", "json", "-o", target)
    one_line_error(code, err, "read-only")
    assert target.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro.json"]


@pytest.mark.parametrize("argv", [
    ["predict", "-b", "1", "-f", "json", "-o", "/proc/version"],
    ["predict", "-b", "1", "--plot", "/proc/x.png"],
])
def test_output_into_proc_is_one_line(cli, argv):
    code, _, err = cli(*argv)
    one_line_error(code, err, "cannot write")


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_files_follow_the_umask(cli, tmp_path, umask):
    import os

    old = os.umask(umask)
    try:
        code, _, err = cli("predict", "-b", "1,2", "-f", "json", "-o", tmp_path / "p.json", "--plot",
                           tmp_path / "p.png")
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("p.json", "p.png"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


# --- 9. labels ------------------------------------------------------------------------------------------------


def test_mixed_weight_formats_are_shown(cli):
    code, out, _ = cli("predict", "-m", "gpt-oss-120b", "-b", "1")
    assert code == 0 and "bf16 weights, mxfp4 experts" in out.splitlines()[0]
    code, out, _ = cli("explain", "-m", "gpt-oss-120b")
    assert code == 0 and "mxfp4 experts" in out.splitlines()[0]
    code, out, _ = cli("predict", "-b", "1")
    assert "experts" not in out.splitlines()[0]               # dense: one format


def test_show_hardware_prints_fractions_and_microseconds(cli):
    from dsdsim.specs.catalog import load_hardware

    hw = load_hardware("h100-sxm")
    code, out, _ = cli("show", "hardware", "h100-sxm")
    assert code == 0
    assert f"compute={hw.efficiency.compute.value:.3g}" in out
    assert " m," not in out and "e-0" not in out
    assert f"{hw.launch_overhead_s.value * 1e6:.3g} µs" in out
