"""When nothing fits in memory, the output names the smallest change that does (issue 32, section 5.8): each
suggestion is checked on the same memory model, and the next smaller change is checked not to fit."""
from __future__ import annotations

import re

import pytest

from dsdsim.cost.memory import memory_use
from dsdsim.policy.fits import fit_advice, fit_note
from dsdsim.specs.catalog import load_hardware
from dsdsim.specs.setup import resolve
from dsdsim.units import DType


def fits(model, hw, k=1, context=1024, **dep):
    s = resolve(model, hw, dep or None, "eagle3")
    return bool(memory_use(s.model, s.hardware, s.deployment, s.drafter, 1.0, float(k), float(context)).feasible)


def test_a_70b_model_on_one_h100_needs_tp2_or_fp8():
    """141 GB of bf16 weights against 0.9 of the driver's 85.03e9 B a GPU (76.5 GB): two GPUs hold them (70.6 GB
    each), as vLLM serves Llama-3.1-70B on 2 x H100; in fp8 one does."""
    assert not fits("llama-3.1-70b", "h100-sxm") and fits("llama-3.1-70b", "h100-sxm", tp=2)
    assert fits("llama-3.1-70b", "h100-sxm", dtype=DType.fp8)
    a = fit_advice(resolve("llama-3.1-70b", "h100-sxm"), 1024)
    assert a.tp == "--tp 2 (2 x h100-sxm)" and a.formats == ("--dtype fp8 (1 x h100-sxm)",)
    assert not a.other_gpus


def test_glm_5_fits_no_8_gpu_h200_node_in_bf16_and_the_note_names_nodes_that_do():
    s = resolve("glm-5", "h200-sxm", {"tp": 8})
    assert not fits("glm-5", "h200-sxm", tp=8)
    a = fit_advice(s, 1024)
    assert a.tp is None and a.formats == ("--dtype fp8 (8 x h200-sxm)",)
    assert fits("glm-5", "h200-sxm", tp=8, dtype=DType.fp8)
    assert a.other_gpus
    for option in a.other_gpus:                  # '-g b300 --tp 8 (8 x b300)': each one fits, in bf16
        name, tp = re.match(r"-g (\S+) --tp (\d+)", option).groups()
        assert fits("glm-5", name, tp=int(tp))
        assert int(tp) <= load_hardware(name).gpus_per_node.value
        if int(tp) > 1:
            assert not fits("glm-5", name, tp=int(tp) // 2)
    note = fit_note(s, 1024)
    assert note.startswith("no node of 8 x h200-sxm holds glm-5 in bf16 weights, bf16 KV at context 1024")


def test_a_deployment_that_fits_gets_no_advice():
    assert fit_advice(resolve(), 1024) is None and fit_note(resolve(), 1024) is None


def test_predict_explain_and_the_export_say_what_would_fit(cli):
    code, out, _ = cli("predict", "-m", "llama-3.1-70b", "-b", "1-8")
    assert code == 0 and "it would fit with --tp 2 (2 x h100-sxm)" in " ".join(out.split())
    code, _, err = cli("predict", "-m", "llama-3.1-70b", "-b", "1-8", "-f", "vllm")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "it would fit with --tp 2" in err
    code, out, _ = cli("explain", "-m", "llama-3.1-70b", "-f", "json")
    import json

    assert code == 0 and json.loads(out)["fits_with"].startswith("it would fit with --tp 2")
    code, out, _ = cli("explain", "-f", "json")
    assert "fits_with" not in json.loads(out)


@pytest.mark.parametrize("context", [1024, 131072])
def test_the_advice_holds_at_the_context_asked(context):
    """At a 128k context the KV cache is part of what must fit: the suggestion is checked there, not at 1024."""
    a = fit_advice(resolve("llama-3.1-70b", "h100-sxm"), context)
    tp = int(re.match(r"--tp (\d+)", a.tp).group(1))
    assert fits("llama-3.1-70b", "h100-sxm", context=context, tp=tp)
    assert not fits("llama-3.1-70b", "h100-sxm", context=context, tp=tp // 2)


def test_plan_names_the_candidate_that_would_fit():
    from dsdsim.plan import plan_rows

    rows = plan_rows("qwen3-30b-a3b", ["rtx-5090", "h100-sxm:tp2"], 20.0, batch_sizes="1-64")
    bad = rows[0]
    assert not bad.feasible and bad.reason.endswith("; fits from rtx-5090:tp4")
    assert fits("qwen3-30b-a3b", "rtx-5090", tp=4) and not fits("qwen3-30b-a3b", "rtx-5090", tp=2)
    none = plan_rows("glm-5", ["h100-sxm:tp2", "h200-sxm"], 100.0, batch_sizes="1-8", drafter=None)
    assert all("node holds it as given" in r.reason for r in none)
