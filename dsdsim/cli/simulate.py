"""dsdsim simulate, and plan --simulate: the serving simulator (dsdsim.serve) on the command line.

``simulate`` runs a workload of requests through a continuously batching server once per K policy and prints
throughput, latency percentiles and the K each policy ran; ``--sweep`` runs it at several loads. ``plan --simulate``
adds to each plan candidate the largest load that meets the SLO under each policy. The serving options are declared
once here (``ServeArgs``) and shared by both commands.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import fields, replace
from pathlib import Path
from typing import Annotated, Optional

from dsdsim.cli import model as _model_commands     # plan is declared there; --simulate extends it below
from dsdsim.cli.app import app
from dsdsim.cli.command import Invocation, Option, echo
from dsdsim.cli.options import (Acceptance, DeploymentArgs, Output, Plot, SimulatedArgs, TableFmt, TableFormat)
from dsdsim.cli.output import (check_png, check_writable, emit, is_stdout, output_format, show_or_write,
                               warn, with_progress)
from dsdsim.cli.params import option_fields, takes
from dsdsim.defaults import (DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_POLICIES, DEFAULT_REQUESTS, DEFAULT_ROUTER,
                             DEFAULT_SEED, DEFAULT_WORKLOAD)
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

# what simulate runs without options (the API's defaults: dsdsim.serve.simulate.simulate)

WORKLOAD_HELP = ("How requests arrive: closed:C (C clients, each sending its next request when its last one "
                 "finishes: constant concurrency), poisson:QPS (open loop, random arrivals at QPS requests/s), "
                 "gamma:QPS:CV (bursty open loop: gaps with coefficient of variation CV, 1 = poisson), rollout (every "
                 "request at time 0: an RL rollout whose batch drains as requests finish), trace:FILE (arrival times "
                 "and lengths: CSV or JSONL with arrival_s,input_len,output_len, or a vllm bench serve result "
                 "JSON)")
# the forms of dsdsim.serve.lengths.LENGTH_FORMS, written out so that --help does not load numpy
LENGTH_HELP = ("a number (512), uniform:A:B, normal:MEAN:STD, lognormal:MEAN:STD (of the lengths), or a preset: "
               "sharegpt, mt-bench, long-context (its input or output half)")
POLICIES_HELP = ("Comma list of K policies, each simulated on the same requests: none (no speculation), fixed:K, "
                 "dsd (the K table dsdsim predict exports, looked up by requests in the step), table:FILE (your K "
                 "table: a vLLM, SGLang or TensorRT-LLM file), oracle (the best K of each step), adaptive (SGLang's "
                 "controller: K from the acceptance seen so far)")
SLO_HELP = ("Latency targets in ms (keys ttft, tpot, e2el), e.g. ttft=200,tpot=50: adds goodput (requests/s meeting "
            "every target); plan --simulate searches the largest load at which 90% of requests meet them")
EXECUTOR_HELP = ("Where the simulations run (one per policy and load; plan --simulate: one load search per candidate "
                 "and policy): local (this process), processes (this machine's cores; the default for more than one "
                 "job), dask://HOST:PORT or tcp://HOST:PORT (a dask.distributed scheduler whose workers have dsdsim "
                 "installed: pip install 'dsdsim[cluster]'; a job whose worker dies is rerun elsewhere, up to dask's "
                 "retries)")


@frozen
class ServeArgs:
    """What is served and how the server schedules it: the options simulate and plan --simulate share."""

    workload: Annotated[str, Option("--workload", metavar="KIND[:ARGS]", help=WORKLOAD_HELP)] = DEFAULT_WORKLOAD
    max_concurrency: Annotated[Optional[int], Option(
        "--max-concurrency", metavar="C",
        help="The client's limit on requests in flight under poisson, gamma or a trace, as vllm bench serve "
             "--request-rate QPS --max-concurrency C runs: a request whose time has come waits for one to finish, "
             "and its latencies count from when it is sent (closed:C is C in flight already)")] = None
    requests: Annotated[Optional[int], Option("--requests", metavar="N",
                                              help=f"Requests to simulate (default {DEFAULT_REQUESTS}; a trace: "
                                                   f"all its rows)")] = None
    input_len: Annotated[str, Option("--input-len", metavar="LENGTHS",
                                     help=f"Prompt tokens per request: {LENGTH_HELP}")] = DEFAULT_INPUT_LEN
    output_len: Annotated[str, Option("--output-len", metavar="LENGTHS",
                                      help=f"Output tokens per request: {LENGTH_HELP}")] = DEFAULT_OUTPUT_LEN
    policies: Annotated[str, Option("--policies", metavar="LIST", help=POLICIES_HELP)] = DEFAULT_POLICIES
    max_num_seqs: Annotated[Optional[int], Option(
        "--max-num-seqs", help="Most requests in one step (vLLM's max_num_seqs; default 256; SGLang with a drafter 48, "
                               "TensorRT-LLM 2048: their own)")] = None
    max_num_batched_tokens: Annotated[Optional[int], Option(
        "--max-num-batched-tokens", help="Most tokens in one step, prefill chunks and drafts included (vLLM's "
                                         "max_num_batched_tokens; default: the engine's for the GPU, vLLM 8192 on "
                                         ">= 70 GiB but the A100, else 2048; SGLang its chunked_prefill_size; "
                                         "TensorRT-LLM 8192, its max_num_tokens)")] = None
    kv_cache_tokens: Annotated[Optional[int], Option(
        "--kv-cache-tokens", metavar="N",
        help="The KV cache in tokens, as your server reports it (vLLM's log: 'GPU KV cache size: N tokens'); "
             "default: sized as the engine sizes it (vLLM: --memory-utilization of the GPU's memory less weights and "
             "the profile run's peak; SGLang: --mem-fraction-static)")] = None
    num_gpu_blocks: Annotated[Optional[int], Option(
        "--num-gpu-blocks", metavar="N",
        help="The KV cache in blocks of 16 tokens (vLLM's --num-gpu-blocks-override)")] = None
    mem_fraction_static: Annotated[Optional[float], Option(
        "--mem-fraction-static", metavar="F",
        help="An SGLang server's share of the GPU's memory for weights and KV cache (SGLang's --mem-fraction-static); "
             "default: the share SGLang picks for its release, GPU and tp")] = None
    prefix_cache_hit: Annotated[float, Option(
        "--prefix-cache-hit", metavar="SHARE",
        help="The share of each prompt the server finds in its prefix cache, 0 to 1 (vLLM's /metrics: "
             "prefix_cache_hits / prefix_cache_queries; an RL rollout of G samples per prompt finds (G - 1) / G of "
             "the prompt): that share, in whole blocks, starts computed; default 0 (random prompts)")] = 0.0
    shared_prefix: Annotated[Optional[str], Option(
        "--shared-prefix", metavar="TOKENS:GROUPS",
        help="Prompts that share prefixes: each is one of GROUPS prefixes of TOKENS tokens, then its own --input-len "
             "tokens (vllm bench serve's prefix_repetition, SGLang's generated-shared-prefix; an RL rollout of G "
             "samples of N prompts: the prompt length and N). Each server keeps them in a prefix cache of shared "
             "blocks, evicted oldest first; with --router prefix-aware requests follow their prefix")] = None
    multi_turn: Annotated[Optional[str], Option(
        "--multi-turn", metavar="TURNS[:THINK_S]",
        help="Conversations: each of TURNS turns sends the conversation so far and a new --input-len message, "
             "THINK_S seconds (default 0) after the reply to the turn before (vLLM's multi-turn benchmark); "
             "the workload's arrivals start conversations (closed:C holds C at a time). Later turns find the "
             "earlier ones in the prefix cache")] = None
    request_overhead_ms: Annotated[Optional[float], Option(
        "--request-overhead-ms", metavar="MS",
        help="Time a request spends outside the GPU steps before its first token reaches the client (API server, "
             "tokenisation, hand-over, streaming): each request reaches the scheduler MS after it is sent, so TTFT "
             "and latency grow by it and TPOT does not. Default: what `calibrate --measurements --replay` fitted "
             "into the engine spec (-e FILE.yaml), else 0; the shipped specs price none")] = None
    scheduling: Annotated[Optional[str], Option(
        "--scheduling", metavar="RULE",
        help="How each step is built: vllm (running requests, then waiting ones mixed in: vLLM V1) or "
             "prefill-first (a prefill batch whenever one can be formed: SGLang without mixed chunks); default: "
             "the engine's")] = None
    replicas: Annotated[int, Option(
        "--replicas", metavar="N",
        help="Data-parallel copies of the server behind a router, each with its own scheduler, KV cache and K "
             "policy; the workload is the fleet's (closed:C is C clients in all)")] = 1
    router: Annotated[str, Option(
        "--router", metavar="NAME",
        help="Which replica a request goes to: round-robin (in turn), least-loaded (fewest requests running and "
             "waiting) or prefix-aware (SGLang's cache-aware router: where its prefix went before, unless the "
             "loads are out of balance)")] = DEFAULT_ROUTER
    slo: Annotated[Optional[str], Option("--slo", metavar="ttft=MS,tpot=MS", help=SLO_HELP)] = None
    seed: Annotated[int, Option("--seed", help="Random seed of arrivals, lengths and acceptance")] = DEFAULT_SEED
    executor: Annotated[Optional[str], Option("--executor", metavar="local|processes|dask://HOST:PORT",
                                              help=EXECUTOR_HELP)] = None

    def simulation(self, setup, acceptance, memory_utilization: float, slo: Optional[str] = None, tree=None):
        """The Simulation job these options describe on ``setup`` (texts checked here, before any work)."""
        from dsdsim.serve.sweep import Simulation, check_executor, checked

        if self.requests is not None and self.requests < 1:
            raise DsdsimError(f"--requests must be >= 1, got {self.requests}")
        check_executor(self.executor)
        requests = self.requests
        if requests is None:       # a trace's request count is its own unless --requests is given
            requests = None if self.workload.strip().startswith("trace:") else DEFAULT_REQUESTS
        from dsdsim.serve.fleet import check_replicas, router_named

        check_replicas(self.replicas)
        router_named(self.router)
        sim = Simulation(setup, self.workload, self.policies, requests=requests, input_len=self.input_len,
                         output_len=self.output_len, acceptance=acceptance,
                         scheduler=self.scheduler(memory_utilization), slo=slo if slo is not None else self.slo,
                         seed=self.seed, replicas=self.replicas, router=self.router,
                         shared_prefix=self.shared_prefix, multi_turn=self.multi_turn,
                         max_concurrency=self.max_concurrency)
        return checked(sim, tree)

    def scheduler(self, memory_utilization: float):
        """The SchedulerConfig: the scheduler's defaults where an option is not given."""
        from dsdsim.serve.scheduler import SchedulerConfig, overhead_seconds

        values = {"memory_utilization": memory_utilization}
        if self.scheduling is not None:
            values["rule"] = self.scheduling
        if self.kv_cache_tokens is not None and self.num_gpu_blocks is not None:
            raise DsdsimError("give the KV cache once: --kv-cache-tokens (tokens) or --num-gpu-blocks (blocks of "
                              "16 tokens), not both")
        for name, option in (("max_num_seqs", "--max-num-seqs"),
                             ("max_num_batched_tokens", "--max-num-batched-tokens"),
                             ("kv_cache_tokens", "--kv-cache-tokens"), ("num_gpu_blocks", "--num-gpu-blocks")):
            value = getattr(self, name)
            if value is not None:
                if value < 1:
                    raise DsdsimError(f"{option} must be >= 1, got {value}")
                values[name] = value
        if self.mem_fraction_static is not None:
            values["mem_fraction_static"] = self.mem_fraction_static
        if not 0 <= self.prefix_cache_hit < 1:
            raise DsdsimError(f"--prefix-cache-hit must be in [0, 1), got {self.prefix_cache_hit:g}; 0.5 means half "
                              "of every prompt is served from the cache")
        if self.prefix_cache_hit:
            values["prefix_cache_hit"] = self.prefix_cache_hit
        if "num_gpu_blocks" in values:
            values["kv_cache_tokens"] = values.pop("num_gpu_blocks") * SchedulerConfig.block_size
        if self.request_overhead_ms is not None:
            values["request_overhead_s"] = overhead_seconds(self.request_overhead_ms, "--request-overhead-ms")
        return SchedulerConfig(**values)


