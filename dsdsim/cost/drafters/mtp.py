"""The model's MTP module(s): embedding, enorm/hnorm, eh_proj, one full layer (MoE included), the shared head."""
from __future__ import annotations

from dsdsim.cost import ops
from dsdsim.cost.drafters.base import DraftSetup, DrafterCost, gemm_dtypes
from dsdsim.cost.layers import PassContext, head_plan, layer_plan
from dsdsim.cost.plan import PlanOp, tokens
from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters.mtp import no_mtp_module
from dsdsim.specs.model import ModelSpec


def _mtp_plan(target: ModelSpec, pc: PassContext) -> list[PlanOp]:
    """DeepSeek MTP: enorm/hnorm, eh_proj (2h -> h), one full layer (MLA + MoE), shared head (full vocab).
    The head reads the last token of the first pass (B rows) and every candidate of later passes (B*q rows)."""
    h = target.hidden_size
    g = gemm_dtypes(pc)
    out = [PlanOp("mtp.embed", ops.Embedding(h, pc.w_dtype, pc.act_dtype), tokens),
           PlanOp("mtp.enorm_hnorm", ops.Elementwise(2 * h, reads=1, writes=1, act_dtype=pc.act_dtype), tokens),
           PlanOp("mtp.eh_proj", ops.Gemm(target.mtp_eh_proj.inputs, target.mtp_eh_proj.outputs, **g), tokens)]
    out += [o.renamed("mtp.") for o in layer_plan(target.mtp_layer, h, pc)]
    return out + head_plan(h, target.vocab_size, pc, prefix="mtp.")


def _plan(ds: DraftSetup):
    if not ds.target.mtp_layers:
        raise DsdsimError(no_mtp_module(ds.target.name))
    one = _mtp_plan(ds.target, ds.pc)
    return ds.chain(one, one)


def _whole(target: ModelSpec, drafter) -> int:
    if not target.mtp_layers:
        return 0
    h = target.hidden_size
    layer = target.mtp_layer
    return target.mtp_layers * (layer.params(h) - layer.ffn.routed_params(h))


def _kv_layers(target: ModelSpec, drafter):
    return () if target.mtp_layer is None else ((target.mtp_layer.attention, target.mtp_layers),)


MTP = DrafterCost(plan=_plan, weights=lambda t, d, m: t.params_mtp, whole=_whole, kv_layers=_kv_layers)
