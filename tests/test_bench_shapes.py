"""Torch operator benches built from OpCosts: they run, time, count kernels, and route like the cost model."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dsdsim.bench.shapes import TensorPool, build_bench, measured_experts_touched, random_routing  # noqa: E402
from dsdsim.bench.timing import Timing, count_kernels, rotation_sets, time_fn  # noqa: E402
from dsdsim.cost import ops  # noqa: E402
from dsdsim.cost.experts import experts_touched  # noqa: E402
from dsdsim.cost.layers import PassContext, pass_ops  # noqa: E402
from dsdsim.specs.catalog import load_hardware, load_model  # noqa: E402
from dsdsim.specs.deployment import Deployment  # noqa: E402
from dsdsim.bench.reduce import reduce_model  # noqa: E402
from dsdsim.units import DType  # noqa: E402


def test_time_fn_reports_median_and_percentiles():
    x = torch.randn(256, 256)
    t = time_fn(lambda a: a @ a, lambda i: (x,), "cpu", warmup=1, repeats=7, rotate=2)
    assert isinstance(t, Timing) and t.repeats == 7 and t.rotate == 2
    assert 0 < t.p10_s <= t.median_s <= t.p90_s


def test_rotation_covers_twice_the_cache():
    assert rotation_sets(1e6, 32e6, max_sets=64) == 64
    assert rotation_sets(10e6, 32e6, max_sets=64) == 7
    assert rotation_sets(1e9, 32e6) == 1


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v2-lite"])
def test_every_pass_operator_runs(model):
    """Each operator kind of a verify pass (GQA or MLA, dense or MoE) has a bench that runs on its own inputs."""
    m, _ = reduce_model(load_model(model), 16)
    hw = load_hardware("h100-sxm")
    pc = PassContext.build(m, hw, Deployment(dtype=DType.bf16, act_dtype=DType.bf16, cuda_graphs=False))
    pool = TensorPool("cpu", cache_bytes=4e6)
    kinds = set()
    for op in pass_ops(m, pc, 2, 3, 64, sampling_passes=2.0):
        one = op.times(1.0 / float(np.asarray(op.count)))
        bench = build_bench(one, pool, DType.bf16, num_experts=m.moe_ffn.num_experts if m.moe_ffn else None,
                            vocab=m.vocab_size, hidden=m.hidden_size)
        if bench is None:
            continue
        out = bench.fn(*bench.make_inputs(0))
        assert out is not None
        assert count_kernels(bench.fn, bench.make_inputs(1)) >= 1
        kinds.add(op.kind.value)
    assert {"gemm", "attention", "elementwise", "logits", "embedding"} <= kinds


def test_gemm_bench_matches_shape_and_fp32_logits():
    op = ops.gemm("lm_head", 4, 64, 1000, DType.bf16, DType.bf16, out_bytes_per_element=4.0)
    bench = build_bench(op, TensorPool("cpu"), DType.bf16)
    y = bench.fn(*bench.make_inputs(0))
    assert y.shape == (4, 1000) and y.dtype == torch.float32


def test_random_routing_touches_the_expected_experts():
    """Uniform top-k routing touches E(1 - (1 - k/E)^N) experts on average (the cost model's formula)."""
    gen = torch.Generator().manual_seed(0)
    for tokens in (1, 8, 64):
        seen = [len(random_routing(tokens, 8, 128, "cpu", gen, torch.float32).experts) for _ in range(200)]
        expected = float(experts_touched(128, 8, tokens, 1))
        assert np.mean(seen) == pytest.approx(expected, rel=0.05)


def test_moe_bench_routes_and_combines():
    op = ops.moe_experts("experts", 16, 4, 64, 32, experts_touched(32, 4, 16, 1), 1.0, DType.fp32, DType.fp32)
    pool = TensorPool("cpu")
    bench = build_bench(op, pool, DType.fp32, num_experts=32)
    y = bench.fn(*bench.make_inputs(0))
    assert y.shape == (16, 64) and torch.isfinite(y).all()
    assert measured_experts_touched(bench, 4) == pytest.approx(float(experts_touched(32, 4, 16, 1)), rel=0.3)


def test_attention_bench_causal_against_reference():
    """The CPU attention path (grouped matmuls) equals SDPA with an explicit bottom-right causal mask."""
    from dsdsim.bench.shapes import attend

    b, h, kvh, q, total, d = 2, 8, 2, 3, 17, 16
    qt, k, v = torch.randn(b, h, q, d), torch.randn(b, kvh, total, d), torch.randn(b, kvh, total, d)
    mask = torch.arange(total)[None, :] <= torch.arange(q)[:, None] + (total - q)
    ref = torch.nn.functional.scaled_dot_product_attention(qt, k.repeat_interleave(h // kvh, 1),
                                                           v.repeat_interleave(h // kvh, 1), attn_mask=mask)
    torch.testing.assert_close(attend(qt, k, v, q, cuda=False), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model,names", [("qwen3-next-80b-a3b", {"L.attn.conv1d", "L.attn.delta_rule"}),
                                         ("deepseek-v3.2-exp", {"L.attn.indexer", "L.attn.attn"})])
def test_fused_kernel_operators_say_why_they_are_not_timed(model, names):
    """The 2026 layers' recurrent scans, sparse attention and indexer run as fused kernels torch does not ship:
    they get no bench and a reason, while their projections (GEMMs) are benched as any other."""
    from dsdsim.bench.shapes import not_benched
    from dsdsim.fit.validation import clean_name

    m, _ = reduce_model(load_model(model), 16)
    hw = load_hardware("h100-sxm")
    pc = PassContext.build(m, hw, Deployment(dtype=DType.bf16, act_dtype=DType.bf16, cuda_graphs=False))
    pool = TensorPool("cpu", cache_bytes=4e6)
    skipped, benched = {}, set()
    for op in pass_ops(m, pc, 2, 3, 64):
        name = clean_name(op.name)
        why = not_benched(op)
        if why is not None:
            assert build_bench(op, pool, DType.bf16, num_experts=m.moe_ffn.num_experts if m.moe_ffn else None,
                               vocab=m.vocab_size, hidden=m.hidden_size) is None
            skipped[name] = why
        elif op.kind.value == "gemm":
            benched.add(name)
    assert names <= set(skipped), skipped
    assert all("torch does not ship" in why for why in skipped.values())
    assert benched                                         # q/k/v, out, indexer projections still timed


def test_the_torch_decoder_refuses_linear_attention_rather_than_time_softmax_in_its_place():
    from dsdsim.bench.model import TorchDecoder, UnsupportedSpec

    m, _ = reduce_model(load_model("qwen3-next-80b-a3b"), 16)
    with pytest.raises(UnsupportedSpec, match="linear attention"):
        TorchDecoder(m, dtype=torch.bfloat16, device="cpu", seed=0)
