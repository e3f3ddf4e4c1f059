"""Tensor parallelism with torch.distributed (gloo, 2 CPU processes): all-reduce vs the link model, TP MLP."""
import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_gloo_all_reduce_and_tp_mlp():
    from dsdsim.bench.distributed import run_distributed

    rep = run_distributed("gloo", 2, hardware="h100-sxm", sizes_bytes=(64 << 10, 1 << 20, 4 << 20), repeats=5)
    assert [s.bytes for s in rep.sweep] == [64 << 10, 1 << 20, 4 << 20]
    assert all(s.seconds > 0 and s.busbw_bytes_per_s > 0 for s in rep.sweep)
    assert rep.tp is not None and rep.tp.max_abs_error < 1e-4        # column/row-parallel MLP == unsplit MLP
    assert len(rep.model_comparison) == 3 and all(c["predicted_s"] > 0 for c in rep.model_comparison)
    assert rep.link_fit["latency_s"] >= 0
    assert rep.wall_s < 20
