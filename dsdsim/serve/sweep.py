"""Many serving simulations at once: loads x policies (x plan candidates) through an executor.

``simulate_many`` and ``sweep`` run one job per (load, policy): simulate draws every policy's requests and acceptance
from the same seeded streams whichever policies run beside it, so a policy simulated alone gives the numbers it
gives with the others, and the results of one load are merged back into one SimulationResult. A load search
(``largest_loads``) runs, per plan candidate and policy, the few simulations that a doubling then bisection over the
load needs to find the largest load that meets the SLO (one job each). Where a job runs does not change its
numbers:

    local                  in this process, one after another
    processes              a ``concurrent.futures.ProcessPoolExecutor`` on this machine's cores (the default when
                           there is more than one job and more than one core)
    dask://HOST:PORT       a ``dask.distributed`` cluster (``pip install 'dsdsim[cluster]'``; the workers need
                           dsdsim installed); the scheduler's address, tcp:// unless another protocol is written
                           (tcp://HOST:PORT, as ``dask scheduler`` prints it, is read the same way)

or any ``concurrent.futures.Executor`` you pass (it is used, not shut down). A job carries its resolved Setup (spec
objects pickle by value, so a worker needs none of the spec files), its acceptance as an object (``checked`` reads a
metrics file once, here), and the texts of its workload, policies and SLO, parsed in the worker (a trace or table
file must be readable there).
"""
from __future__ import annotations

import math
import os
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, Callable, Optional, Sequence

from dsdsim.errors import DsdsimError, comma_items
from dsdsim.records import frozen

LOCAL, PROCESSES, DASK = "local", "processes", "dask://"
SCHEDULER_PROTOCOLS = ("tcp://", "tls://", "ucx://", "inproc://")     # a dask scheduler's own address
EXECUTORS_HELP = "local | processes | dask://HOST:PORT (or the scheduler's address, tcp://HOST:PORT)"

Progress = Optional[Callable[[float, int], None]]     # (jobs done, jobs in all)


# --- loads ------------------------------------------------------------------------------------------------------

LOAD_KINDS = {"closed": "concurrency", "poisson": "QPS", "gamma": "QPS"}   # what each swept workload's number is


@frozen
class Loads:
    """The loads of a sweep: the workload kind, its numbers, and the workload text of each.

    closed: concurrency (whole numbers); poisson and gamma: requests per second (gamma keeps its CV)."""

    kind: str
    values: tuple[float, ...]             # ints for closed
    cv: Optional[float] = None            # gamma's coefficient of variation of the gaps

    @property
    def unit(self) -> str:
        return LOAD_KINDS[self.kind]

    def workload(self, value: float) -> str:
        """The workload text at one load: 'closed:32', 'poisson:4', 'gamma:4:2'."""
        if self.kind == "closed":
            return f"closed:{int(value)}"
        if self.kind == "gamma":
            return f"gamma:{value:g}:{self.cv:g}"
        return f"{self.kind}:{value:g}"

    @property
    def text(self) -> str:
        """The sweep as given: 'poisson:1,2,4', 'gamma:1,2,4:2' (gamma's CV kept), 'closed:1,8,32'."""
        values = ",".join(f"{int(v)}" if self.kind == "closed" else f"{v:g}" for v in self.values)
        return f"{self.kind}:{values}" + (f":{self.cv:g}" if self.kind == "gamma" else "")

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(self.workload(v) for v in self.values)