# --- simulate -----------------------------------------------------------------------------------------------------


@app.command()
@takes(sim=SimulatedArgs, deploy=DeploymentArgs, serve=ServeArgs)
def simulate(
    ctx: Invocation,
    sim: SimulatedArgs,
    deploy: DeploymentArgs,
    serve: ServeArgs,
    acceptance: Acceptance = None,
    sweep: Optional[str] = Option(None, "--sweep", metavar="KIND:L1,L2,...",
                                  help="Run at each load: poisson:1,2,4,8 (QPS), gamma:1,2,4:CV, "
                                       "closed:1,8,32,64 (concurrency); one row per load and policy (replaces "
                                       "--workload)"),
    fmt: TableFmt = TableFormat.table,
    output: Output = None,
    plot: Plot = None,
) -> None:
    """Serve a workload of requests with each K policy and report what a benchmark client would see: output
    tokens/s, requests/s, TTFT, TPOT, ITL and end-to-end latency percentiles, goodput under an SLO, the mean batch,
    the share of steps at each K, preemptions. Each engine step is priced by dsdsim's cost model (prefill chunks and
    verify tokens in one mixed pass, the draft passes, the engine's terms); acceptance is drawn per request.

    \b
    Workloads (--workload):
      closed:C         C clients, each sending its next request when its last one returns (constant concurrency)
      poisson:QPS      open loop: requests arrive at random, QPS per second on average
      gamma:QPS:CV     open loop, bursty: gamma-distributed gaps, CV their coefficient of variation (1 = poisson)
      rollout          every request arrives at time 0, as in an RL rollout: the batch drains as requests finish
      trace:FILE       arrival times and lengths from a CSV / JSONL file (arrival_s,input_len,output_len) or a
                       `vllm bench serve --save-detailed` result

    \b
    Examples:
      dsdsim simulate
      dsdsim simulate --workload poisson:8 --slo ttft=200,tpot=50 --format json -o run.json
      dsdsim simulate --workload rollout --requests 256 --output-len lognormal:1024:600 --plot rollout.png
      dsdsim simulate --sweep poisson:2,4,8,16 --policies none,fixed:3,dsd --plot sweep.png
      dsdsim simulate -m qwen3-30b-a3b -g h200-sxm --sweep closed:1,8,32,64 --executor dask://10.0.0.5:8786
      dsdsim simulate --workload poisson:12 --replicas 4 --router prefix-aware --shared-prefix 8192:128
      dsdsim simulate --workload closed:32 --multi-turn 10:2 --shared-prefix 2048:4 --input-len uniform:64:256
    """
    from dsdsim.specs.setup import resolve

    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    if plot is not None:
        check_png(plot, "--plot")
        if is_stdout(plot) and (output is None or is_stdout(output)):
            raise DsdsimError("--plot - and the simulate output would both go to standard output; write one to a file")
    if sweep is not None and ctx.given("workload"):
        raise DsdsimError("--sweep sets the workload at each load: give either --workload or --sweep, not both")
    if serve.workload.strip().startswith("trace:"):
        given = [option for name, option in (("input_len", "--input-len"), ("output_len", "--output-len"))
                 if ctx.given(name)]
        if given:
            warn(f"{' and '.join(given)} not used: a trace carries each request's own lengths")
    loads = None
    if sweep is not None:
        from dsdsim.serve.sweep import parse_loads

        loads = parse_loads(sweep)
        serve = replace(serve, workload=loads.workloads[0])    # the sweep's kind is checked with the other options
    _check_router(ctx, serve.replicas)
    setup = resolve(sim.model, sim.hardware, deploy.deployment(), sim.drafter_spec(), sim.engine)
    serve = _default_policies(ctx, serve, setup.drafter)
    job = serve.simulation(setup, acceptance, deploy.memory_utilization)
    quiet = fmt is TableFormat.json and (output is None or is_stdout(output))
    if loads is not None:
        return _sweep(job, loads, setup, serve.executor, fmt, output, plot, quiet)
    from dsdsim.serve.sweep import simulate_many

    result = _progress(quiet, f"simulating {_requests_text(job.requests)}",
                       lambda progress: simulate_many(job, [job.workload], executor=serve.executor,
                                                      progress=progress)[0])
    from dsdsim.export import serve as views

    if plot is not None:
        from dsdsim.export.serve_plots import TimelineDisplay, plot_title

        _save_plot(TimelineDisplay.from_result(result, plot_title(views.setup_line(setup), _workload_text(job))), plot)
    _write(fmt, output, lambda: views.simulation_dict(setup, result), lambda: views.simulation_csv(setup, result),
           lambda: views.simulation_view(setup, result, _notes(job)))


