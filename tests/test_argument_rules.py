"""Arguments checked against each other (issue 32, section 2): one test per rule of the README table "Arguments
checked against each other". An error is one line, exit 2, nothing written; a warning is one line on stderr and
the result is still written."""
from __future__ import annotations

import json

import pytest

from conftest import one_line_error

FAST = ("-b", "1-8")


def warnings_of(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("dsdsim: warning:")]


@pytest.mark.parametrize("argv, fragment", [
    (["predict", "-b", "8,8"], "batch size 8 is listed twice"),
    (["predict", "-b", "1-8,4"], "batch size 4 is listed twice"),
    (["predict", *FAST, "--contexts", "1024,1024"], "names a context length twice"),
    (["simulate", "--requests", "4", "--sweep", "poisson:1,1"], "twice"),
    (["simulate", "--requests", "4", "--policies", "none,none"], "listed twice"),
    (["plan", "--itl-slo-ms", "30", "-g", "h100-sxm,h100-sxm:tp1"], "candidate h100-sxm:tp1 is listed twice"),
    (["plot", "sensitivity", "--alphas", "0.6,0.6", "-o", "{tmp}/s.png"], "--alphas lists 0.6 twice"),
    (["plot", "sensitivity", "--contexts", "1024,1024", "-o", "{tmp}/s.png"], "--contexts lists 1024 twice"),
])
def test_a_list_names_each_value_once(cli, tmp_path, argv, fragment):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, _, err = cli(*argv)
    one_line_error(code, err, fragment)
    assert list(tmp_path.iterdir()) == []


def test_a_list_of_batch_sizes_from_code_is_deduplicated():
    from dsdsim.policy.predict import parse_batch_sizes

    assert parse_batch_sizes([4, 1, 4]).tolist() == [1, 4]


def test_tolerance_zero_and_a_range_budget_contradict(cli):
    one_line_error(*cli("predict", *FAST, "--tolerance", "0", "--max-ranges", "3")[::2], "give one of them")
    code, _, err = cli("predict", *FAST, "--tolerance", "0", "--max-ranges", "0", "-f", "vllm")
    assert code == 0


@pytest.mark.parametrize("argv, fragment", [
    (["--draft-tree", "4,4,16", "-a", "al=3@tree", "-e", "sglang", "--max-k", "2"], "max K applies to chains only"),
    (["--draft-tree", "4,4,16", "-a", "al=3@tree", "-e", "sglang", "--fixed-k", "2"], "fixed K applies to chains"),
    (["--draft-tree", "4,4,16", "-a", "0.8", "-e", "sglang"], "takes the mean acceptance length measured with it"),
    (["-d", "medusa", "--max-k", "8"], "beyond the medusa drafter's limit of 5"),
])
def test_a_tree_or_a_drafter_limit_against_the_k_options(cli, argv, fragment):
    one_line_error(*cli("predict", *FAST, *argv)[::2], fragment)


def test_acceptance_for_more_positions_than_k_is_a_warning(cli):
    code, out, err = cli("predict", *FAST, "-a", "0.8,0.7,0.6,0.5", "--max-k", "2", "-f", "json")
    assert code == 0 and json.loads(out)["grid"]["k_values"] == [0, 1, 2]
    assert warnings_of(err) == ["dsdsim: warning: acceptance is given for 4 positions and K goes to 2: positions 3-4 "
                                "are not used (raise --max-k to use them)"]
    code, _, err = cli("predict", *FAST, "--max-k", "2", "-f", "json")      # the shipped example: no warning
    assert code == 0 and not warnings_of(err)


@pytest.mark.parametrize("drafter, fragment", [
    ("eagle3:200000", "a draft vocabulary of 200000 is larger than llama-3.1-8b's 128256"),
    ("mtp", "has no MTP module"),
    ("dflash:2,99,16", "taps 99 target layers"),
])
def test_a_drafter_that_cannot_serve_its_target_is_an_error(cli, drafter, fragment):
    one_line_error(*cli("predict", *FAST, "-d", drafter)[::2], fragment)


