"""End-to-end corpus cases that replay a measured run's own requests (``serving.workload: trace:traces/NAME.csv``)
and the TTFT p50 quantity."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT

TRACE = REPO_ROOT / "measurements" / "traces" / "llmservingsim-rtx4090-llama8b-tp1.csv"
SERVING_CASE = {
    "id": "t-1", "where": "summary", "tag": "primary", "split": "test",
    "conditions": {"engine": "vllm", "engine_version": "0.19.0", "engine_version_stated": "stated",
                   "hardware": "rtx-4090", "hardware_stated": "RTX 4090", "model": "llama-3.1-8b",
                   "model_stated": "Llama-3.1-8B", "context_note": "each request's own",
                   "serving": {"workload": "trace:traces/x.csv", "requests": 3, "input_len": "trace",
                               "output_len": "trace", "note": "the run's requests"}},
    "acceptance": {"handling": "not-needed"}, "measured": {"quantity": "ttft_p50_ms", "value": 100.0}}


def _load(tmp_path: Path, case: dict):
    from dsdsim.corpus.schema import load_corpus

    folder = tmp_path / "corpus"
    folder.mkdir(exist_ok=True)
    (folder / "src.yaml").write_text(yaml.safe_dump({"source": {"title": "t", "url": "u"}, "cases": [case]}))
    return load_corpus(folder)


def _trace(folder: Path, rows: str = "arrival_s,input_len,output_len\n0,100,5\n0.5,200,5\n1.0,300,5\n"):
    (folder / "corpus" / "traces").mkdir(parents=True, exist_ok=True)
    (folder / "corpus" / "traces" / "x.csv").write_text(rows)


def test_a_trace_workload_and_a_ttft_case_load_and_replay_their_folders_trace(tmp_path):
    from dsdsim.corpus.serving import predict_serving

    _trace(tmp_path / "a")
    ((_, case),) = _load(tmp_path / "a", SERVING_CASE)
    assert case.conditions.serving.workload == "trace:traces/x.csv"
    assert case.measured.quantity.value == "ttft_p50_ms"
    # three requests half a second apart on an idle server: the TTFT p50 is the middle prompt's prefill; the same
    # case in another folder replays that folder's trace, whose middle prompt is 8x longer
    ttft_p50 = predict_serving(case, None)[0]
    _trace(tmp_path / "b", "arrival_s,input_len,output_len\n0,100,5\n0.5,1600,5\n1.0,300,5\n")
    ((_, longer),) = _load(tmp_path / "b", SERVING_CASE)
    assert longer == case and predict_serving(longer, None)[0] > ttft_p50 > 0


def test_a_trace_case_whose_file_is_missing_is_refused_in_one_line(tmp_path):
    from dsdsim.errors import SpecError

    with pytest.raises(SpecError) as exc:
        _load(tmp_path, SERVING_CASE)
    assert "names traces/x.csv, which" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("change,fragment", [
    ({"input_len": "512"}, "'trace' exactly when the workload is a trace"),
    ({"workload": "poisson:4"}, "'trace' exactly when the workload is a trace"),
    ({"workload": "trace:/etc/x.csv"}, "trace:traces/NAME.csv"),
    ({"workload": "trace:traces/../x.csv"}, "trace:traces/NAME.csv"),
    ({"workload": "closed:8", "input_len": "512", "output_len": "64", "max_concurrency": 8},
     "max_concurrency is the limit of an open loop or a trace"),
])
def test_a_trace_workload_is_a_file_of_the_corpus_and_carries_the_lengths(tmp_path, change, fragment):
    from dsdsim.errors import SpecError

    case = json.loads(json.dumps(SERVING_CASE))
    case["conditions"]["serving"].update(change)
    with pytest.raises(SpecError) as exc:
        _load(tmp_path, case)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)


def test_a_ttft_figure_without_its_serving_conditions_is_refused(tmp_path):
    from dsdsim.errors import SpecError

    case = json.loads(json.dumps(SERVING_CASE))
    del case["conditions"]["serving"]
    case["conditions"].update(batch_size=1, context_tokens=100)
    with pytest.raises(SpecError, match="ttft_p50_ms is an end-to-end figure"):
        _load(tmp_path, case)


def test_the_shipped_trace_is_the_source_runs_requests():
    """measurements/llmservingsim.yaml's notes: 300 requests over about 29 s, mean 857 prompt and 653 output
    tokens, as requests.jsonl of casys-kaist/LLMServingSim bench/results/rtx4090-llama8b-tp1 holds them."""
    rows = list(csv.DictReader(TRACE.open()))
    assert len(rows) == 300
    arrival = [float(r["arrival_s"]) for r in rows]
    assert arrival[0] == 0.0 and arrival == sorted(arrival) and 29.0 < arrival[-1] < 29.5
    assert round(statistics.mean(int(r["input_len"]) for r in rows), 2) == 857.46
    assert round(statistics.mean(int(r["output_len"]) for r in rows), 2) == 652.51


RUNS = {   # case id prefix: (GPU, trace, the limits the run states)
    "llmservingsim-rtx4090-llama31-8b-sharegpt300-": ("rtx-4090", TRACE, {"max_num_seqs": 128}),
    "llmservingsim-rtx4090-llama31-8b-sharegpt300-seqs256-": (
        "rtx-4090", TRACE.with_name("llmservingsim-rtx4090-llama8b-seqs256.csv"),
        {"max_num_seqs": 256, "kv_cache_tokens": 41408}),          # the pool its meta.json states
    "llmservingsim-rtxpro6000-llama31-8b-sharegpt300-": (
        "rtx-pro-6000", TRACE.with_name("llmservingsim-rtxpro6000-llama8b-tp1.csv"), {"max_num_seqs": 128}),
}


def _run_cases(prefix: str) -> dict:
    from dsdsim.corpus.schema import load_corpus

    return {c.measured.quantity.value: c for _, c in load_corpus()
            if c.id.startswith(prefix) and c.id.count("-") == prefix.count("-") + 1}


@pytest.mark.parametrize("prefix", list(RUNS))
def test_the_trace_cases_replay_the_trace_as_simulate_does(prefix):
    """A trace case's prediction is ``dsdsim.simulate`` on the same trace file, server and limits (no speculation)."""
    import dsdsim
    from dsdsim.corpus.serving import predict_serving

    gpu, trace, limits = RUNS[prefix]
    cases = _run_cases(prefix)
    assert set(cases) == {"ttft_p50_ms", "tpot_p50_ms", "e2e_latency_ms"}
    run = dsdsim.simulate("llama-3.1-8b", gpu, drafter=None, engine="vllm@0.19.0", workload=f"trace:{trace}",
                          max_num_batched_tokens=2048, **limits).policies[0]
    assert predict_serving(cases["ttft_p50_ms"], None)[0] == pytest.approx(run.ttft_ms.p50, rel=1e-12)
    assert predict_serving(cases["tpot_p50_ms"], None)[0] == pytest.approx(run.tpot_ms.p50, rel=1e-12)
    assert predict_serving(cases["e2e_latency_ms"], None)[0] == pytest.approx(run.e2e_ms.mean, rel=1e-12)
    assert run.kv_cache_tokens == limits.get("kv_cache_tokens", run.kv_cache_tokens)


def test_the_readme_quotes_the_trace_cases_as_predicted():
    """The README's paragraph on the replayed runs quotes each prediction as this checkout makes it."""
    from dsdsim.corpus.serving import predict_serving

    readme = (REPO_ROOT / "README.md").read_text()
    for prefix in RUNS:
        cases = _run_cases(prefix)
        got = {q: predict_serving(c, None)[0] for q, c in cases.items()}
        err = {q: got[q] / cases[q].measured.value - 1.0 for q in got}
        quote = (f"TTFT p50 {got['ttft_p50_ms'] / 1e3:.1f} s ({100 * err['ttft_p50_ms']:+.1f}%), TPOT p50 "
                 f"{got['tpot_p50_ms']:.1f} ms ({100 * err['tpot_p50_ms']:+.1f}%),")
        assert quote in " ".join(readme.split()), quote
