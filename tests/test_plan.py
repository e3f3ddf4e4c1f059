"""Capacity planning (dsdsim.plan) over every shipped model, its arithmetic by hand, and the `plan` command.

Invariants: DSD searches K in 0..max_k, a superset of plain decoding (K = 0), so wherever both exist the
largest batch meeting the SLO and the best tokens/s under it are at least plain decoding's. Infeasible rows
always say why (memory, or the SLO). GPUs needed and $/M tokens are re-derived here from a Prediction with
plain loops, independently of plan.py's vectorised search.
"""
from __future__ import annotations

import csv
import io
import json
import math

import numpy as np
import pytest

from dsdsim.errors import DsdsimError
from dsdsim.plan import Candidate, plan, plan_rows, sensitivity
from dsdsim.policy.predict import predict
from dsdsim.specs.catalog import load_model, model_names
from dsdsim.specs.deployment import Deployment

HW = "h200-sxm"
SLO_MS = 50.0
BATCHES = "1-256"
TPS = (1, 2, 4, 8)


def _valid_tps(name: str) -> list[int]:
    m = load_model(name)
    out = []
    for tp in TPS:
        try:
            Deployment(tp=tp).check(m)
        except DsdsimError:
            continue
        out.append(tp)
    return out


@pytest.fixture(scope="module")
def rows_by_model():
    """For each shipped model: plan rows on h200-sxm at every tp in {1,2,4,8} the model's heads allow."""
    out = {}
    for name in model_names():
        tps = _valid_tps(name)
        out[name] = (tps, plan_rows(name, [Candidate(HW, tp) for tp in tps], SLO_MS, batch_sizes=BATCHES))
    return out


def test_every_model_has_a_valid_tp():
    for name in model_names():
        assert _valid_tps(name)[0] == 1, name     # tp 1 always divides; listed so a failure names the model


@pytest.mark.parametrize("name", model_names())
def test_plan_rows_invariants(rows_by_model, name):
    tps, rows = rows_by_model[name]
    assert len(rows) == len(tps)
    assert [r.tp for r in rows] == tps
    for r in rows:
        assert r.hardware == HW and r.gpus == r.tp and r.ep == 1
        if not r.feasible:
            assert r.reason and ("memory" in r.reason.lower() or "slo" in r.reason.lower()), r.reason
            assert r.batch_dsd is None and r.tokens_per_s_per_gpu_dsd is None
            continue
        assert r.reason == ""
        assert r.batch_dsd is not None and 1 <= r.batch_dsd <= 256
        assert r.k_dsd is not None and 0 <= r.k_dsd <= 8
        assert r.tokens_per_s_dsd > 0 and r.tokens_per_s_per_gpu_dsd > 0
        assert r.tokens_per_s_per_gpu_dsd == pytest.approx(r.tokens_per_s_dsd / r.gpus)
        if r.batch_vanilla is not None:
            assert r.tokens_per_s_vanilla > 0
            # every step of a server running a K table pays what the engine charges such a server (its K = 0
            # tier included, vLLM issue #49548), so at large batch it can fall behind a server without speculation
            assert r.dsd_gain == pytest.approx(r.tokens_per_s_dsd / r.tokens_per_s_vanilla, rel=1e-12)
        assert r.gpus_needed_dsd is None and r.cost_per_million_tokens_dsd is None   # no target, no price given


def test_smallest_tp_row_per_model(rows_by_model):
    """The smallest tp that divides the heads is 1 for every shipped model; big models do not fit there."""
    for name, (tps, rows) in rows_by_model.items():
        first = rows[0]
        assert first.tp == tps[0]
        if not first.feasible:
            assert "memory" in first.reason, (name, first.reason)