def parse_loads(text: str) -> Loads:
    """'poisson:1,2,4,8' | 'gamma:1,2,4:CV' | 'closed:1,8,32,64'. Every workload is checked by parse_workload."""
    from dsdsim.serve.workload import parse_workload

    kind, _, rest = str(text).strip().partition(":")
    kind = kind.strip().lower()
    example = "poisson:1,2,4,8, gamma:1,2,4:2 or closed:1,8,32,64"
    if kind not in LOAD_KINDS:
        raise DsdsimError(f"cannot sweep {text!r}: a sweep varies the load of closed, poisson or gamma, e.g. {example}")
    cv = None
    if kind == "gamma":
        rest, sep, cv_text = rest.rpartition(":")
        if not sep:
            raise DsdsimError(f"cannot read the sweep {text!r}: write gamma:QPS1,QPS2,...:CV, e.g. gamma:1,2,4:2")
        cv = _number(cv_text, text, example)
    values = tuple(_number(v, text, example) for v in (comma_items(rest, f"the sweep {text!r}", example) if rest.strip()
                                                      else []))
    if not values:
        raise DsdsimError(f"the sweep {text!r} names no load; e.g. {example}")
    if kind == "closed":
        if any(v != int(v) for v in values):
            raise DsdsimError(f"closed-loop loads are whole numbers of clients, got {text!r}")
        values = tuple(int(v) for v in values)
    if len(set(values)) != len(values):
        raise DsdsimError(f"the sweep {text!r} names a load twice")
    loads = Loads(kind, tuple(sorted(values)), cv)
    for w in loads.workloads:
        parse_workload(w)                 # each load a valid workload (QPS > 0, C >= 1, ...) before any work
    return loads


