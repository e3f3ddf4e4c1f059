"""Prefix cache hits in the serving simulation (SchedulerConfig.prefix_cache_hit): the share of each prompt found
cached on admission, in whole blocks, the last prompt token always computed; checked on hand-worked steps."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import one_line_error
from dsdsim.errors import DsdsimError
from dsdsim.serve.scheduler import Scheduler, SchedulerConfig
from test_serve_core import FakePricer, run


def _scheduler(input_len, hit, blocks=10_000):
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4096, prefix_cache_hit=hit)
    return Scheduler([0.0] * len(input_len), input_len, [4] * len(input_len), cfg, blocks, 0)


def test_hits_are_whole_blocks_and_leave_the_last_prompt_token():
    """Block 16: a 100-token prompt at 0.5 finds floor(50 / 16) = 3 blocks, 48 tokens, and prefills 52; at 0.999
    96 (6 blocks); a 16-token prompt finds none at 0.99 (15.8 tokens is no whole block); a 32-token prompt at 0.999
    finds 1 block, not 2: the last token is computed."""
    s = _scheduler([100, 100, 16, 32], 0.5)
    assert list(s.cache_hit) == [48, 48, 0, 16]
    assert list(_scheduler([100, 16, 32], 0.999).cache_hit) == [96, 0, 16]
    s.release(0.0)
    plan = s.schedule(0)
    assert list(plan.pre_chunks) == [52, 52, 16, 16]
    assert list(s.held[plan.pre_ids]) == [7, 7, 1, 2]         # ceil(100 / 16): the found blocks are held too
    assert s.prompt_cached == 48 + 48 + 0 + 16 and s.prompt_admitted == 248


def test_no_hits_is_the_run_without_a_prefix_cache():
    a = run("closed:8", "fixed:3", requests=60, input_len="300", output_len="40").policies[0]
    b = run("closed:8", "fixed:3", requests=60, input_len="300", output_len="40",
            scheduler=SchedulerConfig(prefix_cache_hit=0.0)).policies[0]
    assert a.ttft_ms.to_dict() == b.ttft_ms.to_dict() and a.prefix_cache_hit is None


def test_a_cached_prompt_prefills_only_its_rest():
    """One request at a time on the fake pricer (a + b * tokens + c * context): at a hit of 0.75 a 512-token prompt
    prefills 128 tokens over a context of 384, so TTFT is a + 128 b + 384 c; the run reports 75% found."""
    f = FakePricer()
    p = run("closed:1", "none", pricer=f, requests=5, input_len="512", output_len="8",
            scheduler=SchedulerConfig(prefix_cache_hit=0.75)).policies[0]
    assert p.ttft_ms.mean == pytest.approx(1e3 * (f.a + f.b * 128 + f.c * 384), rel=1e-9)
    assert p.prefix_cache_hit == pytest.approx(0.75)
    assert p.to_dict()["prefix_cache_hit"] == pytest.approx(0.75)


def test_a_preempted_request_finds_its_prompt_again():
    f = FakePricer(kv=3000)
    cfg = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=512, prefix_cache_hit=0.5)
    p = run("closed:32", "fixed:3", pricer=f, requests=200, input_len="256", output_len="128",
            scheduler=cfg).policies[0]
    assert p.preemptions > 0 and np.all(np.isfinite(p.finish_s))
    assert int(p.timeline.tokens.sum()) == 200 * 128
    assert p.prefix_cache_hit == pytest.approx(0.5)         # 128 of 256 on every admission, readmissions too


@pytest.mark.parametrize("hit", [-0.1, 1.0, 1.5, True])
def test_a_hit_share_outside_zero_to_one_is_one_line(hit):
    with pytest.raises(DsdsimError, match="prefix_cache_hit"):
        SchedulerConfig(prefix_cache_hit=hit)


def test_the_cli_takes_a_hit_share_and_says_what_it_found(cli, tmp_path):
    code, out, err = cli("simulate", "--requests", "60", "--workload", "closed:8", "--input-len", "1024",
                         "--policies", "none", "--prefix-cache-hit", "0.5")
    assert code == 0, err
    assert "prefix cache: 50.0% of the prompt tokens admitted were found cached" in " ".join(out.split())
    code, out, err = cli("simulate", "--requests", "10", "--prefix-cache-hit", "1.2", "-o", tmp_path / "x.json")
    one_line_error(code, err, "--prefix-cache-hit must be in [0, 1)")
    assert not (tmp_path / "x.json").exists()