def test_fits_somewhere_within_a_node(rows_by_model):
    """Every shipped model fits on 8 x H200 (141 GB each, 90% usable: 1.02 TB) except the 1T-parameter Kimi-K2 and
    GLM-5 / GLM-5.2, whose 744B / 743B bf16 weights alone are 1.49 TB."""
    for name, (_, rows) in rows_by_model.items():
        if name in ("kimi-k2", "glm-5", "glm-5.2"):
            continue
        assert any(r.feasible for r in rows), name


def test_more_gpus_never_lower_a_replicas_rate(rows_by_model):
    """More tensor-parallel GPUs hold more KV and split each GEMM: one replica's best rate under the SLO does not
    drop by more than 1%. (For a 0.5B model the two all-reduces a layer cost about what halving its small GEMMs saves,
    each GEMM keeping its fixed per-call latency: qwen2-0.5b at tp 2 plans 0.3% below tp 1.)"""
    for name, (_, rows) in rows_by_model.items():
        prev = 0.0
        for r in rows:
            g = r.tokens_per_s_dsd or 0.0
            assert g >= prev * 0.99, (name, r.tp, g, prev)
            prev = g


def test_tight_slo_is_reported_as_slo():
    (r,) = plan_rows("llama-3.1-8b", [f"{HW}:tp1"], 0.5, batch_sizes="1-8")
    assert not r.feasible and r.reason.startswith("SLO:")
    assert "0.5 ms" in r.reason


def test_memory_infeasible_is_reported_as_memory():
    (r,) = plan_rows("llama-3.1-405b", [f"{HW}:tp1"], SLO_MS, batch_sizes="1-8")
    assert not r.feasible and r.reason.startswith("memory:")


def test_parallelism_the_model_cannot_use_is_an_infeasible_row():
    """A candidate the model cannot be split over is one infeasible row; the other candidates still plan."""
    rows = plan_rows("qwen3-30b-a3b", [f"{HW}:tp3", f"{HW}:tp2:ep4", f"{HW}:tp4:ep4"], SLO_MS, batch_sizes="1-8")
    assert [r.feasible for r in rows] == [False, False, True]
    assert "does not divide" in rows[0].reason and "must divide tp" in rows[1].reason
    (r,) = plan_rows("llama-3.1-8b", [f"{HW}:tp2:ep2"], SLO_MS, batch_sizes="1-8")
    assert not r.feasible and "dense" in r.reason


def test_candidate_validates_itself():
    with pytest.raises(DsdsimError, match="tp must be"):
        Candidate("h100-sxm", 0)
    with pytest.raises(DsdsimError, match="empty candidate"):
        Candidate(" ", 2)


def test_unlimited_slo_is_allowed():
    (r,) = plan_rows("llama-3.1-8b", [f"{HW}:tp1"], float("inf"), batch_sizes="1-64")
    assert r.feasible and r.batch_vanilla == 64


def _by_hand(name, tp, slo_ms, batches, max_k=8):
    """(batch K=0, batch DSD, goodput K=0, goodput DSD) at the best point under the SLO, by plain loops."""
    p = predict(name, HW, Deployment(tp=tp), "eagle3", acceptance=None, context=1024, batch_sizes=batches, max_k=max_k, fixed_k=0)
    best = {"vanilla": (None, -math.inf), "dsd": (None, -math.inf)}
    for j, b in enumerate(p.batch_sizes):          # a server without speculation
        if p.feasible[0, j] and p.plain_step_s[j] * 1e3 <= slo_ms and int(b) / p.plain_step_s[j] > best["vanilla"][1]:
            best["vanilla"] = (int(b), int(b) / p.plain_step_s[j])
    for i, k in enumerate(p.k_values):             # a server running the K table (its K = 0 tier included)
        for j, b in enumerate(p.batch_sizes):
            if not p.feasible[i, j]:
                continue
            itl_ms = p.step_s[i, j] / p.tau[i] * 1e3
            if itl_ms > slo_ms:
                continue
            g = int(b) * p.tau[i] / p.step_s[i, j]
            if g > best["dsd"][1] * (1 + 1e-12):
                best["dsd"] = (int(b), g)
    return best["vanilla"][0], best["dsd"][0], best["vanilla"][1], best["dsd"][1]


