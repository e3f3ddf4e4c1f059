"""What a first-time user hit with tables and their arguments (issue 32, section 5), one test or more each: a bare
fraction read as a percentage, pp with a drafter, exports an engine cannot use, tables that do not pay, another
engine's advice, an off tier the spec charges nothing."""
from __future__ import annotations

import json

import pytest

from conftest import one_line_error

FAST = ("-b", "1-64")


def test_a_bare_tolerance_of_a_tenth_or_more_is_a_percentage_without_its_sign(cli):
    code, _, err = cli("predict", *FAST, "--tolerance", "0.5")
    one_line_error(code, err, "reads as 50% of goodput")
    assert "write 0.5%" in err and "write 50%" in err
    code, _, err = cli("predict", *FAST, "--tolerance", "50%", "--format", "vllm")
    assert code == 0 and "50% of goodput" in err
    code, _, err = cli("predict", *FAST, "--tolerance", "0.05", "--format", "vllm")
    assert code == 0


def test_predict_with_pipeline_parallelism_says_what_does_work(cli):
    code, _, err = cli("predict", "--pp", "2")
    one_line_error(code, err, "--pp 1")
    assert "-d none -k 0" in err and "drop the drafter" not in err
    code, out, err = cli("explain", "--pp", "2", "-d", "none", "-k", "0")     # the command it points to works
    assert code == 0, err


@pytest.mark.parametrize("argv,fragment", [
    (("-d", "medusa", "--format", "trtllm"), "TensorRT-LLM documents no Medusa drafter"),
    (("-d", "self-spec:512", "--format", "trtllm"), "TensorRT-LLM documents no self-speculation drafter"),
    (("-d", "medusa", "--format", "sglang"), "EAGLE and EAGLE3 only"),
])
def test_an_export_the_engine_cannot_load_is_refused_unless_forced(cli, tmp_path, argv, fragment):
    target = tmp_path / "table.json"
    code, _, err = cli("predict", *FAST, *argv, "-o", target)
    one_line_error(code, err, fragment)
    assert "--force" in err and not target.exists()
    code, _, err = cli("predict", *FAST, *argv, "-o", target, "--force")
    assert code == 0, err
    assert json.loads(target.read_text())


def test_a_table_that_never_beats_plain_decoding_is_said_so_and_not_exported(cli, tmp_path):
    """self-spec:512 on llama-3.1-8b: the best speedup over a server without speculation is below 1 at every
    batch size (the JSON rows say so), so the table text says the drafter does not pay, and no engine table is
    written."""
    code, out, _ = cli("predict", *FAST, "-d", "self-spec:512", "--format", "json")
    rows = json.loads(out)["rows"]
    gains = [r["speedup_vs_vanilla"] for r in rows if r["k"]]
    assert gains and max(gains) < 1
    code, out, _ = cli("predict", *FAST, "-d", "self-spec:512")
    assert code == 0 and "This drafter does not pay here" in out and "Paste into" not in out
    target = tmp_path / "t.json"
    code, _, err = cli("predict", *FAST, "-d", "self-spec:512", "--format", "sglang", "-o", target)
    assert code == 2 and not target.exists()


@pytest.mark.parametrize("engine,label,fmt", [("trtllm", "TensorRT-LLM", "trtllm"), ("sglang", "SGLang", "sglang"),
                                              ("vllm", "vLLM", "vllm")])
def test_each_engine_gets_its_own_advice(cli, engine, label, fmt):
    code, out, _ = cli("predict", *FAST, "-e", engine)
    assert code == 0
    text = " ".join(out.split())
    start = max(text.find(f"Paste into {label}:"), text.find(f"Not for {label} as it stands"))
    assert start >= 0 and f"--format {fmt}" in text[start:]
    if engine != "vllm":
        assert "vLLM num_speculative_tokens_per_batch_size" not in out and "Paste into vLLM" not in out


def test_an_off_tier_the_spec_charges_nothing_is_not_zero_percent_slower(cli):
    code, out, _ = cli("predict", *FAST, "-e", "trtllm")
    assert code == 0 and "0.0% to 0.0% slower" not in " ".join(out.split())
    assert "charges the off tier nothing" in " ".join(out.split())