def _number(text: str, whole: str, example: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise DsdsimError(f"cannot read {text.strip()!r} in the sweep {whole!r}; e.g. {example}") from None
    if not math.isfinite(v) or v <= 0:
        raise DsdsimError(f"sweep loads must be finite numbers > 0, got {text.strip()!r} in {whole!r}")
    return v


def load_of(workload: str) -> tuple[Loads, float]:
    """The load kind of one workload text and its number: 'poisson:4' -> (poisson, 4.0). Refuses a rollout or a
    trace, which have no load to vary."""
    kind, _, rest = str(workload).strip().partition(":")
    kind = kind.strip().lower()
    if kind not in LOAD_KINDS:
        raise DsdsimError(f"workload {workload!r} has no load to vary: use closed:C, poisson:QPS or gamma:QPS:CV")
    if kind == "gamma":
        qps, _, cv = rest.partition(":")
        loads = parse_loads(f"gamma:{qps}:{cv}")
    else:
        loads = parse_loads(f"{kind}:{rest}")
    return loads, loads.values[0]


# --- one simulation, as a job -------------------------------------------------------------------------------------


@frozen
class Simulation:
    """One simulation's inputs, every one picklable: what a worker runs (``run_simulation``).

    setup: a resolved Setup (dsdsim.specs.setup.resolve). workload, policies, slo: the texts parse_workload,
    parse_policies and parse_slo read (parsed in the worker). acceptance: what simulate takes (a text, a number, an
    Acceptance). scheduler: a SchedulerConfig, or None for its defaults."""

    setup: Any
    workload: str
    policies: str
    requests: Optional[int] = 1000        # None: a trace's own rows
    input_len: str = "512"
    output_len: str = "256"
    acceptance: Any = None
    scheduler: Any = None
    slo: Optional[str] = None
    seed: int = 0
    replicas: int = 1                     # data-parallel servers behind the router (dsdsim.serve.fleet)
    router: str = "round-robin"
    shared_prefix: Optional[str] = None   # TOKENS:GROUPS: the prompts' shared prefixes (dsdsim.serve.prefix)
    multi_turn: Optional[str] = None      # TURNS[:THINK_S]: conversations (dsdsim.serve.prefix)
    max_concurrency: Optional[int] = None  # the client's limit on an open loop or a trace (vllm --max-concurrency)

    def at(self, workload: str, policies: Optional[str] = None, setup=None) -> "Simulation":
        """The same simulation at another workload (and policies, setup)."""
        return replace(self, workload=workload, policies=self.policies if policies is None else policies,
                       setup=self.setup if setup is None else setup)


def checked(sim: Simulation, tree=None) -> Simulation:
    """``sim`` with its texts checked (workload, policies, lengths, SLO: a one-line error before any work) and its
    acceptance read here into an Acceptance (a metrics file is read once, in this process, not by every worker).
    ``tree``: the draft tree of a job whose setup comes later (plan's candidates)."""
    from dsdsim.policy.predict import acceptance_for
    from dsdsim.serve.fleet import check_replicas, router_named
    from dsdsim.serve.lengths import parse_lengths
    from dsdsim.serve.policies import parse_policies
    from dsdsim.serve.prefix import parse_multi_turn, parse_shared_prefix
    from dsdsim.serve.simulate import check_tree_policies, parse_slo
    from dsdsim.serve.workload import limit_concurrency, parse_workload

    limit_concurrency(parse_workload(sim.workload), sim.max_concurrency)
    policies = parse_policies(sim.policies)
    drafter = getattr(sim.setup, "drafter", None)
    tree = drafter.tree if drafter is not None else tree     # a setup's tree, else the one given (plan's base job)
    if tree is not None:
        check_tree_policies(policies, tree)
    check_replicas(sim.replicas)
    router_named(sim.router)
    shared, turns = parse_shared_prefix(sim.shared_prefix), parse_multi_turn(sim.multi_turn)
    if shared is not None or turns is not None:
        if sim.workload.strip().lower().startswith("trace:"):
            raise DsdsimError("--shared-prefix and --multi-turn are for generated workloads: a trace gives each "
                              "request's whole prompt")
        if sim.scheduler is not None and sim.scheduler.prefix_cache_hit > 0:
            raise DsdsimError("give prefix caching once: --prefix-cache-hit (a hit share of every prompt) or the "
                              "prompts themselves (--shared-prefix, --multi-turn), not both")
    parse_lengths(sim.input_len, "input length")
    parse_lengths(sim.output_len, "output length")
    if sim.slo:
        parse_slo(sim.slo)
    if sim.acceptance is None:
        if tree is not None:
            acceptance_for(None, tree)             # a tree has no default acceptance: one line, before any work
        return sim
    return replace(sim, acceptance=acceptance_for(sim.acceptance, tree))


def split_policies(text: str) -> list[str]:
    """A policies text as one text per policy ('none,fixed:3,dsd' -> ['none', 'fixed:3', 'dsd']), each checked."""
    from dsdsim.serve.policies import parse_policies

    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    for p in parts:
        parse_policies(p)
    parse_policies(text)
    return parts


def run_simulation(sim: Simulation, progress: Optional[Callable[[float], None]] = None):
    """The SimulationResult of one job (a module-level function: workers import it by name). progress: simulate's,
    called with the fraction done."""
    from dsdsim.serve.simulate import simulate

    return simulate(sim.setup, sim.workload, sim.policies, requests=sim.requests, input_len=sim.input_len,
                    output_len=sim.output_len, acceptance=sim.acceptance, scheduler=sim.scheduler,
                    slo=sim.slo or None, seed=sim.seed, progress=progress, replicas=sim.replicas, router=sim.router,
                    shared_prefix=sim.shared_prefix, multi_turn=sim.multi_turn, max_concurrency=sim.max_concurrency)


def simulate_many(base: Simulation, workloads: Sequence[str], *, executor=None, progress: Progress = None) -> list:
    """``base`` at each workload: one SimulationResult per workload, every policy of ``base`` in it.

    Each (workload, policy) pair is its own job: simulate draws every policy's requests and acceptance from the same
    seeded streams whichever policies run with it, so a policy simulated alone gives the numbers it gives beside the
    others, and the pairs can run on different cores. executor: see the module doc (None: processes for more than
    one job on a machine with more than one core). progress(done, total) as jobs finish (fractions of a job when
    they run here)."""
    policies = split_policies(base.policies)
    jobs = [base.at(w, policies=p) for w in workloads for p in policies]
    parts = map_jobs(run_simulation, jobs, executor=executor, progress=progress)
    n = len(policies)
    return [merge_results(parts[i * n:(i + 1) * n]) for i in range(len(workloads))]


def merge_results(parts: Sequence):
    """One SimulationResult of the same requests from several, each simulating some of the policies."""
    first = parts[0]
    return replace(first, policies=[p for r in parts for p in r.policies])


# --- sweeps -------------------------------------------------------------------------------------------------------


@frozen
class LoadPoint:
    """One load of a sweep: its number, its workload text, and the simulation of every policy there."""

    load: float
    workload: str
    result: Any                    # a SimulationResult

    def to_dict(self) -> dict:
        return {"load": self.load, **self.result.to_dict()}


@frozen
class SweepResult:
    """Every load of a sweep, in increasing load."""

    loads: Loads
    points: tuple[LoadPoint, ...]

    def to_dict(self) -> dict:
        return {"sweep": {"kind": self.loads.kind, "unit": self.loads.unit, "values": list(self.loads.values),
                          **({"cv": self.loads.cv} if self.loads.cv is not None else {})},
                "loads": [p.to_dict() for p in self.points]}


def sweep(base: Simulation, loads: Loads | str, *, executor=None, progress: Progress = None) -> SweepResult:
    """``base`` at every load of ``loads`` (a Loads or its text, 'poisson:1,2,4,8'); ``base.workload`` is ignored.
    One job per load and policy (``simulate_many``)."""
    loads = parse_loads(loads) if isinstance(loads, str) else loads
    results = simulate_many(base, loads.workloads, executor=executor, progress=progress)
    return SweepResult(loads, tuple(LoadPoint(v, w, r) for v, w, r in zip(loads.values, loads.workloads, results)))


# --- the largest load that meets the SLO --------------------------------------------------------------------------

ATTAINMENT = 0.9          # a load meets the SLO when at least this share of its requests meets every SLO
REL_TOL = 0.05            # open loop: bisect until the passing and the failing QPS are within 5% of each other
MAX_DOUBLINGS = 12        # 2**12 times the starting load up (or down) before giving up


def meets(policy_result, attainment: float = ATTAINMENT) -> bool:
    """Whether a policy's run meets its SLO: goodput (requests meeting every SLO, per second) is at least
    ``attainment`` of the completed requests per second."""
    good = policy_result.goodput_requests_per_s
    if good is None:
        raise DsdsimError("a load search needs an SLO (ttft=MS,tpot=MS) to judge each load by")
    return good >= attainment * policy_result.requests_per_s


@frozen
class Bracket:
    """A load search's answer: the largest load found to meet the SLO (None: not even the smallest tried) and
    the smallest found to miss it (None: none missed up to the cap), after ``simulations`` runs."""

    passing: Optional[float]
    failing: Optional[float]
    simulations: int


def bracket_load(ok: Callable[[float], bool], start: float, whole: bool, *, cap: Optional[float] = None,
                 floor: Optional[float] = None, rel_tol: float = REL_TOL) -> Bracket:
    """The largest load where ``ok(load)`` holds, assuming it holds up to some load and fails beyond (more load,
    more queueing): double (or halve) from ``start`` until the answer changes, then bisect, geometrically for a
    rate (to ``rel_tol``), on whole numbers for a concurrency (to 1).

    cap: no load above it is tried (a closed loop with more clients than requests is a rollout); floor: no load
    below (default 1 for whole numbers, start / 2**MAX_DOUBLINGS for rates)."""
    runs = 0

    def test(x: float) -> bool:
        nonlocal runs
        runs += 1
        return ok(x)

    def snap(x: float) -> float:
        return float(max(1, round(x))) if whole else x

    floor = (1.0 if whole else start / 2 ** MAX_DOUBLINGS) if floor is None else floor
    lo = hi = None
    x = snap(min(start, cap) if cap is not None else start)
    if test(x):
        lo = x
        for _ in range(MAX_DOUBLINGS):
            if cap is not None and lo >= cap:
                return Bracket(lo, None, runs)
            x = snap(lo * 2 if cap is None else min(lo * 2, cap))
            if not test(x):
                hi = x
                break
            lo = x
        else:
            return Bracket(lo, None, runs)
    else:
        hi = x
        while True:
            x = snap(hi / 2)
            if x < floor or x >= hi:
                return Bracket(None, hi, runs)
            if test(x):
                lo = x
                break
            hi = x
    while (hi - lo > 1) if whole else (hi / lo > 1 + rel_tol):
        mid = snap((lo + hi) / 2 if whole else math.sqrt(lo * hi))
        if mid <= lo or mid >= hi:
            break
        if test(mid):
            lo = mid
        else:
            hi = mid
    return Bracket(lo, hi, runs)


@frozen
class LoadSearch:
    """One search job: a candidate's simulation (one policy) and where its load starts."""

    candidate: str
    base: Simulation
    start: str                       # the workload text the search starts from: closed:64, poisson:4, gamma:4:2
    attainment: float = ATTAINMENT
    rel_tol: float = REL_TOL


@frozen
class LargestLoad:
    """The largest load of one (candidate, policy) that meets the SLO (see Bracket), in the load kind's unit."""

    candidate: str
    policy: str
    kind: str
    unit: str
    load: Optional[float]
    failing: Optional[float]
    simulations: int

    def to_dict(self) -> dict:
        return {"candidate": self.candidate, "policy": self.policy, "kind": self.kind, "unit": self.unit,
                "max_load": self.load, "first_failing_load": self.failing, "simulations": self.simulations}


def search_largest_load(job: LoadSearch, progress=None) -> LargestLoad:
    """Run one search (a module-level function: workers import it by name); ``progress`` is not called (a search
    does not know how many simulations it will need)."""
    loads, start = load_of(job.start)
    whole = loads.kind == "closed"
    names = []

    def ok(x: float) -> bool:
        result = run_simulation(job.base.at(loads.workload(x)))
        names.append(result.policies[0].name)
        return meets(result.policies[0], job.attainment)

    cap = float(job.base.requests) if whole and job.base.requests is not None else None
    b = bracket_load(ok, start, whole, cap=cap, rel_tol=job.rel_tol)
    number = int if whole else float
    return LargestLoad(job.candidate, names[0] if names else job.base.policies, loads.kind, loads.unit,
                       None if b.passing is None else number(b.passing),
                       None if b.failing is None else number(b.failing), b.simulations)


def largest_loads(setups: Sequence[tuple[str, Any]], base: Simulation, policies: Sequence[str], *,
                  attainment: float = ATTAINMENT, rel_tol: float = REL_TOL, executor=None,
                  progress: Progress = None) -> list[LargestLoad]:
    """For each (candidate name, Setup) and policy text, the largest load meeting ``base.slo``, the search starting
    at ``base.workload`` (closed:C searches the concurrency, poisson:QPS and gamma:QPS:CV the rate). One job per
    (candidate, policy), in that order."""
    if not base.slo:
        raise DsdsimError("a load search needs an SLO (ttft=MS,tpot=MS) to judge each load by")
    if not 0 < attainment <= 1:
        raise DsdsimError(f"the SLO attainment must be in (0, 1], got {attainment}")
    load_of(base.workload)
    jobs = [LoadSearch(name, base.at(base.workload, policies=p, setup=setup), base.workload, attainment, rel_tol)
            for name, setup in setups for p in policies]
    return map_jobs(search_largest_load, jobs, executor=executor, progress=progress)


# --- how many replicas a rate needs ------------------------------------------------------------------------------

MAX_FLEET = 64            # replicas a fleet search tries at most


@frozen
class FleetSearch:
    """One fleet search: a candidate's simulation (one policy) at the fleet's rate, and the replicas to try first
    (the rate over one replica's largest rate, rounded up)."""

    candidate: str
    base: Simulation                 # at the target workload: poisson:QPS or gamma:QPS:CV
    start: int
    attainment: float = ATTAINMENT


@frozen
class FleetSize:
    """The fewest replicas of one (candidate, policy) behind the router that meet the SLO at ``qps`` (None: more
    than MAX_FLEET), after ``simulations`` runs."""

    candidate: str
    policy: str
    qps: float
    replicas: Optional[int]
    simulations: int

    def to_dict(self) -> dict:
        return {"candidate": self.candidate, "policy": self.policy, "qps": self.qps, "replicas": self.replicas,
                "simulations": self.simulations}


def search_fleet_size(job: FleetSearch, progress=None) -> FleetSize:
    """The fewest replicas meeting the SLO (a module-level function: workers import it by name). Each fleet of N
    serves N x the base's requests (each replica as many as one server did); more replicas never meet it less."""
    per = job.base.requests
    runs = 0
    names = []

    def ok(n: int) -> bool:
        nonlocal runs
        runs += 1
        result = run_simulation(replace(job.base, replicas=n, requests=None if per is None else per * n))
        names.append(result.policies[0].name)
        return meets(result.policies[0], job.attainment)

    lo, hi = 0, None                 # lo: the most replicas known to miss; hi: the fewest known to meet
    n = max(1, min(job.start, MAX_FLEET))
    if ok(n):
        hi = n
    else:
        lo = n
        while hi is None and lo < MAX_FLEET:
            n = min(2 * lo, MAX_FLEET)
            if ok(n):
                hi = n
            else:
                lo = n
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid
    _, qps = load_of(job.base.workload)
    return FleetSize(job.candidate, names[0] if names else job.base.policies, qps, hi, runs)


def fleet_sizes(setups: Sequence[tuple[str, Any]], base: Simulation, policies: Sequence[str], qps: float,
                largest: Sequence[LargestLoad] = (), *, attainment: float = ATTAINMENT, executor=None,
                progress: Progress = None) -> list[FleetSize]:
    """For each (candidate name, Setup) and policy text, the fewest replicas behind ``base.router`` that meet
    ``base.slo`` at ``qps`` requests/s (``base.workload``'s open-loop kind); the search starts at ``qps`` over the
    largest rate one replica met (``largest``, from ``largest_loads``), else at 1. One job per (candidate, policy)."""
    if not base.slo:
        raise DsdsimError("a fleet search needs an SLO (ttft=MS,tpot=MS) to judge each fleet by")
    loads, _ = load_of(base.workload)
    if loads.kind == "closed":
        raise DsdsimError("replicas for a rate need an open-loop workload (poisson:QPS or gamma:QPS:CV); a closed "
                          "loop's clients fix the load whatever the fleet")
    if not (math.isfinite(qps) and qps > 0):
        raise DsdsimError(f"the fleet's rate must be a positive number of requests/s, got {qps!r}")
    one = {(x.candidate, x.policy): x.load for x in largest}
    jobs = []
    for name, setup in setups:
        for p in policies:
            single = one.get((name, p))
            start = math.ceil(qps / single) if single else 1
            jobs.append(FleetSearch(name, base.at(loads.workload(qps), policies=p, setup=setup), start, attainment))
    return map_jobs(search_fleet_size, jobs, executor=executor, progress=progress)


# --- executors ----------------------------------------------------------------------------------------------------


def executor_kind(executor, jobs: int) -> str:
    """'local', 'processes' or 'dask://...' for an executor text (None: processes for more than one job when this
    machine has more than one core); a scheduler address tcp://HOST:PORT (as dask prints it) is a dask one."""
    if executor is None:
        return PROCESSES if jobs > 1 and (os.cpu_count() or 1) > 1 else LOCAL
    text = str(executor).strip()
    if text.startswith(SCHEDULER_PROTOCOLS) and "://" in text and len(text.split("://", 1)[1]) > 0:
        return DASK + text
    if text in (LOCAL, PROCESSES) or (text.startswith(DASK) and len(text) > len(DASK)):
        return text
    raise DsdsimError(f"unknown executor {executor!r}; use {EXECUTORS_HELP}")


def check_executor(executor) -> None:
    """A one-line error, before any work, for an executor text that cannot run: unknown, or dask:// without
    dask.distributed installed."""
    if isinstance(executor, Executor) or executor is None:
        return
    if executor_kind(executor, 2).startswith(DASK):
        _dask_client_class()


def _dask_client_class():
    try:
        from dask.distributed import Client
    except ImportError:
        raise DsdsimError("a dask executor needs dask.distributed, which is not installed: "
                          "pip install 'dsdsim[cluster]'") from None
    return Client


def map_jobs(fn: Callable, jobs: Sequence, *, executor=None, progress: Progress = None) -> list:
    """[fn(job) for job in jobs] on ``executor`` (see the module doc), in the jobs' order. progress(done, total) as
    jobs finish; here (local) ``fn(job, tick)`` is also given a tick(fraction) for the job under way. The first job
    that raises stops the others and its error is raised here."""
    jobs = list(jobs)
    if isinstance(executor, Executor):
        return _gather(executor, fn, jobs, progress)
    kind = executor_kind(executor, len(jobs))
    if kind == LOCAL or not jobs:
        out = []
        for i, job in enumerate(jobs):
            tick = None if progress is None else (lambda f, i=i: progress(i + f, len(jobs)))
            out.append(fn(job, tick))
            if progress is not None:
                progress(i + 1, len(jobs))
        return out
    if kind == PROCESSES:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1)),
                                   initializer=_ignore_interrupts)
        try:
            return _gather(pool, fn, jobs, progress)
        except BaseException:
            _stop_workers(pool)            # Ctrl-C or a failed job: the running jobs are not waited for
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    client = dask_client(kind[len(DASK):])
    try:
        with client.get_executor(pure=False) as pool:
            return _gather(pool, fn, jobs, progress)
    finally:
        client.close()