def _sweep(job, loads, setup, executor, fmt, output: Optional[Path], plot: Optional[Path], quiet: bool) -> None:
    from dsdsim.export import serve as views
    from dsdsim.serve.sweep import sweep

    result = _progress(quiet, f"simulating {len(loads.values)} loads",
                       lambda progress: sweep(job, loads, executor=executor, progress=progress))
    if plot is not None:
        from dsdsim.export.serve_plots import SweepDisplay, plot_title

        limit = f", at most {job.max_concurrency} in flight" if job.max_concurrency else ""
        what = (f"{loads.text} (one run per load{limit}), {_requests_text(job.requests)} "
                f"each, input {_input_text(job)}, output {job.output_len} tokens")
        _save_plot(SweepDisplay.from_sweep(result, plot_title(views.setup_line(setup), what)), plot)
    _write(fmt, output, lambda: views.sweep_dict(setup, result), lambda: views.sweep_csv(setup, result),
           lambda: views.sweep_view(setup, result, _notes(job)))


def _check_router(ctx: Invocation, replicas: int, fleet_qps: Optional[float] = None) -> None:
    """A --router the user typed has replicas to choose from: --replicas N (N >= 2), or plan's --fleet-qps."""
    if ctx.given("router") and replicas == 1 and fleet_qps is None:
        more = " or --fleet-qps QPS (plan finds the replicas)" if ctx.command_path.endswith("plan") else ""
        raise DsdsimError(f"--router picks the replica each request goes to, and one server has none to pick: "
                          f"add --replicas N (N >= 2){more}, or drop --router")


