"""DFlash: a block-diffusion drafter (Chen et al. 2026, arXiv 2602.06036; z-lab/dflash ``dflash/model.py``).

One non-causal pass over a block of K + 1 positions (the last verified token + K mask tokens, embedded with the
target's embedding) proposes all K draft tokens. The draft is a stack of Qwen3-style decoder layers at the target's
hidden size; its keys and values also come from the target's hidden states at TAPS layers, projected by
fc(TAPS*h -> h) + RMSNorm and cached per layer (the context features); the K outputs go through the target's lm_head.

``dflash[:LAYERS[,TAPS[,BLOCK]]]``. Defaults from published drafters: 5 draft layers reading 5 target layers, block
size 16, so K <= 15 (the z-lab/Qwen3.5-9B-DFlash derivative's model card: "Draft layers 5, Block size 16, Target
layers tapped 1, 8, 15, 22, 29"; z-lab/dflash tests/fixtures/dflash2-config.json: num_hidden_layers 5, five
target_layer_ids, block_size 16). Other checkpoints differ (z-lab/Qwen3.5-122B-A10B-DFlash: 6 layers, 8 taps): pass
them.
"""
from __future__ import annotations

from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun, whole_numbers
from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal

LAYERS, TAPS, BLOCK = 5, 5, 16
FORM = "dflash[:LAYERS[,TAPS[,BLOCK]]]"


def _parse(arg: str, raw: str) -> dict:
    given = whole_numbers(arg, raw, ("draft layers", "target layers tapped", "block size"), FORM)
    layers, taps, block = given + [LAYERS, TAPS, BLOCK][len(given):]
    if block < 2:
        raise DsdsimError(f"dflash block size must be >= 2 (the last token + at least one mask), got {block}")
    if block - 1 > 64:
        raise DsdsimError(f"dflash block size must be <= 65 (K <= 64), got {block}")
    return {"layers": layers, "taps": taps, "max_k": block - 1}


def _label(d) -> str:
    return "dflash" if (d.layers, d.taps, d.max_k) == (LAYERS, TAPS, BLOCK - 1) else \
        f"dflash:{d.layers},{d.taps},{d.max_k + 1}"


INFO = DrafterInfo(
    kind=DrafterKind.dflash, form=FORM, aliases=("d-flash",), parse=_parse, label=_label,
    check=lambda d: None if d.layers and d.taps else "dflash needs its draft layers and taps: write "
                                                      "dflash:LAYERS,TAPS (e.g. dflash:5,5)",
    summary="DFlash block diffusion: LAYERS draft layers over K + 1 positions in ONE pass, on target features",
    passes=DraftPasses.one, max_k=BLOCK - 1,
    max_k_source="block size 16 of the z-lab -b16 checkpoints: the last token + 15 masks (z-lab/dflash model.py)",
    acceptance="K = block - 1 positions drafted at once; conditional alpha per position as vLLM exports it; "
               "DFlash papers report acceptance length tau (bonus token included)",
    engines={"vllm": EngineRun(method="dflash", source="vllm/config/speculative.py SpeculativeMethod (dflash); "
                                                       "DSD docs v0.25.0: 'Tested with Eagle, Eagle-3, and DFlash'"),
             "sglang": sglang_refusal("DFlash (--speculative-algorithm DFLASH)"),
             "trtllm": trtllm_refusal("DFlash")})
