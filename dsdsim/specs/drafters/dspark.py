"""DSpark: a DFlash-style parallel backbone plus a sequential Markov head (Cheng et al. 2026, DeepSeek-AI and Peking
University, "DSpark: Confidence-Scheduled Speculative Decoding with Semi-Autoregressive Generation";
deepseek-ai/DeepSpec ``deepspec/modeling/dspark``; vLLM ``vllm/v1/spec_decode/dspark.py``).

One non-causal pass over a block of K positions (the token sampled last step + K - 1 mask tokens) gives base logits
for all K drafts; then K sequential steps each add a low-rank bias from the previous draft token,
``B = W2(W1[x_{k-1}])`` (an r-wide embedding and an r -> V projection, ``VanillaMarkov``), and sample that position.

``dspark[:LAYERS[,TAPS[,BLOCK[,RANK]]]]``. Defaults from the released checkpoints' configs
(deepseek-ai/DeepSpec ``config/dspark/dspark_qwen3_{4b,8b,14b}.py``: block_size 7, num_draft_layers 5, five
target_layer_ids, markov_rank 256, markov_head_type 'vanilla'), so K <= 7: DeepSpec predicts from every slot of
the block, the anchor included (``label_offsets = arange(1, block_size + 1)``), and vLLM fills
``num_speculative_tokens`` slots (``DSparkProposer.set_inputs_first_pass``).
"""
from __future__ import annotations

from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun, whole_numbers
from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal

LAYERS, TAPS, BLOCK, RANK = 5, 5, 7, 256
FORM = "dspark[:LAYERS[,TAPS[,BLOCK[,RANK]]]]"


def _parse(arg: str, raw: str) -> dict:
    given = whole_numbers(arg, raw, ("draft layers", "target layers tapped", "block size", "Markov rank"), FORM)
    layers, taps, block, rank = given + [LAYERS, TAPS, BLOCK, RANK][len(given):]
    if block > 64:
        raise DsdsimError(f"dspark block size must be <= 64 (K <= 64), got {block}")
    return {"layers": layers, "taps": taps, "max_k": block, "markov_rank": rank}


def _label(d) -> str:
    return "dspark" if (d.layers, d.taps, d.max_k, d.markov_rank) == (LAYERS, TAPS, BLOCK, RANK) else \
        f"dspark:{d.layers},{d.taps},{d.max_k},{d.markov_rank}"


INFO = DrafterInfo(
    kind=DrafterKind.dspark, form=FORM, parse=_parse, label=_label,
    check=lambda d: None if d.layers and d.taps and d.markov_rank else
    "dspark needs its draft layers, taps and Markov rank: write dspark:LAYERS,TAPS,BLOCK,RANK (e.g. dspark:5,5,7,256)",
    summary="DSpark: LAYERS draft layers over K positions in ONE pass, then K sequential rank-RANK Markov steps",
    passes=DraftPasses.one, max_k=BLOCK,
    max_k_source="block size 7 of the released deepseek-ai/dspark_*_block7 checkpoints (DeepSpec README, configs)",
    acceptance="K = block positions drafted at once, verified as a chain; conditional alpha per position; the DSpark "
               "paper reports acceptance length tau (bonus token included). Confidence-scheduled verification "
               "(a per-request prefix) is not modelled: vLLM's DSparkProposer leaves it out",
    engines={"vllm": EngineRun(method="dspark", source="vllm/config/speculative.py DSparkModelTypes ('dspark'); "
                                                       "vllm/v1/spec_decode/dspark.py DSparkProposer(DFlashProposer)"),
             "sglang": sglang_refusal("DSpark"),
             "trtllm": trtllm_refusal("DSpark")})