def _default_policies(ctx: Invocation, serve: "ServeArgs", drafter) -> "ServeArgs":
    """``serve`` with the policies that can run where --policies was not given: ``none`` without a drafter (-d
    none), ``none,fixed:D`` for a draft tree (its server verifies the tree or nothing)."""
    if ctx.given("policies") or (drafter is not None and drafter.tree is None):
        return serve
    if drafter is None:
        return replace(serve, policies="none")
    from dsdsim.serve.simulate import tree_depth

    return replace(serve, policies=f"none,fixed:{tree_depth(drafter.tree)}")


def _save_plot(display, plot: Path) -> None:
    from dsdsim.export.plots import save_png

    save_png(display.plot(), plot)
    display.close()
    echo(f"wrote {plot}", err=True)


def _write(fmt, output: Optional[Path], as_dict, as_csv, as_view) -> None:
    """The result in the format asked for: JSON (the documented contract), CSV rows, or the table."""
    if fmt is TableFormat.json:
        from dsdsim.export.render import to_json

        return emit(to_json(as_dict()), output)
    if fmt is TableFormat.csv:
        return emit(as_csv(), output)
    show_or_write(as_view(), output)


def _progress(quiet: bool, label: str, run):
    """A progress bar on stderr (a terminal, runs over a second), none when the output is JSON on stdout."""
    return run(None) if quiet else with_progress(label, run)


