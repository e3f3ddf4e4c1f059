"""Serving simulations as text: the table (``dsdsim.export.text`` renderables, never printed here), the JSON
contract, CSV rows.

Each function takes what ``dsdsim.serve`` computed (a SimulationResult, a sweep, load searches) through its
``to_dict()`` forms and the resolved Setup, and returns something to print. The JSON contract (docs/simulate.md):

    {"setup": {model, hardware, tp, drafter, engine}, "workload", "requests", "seed", "policies": [...]}
    a sweep: {"setup", "sweep": {kind, unit, values[, cv]}, "loads": [{"load", "workload", "requests", "seed",
              "policies"}, ...]}

CSV has one row per policy (and per load for a sweep), the percentiles flattened: ``ttft_ms_p50``.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from dsdsim.units import format_percent

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")          # each {mean, p50, p90, p99} in PolicyResult.to_dict
STATS = ("mean", "p50", "p90", "p99")
LATENCY_LABELS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "e2e"}


# --- the setup ---------------------------------------------------------------------------------------------------


def setup_dict(setup) -> dict:
    """What was simulated, by name: model, hardware, tp, ep, drafter ('none' without one), engine ('vllm >=0.29
    (model runner V2)'), and the expert overlap priced (0 on a dense model or under independent routing). No pp: the
    serving simulation runs pp = 1 only."""
    from dsdsim.cost.experts import routing_overlap
    from dsdsim.export.render import engine_text

    engine = engine_text(setup.engine) if setup.engine is not None else None
    dep = setup.deployment
    return {"model": setup.model.name, "hardware": setup.hardware.name, "tp": dep.tp, "ep": dep.ep,
            "drafter": _drafter_label(setup.drafter), "engine": engine or "ideal",
            "expert_overlap": routing_overlap(dep.expert_overlap, setup.model.moe_ffn is not None)}


def _drafter_label(drafter) -> str:
    """'eagle3', 'eagle3 (tree 3,2,8)', 'none'."""
    if drafter is None:
        return "none"
    return drafter.label + (f" ({drafter.tree.label})" if drafter.tree is not None else "")


def setup_line(setup) -> str:
    """'llama-3.1-8b on h100-sxm (tp 1), drafter eagle3, engine vllm >=0.29 (model runner V2)'."""
    s = setup_dict(setup)
    ep, pp = setup.deployment.ep, setup.deployment.pp
    from dsdsim.export.deployment import deployment_view

    routing = deployment_view(setup.model, setup.deployment).routing_label
    par = f"tp {s['tp']}" + (f", ep {ep}" if ep > 1 else "") + (f", pp {pp}" if pp > 1 else "") + routing
    return f"{s['model']} on {s['hardware']} ({par}), drafter {s['drafter']}, engine {s['engine']}"


# --- JSON ----------------------------------------------------------------------------------------------------------


def simulation_dict(setup, result) -> dict:
    """The documented JSON of one simulation: the setup, then SimulationResult.to_dict()."""
    d = result.to_dict()
    return {"setup": setup_dict(setup), **d, "servers": servers_map(d["policies"])}


def sweep_dict(setup, sweep) -> dict:
    """The documented JSON of a sweep: the setup, the loads swept, one simulation per load."""
    d = sweep.to_dict()
    return {"setup": setup_dict(setup), **d,
            "servers": servers_map([p for pt in d["loads"] for p in pt["policies"]])}


# --- CSV -----------------------------------------------------------------------------------------------------------


def policy_row(policy: Mapping[str, Any]) -> dict:
    """One PolicyResult.to_dict() as flat columns: ttft_ms_p50, ..., k_histogram as 'K:steps K:steps'."""
    row: dict = {"policy": policy["name"], "output_tokens_per_s": policy["output_tokens_per_s"],
                 "requests_per_s": policy["requests_per_s"]}
    for lat in LATENCIES:
        for stat in STATS:
            row[f"{lat}_{stat}"] = (policy.get(lat) or {}).get(stat)
    row["goodput_requests_per_s"] = policy.get("goodput_requests_per_s")
    row["mean_batch"] = policy.get("mean_batch")
    row["mean_acceptance_length"] = policy.get("mean_acceptance_length")
    row["k_histogram"] = " ".join(f"{k}:{n}" for k, n in _k_items(policy.get("k_histogram") or {}))
    row["k_limited_steps"] = policy.get("k_limited_steps")
    for key in ("preemptions", "kv_cache_tokens", "duration_s", "steps"):
        row[key] = policy.get(key)
    return row


def simulation_rows(setup, result, load: Optional[float] = None) -> list[dict]:
    """The CSV rows of one simulation: the setup, workload (and the client's limit on an open loop or a trace) and
    fleet (replicas, and the router when more than one) on every row, then the policy's columns (the fleet's
    figures)."""
    d = result.to_dict()
    head = {**setup_dict(setup), **({"load": load} if load is not None else {}), "workload": d["workload"],
            "max_concurrency": d.get("max_concurrency"), "requests": d["requests"], "seed": d["seed"],
            "replicas": d.get("replicas", 1), "router": d.get("router")}
    return [{**head, **policy_row(p)} for p in d["policies"]]


def simulation_csv(setup, result) -> str:
    from dsdsim.export.engines import table_csv

    return table_csv(simulation_rows(setup, result))


def sweep_csv(setup, sweep) -> str:
    from dsdsim.export.engines import table_csv

    return table_csv([row for point in sweep.points for row in simulation_rows(setup, point.result, point.load)])


# --- tables --------------------------------------------------------------------------------------------------------


def k_histogram_text(hist: Mapping[Any, Any]) -> str:
    """Steps per K as shares, K ascending: '0:12% 2:40% 3:48%' (a share that would print as 0% or as 100% beside
    others: '<1%', '>99%'); '-' when empty."""
    items = _k_items(hist)
    total = sum(n for _, n in items)
    if not total:
        return "-"
    parts = []
    for k, n in items:
        share = 100.0 * n / total
        if 0 < share < 0.5:
            parts.append(f"{k}:<1%")
        elif 99.5 <= share < 100:
            parts.append(f"{k}:>99%")
        else:
            parts.append(f"{k}:{share:.0f}%")
    return " ".join(parts)


def _k_items(hist: Mapping[Any, Any]) -> list[tuple[int, int]]:
    return sorted((int(k), int(n)) for k, n in hist.items())


def _ms(x: Optional[float]) -> str:
    """Milliseconds for people: 3 significant figures below 100, whole numbers (with thousands commas) above."""
    if x is None:
        return "-"
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _pair(policy: Mapping[str, Any], key: str) -> str:
    d = policy.get(key) or {}
    return f"{_ms(d.get('p50'))}/{_ms(d.get('p99'))}"


def _rate(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _columns(with_goodput: bool, load_unit: Optional[str] = None) -> list[str]:
    cols = ([load_unit] if load_unit else []) + ["policy", "out tok/s", "req/s"]
    cols += [f"{LATENCY_LABELS[k]} p50/p99" for k in LATENCIES]
    cols += (["goodput"] if with_goodput else []) + ["batch", "K: % of steps", "preempt"]
    return cols


def _cells(policy: Mapping[str, Any], with_goodput: bool) -> list[str]:
    cells = [str(policy["name"]), _rate(policy["output_tokens_per_s"]), _rate(policy["requests_per_s"])]
    cells += [_pair(policy, k) for k in LATENCIES]
    if with_goodput:
        cells.append(_rate(policy.get("goodput_requests_per_s")))
    mean_batch = policy.get("mean_batch")
    cells += ["-" if mean_batch is None else f"{mean_batch:.1f}", k_histogram_text(policy.get("k_histogram") or {}),
              str(policy.get("preemptions", "-"))]
    return cells


def _table(title: str, cols: Sequence[str]):
    from dsdsim.export.text import Table

    t = Table(title=title)
    for c in cols:
        t.add_column(c, justify="left" if c in ("policy", "K: % of steps") else "right", no_wrap=True)
    return t


def simulation_view(setup, result, notes: Sequence[str] = ()):
    """A header line naming the setup and the workload, one row per policy, then ``notes`` (lengths, SLO)."""
    from dsdsim.export.text import Group

    d = result.to_dict()
    policies = d["policies"]
    with_goodput = any(p.get("goodput_requests_per_s") is not None for p in policies)
    t = _table(f"Each policy on the same {d['requests']} requests (seed {d['seed']})",
               _columns(with_goodput))
    for p in policies:
        t.add_row(*_cells(p, with_goodput))
    fleet = f"; {d['replicas']} replicas behind a {d['router']} router" if d.get("replicas", 1) > 1 else ""
    measured = [versus_table(policies), *ttft_gap_line(policies)] if any("vs_measured" in p for p in policies) else []
    return Group(f"{setup_line(setup)}{fleet}; workload {d['workload']} ({_describe(result)})", t, *measured,
                 *_footer(policies, d.get("shared_prefix"), d.get("multi_turn")),
                 *request_overhead_line(d.get("request_overhead_ms")), *notes)


def request_overhead_line(ms: Optional[float]) -> list[str]:
    """['request overhead: 45 ms ...'] where the run priced one (``SchedulerConfig.request_overhead_s``), else []."""
    if not ms:
        return []
    return [f"request overhead: {ms:.3g} ms a request, outside the GPU steps (API server, tokenisation, hand-over, "
            "streaming): each reaches the scheduler that long after it is sent, in its TTFT and latency, not its "
            "TPOT (--request-overhead-ms, or the calibrated engine spec's)"]


def versus_table(policies: Sequence[Mapping[str, Any]]):
    """Simulated against measured, per policy: p50 and p99 of TTFT, TPOT and e2e (simulated / measured and the
    error), and the median over requests of the e2e error."""
    t = _table("Simulated against the run the trace measured (ms: simulated / measured, error)",
               ["policy", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "e2e p50", "e2e p99",
                "per request e2e |err|"])
    for p in policies:
        vs = p.get("vs_measured")
        if not vs:
            continue
        cells = []
        for q in ("ttft_ms", "tpot_ms", "e2e_ms"):
            for k in ("p50", "p99"):
                x, m, e = vs[q]["simulated"][k], vs[q]["measured"][k], vs[q]["rel_error"][k]
                cells.append(f"{_ms(x)} / {_ms(m)} {e:+.0%}" if e is not None else f"{_ms(x)} / {_ms(m)}")
        per = vs["e2e_ms"]["per_request_median_abs_rel_error"]
        t.add_row(p["name"], *cells, "-" if per is None else f"{per:.1%}")
    return t


def ttft_gap_line(policies: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where a replayed run's measured TTFT p50 is well above the simulated one (by 5 ms and 10% or more): a line
    naming the gap and the request overhead that explains it at light load (``SchedulerConfig.request_overhead_s``)."""
    gaps = []
    for p in policies:
        vs = p.get("vs_measured")
        if not vs:
            continue
        measured, simulated = vs["ttft_ms"]["measured"]["p50"], vs["ttft_ms"]["simulated"]["p50"]
        if measured - simulated >= max(5.0, 0.1 * measured):
            gaps.append(f"{p['name']} {measured - simulated:.3g} ms")
    if not gaps:
        return []
    return [f"the run's TTFT p50 is above the simulated one ({', '.join(gaps)}): at light load that is time outside "
            "the GPU steps (API server, tokenisation, hand-over, streaming), which `dsdsim calibrate --measurements "
            "RUN.json --replay` fits into the engine spec and --request-overhead-ms MS sets; under load it may be "
            "queueing the steps price too fast"]


_UNITS = ("latencies in ms (p50/p99); batch: mean requests per step; K: share of the steps with a decoding request "
          "run at each K")
_GOODPUT = "; goodput: requests/s meeting every SLO"


def _describe(result) -> str:
    """The workload in words ('closed loop, 64 requests in flight'), without a leading repeat of its kind; with its
    conversations where it has them."""
    wl = getattr(result, "workload", None)
    text = wl.describe() if hasattr(wl, "describe") else ""
    prefix = f"{getattr(wl, 'kind', '')}: "
    text = text[len(prefix):] if text.startswith(prefix) else text
    turns = getattr(result, "multi_turn", None)
    return f"{text}; {turns.describe()}, a workload arrival starting one" if turns is not None else text


def sweep_view(setup, sweep, notes: Sequence[str] = ()):
    """One row per (load, policy), loads ascending, a rule between loads."""
    from dsdsim.export.text import Group

    points = sweep.points
    first = points[0].result.to_dict()
    with_goodput = any(p.get("goodput_requests_per_s") is not None for pt in points
                       for p in pt.result.to_dict()["policies"])
    unit = "QPS" if sweep.loads.unit == "QPS" else "C"
    t = _table(f"{sweep.loads.kind} sweep: each policy on the same {first['requests']} requests at each load (seed "
               f"{first['seed']}){', C: clients' if unit == 'C' else ''}", _columns(with_goodput, unit))
    for i, pt in enumerate(points):
        policies = pt.result.to_dict()["policies"]
        for j, p in enumerate(policies):
            t.add_row(f"{pt.load:g}" if j == 0 else "", *_cells(p, with_goodput),
                      end_section=j == len(policies) - 1 and i < len(points) - 1)
    kinds = ", ".join(pt.workload for pt in points)
    fleet = f"; {first['replicas']} replicas behind a {first['router']} router" if first.get("replicas", 1) > 1 else ""
    if first.get("max_concurrency"):
        kinds += f" (at most {first['max_concurrency']} in flight)"
    every = [p for pt in points for p in pt.result.to_dict()["policies"]]
    return Group(f"{setup_line(setup)}{fleet}; workloads {kinds}", t,
                 *_footer(every, first.get("shared_prefix"), first.get("multi_turn")), *notes)


def servers_map(policies: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """{policy name: the server its steps were priced as} (``dsdsim.serve.simulate.SERVERS``), in policy order."""
    from dsdsim.serve.policies import parse_policies
    from dsdsim.serve.simulate import SERVERS, server_kind

    return {p["name"]: SERVERS[server_kind(parse_policies(p["name"])[0])] for p in policies}


def servers_line(policies: Sequence[Mapping[str, Any]]) -> str:
    """'servers: none: a server without speculation ...; dsd, oracle: one server running a dynamic K table ...':
    each server once, with the policies priced as it."""
    by_server: dict[str, list[str]] = {}
    for name, server in servers_map(policies).items():
        by_server.setdefault(server, []).append(name)
    return "servers: " + "; ".join(f"{', '.join(n)}: {server}" for server, n in by_server.items())


def fleet_line(policies: Sequence[Mapping[str, Any]]) -> list[str]:
    """['fleet: 2 replicas ...; per replica: none 28.4-28.6 req/s, TPOT p50 10.5-10.6 ms; ...']: [] for one server."""
    parts = []
    count = 0
    for p in policies:
        reps = p.get("replicas") or []
        if not reps:
            continue
        count = len(reps)
        rps = [r["requests_per_s"] for r in reps]
        tpot = [r["tpot_ms"]["p50"] for r in reps]
        served = [round(r["requests_per_s"] * r["duration_s"]) for r in reps]
        parts.append(f"{p['name']} {min(rps):.3g}-{max(rps):.3g} req/s, TPOT p50 {min(tpot):.3g}-{max(tpot):.3g} ms, "
                     f"{min(served):,}-{max(served):,} requests")
    if not parts:
        return []
    return [f"fleet: {count} replicas, each its own scheduler, KV cache and K policy; the figures above are every "
            f"request's, per replica: " + "; ".join(parts)]


def _footer(policies: Sequence[Mapping[str, Any]], shared: Optional[Mapping[str, Any]] = None,
            turns: Optional[Mapping[str, Any]] = None) -> list[str]:
    durations = [p.get("duration_s") for p in policies if p.get("duration_s") is not None]
    steps = [p.get("steps") for p in policies if p.get("steps") is not None]
    units = _UNITS + (_GOODPUT if any(p.get("goodput_requests_per_s") is not None for p in policies) else "")
    lines = [units, servers_line(policies)] + fleet_line(policies) + kv_cache_line(policies) + \
        prefix_cache_line(policies, shared, turns)
    if not durations:
        return lines
    return lines + [f"simulated serving time {min(durations):.1f}-{max(durations):.1f} s, "
                    f"{min(steps):,}-{max(steps):,} engine steps per policy; as vllm bench serve counts them: TPOT "
                    "(e2e - TTFT) / (output tokens - 1) per request, ITL the gaps between a request's successive "
                    "emissions (a step's tokens stream as one chunk)"]


def prefix_cache_line(policies: Sequence[Mapping[str, Any]], shared: Optional[Mapping[str, Any]] = None,
                      turns: Optional[Mapping[str, Any]] = None) -> list[str]:
    """['prefix cache: 49.2% of prompt tokens found ...'] where the run asked for prefix cache hits (a hit share, or
    the prompts themselves: the run's ``shared_prefix`` and ``multi_turn``), else []."""
    hits = [p["prefix_cache_hit"] for p in policies if p.get("prefix_cache_hit") is not None]
    if not hits:
        return []
    share = format_percent(min(hits)) if max(hits) - min(hits) < 5e-4 else \
        f"{100 * min(hits):.1f}-{format_percent(max(hits))}"
    if shared or turns:
        what = [f"{shared['groups']:,} shared prefixes of {shared['tokens']:,} tokens" if shared else "",
                f"conversations of {turns['turns']} turns, each finding the turns before it" if turns else ""]
        what_text = "; ".join(w for w in what if w)
        return [f"prefix cache: {share} of the prompt tokens admitted were found cached ({what_text}): full blocks, "
                "a prefix shared by the requests using it, the unused blocks evicted oldest first"]
    return [f"prefix cache: {share} of the prompt tokens admitted were found cached (--prefix-cache-hit, in whole "
            "blocks, the last prompt token always computed); their blocks count as each request's own"]


def kv_cache_line(policies: Sequence[Mapping[str, Any]]) -> list[str]:
    """['KV cache: none 451,888; fixed:3, dsd 431,904 tokens at 0.9 (vLLM: ...)']: each server's cache once, at the
    share of the GPU's memory that sized it, and the rule; [] where the policies carry none."""
    by_size: dict[tuple, list[str]] = {}
    given, rules = False, []
    for p in policies:
        if p.get("kv_cache_tokens") is not None:
            key = (int(p["kv_cache_tokens"]), p.get("kv_cache_memory_share"))
            names = by_size.setdefault(key, [])
            if p["name"] not in names:
                names.append(p["name"])
            given = given or p.get("kv_cache_source") == "given"
            rule = p.get("kv_cache_rule")
            if rule and rule not in rules:
                rules.append(rule)
    if not by_size:
        return []
    shares = {share for _, share in by_size}
    one_share = len(shares) == 1
    sizes = "; ".join(f"{', '.join(names)} {tokens:,} tokens" + ("" if one_share or share is None else f" at {share:g}")
                      for (tokens, share), names in by_size.items())
    share = next(iter(shares)) if one_share else None
    if given:
        why = "as given"
    else:
        from dsdsim.cost.mixed import KV_LOG_LINES

        engines = (r.split(":")[0].split()[0] for r in rules)         # the name each rule begins with
        named = [KV_LOG_LINES[e] for e in engines if e in KV_LOG_LINES]
        logs = ", ".join(dict.fromkeys(named)) or ", ".join(KV_LOG_LINES.values())   # the engine's own, else all
        why = ("; ".join(rules) or "sized from --memory-utilization of the GPU's memory") + (
            f"; --kv-cache-tokens N takes your server's own: {logs}")
    return [f"KV cache: {sizes}" + (f" at {share:g}" if share is not None else "") + f" ({why})"]


# --- plan --simulate -----------------------------------------------------------------------------------------------


def load_column(policy: str, unit: str) -> str:
    """The flat column name of a load search: 'max_qps_dsd', 'max_concurrency_fixed:3'."""
    return f"max_{unit.lower()}_{policy}"


def _by_candidate(searches: Sequence) -> tuple[dict, list[str]]:
    """The searches by (candidate, policy), and the policies in the order searched."""
    return {(x.candidate, x.policy): x for x in searches}, list(dict.fromkeys(x.policy for x in searches))


def _with_search_columns(records: Sequence[dict], candidates: Sequence[str], searches: Sequence, column, value):
    """Plan's records with one column per policy (``column(policy)``): ``value(search)`` where the candidate was
    searched, else None."""
    by, policies = _by_candidate(searches)
    return [{**rec, **{column(p): (value(by[(c, p)]) if (c, p) in by else None) for p in policies}}
            for rec, c in zip(records, candidates)]


def _search_table(title: str, candidates: Sequence[str], searches: Sequence, cell):
    """One row per candidate, one column per policy (``cell(search)``), and the simulations each row took."""
    from dsdsim.export.text import Table

    by, policies = _by_candidate(searches)
    t = Table(title=title)
    t.add_column("candidate", no_wrap=True)
    for p in policies:
        t.add_column(p, justify="right", no_wrap=True)
    t.add_column("simulations", justify="right")
    for cand in candidates:
        found = [by.get((cand, p)) for p in policies]
        if all(x is None for x in found):
            t.add_row(cand, *["-" for _ in policies], "-")
            continue
        t.add_row(cand, *[cell(x) for x in found], str(sum(x.simulations for x in found if x is not None)))
    return t


def plan_load_records(records: Sequence[dict], candidates: Sequence[str], largest: Sequence) -> list[dict]:
    """Plan's candidate records (asdict(PlanRow)) with one column per policy: the largest load meeting the SLO
    (None where the candidate was not searched or no load met it)."""
    unit = largest[0].unit if largest else "load"
    return _with_search_columns(records, candidates, largest, lambda p: load_column(p, unit), lambda x: x.load)


def fleet_column(policy: str) -> str:
    """The flat column name of a fleet search: 'replicas_for_qps_dsd'."""
    return f"replicas_for_qps_{policy}"


def plan_fleet_records(records: Sequence[dict], candidates: Sequence[str], fleets: Sequence) -> list[dict]:
    """Plan's records with one column per policy: the fewest replicas meeting the SLO at the fleet's rate (None
    where the candidate was not searched or more than the search tries); unchanged without fleet searches."""
    return _with_search_columns(records, candidates, fleets, fleet_column, lambda x: x.replicas)


def plan_with_fleets(view, rows: Sequence, fleets: Sequence, router: str):
    """``view`` with a table of the fleet searches: per candidate and policy, the replicas and GPUs for the rate."""
    from dsdsim.export.text import Group
    from dsdsim.serve.sweep import MAX_FLEET

    gpus = {r.candidate: r.gpus for r in rows}

    def cell(x) -> str:
        if x is None:
            return "-"
        return f"> {MAX_FLEET}" if x.replicas is None else f"{x.replicas} ({x.replicas * gpus[x.candidate]})"

    t = _search_table(f"Replicas for {fleets[0].qps:g} requests/s meeting the SLO ({router}), simulated: replicas "
                      "(GPUs)", [r.candidate for r in rows], fleets, cell)
    note = (f"each fleet serves the rate with --requests per replica; '> {MAX_FLEET}': not met by {MAX_FLEET} "
            "replicas")
    return Group(*view.parts, t, note)


def plan_with_loads(plan_group, candidates: Sequence[str], largest: Sequence, what: str):
    """plan_table's renderable as it is, then a table of the load searches: one row per candidate, one column per
    policy (plan's table already fills the width), and a line saying what they are (``what``: the load, the
    workload, the SLO and its attainment)."""
    from dsdsim.export.text import Group

    unit = largest[0].unit if largest else "load"
    t = _search_table(f"Largest {unit} meeting the SLO, per policy (simulated)", candidates, largest, _load_cell)
    notes = [f"max {unit}: the largest {what}; '>= x': met up to the largest load tried, '< x': not met at the "
             "smallest; '-': not simulated (the candidate is not feasible)"]
    if any(x.load is not None and x.failing is None for x in largest):
        notes.append("a load met up to the largest tried: its requests may all fit one batch (a burst the server "
                     "absorbs, not a steady load); give more --requests, or a ttft= target in --slo")
    return Group(*plan_group.parts, t, *notes)


def _load_cell(x) -> str:
    if x is None:
        return "-"
    if x.load is None:
        return f"< {x.failing:g}" if x.failing is not None else "-"
    text = f"{x.load:g}" if x.unit == "concurrency" else f"{x.load:.3g}"
    return text if x.failing is not None else f">= {text}"
