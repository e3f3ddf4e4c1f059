"""The command lines that measure a calibration plan's points (``dsdsim calibrate --plan N``).

One server per K (a fixed-K speculative server, or one without speculation for K = 0), then one benchmark run per
point at ``--max-concurrency B`` (the batch the point is at), the random dataset at fixed lengths so the mean
context is the plan's (prompt + half the output) and ``--ignore-eos`` keeps every output at its length:

    vLLM     vllm serve MODEL --speculative-config '{"method": ..., "num_speculative_tokens": K}'
             vllm bench serve --max-concurrency B --num-prompts P --save-result --save-detailed
             --metadata num_speculative_tokens=K
             (docs/reference/engines.md §1-2; the result JSON carries mean_tpot_ms, max_concurrency,
             spec_decode_acceptance_length, completed, total_input_tokens, total_output_tokens, and with
             --save-detailed each request's lengths and latencies, which ``calibrate --replay`` replays)
    SGLang   python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps K
             --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1
             python -m sglang.bench_serving --max-concurrency B --num-prompts P --output-file ...-kK.jsonl
             (bench_serving does not record K: the file name carries it, ``dsdsim.fit.points``)
    TRT-LLM  trtllm-serve MODEL --backend pytorch --max_batch_size B --extra_llm_api_options dsdsim-kK.yml, the file
             holding the speculative_config (decoding_type Eagle3 / Eagle / MTP / NGram / Draft_Target and the
             draft length: tensorrt_llm/llmapi/llm_args.py, the *DecodingConfig classes), written by the script
             python -m tensorrt_llm.serve.scripts.benchmark_serving --backend openai --dataset-name random
             --random-ids --ignore-eos --max-concurrency B --num-prompts P --save-result --result-filename
             ...-kK.json (TensorRT-LLM's own client, vLLM's benchmark_serving ported: its result JSON is vLLM's,
             its acceptance length mean_avg_decoded_tokens_per_iter; the file name carries K, as it records none)

P is chosen so a run lasts about ``RUN_SECONDS`` at the shipped figures (at least ``MIN_WAVES`` waves of B
requests, so the batch is held at B between the first and the last wave).
"""
from __future__ import annotations

import json
import math
import re
import shlex
from typing import Optional

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

RUN_SECONDS = 120.0
MIN_WAVES = 4
DRAFT_PLACEHOLDER = "DRAFT_MODEL"       # the drafter's weights: a head the model spec does not name


@frozen
class PointRun:
    batch: int
    k: int
    num_prompts: int
    seconds: float                # about, at the shipped figures
    command: str                  # the benchmark client
    result_file: str


@frozen
class ServerRuns:
    k: int
    server: str                   # the server launch
    runs: list[PointRun]
    config: Optional[tuple[str, str]] = None   # (file name, YAML text) the server reads (TensorRT-LLM), written first


def hf_repo(model) -> str:
    """The Hugging Face repository a model spec's config was taken from (``_dsdsim.source``), else its name."""
    m = re.search(r"huggingface\.co/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)", getattr(model, "source", "") or "")
    return m.group(1) if m else model.name


def input_length(context: int, output_len: int) -> int:
    """The prompt length whose requests decode at a mean context of ``context`` (prompt + half the output)."""
    return max(16, int(round(context - output_len / 2)))


def num_prompts(batch: int, step_s: float, tau: float, output_len: int) -> tuple[int, float]:
    """(prompts, seconds): whole waves of ``batch`` requests lasting about RUN_SECONDS, at least MIN_WAVES."""
    wave_s = output_len / max(tau, 1.0) * step_s
    waves = max(MIN_WAVES, math.ceil(RUN_SECONDS / wave_s)) if wave_s > 0 else MIN_WAVES
    return batch * waves, waves * wave_s


def _drafter_run(setup, k: int, engine: str):
    """(the drafter, how ``engine`` runs it) for a server speculating K tokens; None at K = 0 or without a drafter;
    the drafter's refusal on that engine, raised."""
    d = setup.drafter
    if k == 0 or d is None:
        return None
    run = d.info.on(engine)
    if run.refusal:
        raise DsdsimError(run.refusal)
    return d, run


def _vllm_spec_config(setup, k: int) -> Optional[dict]:
    found = _drafter_run(setup, k, "vllm")
    if found is None:
        return None
    d, run = found
    config: dict = {"method": run.method}
    if d.info.loads_model:
        config["model"] = hf_repo(setup.draft_model) if setup.draft_model is not None else d.model
    elif d.kind.value not in ("mtp", "ngram", "suffix", "self-spec"):
        config["model"] = DRAFT_PLACEHOLDER
    config.update(dict(run.extra))
    config["num_speculative_tokens"] = int(k)
    return config


def _sglang_spec_args(setup, k: int) -> list[str]:
    found = _drafter_run(setup, k, "sglang")
    if found is None:
        return []
    d, run = found
    if not run.method:
        raise DsdsimError(f"SGLang runs no {d.label} drafter")
    args = ["--speculative-algorithm", run.method]
    if d.info.loads_model:
        args += ["--speculative-draft-model-path",
                 hf_repo(setup.draft_model) if setup.draft_model is not None else str(d.model)]
    elif d.kind.value != "mtp":
        args += ["--speculative-draft-model-path", DRAFT_PLACEHOLDER]
    return args + ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", str(k + 1)]