def _input_text(job) -> str:
    """The prompts' lengths as given: '512', '1024 shared (8 prefixes) + 512' with --shared-prefix, and each turn
    the conversation so far and a message with --multi-turn."""
    text = str(job.input_len)
    if job.shared_prefix:
        from dsdsim.serve.prefix import parse_shared_prefix

        shared = parse_shared_prefix(job.shared_prefix)
        text = f"{shared.tokens} shared ({shared.groups} prefix{'es' if shared.groups != 1 else ''}) + {text}"
    if job.multi_turn:
        from dsdsim.serve.prefix import parse_multi_turn

        text += f" a turn, in {parse_multi_turn(job.multi_turn).turns}-turn conversations"
    return text


TRACE_LENGTHS = "the trace's own"          # a trace workload's lengths, in the footer and plot titles


def _lengths_text(job) -> Optional[str]:
    """'input 512, output 256 tokens'; None for a trace, whose requests carry their own (--input-len unused)."""
    if job.workload.strip().startswith("trace:"):
        return None
    return f"input {_input_text(job)}, output {job.output_len} tokens"


def _workload_text(job) -> str:
    limit = f" (at most {job.max_concurrency} in flight)" if job.max_concurrency else ""
    return f"{job.workload}{limit}, {_requests_text(job.requests)}, {_lengths_text(job) or TRACE_LENGTHS + ' lengths'}"


def _notes(job) -> list[str]:
    lines = [f"lengths: {_lengths_text(job) or TRACE_LENGTHS}; seed {job.seed}"]
    if job.multi_turn:
        lines.append("a conversation's later turn sends the conversation so far (the turns before and their replies) "
                     "and a new message of that input length")
    if job.slo:
        lines.append(f"SLO: {job.slo} (milliseconds)")
    from dsdsim.policy.predict import chain_engine_tree_note

    tree = chain_engine_tree_note(job.setup) if job.setup is not None else None
    return lines + _scheduling_note(job) + _speculative_cap_note(job) + ([tree] if tree else [])


