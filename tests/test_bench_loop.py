"""The real speculative loop: rejection sampling, KV rollback, acceptance and tau against the acceptance model."""
import math

import pytest

pytest.importorskip("torch")

from dsdsim.bench.loop import run_loop  # noqa: E402


@pytest.mark.slow
def test_loop_tau_matches_acceptance_model(tmp_path):
    from dsdsim.bench.probe import run_probe

    r = run_loop(k=4, batch=8, new_tokens=40, seed=0, hardware="h100-sxm")
    assert len(r.alpha) == 4 and r.reached[0] == r.batch * r.steps
    assert all(0.3 < a < 0.98 for a in r.alpha), r.alpha          # nontrivial acceptance by construction
    assert 1.0 < r.tau_measured <= 5.0
    # tau from the observed per-position conditional alpha (dsdsim.policy.acceptance) within 5%
    assert r.tau_rel_error < 0.05
    assert abs(r.tau_constant_alpha - r.tau_measured) / r.tau_measured < 0.10
    assert r.step_s_median > 0 and r.predicted_step_s > 0 and math.isfinite(r.step_ratio)


def test_loop_is_lossless_at_zero_noise():
    """A draft identical to the target is always accepted: tau = K + 1 (rejection sampling keeps p exactly)."""
    from dsdsim.bench.loop import loop_specs

    target, _ = loop_specs(layers=2, draft_layers=2)
    r = run_loop(k=3, batch=4, new_tokens=12, target_spec=target, draft_spec=target, noise=0.0, seed=1)
    assert r.alpha == [1.0, 1.0, 1.0]
    assert r.tau_measured == pytest.approx(4.0)