# the TensorRT-LLM speculative_config decoding_type of each drafter method (tensorrt_llm/llmapi/llm_args.py:
# Eagle3DecodingConfig "Eagle3", EagleDecodingConfig "Eagle", MTPDecodingConfig "MTP", NGramDecodingConfig "NGram",
# DraftTargetDecodingConfig "Draft_Target"); None: a draft model, which the drafter spec names no method for
TRTLLM_DECODING_TYPES = {"eagle3": "Eagle3", "eagle": "Eagle", "mtp": "MTP", "ngram": "NGram", None: "Draft_Target"}


def _trtllm_spec_yaml(setup, k: int) -> Optional[str]:
    """The extra_llm_api_options YAML of a TensorRT-LLM server speculating K tokens (None at K = 0)."""
    found = _drafter_run(setup, k, "trtllm")
    if found is None:
        return None
    d, run = found
    kind = TRTLLM_DECODING_TYPES.get(run.method)
    if kind is None:
        raise DsdsimError(f"dsdsim writes no TensorRT-LLM speculative_config for {d.label}; measure with -e vllm")
    lines = ["speculative_config:", f"  decoding_type: {kind}"]
    if kind == "MTP":
        lines.append(f"  num_nextn_predict_layers: {int(k)}")
    else:
        lines.append(f"  max_draft_len: {int(k)}")
    if kind not in ("MTP", "NGram"):
        path = (hf_repo(setup.draft_model) if setup.draft_model is not None
                else (d.model if d.info.loads_model and d.model else DRAFT_PLACEHOLDER))
        lines.append(f"  speculative_model: {path}")
    return "\n".join(lines) + "\n"


def _parallel(setup, engine: str) -> list[str]:
    dep = setup.deployment
    if engine == "trtllm":
        return (["--tp_size", str(dep.tp)] if dep.tp > 1 else []) + (["--ep_size", str(dep.ep)] if dep.ep > 1 else [])
    if engine == "sglang":
        return (["--tp", str(dep.tp)] if dep.tp > 1 else []) + (["--ep-size", str(dep.ep)] if dep.ep > 1 else [])
    out = ["--tensor-parallel-size", str(dep.tp)] if dep.tp > 1 else []
    return out + (["--enable-expert-parallel"] if dep.ep > 1 else [])


def bench_runs(setup, points, tau_of, engine: str, output_len: int = 256) -> list[ServerRuns]:
    """The servers and benchmark runs measuring ``points`` (``dsdsim.fit.shape.PlannedPoint``) on ``engine``
    (vllm, sglang or trtllm); ``tau_of(K)``: the tokens a step emits, for the run's length."""
    if engine not in ("vllm", "sglang", "trtllm"):
        raise DsdsimError(f"calibrate --plan writes vllm, sglang or trtllm command lines, not {engine}")
    model = hf_repo(setup.model)
    out = []
    for k in sorted({p.k for p in points}):
        mine = [p for p in points if p.k == k]
        top = max(p.batch for p in mine)
        spec_file = None
        if engine == "trtllm":
            server = ["trtllm-serve", model, "--backend", "pytorch", *_parallel(setup, engine), "--max_batch_size",
                      str(max(top, 1))]
            text = _trtllm_spec_yaml(setup, k)
            if text is not None:
                spec_file = (f"dsdsim-k{k}.yml", text)
                server += ["--extra_llm_api_options", spec_file[0]]
        elif engine == "vllm":
            server = ["vllm", "serve", model, *_parallel(setup, engine), "--max-num-seqs", str(max(top, 1))]
            config = _vllm_spec_config(setup, k)
            if config is not None:
                server += ["--speculative-config", json.dumps(config)]
        else:
            server = ["python", "-m", "sglang.launch_server", "--model-path", model, *_parallel(setup, engine),
                      "--max-running-requests", str(top), *_sglang_spec_args(setup, k)]
            if k > 0:
                server += ["--cuda-graph-max-bs", str(top)]
        runs = []
        for p in sorted(mine, key=lambda p: p.batch):
            n, seconds = num_prompts(p.batch, p.step_ms * 1e-3, tau_of(k), output_len)
            inp = input_length(p.context, output_len)
            stem = f"dsdsim-b{p.batch}-k{k}"
            if engine == "vllm":
                client = ["vllm", "bench", "serve", "--model", model, "--dataset-name", "random",
                          "--random-input-len", str(inp), "--random-output-len", str(output_len), "--ignore-eos",
                          "--max-concurrency", str(p.batch), "--num-prompts", str(n), "--save-result",
                          "--save-detailed", "--result-filename", f"{stem}.json",
                          "--metadata", f"num_speculative_tokens={k}"]
                result = f"{stem}.json"
            elif engine == "trtllm":
                client = ["python", "-m", "tensorrt_llm.serve.scripts.benchmark_serving", "--model", model,
                          "--backend", "openai", "--dataset-name", "random", "--random-input-len", str(inp),
                          "--random-output-len", str(output_len), "--random-prefix-len", "0", "--random-ids",
                          "--ignore-eos", "--max-concurrency", str(p.batch), "--num-prompts", str(n),
                          "--save-result", "--result-filename", f"{stem}.json"]
                result = f"{stem}.json"
            else:
                client = ["python", "-m", "sglang.bench_serving", "--backend", "sglang", "--dataset-name", "random",
                          "--random-input-len", str(inp), "--random-output-len", str(output_len),
                          "--random-range-ratio", "1", "--max-concurrency", str(p.batch), "--num-prompts", str(n),
                          "--output-file", f"{stem}.jsonl"]
                result = f"{stem}.jsonl"
            runs.append(PointRun(p.batch, k, n, seconds, shlex.join(client), result))
        out.append(ServerRuns(k, shlex.join(server), runs, spec_file))
    return out
