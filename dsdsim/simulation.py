"""``dsdsim.simulate``: the serving simulation from names, as ``dsdsim simulate`` runs it.

The same defaults as the command (model, GPU, drafter eagle3, engine, ``closed:64``, 1000 requests of 512 in / 256
out, policies ``none,fixed:3,dsd``), the same checks, and the same result: ``SimulationResult.to_json()`` is the
document ``dsdsim simulate -f json`` writes. It sits above the serving simulator and the views (the package's
public API layer).
"""
from __future__ import annotations

from dataclasses import fields
from typing import Callable, Optional

from dsdsim.defaults import (DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_INPUT_LEN, DEFAULT_MODEL,
                             DEFAULT_OUTPUT_LEN, DEFAULT_POLICIES, DEFAULT_REQUESTS, DEFAULT_SEED, DEFAULT_WORKLOAD)
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.serve.simulate import SimulationResult


@frozen
class SimulationReport(SimulationResult):
    """A SimulationResult that writes itself as ``dsdsim simulate -f json`` does (what ``dsdsim.simulate`` returns)."""

    @classmethod
    def of(cls, result: SimulationResult) -> "SimulationReport":
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    def report(self) -> dict:
        """The document ``dsdsim simulate -f json`` writes: the setup, the run, each policy's server."""
        from dsdsim.export.serve import simulation_dict

        return simulation_dict(self.setup, self)

    def to_json(self) -> str:
        """``report()`` as the command writes it, byte for byte."""
        from dsdsim.export.render import to_json

        return to_json(self.report())


def simulate(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment=None, drafter=DEFAULT_DRAFTER, *,
             engine=DEFAULT_ENGINE, workload: str = DEFAULT_WORKLOAD, policies: Optional[str] = None,
             requests: Optional[int] = None, input_len: str = DEFAULT_INPUT_LEN, output_len: str = DEFAULT_OUTPUT_LEN,
             acceptance=None, max_num_seqs: Optional[int] = None, max_num_batched_tokens: Optional[int] = None,
             kv_cache_tokens: Optional[int] = None, mem_fraction_static: Optional[float] = None,
             scheduling: Optional[str] = None, prefix_cache_hit: float = 0.0, slo: Optional[str] = None,
             seed: int = DEFAULT_SEED, replicas: int = 1, router: str = "round-robin", executor: Optional[str] = "local",
             shared_prefix: Optional[str] = None, multi_turn: Optional[str] = None,
             max_concurrency: Optional[int] = None, request_overhead_ms: Optional[float] = None,
             progress: Optional[Callable[[int, int], None]] = None):
    """Serve ``requests`` requests of ``workload`` once per policy on one server; a SimulationReport (a
    SimulationResult whose ``to_json()`` is the command's JSON).

    model, hardware, deployment (a Deployment or a dict of its fields), drafter (None or "none": no speculation;
    the policies then default to ``none``), engine: as ``dsdsim.resolve`` takes them. workload, policies, requests,
    input_len, output_len, acceptance, slo, seed: the texts and numbers of ``dsdsim simulate``'s options of the same
    names (requests None: 1000, or a trace's own rows). max_num_seqs, max_num_batched_tokens: the scheduler's
    limits (vLLM's; None: its defaults). kv_cache_tokens: the KV cache as the server reports it (vLLM's "GPU KV
    cache size: N tokens"; None: sized as the engine sizes it, vLLM from the deployment's memory_utilization).
    mem_fraction_static: an SGLang server's memory share (None: SGLang's own for its release). prefix_cache_hit:
    the share of each prompt found in the prefix cache on admission (``SchedulerConfig.prefix_cache_hit``; 0: none).
    shared_prefix: ``TOKENS:GROUPS``, each prompt one of GROUPS prefixes of TOKENS tokens followed by its
    ``input_len`` tokens, found in each server's prefix cache of shared blocks (``dsdsim.serve.prefix``; None: none).
    multi_turn: ``TURNS[:THINK_S]``, the requests conversations of TURNS turns, each turn's prompt the conversation so
    far and a new message, sent THINK_S seconds after the reply before it (None: single requests).
    max_concurrency: the client's limit on requests in flight under a poisson, gamma or trace workload (``vllm bench
    serve --request-rate QPS --max-concurrency C``; None: none). request_overhead_ms: the time a request spends
    outside the GPU steps before its first token (``SchedulerConfig.request_overhead_s``; None: the calibrated
    engine spec's, else 0). scheduling: the rule
    that builds each step (``vllm``, ``prefill-first``, or one registered with
    ``dsdsim.serve.scheduler.register_rule``; None: the engine's). executor: ``local`` (this process, the default
    here), ``processes`` or a Dask scheduler address. replicas, router: N copies of the server behind a router
    (``round-robin``, ``least-loaded``, ``prefix-aware``; ``dsdsim.serve.fleet``), the workload the fleet's; each
    policy's result is the fleet's, with each replica's under ``replicas``.
    progress(done, total): called as the run goes."""
    from dsdsim.serve.scheduler import SchedulerConfig, overhead_seconds
    from dsdsim.serve.sweep import Simulation, check_executor, checked, simulate_many
    from dsdsim.specs.setup import resolve

    setup = resolve(model, hardware, deployment, drafter, engine)
    if policies is None:
        policies = DEFAULT_POLICIES if setup.drafter is not None else "none"
    if requests is None and not str(workload).strip().startswith("trace:"):
        requests = DEFAULT_REQUESTS
    limits = {"memory_utilization": setup.deployment.memory_utilization}
    if scheduling is not None:
        limits["rule"] = scheduling
    for name, value in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens),
                        ("kv_cache_tokens", kv_cache_tokens)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DsdsimError(f"{name} must be a whole number >= 1, got {value!r}")
            limits[name] = value
    if mem_fraction_static is not None:
        limits["mem_fraction_static"] = mem_fraction_static
    if prefix_cache_hit:
        limits["prefix_cache_hit"] = prefix_cache_hit
    if request_overhead_ms is not None:
        limits["request_overhead_s"] = overhead_seconds(request_overhead_ms)
    check_executor(executor)
    job = checked(Simulation(setup, workload, policies, requests=requests, input_len=input_len,
                             output_len=output_len, acceptance=acceptance, scheduler=SchedulerConfig(**limits),
                             slo=slo, seed=seed, replicas=replicas, router=router, shared_prefix=shared_prefix,
                             multi_turn=multi_turn, max_concurrency=max_concurrency))
    return SimulationReport.of(simulate_many(job, [job.workload], executor=executor, progress=progress)[0])
