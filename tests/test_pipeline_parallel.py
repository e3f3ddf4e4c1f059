"""Pipeline parallelism: the layer split (vLLM get_pp_indices), the stage sends, per-stage memory, refusals."""
import numpy as np
import pytest

from dsdsim.cost.memory import stage_weight_bytes, weight_bytes_per_gpu
from dsdsim.cost.plan import stage_layer_ranges
from dsdsim.cost.step import simulate_step
from dsdsim.cost.timing import launch_overhead
from dsdsim.errors import DsdsimError
from dsdsim.plan import Candidate
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.setup import resolve


# vLLM tests/distributed/test_pipeline_partition.py::test_uneven_auto_partition and the even case
@pytest.mark.parametrize("layers,pp,ranges", [
    (2, 2, ((0, 1), (1, 2))), (3, 2, ((0, 2), (2, 3))), (3, 3, ((0, 1), (1, 2), (2, 3))),
    (4, 3, ((0, 1), (1, 3), (3, 4))), (5, 3, ((0, 2), (2, 4), (4, 5))),
    (20, 4, ((0, 5), (5, 10), (10, 15), (15, 20))),
])
def test_layer_split_is_vllms(layers, pp, ranges):
    assert stage_layer_ranges(layers, pp) == ranges


def test_pp1_unchanged():
    a = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(tp=2), None, batch=8, context=1024)
    b = simulate_step("llama-3.1-8b", "h100-sxm", Deployment(tp=2, pp=1), None, batch=8, context=1024)
    assert a.step_time_s == b.step_time_s and a.stage_times_s == [] and a.microbatches == 1


def test_step_is_the_stages_plus_the_send():
    """llama-3.1-70b tp8 pp2 on 8-GPU nodes: stage 0 on node 0, stage 1 on node 1, the send crosses nodes. Each rank
    sends 1/8 of hidden_states + residual (2 x B x h bf16) over the scale-out network; the next stage all-gathers."""
    s = resolve("llama-3.1-70b", "h100-sxm", Deployment(tp=8, pp=2))
    hw, h, b = s.hardware, s.model.hidden_size, 8
    one = simulate_step(s.model, hw, Deployment(tp=8), None, batch=b, context=1024, engine=None)
    two = simulate_step(s.model, hw, Deployment(tp=8, pp=2), None, batch=b, context=1024, engine=None)
    eff = hw.efficiency.collective.value
    payload = b * 2 * h * 2.0                               # B*q rows x 2h x 2 bytes
    send = hw.scale_out_latency_s.value + payload / 8 / (hw.scale_out_bandwidth_bytes_per_s.value * eff)
    gather = hw.link_latency_s.value + payload * 7 / 8 / (hw.link_bandwidth_bytes_per_s.value * eff)
    gap = launch_overhead(hw, True)                         # each of the two calls launches once (CUDA graph)
    assert two.kernel_time_s == pytest.approx(one.kernel_time_s + send + gather + 2 * gap, rel=1e-12)
    assert sum(two.stage_times_s) == pytest.approx(two.kernel_time_s, rel=1e-12)
    assert len(two.stage_times_s) == 2 and two.microbatches == 2


def test_send_inside_a_node_uses_the_scale_up_link():
    s = resolve("llama-3.1-8b", "h100-sxm", Deployment(tp=2, pp=2))
    hw, h, b = s.hardware, s.model.hidden_size, 4
    one = simulate_step(s.model, hw, Deployment(tp=2), None, batch=b, context=512, engine=None)
    two = simulate_step(s.model, hw, Deployment(tp=2, pp=2), None, batch=b, context=512, engine=None)
    eff, link, lat = hw.efficiency.collective.value, hw.link_bandwidth_bytes_per_s.value, hw.link_latency_s.value
    payload = b * 2 * h * 2.0
    added = (lat + payload / 2 / (link * eff)) + (lat + payload / 2 / (link * eff))   # send 1/2, gather (2-1)/2
    added += 2 * launch_overhead(hw, True)
    assert two.kernel_time_s == pytest.approx(one.kernel_time_s + added, rel=1e-12)


def test_stage_weights_add_up():
    """Untied (llama-3.1-70b): the stages hold the replica's weights once. Tied (llama-3.2-1b): the last stage adds
    a V x h copy of the embedding for its lm_head."""
    m = resolve("llama-3.1-70b", "h100-sxm").model
    dep = Deployment(tp=4, pp=2)
    assert sum(stage_weight_bytes(m, dep, s) for s in range(2)) == pytest.approx(
        weight_bytes_per_gpu(m, Deployment(tp=4)), rel=1e-12)
    t = resolve("llama-3.2-1b", "h100-sxm").model
    assert t.tie_word_embeddings
    dep = Deployment(tp=1, pp=4)
    copy = t.vocab_size * t.hidden_size * 2.0
    assert sum(stage_weight_bytes(t, dep, s) for s in range(4)) == pytest.approx(
        weight_bytes_per_gpu(t, Deployment()) + copy, rel=1e-12)


