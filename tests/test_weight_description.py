"""The one description of a SwiGLU expert's and a draft head's weights against independent counts.

Ground truth: tensor shapes of published checkpoints and reference code (cited per test), and torch modules whose
parameters torch counts itself: bench/model.py's MoE and EAGLE-3 head, and, for heads bench does not build, the
published module written out in torch.nn here. Built on the meta device (no memory). Tolerance: exact, except
where a published figure is rounded (stated there).
"""
from __future__ import annotations

import pytest

from dsdsim import load_hardware, load_model
from dsdsim.cost import ops
from dsdsim.cost.drafters.base import eagle_layer
from dsdsim.cost.drafts import draft_head, draft_ops, drafter_weight_params, drafter_whole_params
from dsdsim.cost.layers import PassContext
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import parse_drafter
from dsdsim.specs.model import swiglu_bias_params, swiglu_matrix_params
from dsdsim.units import DType


def _numel(*shapes: tuple[int, ...]) -> int:
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


# --- a routed SwiGLU expert ------------------------------------------------------------------------------------


def test_a_mixtral_expert_matches_its_published_tensors():
    # mistralai/Mixtral-8x7B-v0.1 block_sparse_moe.experts.N: w1 and w3 (14336, 4096), w2 (4096, 14336)
    published = _numel((14336, 4096), (14336, 4096), (4096, 14336))
    ffn = load_model("mixtral-8x7b").moe_ffn
    assert swiglu_matrix_params(4096, ffn.expert_intermediate_size) == published == 176_160_768


def test_a_gpt_oss_expert_matches_its_published_tensors():
    # transformers models/gpt_oss GptOssExperts, per expert: gate_up_proj (h, 2I), gate_up_proj_bias (2I),
    # down_proj (I, h), down_proj_bias (h); openai/gpt-oss-120b: h = I = 2880
    h, i = 2880, 2880
    ffn = load_model("gpt-oss-120b").moe_ffn
    assert ffn.expert_intermediate_size == i and ffn.bias
    assert swiglu_matrix_params(h, i) == _numel((h, 2 * i), (i, h))
    assert swiglu_bias_params(h, i) == _numel((2 * i,), (h,))
    op = ops.moe_experts("experts", 1.0, ffn.top_k, h, i, 1.0, 1.0, w_dtype=DType.bf16, act_dtype=DType.bf16,
                         bias=True)
    assert op.weight_bytes == _numel((h, 2 * i), (2 * i,), (i, h), (h,)) * 2        # one expert touched, bf16


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_the_cost_op_reads_one_torch_expert_per_touched_expert(name):
    torch = pytest.importorskip("torch")
    from dsdsim.bench.model import MoE

    m = load_model(name)
    h, ffn = m.hidden_size, m.moe_ffn
    module = MoE(ffn, h, torch.bfloat16, "meta")
    per_expert = (module.w13.numel() + module.w2.numel()) // ffn.num_experts     # bench MoE: matrices only
    assert swiglu_matrix_params(h, ffn.expert_intermediate_size) == per_expert
    op = ops.moe_experts("experts", 1.0, ffn.top_k, h, ffn.expert_intermediate_size, 3.0, 1.0,
                         w_dtype=DType.bf16, act_dtype=DType.bf16)
    assert op.weight_bytes == 3 * per_expert * 2


# --- draft heads -----------------------------------------------------------------------------------------------


def test_eagle3_head_parts_match_the_published_llama_3_1_8b_head():
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (reference models.md, SpecForge llama3-8B-eagle3.json): fc 50.3M,
    # attention 67.1M, MLP 176.2M, lm_head 131.1M; each rounded to 0.1M
    head = draft_head(load_model("llama-3.1-8b"), parse_drafter("eagle3"))
    assert head.fc.params == pytest.approx(50.3e6, abs=0.05e6)
    assert head.layer_params == pytest.approx((67.1 + 176.2) * 1e6, abs=0.1e6)
    assert head.lm_head.params == pytest.approx(131.1e6, abs=0.05e6)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b"])