def _speculative_cap_note(job) -> list[str]:
    """A line where the engine caps a speculative server's running requests below the scheduler's default and
    --max-num-seqs was not given: the speculative policies ran under that cap, which their batch and TTFT show."""
    from dsdsim.serve.policies import parse_policies
    from dsdsim.serve.scheduler import SchedulerConfig
    from dsdsim.serve.simulate import server_kind

    engine = job.setup.engine
    limit = getattr(engine, "speculative_max_requests", None)
    given = job.scheduler.max_num_seqs if job.scheduler is not None else None
    plain = SchedulerConfig().for_server(engine, False).max_num_seqs      # the engine's limit without speculation
    if limit is None or limit.value >= plain or given is not None:
        return []
    if all(server_kind(p) == "plain" for p in parse_policies(job.policies)):
        return []
    return [f"{engine.speculative_cap_text}: the speculative servers here run at most {limit.value}, a server without "
            f"speculation {plain}; --max-num-seqs N simulates servers started with N"]


def _scheduling_note(job) -> list[str]:
    """A line where the engine version serves this model without chunked prefill (vLLM 0.7.1-0.7.3 and MLA) or
    schedules as vLLM does not (TensorRT-LLM: whole prompts, admission that reserves a whole sequence), else none:
    such a server's TTFT grows with the concurrency and a reader should know why."""
    from dsdsim.serve.scheduler import SchedulerConfig
    from dsdsim.serve.simulate import engine_prefill_rule

    given = job.scheduler if job.scheduler is not None else SchedulerConfig()
    if given.mixed_prefill is not None:
        return []
    cfg = engine_prefill_rule(given, job.setup)
    if cfg.mixed_prefill and (not cfg.chunked_prefill or cfg.reserve_to_completion):   # TensorRT-LLM's defaults
        server = cfg.for_server(job.setup.engine, False, job.setup.hardware, job.setup.deployment.tp)
        parts = []
        if not cfg.chunked_prefill:
            parts.append(f"prompts enter a step whole beside the decodes (no chunked prefill), first come first "
                         f"served: the queue waits at a prompt that does not fit the tokens left of "
                         f"{server.max_num_batched_tokens:,}")
        if cfg.reserve_to_completion:
            parts.append("a request is admitted only while the blocks of its whole sequence are free, so none is "
                         "preempted (GUARANTEED_NO_EVICT)")
        return [f"scheduling ({job.setup.engine.name}'s defaults): {'; '.join(parts)}; at most "
                f"{server.max_num_seqs:,} requests a step"]
    if cfg.chunked_prefill:
        return []
    return [f"scheduling: whole prompts in prefill-first steps of up to {cfg.max_num_batched_tokens:,} tokens, decodes "
            "in steps of their own (this release serves MLA models without chunked prefill: \"MLA is enabled; forcing "
            "chunked prefill and prefix caching to be disabled\"): a waiting prompt runs before any decode step, so TTFT "
            "grows with the prompts that arrive together"]


# --- plan --simulate ------------------------------------------------------------------------------------------------

SIMULATE_FLAG = Annotated[bool, Option(
    "--simulate", help="Also simulate serving on each candidate: for each --policies policy, the largest load "
                       "(concurrency for --workload closed:C, QPS for poisson/gamma, starting there) at which 90% of "
                       "requests meet --slo (default tpot = --itl-slo-ms); a column per policy")]
FLEET_QPS = Annotated[Optional[float], Option(
    "--fleet-qps", metavar="QPS",
    help="With --simulate and an open-loop --workload: also the fewest replicas of each candidate, behind --router, "
         "that meet --slo at QPS requests/s, per policy (each replica serving --requests)")]

_PLAN_SIMULATE_HELP = """

    With --simulate, each feasible candidate is also served: for each policy, a doubling then bisection over the load
    of --workload (closed:C searches the concurrency, poisson:QPS and gamma:QPS:CV the rate, starting at the number
    given) finds the largest load at which 90% of the requests meet --slo (default: tpot = --itl-slo-ms), in a few
    simulations per candidate and policy; one column per policy.

    \b
    Example (serving):
      dsdsim plan -m llama-3.1-8b -g h100-sxm,h200-sxm --itl-slo-ms 30 --simulate --workload poisson:4 \\
          --slo ttft=500,tpot=30 --requests 300
      dsdsim plan -m llama-3.1-8b -g h100-sxm --itl-slo-ms 30 --simulate --workload poisson:8 \\
          --slo ttft=200,tpot=15 --requests 200 --fleet-qps 150        # how many replicas for 150 req/s
"""


