"""The range budget (--max-ranges): the table of at most N ranges with the most goodput, checked on numbers worked
out by hand, against brute force, and through predict and the command line."""
from __future__ import annotations

import json
from itertools import product

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.export.prediction import prediction_dict, table_summary
from dsdsim.policy.batch_weights import read_batch_weights, weights_for
from dsdsim.policy.predict import export_table, predict
from dsdsim.specs.deployment import Deployment
from dsdsim.policy.table import count_ranges, loss_per_batch, most_goodput_in_ranges

# Goodput relative to each batch size's best, K = 0, 1, 2 over six batch sizes (worked by hand below); the absolute
# goodput grows with the batch, which a relative objective must not see.
REL = np.array([[0.90, 0.90, 0.95, 0.97, 1.00, 1.00],
                [0.95, 1.00, 0.99, 1.00, 0.98, 0.85],
                [1.00, 0.97, 1.00, 0.90, 0.80, 0.70]])
G = REL * np.array([100.0, 200, 300, 400, 500, 600])[None, :]
KS = np.array([0, 1, 2])


def test_three_range_optimum_worked_by_hand():
    """Exact best: K 2,1,2,1,0,0 (5 ranges). Three ranges: 2,1,1,1,0,0 sums 1 + 1 + 0.99 + 1 + 1 + 1 = 5.99, the
    best (2,2,2,1,0,0: 5.97; 2,1,1,1,1,0: 5.97). Two ranges: 1,1,1,1,0,0 sums 5.94 (2,2,2,2,0,0 and 2,1,1,1,1,1:
    5.87). One range: K 1, 5.77 (K 0: 5.72, K 2: 5.37)."""
    exact = np.argmax(G, axis=0)
    assert list(exact) == [2, 1, 2, 1, 0, 0] and count_ranges(exact) == 5
    for n, expected, score in ((3, [2, 1, 1, 1, 0, 0], 5.99), (2, [1, 1, 1, 1, 0, 0], 5.94), (1, [1] * 6, 5.77),
                               (5, [2, 1, 2, 1, 0, 0], 6.0), (9, [2, 1, 2, 1, 0, 0], 6.0)):
        t = most_goodput_in_ranges(G, KS, n)
        assert list(t.k_per_batch) == expected, n
        assert REL[t.k_per_batch, np.arange(6)].sum() == pytest.approx(score)
        assert t.mean_goodput_loss == pytest.approx(1 - score / 6)
        assert t.max_ranges == n


def test_weights_move_the_ranges_to_where_the_server_spends_its_time():
    """Batch size 1 weighs 10, the others 1. Two ranges: 2,2,2,0,0,0 = 10 + 0.97 + 1 + 0.97 + 1 + 1 = 14.94 beats
    2,2,0,0,0,0 (14.89), 2,2,2,2,0,0 (14.87) and the unweighted optimum 1,1,1,1,0,0 (9.5 + 4.99 = 14.49)."""
    w = np.array([10.0, 1, 1, 1, 1, 1])
    t = most_goodput_in_ranges(G, KS, 2, weights=w)
    assert list(t.k_per_batch) == [2, 2, 2, 0, 0, 0] and t.weighted
    assert (REL[t.k_per_batch, np.arange(6)] * w).sum() == pytest.approx(14.94)


def test_a_loss_cap_keeps_every_batch_size_within_it():
    """Within 2% of each best: K 1 at batch 1 (0.95) and K 2 at batch 2 (0.97) are out, so two ranges must start
    with K 2 at batch 1 and carry K 1 from batch 2: 2,1,1,1,0,0 is the only 3-range table; two ranges cannot."""
    t = most_goodput_in_ranges(G, KS, 3, loss_cap=0.02)
    assert list(t.k_per_batch) == [2, 1, 1, 1, 0, 0] and t.max_goodput_loss <= 0.02 + 1e-12
    assert np.nanmax(loss_per_batch(G, KS, t.k_per_batch)) == pytest.approx(0.01)