def test_feasible_when_every_stage_fits():
    one = simulate_step("deepseek-v3", "h100-sxm", Deployment(tp=8), None, batch=8, context=1024)
    two = simulate_step("deepseek-v3", "h100-sxm", Deployment(tp=8, pp=2), None, batch=8, context=1024)
    assert not one.feasible and two.feasible
    assert two.memory.used_bytes == max(u.used_bytes for u in two.memory.stages)


def test_refusals():
    with pytest.raises(DsdsimError, match="plain decoding only"):
        simulate_step("llama-3.1-8b", "h100-sxm", Deployment(pp=2), drafter="eagle3", batch=1, k=2)
    with pytest.raises(DsdsimError, match="more stages than"):
        resolve("llama-3.1-8b", "h100-sxm", Deployment(pp=64))


def test_candidate_pp():
    c = Candidate.parse("h100-sxm:tp8:pp2")
    assert (c.hardware, c.tp, c.ep, c.pp) == ("h100-sxm", 8, 1, 2)
    with pytest.raises(DsdsimError):
        Candidate.parse("h100-sxm:tp8:ppx")


def test_explain_gives_each_stage_and_the_batches_in_flight(cli):
    """explain under --pp: each stage's time (its send included) adds up to the kernels of the step, and pp batches
    of B are in flight; with pp = 1 the JSON has neither key."""
    import json

    code, out, err = cli("explain", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--pp", "2", "-d", "none",
                         "--batch", "8", "--k", "0", "-f", "json")
    assert code == 0, err
    d = json.loads(out)
    s = resolve("llama-3.1-70b", "h100-sxm", Deployment(tp=4, pp=2), None)
    step = simulate_step(None, None, setup=s, batch=8, k=0, context=1024)
    assert d["microbatches"] == 2 and len(d["stage_times_s"]) == 2
    assert sum(d["stage_times_s"]) == pytest.approx(float(step.verify.time_s), rel=1e-12)
    code, out, err = cli("explain", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "-d", "none", "--batch", "8",
                         "--k", "0", "-f", "json")
    assert code == 0 and "stage_times_s" not in json.loads(out) and "microbatches" not in json.loads(out)
    code, out, err = cli("explain", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "4", "--pp", "2", "-d", "none",
                         "--batch", "8", "--k", "0")
    assert code == 0 and "pipeline stages" in out and "2 batches of B=8 in flight" in out


def test_plan_gives_a_pp_candidate_its_plain_columns():
    """A pp candidate asked for speculation is not feasible (vLLM runs none under pp) but carries the K = 0 figures of
    the same GPUs: pp batches of B in flight, each at the plain step time, every stage holding the KV of pp x B."""
    from dsdsim.cost.step import step_time_grid
    from dsdsim.plan import plan_rows

    slo_ms = 40.0
    rows = plan_rows("llama-3.1-70b", ["h100-sxm:tp4:pp2"], slo_ms, drafter="eagle3", batch_sizes="1-512")
    r = rows[0]
    assert not r.feasible and "plain decoding only" in r.reason and r.tokens_per_s_dsd is None
    s = resolve("llama-3.1-70b", "h100-sxm", Deployment(tp=4, pp=2), None)
    b = np.arange(1, 513)
    t, fits = step_time_grid(None, None, batch_sizes=b, k_values=[0], contexts=[1024], setup=s)
    _, fits_in_flight = step_time_grid(None, None, batch_sizes=2 * b, k_values=[0], contexts=[1024], setup=s)
    ok = fits[:, 0, 0] & fits_in_flight[:, 0, 0] & (t[:, 0, 0] <= slo_ms / 1e3)
    rate = np.where(ok, 2 * b / t[:, 0, 0], -np.inf)
    assert r.batch_vanilla == int(b[int(np.argmax(rate))])
    assert r.tokens_per_s_vanilla == pytest.approx(float(rate.max()), rel=1e-12)
    assert r.tokens_per_s_per_gpu_vanilla == pytest.approx(float(rate.max()) / 8, rel=1e-12)


def test_plan_without_a_drafter_plans_plain_servers():
    from dsdsim.plan import plan_rows

    rows = plan_rows("llama-3.1-8b", ["h100-sxm:tp1", "h100-sxm:tp1:pp2"], 30.0, drafter=None, batch_sizes="1-256")
    assert all(r.feasible and r.batch_vanilla and r.tokens_per_s_dsd is None for r in rows)
    tight = plan_rows("llama-3.1-8b", ["h100-sxm:tp1"], 0.5, drafter=None, batch_sizes="1-256")[0]
    assert not tight.feasible and tight.reason.startswith("SLO")


def test_plan_holds_the_kv_of_every_batch_in_flight():
    """At 16k context llama-3.1-70b on tp 4 x pp 2 fits 87 sequences per stage ((0.9 x 85.03e9 B - 17.64 GB of a
    stage's weights) / (16385 tokens x 40,960 B) = 87.7, less the activations): with 2 batches in flight the plan's
    batch is 43, not 87."""
    from dsdsim.plan import plan_rows

    r = plan_rows("llama-3.1-70b", ["h100-sxm:tp4:pp2"], 200.0, drafter=None, batch_sizes="1-512", context=16384)[0]
    assert r.feasible and r.batch_vanilla == 43