def _extend_plan() -> None:
    """Give plan (declared in model.py) the --simulate flag and the serving options; without --simulate it runs as
    declared there, its output unchanged."""
    info = next(c for c in app.registered_commands if c.callback is _model_commands.plan)
    original = info.callback
    serve_fields = option_fields(ServeArgs, {})
    names = [n for n, _, _ in serve_fields]
    params = list(inspect.signature(original).parameters.values())
    extra = [inspect.Parameter("simulate", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=False,
                               annotation=SIMULATE_FLAG),
             inspect.Parameter("fleet_qps", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                               annotation=FLEET_QPS)]
    extra += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d, annotation=a)
              for n, a, d in serve_fields]

    @functools.wraps(original)
    def plan(**kwargs):
        simulate_ = kwargs.pop("simulate")
        fleet_qps = kwargs.pop("fleet_qps")
        serve = ServeArgs(**{n: kwargs.pop(n) for n in names})
        if not simulate_:
            typed = [f"--{n.replace('_', '-')}" for n in names + ["fleet_qps"] if kwargs["ctx"].given(n)]
            if typed:
                one = len(typed) == 1
                raise DsdsimError(f"{', '.join(typed)} {'is' if one else 'are'} for plan --simulate; add --simulate "
                                  f"or drop {'it' if one else 'them'}")
            return original(**kwargs)
        return _plan_simulated(serve, fleet_qps=fleet_qps, **kwargs)

    plan.__signature__ = inspect.signature(original).replace(parameters=[*params, *extra])
    plan.__annotations__ = {p.name: p.annotation for p in [*params, *extra]}
    plan.__doc__ = (original.__doc__ or "").rstrip() + _PLAN_SIMULATE_HELP
    del plan.__wrapped__
    info.callback = plan


