"""Smaller models for measuring, torch-free: widths divided by a factor where the real layer does not fit the device
or the time budget, and the one-layer-per-kind slice a whole pass is timed on. Predictions are made for the
reduced spec itself, and the report records what was changed."""
from __future__ import annotations

from typing import Optional

from dsdsim.specs.drafter import DrafterSpec
from dsdsim.specs.model import FFN, Attention, Layer, Mamba2, ModelSpec


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

    def mamba(m: Mamba2) -> Mamba2:
        groups = max(1, min(m.n_groups, div(m.n_groups)))
        heads = max(groups, div(m.num_heads) // groups * groups)      # groups still divide the heads
        return m.model_copy(update={"num_heads": heads, "n_groups": groups})

    def layer(l: Layer) -> Layer:
        return l.model_copy(update={"attention": attn(l.attention) if l.attention is not None else None,
                                    "ffn": ffn(l.ffn) if l.ffn is not None else None,
                                    "mamba": mamba(l.mamba) if l.mamba is not None else None})

    layers = [layer(l) for l in model.layers]
    reduced = model.model_copy(update={
        "name": f"{model.name}/{factor}", "hidden_size": div(model.hidden_size, 64), "vocab_size": div(model.vocab_size, 256),
        "layers": tuple(layers), "mtp_layer": layer(model.mtp_layer) if model.mtp_layer else None})
    record = {"factor": factor, "hidden_size": [model.hidden_size, reduced.hidden_size],
              "vocab_size": [model.vocab_size, reduced.vocab_size], "layers": model.num_layers,
              "note": "widths divided by the factor; head_dim, layer count, experts and top_k kept; predictions use "
                      "this reduced spec"}
    at = next((i for i, l in enumerate(model.layers) if l.attention is not None), None)
    if at is not None:
        a0, a1 = model.layers[at].attention, reduced.layers[at].attention
        record.update(num_heads=[a0.num_heads, a1.num_heads], num_kv_heads=[a0.num_kv_heads, a1.num_kv_heads],
                      head_dim=a1.head_dim)
    mb = next((i for i, l in enumerate(model.layers) if l.mamba is not None), None)
    if mb is not None:
        m0, m1 = model.layers[mb].mamba, reduced.layers[mb].mamba
        record.update(mamba_num_heads=[m0.num_heads, m1.num_heads], mamba_n_groups=[m0.n_groups, m1.n_groups])
    dense = next((i for i, l in enumerate(model.layers) if l.ffn is not None and l.ffn.intermediate_size), None)
    if dense is not None:
        record["intermediate_size"] = [model.layers[dense].ffn.intermediate_size,
                                       reduced.layers[dense].ffn.intermediate_size]
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
