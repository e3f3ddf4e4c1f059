"""Prompts that share prefixes (simulate --shared-prefix), conversations (--multi-turn), the prefix cache that finds
them, and the prefix-aware router:
closed-form checks (one request at a time: which requests find their prefix follows from the order of the prefixes
alone), equality with a run that shares nothing, and the router's rule on hand-built loads."""
from __future__ import annotations

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.serve.fleet import PrefixAware, RoutedRequests
from dsdsim.serve.prefix import PrefixCache, Prompts, SharedPrefix, assign_groups, parse_shared_prefix
from dsdsim.serve.scheduler import SchedulerConfig
from dsdsim.serve.simulate import simulate
from test_serve_core import FakePricer

BS = SchedulerConfig.block_size


def run(workload="closed:1", policies="none", **kw):
    kw.setdefault("acceptance", 0.8)
    kw.setdefault("requests", 60)
    kw.setdefault("input_len", "40")
    kw.setdefault("output_len", "24")
    return simulate(None, workload, policies, pricer=FakePricer(), **kw)


def found_share(hits: int, prefix_tokens: int, requests) -> float:
    """The share of prompt tokens found when ``hits`` requests each find their prefix's full blocks."""
    return hits * (prefix_tokens // BS) * BS / sum(r.input_len for r in requests)


# --------------------------------------------------------------------------------------------------- parsing


def test_shared_prefix_is_read_as_tokens_and_groups():
    assert parse_shared_prefix("2048:16") == SharedPrefix(2048, 16)
    assert parse_shared_prefix(" 100:1 ") == SharedPrefix(100, 1)
    assert parse_shared_prefix(None) is None and parse_shared_prefix("") is None


@pytest.mark.parametrize("text, words", [("2048", "TOKENS:GROUPS"), ("a:b", "TOKENS:GROUPS"), ("0:4", ">= 1 token"),
                                         ("64:0", "1.."), ("64:4:2", "TOKENS:GROUPS"), ("-5:2", "TOKENS:GROUPS")])
def test_a_malformed_shared_prefix_is_one_clear_line(text, words):
    with pytest.raises(DsdsimError, match=words) as e:
        parse_shared_prefix(text)
    assert "\n" not in str(e.value)


def test_the_prefixes_are_dealt_in_equal_shares_then_shuffled():
    groups = assign_groups(103, SharedPrefix(64, 10), np.random.default_rng(1))
    counts = np.bincount(groups, minlength=10)
    assert counts.sum() == 103 and counts.max() - counts.min() <= 1
    assert not np.array_equal(groups, np.arange(103) % 10)          # shuffled
    assert np.array_equal(groups, assign_groups(103, SharedPrefix(64, 10), np.random.default_rng(1)))


def test_shared_prefixes_leave_the_other_draws_where_they_were():
    """The prefixes come from a stream of their own: the arrivals, lengths and acceptance of a run are those of the
    same run without them, each prompt longer by the prefix."""
    plain = run("poisson:50", input_len="uniform:10:50")
    shared = run("poisson:50", input_len="uniform:10:50", shared_prefix="64:5")
    assert [r.arrival_s for r in shared.requests] == [r.arrival_s for r in plain.requests]
    assert [r.input_len for r in shared.requests] == [r.input_len + 64 for r in plain.requests]
    assert [r.output_len for r in shared.requests] == [r.output_len for r in plain.requests]
    assert {r.prefix for r in shared.requests} == set(range(5)) and {r.prefix for r in plain.requests} == {-1}


def test_a_trace_and_a_hit_share_are_refused_beside_shared_prefixes(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,10,5\n")
    with pytest.raises(DsdsimError, match="whole prompt"):
        run(f"trace:{trace}", requests=None, shared_prefix="64:2")
    with pytest.raises(DsdsimError, match="not both"):
        run(shared_prefix="64:2", scheduler=SchedulerConfig(prefix_cache_hit=0.5))


# --------------------------------------------------------------------------------------------------- the cache


def test_requests_one_at_a_time_find_their_prefix_after_its_first_request():
    """A cache that keeps everything, one request at a time: each prefix's first request writes it, every later one
    finds its full blocks (a 100-token prefix: 6 blocks of 16, 96 tokens), so the share found is (n - G) blocks'
    tokens over the prompts."""
    r = run(shared_prefix="100:3", requests=60)
    assert r.policies[0].prefix_cache_hit == pytest.approx(found_share(60 - 3, 100, r.requests), rel=1e-12)


def test_a_cache_that_holds_one_request_finds_a_prefix_only_right_after_it():
    """A cache of exactly the blocks one request needs: the next request finds the last one's prefix (still queued,
    the last one's own blocks evicted first, tail first as vLLM frees them) and nothing older, so a request finds
    its prefix exactly when the one before it had the same (closed form over the shuffled order)."""
    prompt, out = 96 + 40, 24
    blocks = -(-(prompt + out) // BS)
    r = run(shared_prefix="96:3", requests=80, scheduler=SchedulerConfig(kv_cache_tokens=blocks * BS))
    g = [q.prefix for q in r.requests]
    hits = sum(a == b for a, b in zip(g, g[1:]))
    assert 0 < hits < 79
    assert r.policies[0].prefix_cache_hit == pytest.approx(found_share(hits, 96, r.requests), rel=1e-12)


def test_prefixes_that_nobody_shares_change_nothing():
    """Every prompt its own prefix (GROUPS = requests), a cache that never preempts: the run is the run of prompts
    as long with no shared prefixes, figure for figure."""
    kw = dict(workload="closed:12", policies="none,fixed:3", requests=90, output_len="normal:40:20")
    own = run(input_len="30", shared_prefix="200:90", **kw)
    plain = run(input_len="230", **kw)
    for a, b in zip(own.policies, plain.policies):
        d = a.to_dict()
        assert d.pop("prefix_cache_hit") == 0.0
        assert d == b.to_dict()


def test_a_shared_prefix_is_held_once():
    """Requests that share a prefix hold one copy of its blocks: a cache of one 512-token prefix (32 blocks) and 28
    blocks more runs 8 requests of 16 tokens of their own at once, where prompts of 528 tokens each (34 blocks with
    their output) run one at a time."""
    cache = SchedulerConfig(kv_cache_tokens=60 * BS)
    shared = run("closed:8", shared_prefix="512:1", input_len="16", output_len="16", requests=40, scheduler=cache)
    separate = run("closed:8", input_len="528", output_len="16", requests=40, scheduler=cache)
    assert shared.policies[0].mean_batch > 6 and separate.policies[0].mean_batch == pytest.approx(1.0)
    assert shared.policies[0].preemptions == separate.policies[0].preemptions == 0


def test_the_cache_evicts_the_oldest_unused_blocks_first():
    """Unit check of the queue: requests 0 and 1 write prefixes 0 and 1 (4 blocks each) and leave, their own blocks
    queued before their prefix's (tail first); once allocations have taken 6 of the 13 queued blocks, the oldest 6
    (request 0's own 2 and prefix 0's 4) are evicted and prefix 1 is still found."""
    c = PrefixCache(4, Prompts(np.array([0, 1, 0, 1]), 4 * BS), BS)
    for r in (0, 1):
        assert c.written(np.array([r]), np.array([4 * BS + 3]), BS, free=100) == 0
    assert list(c.cached) == [4, 4] and list(c.users) == [1, 1]
    assert c.release(0, own=2) == 6 and c.release(1, own=3) == 7
    assert c.evictable == 13 and list(c.queue.values()) == [2, 4, 3, 4]
    assert c.look(2, most=10, free=13 - 6) == (0, 0, 0) and c.cached[0] == 0 and c.evictable == 7
    assert c.look(3, most=10, free=7) == (4, 0, 4) and c.users[1] == 0          # looking takes nothing
    c.take(3, 4, 0)
    assert c.users[1] == 1 and c.evictable == 3 and 1 not in c.queue
    assert c.look(3, most=2, free=3) == (2, 0, 0)                               # shared already: costs nothing


# --------------------------------------------------------------------------------------------------- fleets


def test_prefix_aware_routing_sends_a_prefix_where_it_went_before():
    """One request at a time, loads never out of balance: the prefix-aware router sends each prefix's requests to
    the replica its first went to (a new prefix to the replica with the smaller tree), so each prefix is written
    once; round-robin writes it once per replica it reaches (closed form over the order)."""
    kw = dict(shared_prefix="96:4", requests=80, replicas=2, output_len="16")
    aware = run(router="prefix-aware", **kw)
    rr = run(router="round-robin", **kw)
    g = [q.prefix for q in rr.requests]
    pairs = len({(i % 2, x) for i, x in enumerate(g)})
    assert aware.policies[0].prefix_cache_hit == pytest.approx(found_share(80 - 4, 96, aware.requests), rel=1e-12)
    assert rr.policies[0].prefix_cache_hit == pytest.approx(found_share(80 - pairs, 96, rr.requests), rel=1e-12)
    assert pairs > 4


def _router(lengths, groups, prefix_tokens, replicas=2):
    r = PrefixAware()
    r.prepare(RoutedRequests(np.asarray(lengths), None if groups is None else np.asarray(groups), prefix_tokens,
                             replicas))
    return r


def test_the_router_follows_a_long_match_and_balances_otherwise():
    r = _router([100] * 6, [0, 1, 0, 1, 2, 0], 80)
    assert r.pick([0, 0], 0) == 0            # nothing sent yet: the smaller tree, ties to the lowest index
    assert r.pick([1, 0], 1) == 1            # a new prefix: replica 1's tree is smaller
    assert r.pick([1, 1], 2) == 0            # prefix 0 went to replica 0: 80 of 100 tokens match (> 0.5)
    assert r.pick([2, 1], 3) == 1
    assert r.pick([40, 2], 5) == 1           # out of balance (40 - 2 > 32, 40 > 1.0001 x 2): the least loaded
    assert r.pick([2, 2], 4) == 0            # a new prefix: replica 1's tree took request 5 whole (220 > 120)


def test_a_short_match_does_not_steer():
    """A prefix of 40 tokens in a 100-token prompt matches 0.4 <= 0.5 of it: the router goes by tree size."""
    r = _router([100, 100, 100], [0, 0, 0], 40)
    assert r.pick([0, 0], 0) == 0
    assert r.pick([0, 0], 1) == 1            # the match would say 0; the smaller tree says 1
    r = _router([100, 100], None, 0)         # no shared prefixes at all: tree sizes decide
    assert [r.pick([0, 0], i) for i in range(2)] == [0, 1]


def test_the_router_is_refused_without_its_prompts():
    with pytest.raises(DsdsimError, match="prepare"):
        PrefixAware().pick([0, 0], 0)


def test_simulate_reports_the_shared_prefixes_and_the_share_found():
    r = run("closed:4", policies="none,fixed:3", shared_prefix="64:2", replicas=2, router="prefix-aware")
    d = r.to_dict()
    assert d["shared_prefix"] == {"tokens": 64, "groups": 2} and d["router"] == "prefix-aware"
    for p in d["policies"]:
        assert 0 < p["prefix_cache_hit"] < 1
        assert all("prefix_cache_hit" in rep for rep in p["replicas"])


# --------------------------------------------------------------------------------------------------- conversations


def _found_in_conversations(requests) -> float:
    """Closed form with a cache that keeps everything: every later turn finds the full blocks of the turn before's
    context (its prompt and reply, less the reply's last token, which is never computed)."""
    by_id = {q.id: q for q in requests}
    found = 0
    for q in requests:
        if q.after >= 0:
            prev = by_id[q.after]
            found += (prev.input_len + prev.output_len - 1) // BS * BS
    return found / sum(q.input_len for q in requests)


def test_multi_turn_is_read_as_turns_and_a_think_time():
    from dsdsim.serve.prefix import MultiTurn, parse_multi_turn

    assert parse_multi_turn("8") == MultiTurn(8, 0.0) and parse_multi_turn("8:1.5") == MultiTurn(8, 1.5)
    assert parse_multi_turn(None) is None
    for bad, words in (("0", "1.."), ("8:x", "TURNS:THINK_S"), ("a", "TURNS"), ("2:1:1", "TURNS"),
                       ("8:-2", "think time must be a finite number of seconds >= 0")):
        with pytest.raises(DsdsimError, match=words):
            parse_multi_turn(bad)


def test_each_turn_is_the_conversation_so_far_and_a_new_message():
    r = run(multi_turn="4", requests=10, input_len="uniform:10:50", output_len="uniform:5:30")
    q = r.requests
    assert [x.after for x in q] == [-1, 0, 1, 2, -1, 4, 5, 6, -1, 8]          # 10 requests: 4 + 4 + 2 turns
    for x in q:
        if x.after >= 0:
            prev = q[x.after]
            assert x.input_len > prev.input_len + prev.output_len and x.arrival_s == float("inf")


def test_later_turns_find_the_turns_before_them():
    """A cache that keeps everything: the share found is the closed form above, exactly, whatever the lengths and
    however many conversations run at once."""
    for workload in ("closed:1", "closed:6", "poisson:20"):
        r = run(workload, policies="none,fixed:3", multi_turn="5", requests=60, input_len="uniform:10:80",
                output_len="uniform:5:60")
        for p in r.policies:
            assert p.prefix_cache_hit == pytest.approx(_found_in_conversations(r.requests), rel=1e-12), workload


def test_a_turn_is_sent_its_think_time_after_the_reply_before_it():
    r = run("closed:3", multi_turn="4:0.25", requests=24)
    p = r.policies[0]
    for q in r.requests:
        if q.after >= 0:
            assert p.sent_s[q.id] == pytest.approx(p.finish_s[q.after] + 0.25, abs=1e-12)
    assert max(p.timeline.requests) <= 3                                 # closed:3 holds three conversations


def test_a_shared_prefix_and_its_conversations_chain():
    """Conversations that begin with a shared prefix: a first turn finds the prefix (after its first writer), a later
    turn the prefix and its conversation's context behind it."""
    r = run(shared_prefix="160:2", multi_turn="3", requests=30, input_len="20", output_len="20")
    by_id = {q.id: q for q in r.requests}
    firsts = [q for q in r.requests if q.after < 0]
    found = sum(160 for q in firsts) - 2 * 160                            # each prefix's first writer misses
    found += sum((by_id[q.after].input_len + by_id[q.after].output_len - 1) // BS * BS
                 for q in r.requests if q.after >= 0)
    assert r.policies[0].prefix_cache_hit == pytest.approx(found / sum(q.input_len for q in r.requests), rel=1e-12)


def test_a_preempted_request_finds_its_own_context_again():
    c = PrefixCache(3, Prompts(None, 0, np.array([-1, 0, -1])), BS)
    assert c.release(2, own=5, context=4) == 5                         # request 2 preempted: 4 full blocks kept
    assert c.look(2, most=10, free=5) == (0, 4, 4)
    c.take(2, 0, 4)
    assert c.evictable == 1 and list(c.queue.values()) == [1]
    assert c.release(0, own=3, context=3) == 3                         # turn 0 finished: turn 1 finds its context
    assert c.look(1, most=2, free=4) == (0, 2, 2)                      # at most 2 blocks: the rest is garbage
    c.take(1, 0, 2)
    assert c.evictable == 2 and list(c.queue)[0] < 0


def test_the_router_follows_a_conversation_whose_prompt_it_sent():
    """Turn 2 (prompt 1,000 tokens) after turn 1 (600) went to replica 1: 600 of 1,000 tokens match there (> 0.5);
    a second turn whose predecessor's prompt is under half of it goes by tree size."""
    r = PrefixAware()
    r.prepare(RoutedRequests(np.array([600, 900, 1000, 4000]), None, 0, 2, np.array([0, 1, 0, 1])))
    assert r.pick([0, 0], 1) == 0 and r.pick([1, 0], 0) == 1
    assert r.pick([1, 1], 2) == 1             # 600 / 1000 of turn 1's prompt, sent to replica 1
    assert r.pick([1, 1], 3) == 0             # 900 / 4000 matches too little: replica 0's tree (900) < 1's (1,000)


def test_prefix_aware_fleets_keep_conversations_where_their_context_is():
    kw = dict(multi_turn="6", requests=120, replicas=2, input_len="uniform:200:400", output_len="uniform:20:60",
              policies="fixed:3")
    aware, rr = run("closed:8", router="prefix-aware", **kw), run("closed:8", router="round-robin", **kw)
    assert aware.policies[0].prefix_cache_hit > rr.policies[0].prefix_cache_hit
    for x in (aware, rr):
        assert sum(int(np.isfinite(rep.e2e_s).sum()) for rep in x.policies[0].replicas) == 120
