"""DSpark (deepseek-ai/DeepSpec ``deepspec/modeling/dspark``; vLLM ``vllm/v1/spec_decode/dspark.py``): a DFlash-style
backbone pass for all K base logits, then K sequential Markov steps.

Per step with K >= 1, for B sequences, h the target's hidden size, V its vocabulary, r the Markov rank:
  block pass (once)
    embed        the block's K tokens (the token sampled last step + K - 1 masks) through the target's embedding
    fc           TAPS*h -> h on the target features of the K + 1 tokens verified last step, then hidden_norm
    ctx_kv       per layer, k_proj / v_proj of those K + 1 context rows (cached)
    layer        per layer, the decoder layer over the K block rows (attention over the cache, the K + 1 new
                 context positions and the block), x LAYERS
    head         final norm and the target's lm_head over the B*K block rows: the base logits (no sampling yet)
  Markov step (K times, one position each, B rows; ``VanillaMarkov.apply_step_logits``)
    markov_w1    the previous draft token's r-wide row of W1 (an embedding lookup)
    markov_w2    r -> V, the bias, split over tensor-parallel ranks like the lm_head
    bias_add     base logits + bias, V/tp wide
    sampling     over the V logits of the position
vLLM's DSparkProposer fills ``num_speculative_tokens`` block slots (``set_inputs_first_pass``) and samples them with
``sample_dspark_markov_block``; the confidence head (h + r -> 1) runs only for confidence-scheduled verification,
which vLLM leaves out, so it is not costed (its weights are counted).
"""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DraftPass, DraftPlan, DraftRole, DraftSetup, DrafterCost, gemm_dtypes
from dsdsim.cost.drafters.dflash import backbone_kv_layers, backbone_ops, backbone_weights, backbone_whole
from dsdsim.cost.plan import PassPoint, PlanOp, tokens
from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.model import ModelSpec


def context_rows(p: PassPoint) -> tuple:
    """The K + 1 tokens per sequence verified last step, whose target features become the draft's new context."""
    return (p.batch * (p.k + 1.0),)


def rank_context_rows(p: PassPoint) -> tuple:
    """The same rows on one rank (its own sequences under data-parallel attention)."""
    return (p.rank_batch * (p.k + 1.0),)


def _sampled_once(p: PassPoint) -> tuple:
    return p.head_rows, 1.0


def _plan(ds: DraftSetup) -> DraftPlan:
    target, pc = ds.target, ds.pc
    vocab, rank = target.vocab_size, ds.drafter.markov_rank
    g = gemm_dtypes(pc)
    block = [o for o in backbone_ops(ds, "dspark.", context=context_rows, rank_context=rank_context_rows)
             if o.name != "dspark.sampling"]                   # the Markov steps sample, one position each
    shard = -(-vocab // pc.tp)
    markov = [PlanOp("dspark.markov_w1", ops.Embedding(rank, pc.w_dtype, pc.act_dtype), tokens),
              PlanOp("dspark.markov_w2", ops.Gemm(rank, shard, **g), tokens),
              PlanOp("dspark.bias_add", ops.Elementwise(shard, reads=2, writes=1, act_dtype=pc.act_dtype), tokens),
              PlanOp("dspark.sampling", ops.Sampling(vocab), _sampled_once)]
    return DraftPlan((DraftPass(DraftRole.block, block), DraftPass(DraftRole.each, markov)), dp_ranks=ds.dp,
                     block_q=(1.0, 0.0), block_context_grows=True)


def markov_params(target: ModelSpec, drafter: DrafterSpec) -> int:
    """W1 (V x r), W2 (r x V, no bias) and the confidence head (h + r -> 1, with bias)."""
    v, r = target.vocab_size, drafter.markov_rank
    return 2 * v * r + (target.hidden_size + r) + 1


def _weights(target: ModelSpec, drafter: DrafterSpec, draft_model) -> int:
    """The backbone's (fc, layers, norms) and the Markov and confidence heads; the embedding and lm_head are the
    target's (vLLM shares them: ``_maybe_share_embeddings``, ``_maybe_share_lm_head``)."""
    return backbone_weights(target, drafter) + markov_params(target, drafter)


DSPARK = DrafterCost(plan=_plan, weights=_weights, whole=backbone_whole, kv_layers=backbone_kv_layers)
