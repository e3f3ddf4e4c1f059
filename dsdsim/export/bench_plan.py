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


def _vllm_spec_config(setup, k: int) -> Optional[dict]:
    d = setup.drafter
    if k == 0 or d is None:
        return None
    run = d.info.on("vllm")
    if run.refusal:
        raise DsdsimError(run.refusal)
    config: dict = {"method": run.method}
    if d.info.loads_model:
        config["model"] = hf_repo(setup.draft_model) if setup.draft_model is not None else d.model
    elif d.kind.value not in ("mtp", "ngram", "suffix", "self-spec"):
        config["model"] = DRAFT_PLACEHOLDER
    config.update(dict(run.extra))
    config["num_speculative_tokens"] = int(k)
    return config


def _sglang_spec_args(setup, k: int) -> list[str]:
    d = setup.drafter
    if k == 0 or d is None:
        return []
    run = d.info.on("sglang")
    if run.refusal or not run.method:
        raise DsdsimError(run.refusal or f"SGLang runs no {d.label} drafter")
    args = ["--speculative-algorithm", run.method]
    if d.info.loads_model:
        args += ["--speculative-draft-model-path",
                 hf_repo(setup.draft_model) if setup.draft_model is not None else str(d.model)]
    elif d.kind.value != "mtp":
        args += ["--speculative-draft-model-path", DRAFT_PLACEHOLDER]
    return args + ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", str(k + 1)]


def _parallel(setup, engine: str) -> list[str]:
    dep = setup.deployment
    if engine == "sglang":
        return (["--tp", str(dep.tp)] if dep.tp > 1 else []) + (["--ep-size", str(dep.ep)] if dep.ep > 1 else [])
    out = ["--tensor-parallel-size", str(dep.tp)] if dep.tp > 1 else []
    return out + (["--enable-expert-parallel"] if dep.ep > 1 else [])


def bench_runs(setup, points, tau_of, engine: str, output_len: int = 256) -> list[ServerRuns]:
    """The servers and benchmark runs measuring ``points`` (``dsdsim.fit.shape.PlannedPoint``) on ``engine``
    (vllm or sglang); ``tau_of(K)``: the tokens a step emits, for the run's length."""
    if engine not in ("vllm", "sglang"):
        raise DsdsimError(f"calibrate --plan writes vllm or sglang command lines, not {engine}")
    model = hf_repo(setup.model)
    out = []
    for k in sorted({p.k for p in points}):
        mine = [p for p in points if p.k == k]
        top = max(p.batch for p in mine)
        if engine == "vllm":
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
            else:
                client = ["python", "-m", "sglang.bench_serving", "--backend", "sglang", "--dataset-name", "random",
                          "--random-input-len", str(inp), "--random-output-len", str(output_len),
                          "--random-range-ratio", "1", "--max-concurrency", str(p.batch), "--num-prompts", str(n),
                          "--output-file", f"{stem}.jsonl"]
                result = f"{stem}.jsonl"
            runs.append(PointRun(p.batch, k, n, seconds, shlex.join(client), result))
        out.append(ServerRuns(k, shlex.join(server), runs))
    return out