def test_eagle3_head_matches_the_torch_head(name):
    torch = pytest.importorskip("torch")
    from dsdsim.bench.model import Eagle3Head, param_count

    target, drafter = load_model(name), parse_drafter("eagle3")
    h = target.hidden_size
    module = Eagle3Head(eagle_layer(target, drafter), h, drafter.draft_vocab_size, torch.bfloat16, "meta")
    head = draft_head(target, drafter)
    assert head.fc.params == param_count(module.fc)
    assert head.layer_params == param_count(module.layer) == drafter_whole_params(target, drafter)
    assert head.lm_head.params == param_count(module.lm_head)
    # not in the description: the embedding (the target's table, shared) and the head's final norm (h elements)
    rest = param_count(module) - param_count(module.embed) - param_count(module.norm)
    assert drafter_weight_params(target, drafter, None) == head.params == rest


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-2-7b", "qwen2.5-7b"])
def test_eagle_head_matches_a_torch_eagle_head(name):
    torch = pytest.importorskip("torch")
    from dsdsim.bench.model import DecoderLayer, param_count

    # SafeAILab/EAGLE eagle/model/cnets1.py: fc = Linear(2h, h, bias=True), one decoder layer, no lm_head
    target, drafter = load_model(name), parse_drafter("eagle")
    h = target.hidden_size
    fc = torch.nn.Linear(2 * h, h, bias=True, device="meta")
    layer = DecoderLayer(eagle_layer(target, drafter), h, torch.bfloat16, "meta")
    head = draft_head(target, drafter)
    assert head.lm_head is None
    assert head.layer_params == param_count(layer) == drafter_whole_params(target, drafter)
    assert drafter_weight_params(target, drafter, None) == head.params == param_count(fc) + param_count(layer)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-2-7b", "qwen2-57b-a14b"])
def test_medusa_heads_match_torch_medusa_heads(name):
    torch = pytest.importorskip("torch")
    from torch import nn

    # FasterDecoding/Medusa medusa/model/medusa_model.py: each head is ResBlock (Linear(h, h), bias on, SiLU,
    # residual) then Linear(h, V, bias=False); medusa_num_layers = 1
    target, drafter = load_model(name), parse_drafter("medusa")
    h, v = target.hidden_size, target.vocab_size
    heads = nn.ModuleList(nn.Sequential(nn.Linear(h, h, device="meta"), nn.SiLU(),
                                        nn.Linear(h, v, bias=False, device="meta")) for _ in range(drafter.max_k))
    torch_count = sum(p.numel() for p in heads.parameters())
    assert drafter_weight_params(target, drafter, None) == draft_head(target, drafter).params == torch_count
    assert drafter_whole_params(target, drafter) == 0


@pytest.mark.parametrize("text", ["eagle3", "eagle", "medusa"])
def test_the_draft_ops_read_the_described_weights(text):
    """One step at K = 1 (Medusa: all its heads) reads each described matrix once: bf16 weights, bf16 biases."""
    target, drafter = load_model("llama-3.1-8b"), parse_drafter(text)
    pc = PassContext.build(target, load_hardware("h100-sxm"), Deployment(dtype=DType.bf16, act_dtype=DType.bf16))
    k = drafter.max_k if text == "medusa" else 1
    read: dict[str, float] = {}
    for o in draft_ops(target, drafter, pc, 4.0, k, 512.0):       # pass1.* once, passN.* K - 1 = 0 times
        part = o.name.split(".")[-1]
        read[part] = read.get(part, 0.0) + o.weight_bytes * o.count
    head = draft_head(target, drafter)
    for part in ("fc", "resblock", "lm_head"):
        linear = getattr(head, part)
        if linear is not None:
            assert read[part] == head.copies * linear.params * 2, part