@pytest.mark.parametrize("seed", range(40))
def test_the_budget_is_optimal_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_k, n_b, n = int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 4))
    g = rng.uniform(0.5, 1.5, (n_k, n_b)) * np.arange(1, n_b + 1)[None, :]
    if n_k > 1 and rng.random() < 0.4:
        g[int(rng.integers(1, n_k)), int(rng.integers(n_b))] = np.nan     # a K that does not fit there
    w = rng.uniform(0, 2, n_b) if rng.random() < 0.5 else np.ones(n_b)
    rel = g / np.nanmax(g, axis=0)

    def score(ks):
        vals = [w[j] * rel[k, j] for j, k in enumerate(ks)]
        return -np.inf if any(np.isnan(v) for v in vals) else float(np.sum(vals))

    best = max(score(ks) for ks in product(range(n_k), repeat=n_b) if count_ranges(np.array(ks)) <= n)
    t = most_goodput_in_ranges(g, np.arange(n_k), n, weights=w)
    assert count_ranges(t.k_per_batch) <= n
    assert score(list(t.k_per_batch)) == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(30))
def test_a_budget_too_small_for_the_cap_keeps_the_least_worst_loss_against_brute_force(seed):
    """Where no N-range table keeps every batch size within 2% of its best, export_table's worst loss is the least
    any N-range table has (to CAP_RESOLUTION), and among the tables within that worst loss it has the most goodput."""
    from dsdsim.defaults import CAP_RESOLUTION

    rng = np.random.default_rng(100 + seed)
    n_k, n_b, n = int(rng.integers(2, 4)), int(rng.integers(3, 7)), int(rng.integers(1, 3))
    g = rng.uniform(0.6, 1.4, (n_k, n_b)) * np.arange(1, n_b + 1)[None, :]
    rel = g / g.max(axis=0)
    tables = [np.array(ks) for ks in product(range(n_k), repeat=n_b) if count_ranges(np.array(ks)) <= n]
    worst = {i: float(np.max(1 - rel[ks, np.arange(n_b)])) for i, ks in enumerate(tables)}
    least = min(worst.values())
    t = export_table(g, np.arange(n_k), np.argmax(g, axis=0), 0.005, max_ranges=n)
    if t.max_ranges is None:           # the tolerance alone met the budget
        return
    got = float(np.max(1 - rel[t.k_per_batch, np.arange(n_b)]))
    assert count_ranges(t.k_per_batch) <= n
    if least > 0.02:
        assert got <= least + CAP_RESOLUTION + 1e-12
    within = [rel[ks, np.arange(n_b)].sum() for i, ks in enumerate(tables) if worst[i] <= t.loss_cap + 1e-12]
    assert rel[t.k_per_batch, np.arange(n_b)].sum() == pytest.approx(max(within), rel=1e-12)


def test_export_table_merges_by_tolerance_first_then_spends_the_budget():
    """The 0.5% tolerance merges none here (every flip is >= 1%); a budget of 3 then gives the hand optimum; a budget
    the tolerance table already meets leaves it alone; 0 (or tolerance 0) is the exact table."""
    best = np.argmax(G, axis=0)
    t = export_table(G, KS, best, 0.005, max_ranges=3)
    assert list(t.k_per_batch) == [2, 1, 1, 1, 0, 0] and t.max_ranges == 3 and t.ranges_at_zero_tolerance == 5
    assert t.loss_cap is None or t.max_goodput_loss <= t.loss_cap + 1e-12
    assert export_table(G, KS, best, 0.005, max_ranges=5).max_ranges is None
    for table in (export_table(G, KS, best, 0.005, max_ranges=0), export_table(G, KS, best, 0.0, max_ranges=3)):
        assert list(table.k_per_batch) == list(best) and table.max_goodput_loss == 0
    with pytest.raises(DsdsimError, match="range budget"):
        most_goodput_in_ranges(G, KS, 0)


