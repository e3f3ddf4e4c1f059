"""Smaller models for measuring, torch-free: widths divided by a factor where the real layer does not fit the device
or the time budget, and the one-layer-per-kind slice a whole pass is timed on. Predictions are made for the
reduced spec itself, and the report records what was changed."""
from __future__ import annotations

from typing import Optional

from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.model import FFN, Attention, Layer, ModelSpec


def reduce_model(model: ModelSpec, factor: int) -> tuple[ModelSpec, dict]:
    """Divide widths by ``factor`` (head_dim, layer count, experts and top_k kept). Returns the spec and a
    record of what changed."""
    if factor <= 1:
        return model, {"factor": 1}

    def div(n: int, minimum: int = 1) -> int:
        return max(minimum, int(n // factor))

    def attn(a: Attention) -> Attention:
        heads = div(a.num_heads)
        kv = max(1, min(heads, div(a.num_kv_heads)))
        while heads % kv:
            kv -= 1
        upd = {"num_heads": heads, "num_kv_heads": kv}
        if a.q_lora_rank:
            upd["q_lora_rank"] = div(a.q_lora_rank, 16)
        if a.kv_lora_rank:
            upd["kv_lora_rank"] = div(a.kv_lora_rank, 16)
        if a.window:
            upd["window"] = a.window
        return a.model_copy(update=upd)

    def ffn(f: FFN) -> FFN:
        upd = {}
        if f.intermediate_size:
            upd["intermediate_size"] = div(f.intermediate_size, 8)
        if f.expert_intermediate_size:
            upd["expert_intermediate_size"] = div(f.expert_intermediate_size, 8)
        if f.shared_intermediate_size:
            upd["shared_intermediate_size"] = div(f.shared_intermediate_size, 8)
        return f.model_copy(update=upd)

    def layer(l: Layer) -> Layer:
        return l.model_copy(update={"attention": attn(l.attention), "ffn": ffn(l.ffn)})

    layers = [layer(l) for l in model.layers]
    reduced = model.model_copy(update={
        "name": f"{model.name}/{factor}", "hidden_size": div(model.hidden_size, 64), "vocab_size": div(model.vocab_size, 256),
        "layers": tuple(layers), "mtp_layer": layer(model.mtp_layer) if model.mtp_layer else None})
    first = reduced.layers[0]
    record = {"factor": factor, "hidden_size": [model.hidden_size, reduced.hidden_size],
              "vocab_size": [model.vocab_size, reduced.vocab_size],
              "num_heads": [model.layers[0].attention.num_heads, first.attention.num_heads],
              "num_kv_heads": [model.layers[0].attention.num_kv_heads, first.attention.num_kv_heads],
              "head_dim": first.attention.head_dim, "layers": model.num_layers,
              "note": "widths divided by the factor; head_dim, layer count, experts and top_k kept; predictions use "
                      "this reduced spec"}
    f0 = model.layers[0].ffn
    if f0.intermediate_size:
        record["intermediate_size"] = [f0.intermediate_size, first.ffn.intermediate_size]
    moe = model.moe_ffn
    if moe is not None:
        rmoe = reduced.moe_ffn
        record["expert_intermediate_size"] = [moe.expert_intermediate_size, rmoe.expert_intermediate_size]
        record["num_experts"] = moe.num_experts
        record["top_k"] = moe.top_k
    return reduced, record


def reduce_drafter(drafter: Optional[DrafterSpec], factor: int) -> Optional[DrafterSpec]:
    if drafter is None or factor <= 1:
        return drafter
    upd = {"draft_vocab_size": max(256, drafter.draft_vocab_size // factor)}
    if drafter.intermediate_size:
        upd["intermediate_size"] = max(8, drafter.intermediate_size // factor)
    return drafter.model_copy(update=upd)


def auto_reduction(device: str, quick: bool) -> int:
    """Real dimensions on a GPU; on a CPU divide widths so the run fits the time budget."""
    return 1 if device.startswith("cuda") else (4 if quick else 2)



def slice_model(model: ModelSpec) -> ModelSpec:
    """One layer of each distinct kind (the stack a pass point runs)."""
    layers = tuple(layer for layer, _ in model.layer_groups())
    return model.model_copy(update={"layers": layers, "name": f"{model.name}[{len(layers)} layers]"})