def _group(cls, values: dict):
    """The option object ``cls`` from the expanded values a command received (its fields that are there)."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in known})


def _plan_simulated(serve: ServeArgs, *, ctx, model: str, candidates: str, itl_slo_ms: Optional[float],
                    target_tokens_per_s, price_per_gpu_hour, fmt, output, fleet_qps=None, **grouped) -> None:
    from dsdsim.export.serve import load_column, plan_fleet_records, plan_load_records, plan_with_fleets, plan_with_loads
    from dsdsim.plan import plan_rows, require_a_valid_candidate
    from dsdsim.policy.options import PredictOptions
    from dsdsim.serve.sweep import ATTAINMENT, fleet_sizes, largest_loads, load_of, split_policies
    from dsdsim.serve.simulate import parse_slo
    from dsdsim.specs.setup import resolve

    if itl_slo_ms is None:       # the served SLO's TPOT is the per-sequence ITL the operating points must meet
        itl_slo_ms = getattr(parse_slo(serve.slo), "tpot_ms", None)
        if itl_slo_ms is None:
            raise DsdsimError("plan --simulate needs --itl-slo-ms MS or a tpot in --slo (e.g. --slo ttft=200,tpot=15): "
                              "the operating points are chosen under that inter-token latency")
    _check_router(ctx, serve.replicas, fleet_qps)
    if serve.max_concurrency is not None:
        raise DsdsimError("plan --simulate searches the load at which the SLO holds, and --max-concurrency caps the "
                          "load the server sees, so every request rate would pass: search the concurrency with "
                          "--workload closed:C, or drop --max-concurrency")
    check_writable(output)
    fmt = output_format(ctx, fmt, output)
    sim, deploy, options = (_group(SimulatedArgs, grouped), _group(DeploymentArgs, grouped),
                            _group(PredictOptions, grouped))
    spec = sim.drafter_spec()
    drafter = "none" if spec is None else spec.label + (f" ({spec.tree.label})" if spec.tree is not None else "")
    dep = deploy.deployment()
    from dsdsim.errors import comma_items

    cands = comma_items(candidates, f"--candidates {candidates!r}", "h100-sxm:tp8,h200-sxm:tp4")
    serve = _default_policies(ctx, serve, spec)
    slo = serve.slo if serve.slo is not None else f"tpot={itl_slo_ms:g}"
    base = serve.simulation(None, options.acceptance, deploy.memory_utilization, slo=slo,
                            tree=spec.tree if spec is not None else None)
    loads, _ = load_of(base.workload)          # a load to search (not a rollout or a trace), before any work
    if fleet_qps is not None:
        if loads.kind == "closed":
            raise DsdsimError("--fleet-qps needs an open-loop workload (--workload poisson:QPS or gamma:QPS:CV): a "
                              "closed loop's clients fix the load whatever the fleet")
        if not fleet_qps > 0:
            raise DsdsimError(f"--fleet-qps must be a positive number of requests/s, got {fleet_qps:g}")
        if base.replicas > 1:
            raise DsdsimError("--fleet-qps finds the number of replicas; drop --replicas")
    rows = with_progress("planning candidates", lambda progress: plan_rows(
        model, cands, itl_slo_ms, drafter=spec, engine=sim.engine, deployment=dep, options=options,
        target_tokens_per_s=target_tokens_per_s, price_per_gpu_hour=price_per_gpu_hour, progress=progress))
    require_a_valid_candidate(rows)
    setups = [(r.candidate, resolve(model, r.hardware, dep.model_copy(update={"tp": r.tp, "ep": r.ep, "pp": r.pp}),
                                    spec, sim.engine))
              for r in rows if r.feasible]
    policies = split_policies(serve.policies)
    largest = with_progress(f"searching the load of {len(setups) * len(policies)} candidate x policy pairs",
                            lambda progress: largest_loads(setups, base, policies, executor=serve.executor,
                                                           progress=progress))
    fleets = []
    if fleet_qps is not None:
        fleets = with_progress(f"sizing the fleets of {len(setups) * len(policies)} candidate x policy pairs",
                               lambda progress: fleet_sizes(setups, base, policies, fleet_qps, largest,
                                                            executor=serve.executor, progress=progress))
    names = [r.candidate for r in rows]
    recs = plan_fleet_records(plan_load_records([r.to_dict() for r in rows], names, largest), names, fleets)
    kind = base.workload.split(":", 1)[0]
    fleet = f" of {base.replicas} replicas behind a {base.router} router" if base.replicas > 1 else ""
    overhead_ms = _request_overhead_ms(base, setups[0][1] if setups else None)     # the candidates share an engine
    priced = f", each reaching the scheduler {overhead_ms:.3g} ms after it is sent" if overhead_ms else ""
    what = (f"load at which {100 * ATTAINMENT:g}% of requests meet {slo} ({kind} arrivals{fleet}, the search starting "
            f"at {base.workload}; {_requests_text(base.requests)}{priced}, input {_input_text(base)}, output "
            f"{base.output_len} tokens)")
    if fmt is TableFormat.json:
        from dsdsim.export.render import to_json

        return emit(to_json({"model": model, "itl_slo_ms": itl_slo_ms, "context": options.context, "drafter": drafter,
                             "dp_attention": dep.dp_attention, "candidates": recs,
                             "simulation": {"workload": base.workload, "requests": base.requests,
                                            "replicas": base.replicas, "router": base.router,
                                            "input_len": base.input_len, "output_len": base.output_len,
                                            "slo": slo, "attainment": ATTAINMENT, "seed": base.seed,
                                            "request_overhead_ms": overhead_ms,
                                            "columns": [load_column(x.policy, x.unit) for x in largest[:len(policies)]],
                                            "searches": [x.to_dict() for x in largest],
                                            **({"fleet_qps": fleet_qps,
                                                "fleet_searches": [x.to_dict() for x in fleets]}
                                               if fleet_qps is not None else {})}}), output)
    if fmt is TableFormat.csv:
        from dsdsim.export.engines import table_csv

        return emit(table_csv(recs), output)
    from dsdsim.export.render import plan_table

    layout = ", data-parallel attention" if dep.dp_attention else ""
    title = f"{model}: ITL SLO {itl_slo_ms:g} ms, context {options.context}, drafter {drafter}{layout}"
    view = plan_with_loads(plan_table(title, rows), names, largest, what)
    if fleets:
        view = plan_with_fleets(view, rows, fleets, base.router)
    show_or_write(view, output)


_extend_plan()


def _request_overhead_ms(job, setup) -> float:
    """The request overhead a job's simulations on ``setup`` price (ms): its scheduler's, else the calibrated one of
    the setup's engine spec."""
    from dsdsim.serve.simulate import calibrated_request_overhead_s

    given = job.scheduler.request_overhead_s if job.scheduler is not None else None
    return 1e3 * (given if given is not None else calibrated_request_overhead_s(setup))


def _requests_text(n) -> str:
    """How many requests a run serves, in words (None: a trace's own rows)."""
    return "every request of the trace" if n is None else f"{n} requests"