def test_predict_default_tables_fit_the_budget_and_say_what_they_give_up():
    p = predict("llama-3.1-70b", "h100-sxm", Deployment(tp=8), acceptance="0.8,0.7,0.6")
    exact = predict("llama-3.1-70b", "h100-sxm", Deployment(tp=8), acceptance="0.8,0.7,0.6", max_ranges=0)
    assert len(p.ranges()) <= 5 < len(exact.ranges())
    t = p.table
    assert t.max_ranges == 5 and t.ranges_at_zero_tolerance == len(exact.ranges())
    # what it gives up is measured against the exact table's goodput at every batch size
    loss = loss_per_batch(p.goodput, p.k_values, t.k_per_batch)
    assert np.nanmax(loss) == pytest.approx(t.max_goodput_loss) and np.nanmean(loss) == pytest.approx(
        t.mean_goodput_loss)
    if t.ranges_for_cap > 5:        # said so: how many ranges would hold the cap, and that this is the least worst
        assert f"--max-ranges {t.ranges_for_cap}" in table_summary(p)
        assert "its worst loss is the least a 5-range table can have" in table_summary(p)
    budget = prediction_dict(p)["table"]["budget"]
    assert budget["max_ranges"] == 5 and len(budget["ranges"]) == len(p.ranges())
    merged = [r for r in budget["ranges"] if len(r["exact_ranges"]) > 1]
    assert merged and all(r["exact_ranges"][0][0] <= r["start"] <= r["exact_ranges"][0][1] for r in merged)


def test_batch_weights_files(tmp_path):
    csv = tmp_path / "w.csv"
    csv.write_text("batch_size,weight\n1,3\n8,1\n64,0\n")
    assert read_batch_weights(csv) == {1: 3.0, 8: 1.0, 64: 0.0}
    prom = tmp_path / "metrics.txt"
    prom.write_text('# HELP vllm:num_requests_running ...\nvllm:num_requests_running{model_name="m"} 12.0\n'
                    'vllm:num_requests_running{model_name="m"} 12.0\nvllm:num_requests_running{model_name="m"} 0.0\n'
                    'vllm:num_requests_waiting{model_name="m"} 4.0\nvllm:num_requests_running{model_name="m"} 40\n')
    assert read_batch_weights(prom) == {12: 2.0, 40: 1.0}          # an idle scrape runs no step
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"policies": [{"name": "dsd", "batch_seconds": {"4": 1.5, "9": 0.5}},
                                            {"name": "none", "batch_seconds": {"4": 0.5}}]}))
    assert read_batch_weights(sim) == {4: 2.0, 9: 0.5}
    # evaluated sizes 1, 4, 16 stand for 1-3, 4-15, 16-: a step rule, then normalised
    assert list(weights_for([1, 4, 16], {2: 1.0, 5: 1.0, 9: 2.0, 100: 4.0})) == [0.125, 0.375, 0.5]
    for text, fragment in (("1,-2\n", "weights are numbers >= 0"), ("0,1\n", "whole number >= 1"),
                           ("1,0\n", "no batch size has a weight"), ("{1: 2}", "not valid JSON"), ("", "empty")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(DsdsimError, match=fragment):
            read_batch_weights(bad)


def test_cli_budget_and_weights(cli, tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("1,100\n2,1\n")
    code, out, err = cli("predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "8", "-a", "0.8,0.7,0.6",
                         "--max-ranges", "3", "--batch-weights", w, "--format", "json")
    assert code == 0, err
    table = json.loads(out)["table"]
    assert len(table["ranges"]) <= 3 and table["budget"]["weighted_mean_goodput_loss"] is not None
    assert "under a budget of 3" in err
    code, out, err = cli("predict", "--max-ranges", "-1")
    assert code == 2 and "--max-ranges" in err and "Traceback" not in err
    missing = tmp_path / "nope.csv"
    code, out, err = cli("predict", "--batch-weights", missing, "-o", tmp_path / "t.json")
    assert code == 2 and "batch weights" in err and not (tmp_path / "t.json").exists()