def test_eagle3s_default_draft_vocabulary_is_the_targets_where_the_target_has_fewer_tokens():
    from dsdsim.specs.catalog import load_model
    from dsdsim.specs.setup import resolve

    small = load_model("llama-3.1-8b").model_copy(update={"name": "small-vocab", "vocab_size": 1000})
    assert resolve(small, "h100-sxm", None, "eagle3").drafter.draft_vocab_size == 1000
    assert resolve("llama-3.1-8b", "h100-sxm", None, "eagle3").drafter.draft_vocab_size == 32000
    with pytest.raises(Exception, match="a draft vocabulary of 2000 is larger than small-vocab's 1000"):
        resolve(small, "h100-sxm", None, "eagle3:2000")


def test_a_draft_model_no_smaller_than_its_target_is_a_warning(cli):
    code, out, err = cli("predict", "-b", "1-4", "--tp", "4", "-d", "draft-model:llama-3.1-70b", "-f", "json")
    assert code == 0 and json.loads(out)["rows"]
    (line,) = warnings_of(err)
    assert "draft model llama-3.1-70b (70.6 B parameters) is not smaller than the target llama-3.1-8b" in line


def test_a_kv_budget_that_holds_the_whole_context_is_a_warning(cli):
    code, out, err = cli("explain", "-d", "self-spec:4096", "-c", "1024", "-f", "json")
    assert code == 0 and json.loads(out)["step_time_s"] > 0
    (line,) = warnings_of(err)
    assert "a KV budget of 4096 tokens holds the whole context of 1024" in line
    code, _, err = cli("explain", "-d", "self-spec:512", "-c", "4096", "-f", "json")
    assert code == 0 and not warnings_of(err)


def test_trace_lengths_are_the_traces_own(cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,20\n0.1,120,30\n")
    code, out, err = cli("simulate", "--workload", f"trace:{trace}", "--input-len", "64", "-f", "json")
    assert code == 0 and json.loads(out)["requests"] == 2
    assert warnings_of(err) == ["dsdsim: warning: --input-len not used: a trace carries each request's own lengths"]
    code, out, err = cli("simulate", "--workload", f"trace:{trace}", "--input-len", "64")
    text = " ".join(out.split())                  # the footer had said "lengths: input 64, output 256 tokens"
    assert code == 0 and "lengths: the trace's own; seed 0" in text and "input 64" not in text


def test_a_calibrated_spec_used_elsewhere_is_a_warning_once():
    import warnings

    from dsdsim.errors import ArgumentWarning
    from dsdsim.specs.catalog import load_engine
    from dsdsim.specs.engine import EngineCalibration
    from dsdsim.specs.setup import resolve

    cal = EngineCalibration(model="llama-3.1-8b", hardware="h100-sxm", base_engine="vllm", compute_scale=0.9,
                            source="rule test", date="2026-12-02")
    spec = load_engine("vllm").model_copy(update={"calibration": cal, "name": "vllm-rule-test"})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        resolve("llama-3.1-8b", "h100-sxm", None, "eagle3", spec)            # where it was fitted: quiet
        resolve("qwen3-8b", "h200-sxm", None, "eagle3", spec)
        resolve("qwen3-8b", "h200-sxm", {"tp": 1}, "eagle3", spec)          # the same combination: said once
    said = [str(w.message) for w in seen if issubclass(w.category, ArgumentWarning)]
    assert len(said) == 1
    assert ("calibrated on llama-3.1-8b on h100-sxm tp 1; used here with model qwen3-8b (calibrated on "
            "llama-3.1-8b), GPU h200-sxm (calibrated on h100-sxm)") in said[0]


def test_the_readme_states_every_rule():
    from conftest import REPO_ROOT

    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("### Arguments checked against each other"):]
    section = section[:section.index("\n## ")]
    for phrase in ("each value once", "the exact table or a budget", "the tree replaces the K axis",
                   "the extra positions are unused", "the drafter cannot serve this target", "speculation cannot pay",
                   "the draft is the target itself", "a trace carries its own lengths", "warning, once",
                   "warning naming it"):
        assert phrase in section, phrase