def test_gpus_and_cost_by_hand():
    name, tp, slo, price, target = "llama-3.1-70b", 4, 30.0, 2.5, 50_000.0
    b_v, b_d, g_v, g_d = _by_hand(name, tp, slo, "1-256")
    (r,) = plan_rows(name, [f"{HW}:tp{tp}"], slo, target_tokens_per_s=target, price_per_gpu_hour=price,
                     batch_sizes="1-256")
    assert r.feasible
    assert (r.batch_vanilla, r.batch_dsd) == (b_v, b_d)
    assert r.tokens_per_s_vanilla == pytest.approx(g_v, rel=1e-9)
    assert r.tokens_per_s_dsd == pytest.approx(g_d, rel=1e-9)
    # replicas of tp GPUs each, rounded up: ceil(50000 / G) * 4
    assert r.gpus_needed_dsd == math.ceil(target / g_d) * tp
    assert r.gpus_needed_vanilla == math.ceil(target / g_v) * tp
    # $ per million tokens: a replica costs price * tp per hour and makes G * 3600 tokens an hour
    assert r.cost_per_million_tokens_dsd == pytest.approx(price * tp / (g_d * 3600) * 1e6, rel=1e-9)
    assert r.cost_per_million_tokens_vanilla == pytest.approx(price * tp / (g_v * 3600) * 1e6, rel=1e-9)
    assert r.cost_per_million_tokens_dsd <= r.cost_per_million_tokens_vanilla
    assert r.gpus_needed_dsd <= r.gpus_needed_vanilla


def test_the_plan_sizes_the_better_server():
    """Where the K-table server does fewer tokens/s per GPU than one without speculation (llama-3.1-70b on
    h100-sxm:tp8 at a 60 ms ITL SLO: gain < 1), the GPUs needed and the cost are the plain server's, and the
    table says so; where it pays, the DSD server's."""
    target, price = 50_000.0, 2.5
    lose, win = plan_rows("llama-3.1-70b", ["h100-sxm:tp8"], 60.0, target_tokens_per_s=target,
                          price_per_gpu_hour=price)[0], plan_rows("llama-3.1-8b", ["h100-sxm"], 30.0,
                                                                  target_tokens_per_s=target,
                                                                  price_per_gpu_hour=price)[0]
    assert lose.dsd_gain < 1 and lose.planned == "plain"
    assert (lose.gpus_needed, lose.cost_per_million_tokens) == (lose.gpus_needed_vanilla,
                                                                lose.cost_per_million_tokens_vanilla)
    assert lose.gpus_needed <= lose.gpus_needed_dsd
    assert win.dsd_gain > 1 and win.planned == "dsd" and win.gpus_needed == win.gpus_needed_dsd
    d = lose.to_dict()
    assert (d["planned"], d["gpus_needed"], d["candidate"]) == ("plain", lose.gpus_needed_vanilla, "h100-sxm:tp8")
    from dsdsim.export.render import plan_table
    from dsdsim.export.text import to_text

    text = " ".join(to_text(plan_table("t", [lose, win]), width=400).split())
    assert "speculation does not pay on h100-sxm:tp8 (gain <= 1): plan a server without speculation" in text


def test_plan_defaults_to_predicts_model_and_gpu(cli):
    code, out, err = cli("plan", "--itl-slo-ms", "30", "-f", "json")
    doc = json.loads(out)
    assert code == 0 and doc["model"] == "llama-3.1-8b" and doc["candidates"][0]["candidate"] == "h100-sxm:tp1"


@pytest.mark.parametrize("bad", ["h100-sxm,,h200-sxm", "h100-sxm:x", ":tp2"])
def test_plan_candidates_refused_in_one_form(cli, bad):
    code, out, err = cli("plan", "--itl-slo-ms", "30", "-g", bad)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "empty item" in err or "HARDWARE[:tpN[:epM][:ppK]], e.g. h100-sxm:tp8 or h200-sxm:tp8:ep8" in err