def test_list_and_show_drafters(cli):
    from dsdsim.specs.drafters import REGISTRY

    code, out, _ = cli("list", "drafters", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and [r["kind"] for r in rows] == [i.name for i in REGISTRY.values()]
    medusa = next(r for r in rows if r["kind"] == "medusa")
    assert medusa["engines"]["vllm"]["method"] == "medusa" and medusa["engines"]["trtllm"]["refusal"]
    assert medusa["max_k"] == 5
    code, out, _ = cli("show", "drafter", "dflash:5,5,16")
    assert code == 0 and "DFlash" in out
    code, _, err = cli("show", "drafter", "eagel3")
    one_line_error(code, err, "unknown drafter")


def test_a_bad_deployment_in_the_api_is_one_clear_error():
    from dsdsim import Deployment
    from dsdsim.errors import DsdsimError

    with pytest.raises(DsdsimError, match=r"Deployment: tp: must be >= 1"):
        Deployment(tp=0)
    assert Deployment(tp=8).tp == 8


def test_a_tree_on_a_chain_engine_says_so(cli):
    code, out, _ = cli("predict", *FAST, "--draft-tree", "4,4,16", "-a", "al=3.2@tree")
    assert code == 0 and "drafts chains" in " ".join(out.split())
    code, out, _ = cli("predict", *FAST, "--draft-tree", "4,4,16", "-a", "al=3.2@tree", "-e", "sglang")
    assert "drafts chains" not in " ".join(out.split())


def test_a_traces_request_count_is_its_own_unless_given(cli, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,20\n0.1,120,30\n0.2,90,25\n")
    code, out, err = cli("simulate", "--workload", f"trace:{trace}", "--executor", "local", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 3
    code, out, err = cli("simulate", "--workload", f"trace:{trace}", "--requests", "2", "--executor", "local",
                         "--format", "json")
    assert code == 0 and json.loads(out)["requests"] == 2
    code, _, err = cli("simulate", "--workload", f"trace:{trace}", "--requests", "5")
    one_line_error(code, err, "has 3 requests")


def test_accuracy_marks_only_cases_that_do_not_fit(cli, monkeypatch):
    """(does not fit) where the case's JSON says fits_in_memory false, not where it is null (not simulated)."""
    monkeypatch.setenv("COLUMNS", "300")
    code, out, _ = cli("accuracy", "--format", "json")
    cases = json.loads(out)["cases"]
    not_fitting = {c["id"] for c in cases if c["fits_in_memory"] is False and c["predicted"] is not None}
    code, text, _ = cli("accuracy")
    marked = {line.split()[1] for line in text.splitlines() if "(does not fit)" in line}
    assert not_fitting and marked == not_fitting


@pytest.mark.parametrize("argv,fragment", [
    (("predict", "--contexts", "1024,,8192"), "has an empty item"),
    (("predict", "--contexts", "1024,1024"), "names a context length twice"),
    (("simulate", "--sweep", "poisson:1,,2"), "has an empty item"),
    (("plot", "sensitivity", "-o", "s.png", "--contexts", "1024,"), "has an empty item"),
    (("explain", "-c", "500000"), "beyond llama-3.1-8b's window of 131072"),
    (("predict", "-d", "dflash:2,99,16", "-b", "1-4"), "has 32: give at most 32 taps"),
])
def test_lists_and_sizes_are_read_alike_everywhere(cli, tmp_path, monkeypatch, argv, fragment):
    """Lists: an empty item is refused as -b refuses it; a context past the model's window is refused by explain as
    by predict; a DFlash drafter cannot tap more layers than the target has."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(*argv)
    one_line_error(code, err, fragment)
    assert list(tmp_path.iterdir()) == []


# --- 17. the Python API as a notebook user meets it ---------------------------------------------------------------


def test_results_and_specs_print_in_a_line_or_two():
    import numpy as np

    import dsdsim

    step = dsdsim.simulate_step(batch=8, k=3)
    assert len(repr(step)) < 300 and "B=8, K=3" in repr(step) and "eagle3" in repr(step)
    assert "a grid of 3 steps" in repr(dsdsim.simulate_step(batch=np.array([1, 8, 64.0]), k=3))
    p = dsdsim.predict(batch_sizes="1-64")
    assert len(repr(p)) < 400 and repr(p).startswith("Prediction(llama-3.1-8b on h100-sxm")
    for spec in (dsdsim.load_model("deepseek-v3"), dsdsim.load_hardware("h200-sxm"), dsdsim.load_engine("sglang")):
        assert len(repr(spec)) <= 400
    assert len(repr(dsdsim.resolve())) < 2000


def test_dir_lists_each_name_once():
    import dsdsim

    dsdsim.predict  # noqa: B018 - loaded: now in the module's globals and in __all__
    names = dir(dsdsim)
    assert len(names) == len(set(names)) and "predict" in names and "simulate" in names


def test_the_api_defaults_are_the_clis(cli):
    """simulate_step() prices what `dsdsim explain` prices (eagle3 is the default drafter of both), and a
    deployment may be a dict of its fields."""
    import dsdsim

    code, out, _ = cli("explain", "-b", "8", "-k", "3", "-f", "json")
    assert code == 0
    assert float(dsdsim.simulate_step(batch=8, k=3).step_time_s) == pytest.approx(json.loads(out)["step_time_s"],
                                                                                  rel=1e-12)
    assert dsdsim.resolve(deployment={"tp": 2}).deployment == dsdsim.Deployment(tp=2)
    with pytest.raises(dsdsim.DsdsimError, match="tp: must be >= 1"):
        dsdsim.resolve(deployment={"tp": 0})
    with pytest.raises(dsdsim.DsdsimError, match="a dict of its fields"):
        dsdsim.simulate_step(deployment=2)


def test_dsdsim_simulate_writes_what_the_command_writes(cli):
    import dsdsim

    code, out, _ = cli("simulate", "--requests", "40", "--workload", "poisson:4", "-f", "json")
    assert code == 0
    result = dsdsim.simulate(workload="poisson:4", requests=40)
    assert result.to_json() == out.rstrip("\n")
    assert [p.name for p in result.policies] == ["none", "fixed:3", "dsd"]
    assert [p.name for p in dsdsim.simulate(drafter=None, requests=8).policies] == ["none"]
    with pytest.raises(dsdsim.DsdsimError, match="max_num_seqs"):
        dsdsim.simulate(requests=8, max_num_seqs=0)
    for bad in (-1, 0):          # one bound, in one wording (-1 had been told "a whole number >= 0")
        with pytest.raises(dsdsim.DsdsimError, match=rf"^requests must be in 1\.\.1000000, got {bad}$"):
            dsdsim.simulate(requests=bad)


# --- 16. every output names the server it priced ------------------------------------------------------------------


def test_predict_and_explain_name_their_servers_and_agree_when_asked_for_the_same(cli):
    """On vLLM 0.24 a server running a K table pays piecewise graphs that a fixed-K server does not: predict's row
    and explain differ at (B 8, K 3), each output says which server it priced, and explain --k-table prices
    predict's."""
    argv = ("-e", "vllm@0.24", "-b", "8")
    code, out, _ = cli("predict", *argv, "-f", "json")
    doc = json.loads(out)
    row = doc["rows"][0]
    assert code == 0 and row["k"] == 3 and doc["server"].startswith("one server running the K table")
    code, out, _ = cli("explain", *argv, "-k", "3", "-f", "json")
    fixed = json.loads(out)
    code2, out, _ = cli("explain", *argv, "-k", "3", "--k-table", "-f", "json")
    table = json.loads(out)
    assert code == code2 == 0
    assert fixed["server"] == "a server with a fixed K=3 (every step drafts 3 tokens)"
    assert table["server"] == "a server running a dynamic K table, at K=3"
    assert fixed["step_time_s"] < table["step_time_s"]
    assert table["step_time_s"] * 1e3 == pytest.approx(row["step_ms"], rel=1e-12)
    code, out, _ = cli("explain", "-k", "0")
    assert "priced: the step of a server without speculation" in out
    code, out, _ = cli("predict", "-b", "1-8", "-e", "sglang")
    assert "priced: a server per K, each with that fixed K" in " ".join(out.split())


@pytest.mark.parametrize("argv, fragment", [
    (["-e", "sglang", "--k-table"], "prices no server of its own for a K table"),
    (["-d", "none", "--k-table"], "needs a drafter"),
])
def test_explain_k_table_where_there_is_none(cli, argv, fragment):
    one_line_error(*cli("explain", *argv)[::2], fragment)


def test_simulate_names_each_policys_server(cli):
    code, out, _ = cli("simulate", "--requests", "8", "--policies", "none,fixed:2,dsd", "-f", "json")
    servers = json.loads(out)["servers"]
    assert code == 0 and list(servers) == ["none", "fixed:2", "dsd"]
    assert servers["none"].startswith("a server without speculation")
    assert servers["dsd"].startswith("one server running a dynamic K table")
    code, out, _ = cli("simulate", "--requests", "8", "--policies", "none,dsd")
    assert "servers: none: a server without speculation" in " ".join(out.split())


def test_a_context_past_the_window_is_refused_by_the_api_as_by_the_commands(cli):
    """predict, explain and simulate_step (a point or a grid) refuse a context the model cannot hold, in one line."""
    import numpy as np

    import dsdsim

    for context in (10 ** 7, np.array([1024.0, 200000.0])):
        with pytest.raises(dsdsim.DsdsimError, match="beyond llama-3.1-8b's window of 131072 tokens"):
            dsdsim.simulate_step(context=context)
    assert float(dsdsim.simulate_step(context=131072).step_time_s) > 0
    for command in ("predict", "explain"):
        code, _, err = cli(command, "-c", "500000", *(("-b", "1-4") if command == "predict" else ()))
        one_line_error(code, err, "window of 131072")


def test_the_eager_warning_reads_the_padding_the_steps_were_priced_with():
    """The prediction keeps whether each step replays a graph (Prediction.graphed, from the same step program as
    its times); the export's eager warning reads it: on vLLM 0.24's K-table server (the unrounded grid) a K = 2 step
    at batch 168 graphs, though a fixed-K server's would not."""
    import numpy as np

    from dsdsim.export.prediction import eager_ranges
    from dsdsim.policy.predict import predict

    p = predict(engine="vllm@0.24", batch_sizes="160-176", acceptance="0.8", max_k=2, max_ranges=0, fixed_k=2)
    j = list(p.batch_sizes).index(168)
    assert p.dynamic and bool(p.graphed[2, j])                   # graphed in the table server
    assert p.graphed.shape == p.step_s.shape and p.graphed.dtype == bool
    assert p.ranges() == [(1, 176, 2)]
    # 170 x 3 = 510 tokens pad to the raw grid's 512; from 171 eager (a fixed-K server stops at 166: 498 tokens)
    assert "batch sizes 171-176 (K=2) run eager" in eager_ranges(p)
    assert [int(b) for b, g in zip(p.batch_sizes, np.asarray(p.graphed[2])) if not g] == list(range(171, 177))
