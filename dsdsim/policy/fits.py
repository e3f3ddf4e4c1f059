"""What would fit when nothing does: the smallest change of the deployment that holds batch 1 in memory.

When no batch size fits (weights, KV cache, activations and the drafter at batch 1 exceed the GPU's usable memory,
``dsdsim.cost.memory``), a table of dashes helps nobody. ``fit_suggestions`` tries, on the same memory model and in
this order: a larger tensor-parallel degree within one node (``gpus_per_node`` of the hardware spec, powers of two
the model splits by); fp8 weights (``--dtype fp8``) and an fp8 KV cache (``--kv-dtype fp8``) at the given tp; both
with the smallest tp that then fits; and, where no change fits one node of this GPU, the shipped GPUs whose node
holds the model in the given formats (fewest GPUs first). Every answer is checked, not estimated: each is a
deployment whose batch-1 step fits in memory at the same context and K.
"""
from __future__ import annotations

from typing import Optional

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.units import DType

MAX_OTHER_GPUS = 3          # other GPUs named when none of this GPU's nodes fits


def _fits(setup, hw, dep, k: int, context: int) -> bool:
    from dsdsim.cost.memory import memory_figures

    try:
        dep = dep.check(setup.model)
        use = memory_figures(setup.model, hw, dep, setup.drafter, setup.draft_model).use(1.0, float(k), float(context))
    except DsdsimError:                     # a tp the model cannot be split by
        return False
    return bool(use.feasible)


def _node(hw) -> int:
    return int(hw.gpus_per_node.value)


def _tps(start: int, node: int) -> list[int]:
    """Powers of two above ``start`` up to the node's GPU count."""
    out, tp = [], 1
    while tp <= node:
        if tp > start:
            out.append(tp)
        tp *= 2
    return out


def _smallest_tp(setup, hw, dep, k: int, context: int) -> Optional[int]:
    for tp in _tps(dep.tp if hw is setup.hardware else 0, _node(hw)):
        if _fits(setup, hw, dep.model_copy(update={"tp": tp}), k, context):
            return tp
    return None


@frozen
class FitAdvice:
    """What fits when the deployment as given does not (option texts with their GPU counts, each checked)."""

    tp: Optional[str]                   # the smallest tp of this GPU that fits in the given formats
    formats: tuple[str, ...]            # fp8 weights and/or KV cache, at the given tp or the smallest that fits
    other_gpus: tuple[str, ...]         # when no node of this GPU holds the given formats: GPUs whose node does

    @property
    def any(self) -> bool:
        return bool(self.tp or self.formats or self.other_gpus)


def fit_advice(setup, context: int, k: int = 1) -> Optional[FitAdvice]:
    """The changes that make batch 1 fit at ``context`` and ``k`` draft tokens; None when batch 1 already fits
    (or pipeline parallelism is in use, whose stages this does not re-plan)."""
    dep, hw, m = setup.deployment, setup.hardware, setup.model
    k = k if setup.drafter is not None else 0
    if dep.pp > 1 or _fits(setup, hw, dep, k, context):
        return None
    tp = _smallest_tp(setup, hw, dep, k, context)
    fp8 = {}
    if dep.weight_dtype(m).bytes_per_element > 1:
        fp8["--dtype fp8"] = {"dtype": DType.fp8}
    if dep.kv_dtype.bytes_per_element > 1:
        fp8["--kv-dtype fp8"] = {"kv_dtype": DType.fp8}
    if len(fp8) == 2:
        fp8["--dtype fp8 --kv-dtype fp8"] = {"dtype": DType.fp8, "kv_dtype": DType.fp8}
    formats = []
    for text, change in fp8.items():
        changed = dep.model_copy(update=change)
        if _fits(setup, hw, changed, k, context):
            formats.append(f"{text} ({dep.tp} x {hw.name})")
            break
        tp8 = _smallest_tp(setup, hw, changed, k, context)
        if tp8 is not None and (tp is None or tp8 < tp):
            formats.append(f"{text} --tp {tp8} ({tp8} x {hw.name})")
            break
    others = () if tp is not None else tuple(_other_gpus(setup, k, context))
    return FitAdvice(None if tp is None else f"--tp {tp} ({tp} x {hw.name})", tuple(formats), others)


def _other_gpus(setup, k: int, context: int) -> list[str]:
    """The shipped GPUs one of whose nodes holds the model as given, fewest GPUs (then least memory) first."""
    from dsdsim.specs.catalog import hardware_names, load_hardware

    found = []
    one = setup.deployment.model_copy(update={"tp": 1})
    for name in hardware_names():
        if name == setup.hardware.name:
            continue
        try:
            hw = load_hardware(name)
        except DsdsimError:
            continue
        tp = 1 if _fits(setup, hw, one, k, context) else _smallest_tp(setup, hw, one, k, context)
        if tp is not None:
            found.append((tp, hw.memory_capacity, f"-g {name} --tp {tp} ({tp} x {name})"))
    found.sort()
    return [text for _, _, text in found[:MAX_OTHER_GPUS]]


def smallest_tp(setup, context: int, k: int = 1) -> Optional[int]:
    """The smallest tensor-parallel degree of this GPU, within one node, at which batch 1 fits as given (None: none
    does; the given tp when it already fits)."""
    k = k if setup.drafter is not None else 0
    if _fits(setup, setup.hardware, setup.deployment, k, context):
        return setup.deployment.tp
    return _smallest_tp(setup, setup.hardware, setup.deployment, k, context)


def fit_note(setup, context: int, k: int = 1) -> Optional[str]:
    """One line: what would fit (None when batch 1 already fits)."""
    advice = fit_advice(setup, context, k)
    if advice is None:
        return None
    dep, node = setup.deployment, _node(setup.hardware)
    formats = f"{dep.weight_dtype(setup.model).value} weights, {dep.kv_dtype.value} KV"
    if advice.tp is not None:
        return "it would fit with " + "; or ".join((advice.tp, *advice.formats))
    parts = [f"no node of {node} x {setup.hardware.name} holds {setup.model.name} in {formats} at context {context}"]
    if advice.formats:
        parts.append(f"it would fit with {'; or '.join(advice.formats)}")
    if advice.other_gpus:
        parts.append(f"as given ({formats}), a node of these would: {'; '.join(advice.other_gpus)}")
    if len(parts) == 1:
        parts.append("no node of a shipped GPU does either; pipeline parallelism across nodes "
                     "(explain --pp N -d none) spreads it")
    return ": ".join(parts[:2]) + ("; " + "; ".join(parts[2:]) if len(parts) > 2 else "")