def test_price_per_hardware_dict():
    rows = plan_rows("llama-3.1-8b", [f"{HW}:tp1", "h100-sxm:tp1"], SLO_MS, batch_sizes="1-64",
                     price_per_gpu_hour={HW: 4.0})
    assert rows[0].cost_per_million_tokens_dsd is not None and rows[0].cost_per_million_tokens_dsd > 0
    assert rows[1].cost_per_million_tokens_dsd is None


@pytest.mark.parametrize("text, expected", [
    ("h100-sxm", Candidate("h100-sxm", 1, 1)), ("h100-sxm:tp8", Candidate("h100-sxm", 8, 1)),
    ("h200-sxm:tp8:ep4", Candidate("h200-sxm", 8, 4)), ("h200-sxm:8", Candidate("h200-sxm", 8, 1)),
    (" mi300x:TP2 ", Candidate("mi300x", 2, 1)),
])
def test_candidate_parse(text, expected):
    assert Candidate.parse(text) == expected


@pytest.mark.parametrize("kwargs, fragment", [
    ({"itl_slo_ms": 0}, "SLO"), ({"itl_slo_ms": -1}, "SLO"), ({"itl_slo_ms": float("nan")}, "SLO"),
    ({"candidates": []}, "no candidates"),
    ({"target_tokens_per_s": 0}, "target"), ({"target_tokens_per_s": float("nan")}, "target"),
    ({"target_tokens_per_s": float("inf")}, "target"),
    ({"price_per_gpu_hour": -1.0}, "price"), ({"price_per_gpu_hour": float("nan")}, "price"),
    ({"candidates": ["h100-sxm:tpx"]}, "candidate"), ({"candidates": ["nope-gpu:tp2"]}, "unknown hardware"),
    ({"candidates": ["h100-sxm:tp0"]}, "tp must be"), ({"candidates": ["h100-sxm:tp2:ep0"]}, "ep must be"),
    ({"candidates": ["h100-sxm:tp4096"]}, "tp must be"),
    # inputs shared by every candidate are errors, not a column of infeasible rows
    ({"model": "llama-9"}, "unknown model"), ({"batch_sizes": "0"}, "batch sizes"),
    ({"acceptance": "1.5"}, "probability"), ({"drafter": "medusa", "max_k": 8}, "limit"), ({"drafter": "mtp"}, "MTP"),
    ({"context": -1}, "context"), ({"max_k": 0}, "max K"), ({"dtype": "fp8"}, "deployment=Deployment"),
])
def test_plan_rows_bad_input(kwargs, fragment):
    args = {"model": "llama-3.1-8b", "candidates": [f"{HW}:tp1"], "itl_slo_ms": SLO_MS, "batch_sizes": "1,2"}
    args.update(kwargs)
    with pytest.raises(DsdsimError, match=fragment):
        plan_rows(**args)


def test_plan_dataframe():
    df = plan("qwen3-30b-a3b", [f"{HW}:tp1", f"{HW}:tp2:ep2"], SLO_MS, batch_sizes="1-128", price_per_gpu_hour=3.0)
    assert list(df["tp"]) == [1, 2] and list(df["ep"]) == [1, 2]
    assert df["feasible"].all()
    assert (df["tokens_per_s_dsd"] >= df["tokens_per_s_vanilla"]).all()
    assert (df["cost_per_million_tokens_dsd"] > 0).all()