def _ignore_interrupts() -> None:
    """A worker process leaves Ctrl-C to the process that started it, which stops the workers (no traceback from
    each of them)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool) -> None:
    """Terminate a process pool's workers now (``shutdown`` alone waits for the jobs they are running)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


def _gather(pool: Executor, fn: Callable, jobs: list, progress: Progress) -> list:
    from concurrent.futures import as_completed

    futures = [pool.submit(fn, job) for job in jobs]
    try:
        for done, f in enumerate(as_completed(futures), 1):
            try:
                f.result()                 # the first error stops the run
            except Exception as exc:
                if _worker_died(exc):
                    raise DsdsimError(_lost_text(jobs, futures, f)) from None
                raise
            if progress is not None:
                progress(done, len(futures))
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return [f.result() for f in futures]


def _worker_died(exc: BaseException) -> bool:
    """A worker process that died under a job (killed, out of memory): a broken process pool, or dask's
    KilledWorker once its retries (distributed.scheduler.allowed-failures) are spent."""
    from concurrent.futures.process import BrokenProcessPool

    return isinstance(exc, BrokenProcessPool) or type(exc).__name__ == "KilledWorker"


def _lost_text(jobs: list, futures: list, failed) -> str:
    """Which jobs a dead worker took with it and which finished: the run writes nothing, so say what to rerun."""
    lost = [i for i, f in enumerate(futures) if f is failed or not (f.done() and not f.cancelled()
                                                                      and f.exception() is None)]
    names = ", ".join(job_label(jobs[i]) for i in lost[:6]) + (f" and {len(lost) - 6} more" if len(lost) > 6 else "")
    return (f"a worker died while running the simulations (killed, or out of memory); {len(lost)} of {len(jobs)} "
            f"did not finish: {names}; nothing was written: rerun (fewer at once with --executor local, or on a "
            f"machine with more memory)")


def job_label(job) -> str:
    """A job in a few words: its workload and policies (a simulation), its candidate and policy (a load search)."""
    if isinstance(job, LoadSearch):
        return f"{job.candidate} {job.base.policies}"
    parts = [str(getattr(job, a)) for a in ("workload", "policies") if getattr(job, a, None) is not None]
    if parts:
        return " ".join(parts)
    text = repr(job)
    return text if len(text) <= 40 else text[:37] + "..."


DASK_TIMEOUT_S = 10


def dask_client(address: str):
    """A dask.distributed Client of the scheduler at ``address`` (HOST:PORT means tcp://HOST:PORT)."""
    Client = _dask_client_class()
    full = address if "://" in address else f"tcp://{address}"
    try:
        return Client(full, timeout=DASK_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DsdsimError(f"cannot reach the dask scheduler at {full}: {why}") from None