def test_sensitivity_dataframe():
    df = sensitivity("llama-3.1-8b", HW, [0.5, 0.9], [1024, 8192], batch_sizes="1,16,128", max_k=6)
    assert len(df) == 2 * 2 * 3
    assert set(df["alpha"]) == {0.5, 0.9} and set(df["context"]) == {1024, 8192}
    feasible = df.dropna(subset=["k"])
    assert feasible["k"].between(0, 6).all()
    assert len(feasible) >= 8                     # batch 128 at context 8192 may not fit; the rest do
    # higher acceptance never lowers the best speedup at a given batch and context
    piv = feasible.pivot_table(index=["context", "batch_size"], columns="alpha", values="speedup_vs_vanilla")
    assert (piv[0.9] >= piv[0.5] - 1e-9).all()


PLAN_ARGS = ["plan", "-m", "llama-3.1-70b", "-g", "h100-sxm:tp4,h200-sxm:tp2,h100-sxm:tp3", "--itl-slo-ms", "30",
             "-b", BATCHES, "--target-tokens-per-s", "50000", "--price-per-gpu-hour", "2.5"]


def test_cli_plan_json(cli, tmp_path):
    code, out, err = cli(*PLAN_ARGS, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["model"] == "llama-3.1-70b" and data["itl_slo_ms"] == 30
    cands = data["candidates"]
    assert [(c["hardware"], c["tp"]) for c in cands] == [("h100-sxm", 4), ("h200-sxm", 2), ("h100-sxm", 3)]
    assert cands[0]["feasible"] and cands[1]["feasible"]
    assert not cands[2]["feasible"] and "does not divide" in cands[2]["reason"]
    for c in cands[:2]:
        assert c["gpus_needed_dsd"] % c["tp"] == 0
        assert c["cost_per_million_tokens_dsd"] == pytest.approx(
            2.5 * c["gpus"] / (c["tokens_per_s_dsd"] * 3600) * 1e6, rel=1e-9)
    # and to a file, atomically
    target = tmp_path / "plan.json"
    code, out, err = cli(*PLAN_ARGS, "--format", "json", "--output", str(target))
    assert code == 0 and out == "" and json.loads(target.read_text()) == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_cli_plan_csv(cli):
    code, out, err = cli(*PLAN_ARGS, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 3
    assert rows[0]["hardware"] == "h100-sxm" and rows[0]["feasible"] == "true"
    assert rows[2]["feasible"] == "false" and rows[2]["batch_dsd"] == ""
    assert float(rows[0]["tokens_per_s_dsd"]) >= float(rows[0]["tokens_per_s_vanilla"])
    assert float(rows[0]["tokens_per_s_per_gpu_dsd"]) > 0


def test_cli_plan_table(cli):
    code, out, err = cli(*PLAN_ARGS)
    assert code == 0, err
    assert "h100-sxm:tp4" in out and "h200-sxm:tp2" in out and "does not" in out   # the reason (wrapped)


def test_a_row_is_one_operating_point():
    """Issue 12 defect 2: deepseek-v3 on 8 x H200 with MTP at a 50 ms SLO showed max batch 566 with K=0 but the
    tokens/s of B=560, K=3. Every DSD column must describe the same (batch, K): its goodput, its ITL within the
    SLO, and no other point under the SLO with more tokens/s."""
    slo_ms = 50.0
    (r,) = plan_rows("deepseek-v3", ["h200-sxm:tp8"], slo_ms, drafter="mtp", acceptance="0.8", batch_sizes="1-1024")
    assert r.feasible
    p = predict("deepseek-v3", "h200-sxm", Deployment(tp=8), "mtp", acceptance="0.8", context=1024, batch_sizes="1-1024", max_k=8, fixed_k=0)
    i, j = list(p.k_values).index(r.k_dsd), list(p.batch_sizes).index(r.batch_dsd)
    assert r.tokens_per_s_dsd == pytest.approx(float(p.goodput[i, j]), rel=1e-12)
    assert p.step_s[i, j] / p.tau[i] * 1e3 <= slo_ms
    itl_ms = p.step_s / p.tau[:, None] * 1e3
    assert np.nanmax(np.where(p.feasible & (itl_ms <= slo_ms), p.goodput, np.nan)) == pytest.approx(
        r.tokens_per_s_dsd, rel=1e-12)
    j0 = list(p.batch_sizes).index(r.batch_vanilla)
    assert r.tokens_per_s_vanilla == pytest.approx(float(p.plain_goodput[j0]), rel=1e-12)


# --- no valid candidate; names never cut --------------------------------------------------------------------


def _infeasible(hardware: str, tp: int, ep: int, reason: str):
    from dsdsim.plan import PlanRow

    return PlanRow(hardware, tp, ep, tp, False, reason, *([None] * 12))


def test_no_valid_candidate_is_an_error_naming_the_first_reasons():
    from dsdsim.plan import require_a_valid_candidate

    rows = [_infeasible("h100-sxm", tp, 1, f"reason {tp}") for tp in (3, 5, 6, 7)]
    with pytest.raises(DsdsimError) as info:
        require_a_valid_candidate(rows)
    assert str(info.value) == ("no candidate is valid: h100-sxm:tp3 (reason 3), h100-sxm:tp5 (reason 5), "
                               "h100-sxm:tp6 (reason 6) and 1 more")
    (ok,) = plan_rows("llama-3.1-8b", ["h100-sxm"], float("inf"), batch_sizes="1,2")
    assert require_a_valid_candidate(rows + [ok]) == rows + [ok]


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_cli_plan_with_every_candidate_invalid_exits_2_in_every_format(cli, fmt):
    code, out, err = cli("plan", "-m", "llama-3.1-8b", "-g", "h100-sxm:tp8:ep3,h100-sxm:tp3", "--itl-slo-ms", "30",
                         "-b", "1,2", "-f", fmt)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("dsdsim: error: no candidate is valid: h100-sxm:tp8:ep3 (llama-3.1-8b is dense")
    assert "h100-sxm:tp3 (tp 3 does not divide" in line


def test_plan_table_never_cuts_a_candidate_name():
    """However narrow the terminal and however long a reason, every candidate's name is printed whole and every
    reason in full below the table."""
    from dsdsim.export.render import plan_table
    from dsdsim.export.text import to_text

    reason = "tp 3 does not divide the model's 64 attention heads; choose a tp that divides 64 " * 2
    rows = [_infeasible("a100-sxm-80gb", 8, 8, reason), _infeasible("rtx-pro-6000-blackwell", 4, 2, reason)]
    for width in (40, 80):
        text = to_text(plan_table("plan", rows), width)
        table_lines = [line for line in text.splitlines() if line.startswith("│")]
        assert any("a100-sxm-80gb:tp8:ep8 " in line for line in table_lines), text
        assert any("rtx-pro-6000-blackwell:tp4:ep2 " in line for line in table_lines), text
        flat = " ".join(text.split())
        assert f"a100-sxm-80gb:tp8:ep8: {' '.join(reason.split())}" in flat


def test_an_operating_point_at_the_end_of_the_batch_range_is_said_to_be_the_ranges_limit(cli):
    """Llama-3.2-1B on one H100 meets a 100 ms ITL far past batch 1024 (a server without speculation runs best at
    batch 2005 of 1-4096, with it at 1836): within 1-1024 the K-table server stops at 1024, the range's end, and the
    table says that the SLO is not what stopped it; a range that holds both points says nothing."""
    rows = plan_rows("llama-3.2-1b", ["h100-sxm:tp1"], 100, options=None)
    assert rows[0].largest_batch == 1024 and rows[0].batch_dsd == 1024 and rows[0].at_range_end
    code, out, err = cli("plan", "-m", "llama-3.2-1b", "-g", "h100-sxm", "--itl-slo-ms", "100")
    assert code == 0, err
    assert "the largest evaluated" in " ".join(out.split())
    wide = plan_rows("llama-3.2-1b", ["h100-sxm:tp1"], 100, options=None, batch_sizes="1-4096")
    assert wide[0].batch_dsd < 4096 and wide[0].batch_vanilla < 4096 and not wide[0].at_range_end
