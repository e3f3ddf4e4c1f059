"""The deployment as resolved for a model: what the header of every result names (tp, ep, the formats).

A module of its own so that `dsdsim predict`'s table, which needs only this, does not create the explain views'
classes (dsdsim.export.views, which uses both).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dsdsim.cost.experts import routing_overlap
from dsdsim.records import frozen

if TYPE_CHECKING:
    from dsdsim.specs.model import ModelSpec


@frozen
class DeploymentView:
    """The deployment as resolved for a model (checkpoint dtypes filled in)."""

    tp: int
    ep: int
    dtype: str
    expert_dtype: str
    kv_dtype: str
    cuda_graphs: bool
    expert_overlap: float
    dp_attention: bool

    @property
    def weights_label(self) -> str:
        """'bf16 weights', or 'bf16 weights, mxfp4 experts' when the routed experts are stored in another format."""
        if self.expert_dtype and self.expert_dtype != self.dtype:
            return f"{self.dtype} weights, {self.expert_dtype} experts"
        return f"{self.dtype} weights"

    @property
    def routing_label(self) -> str:
        """', expert overlap 0.35' where routing locality is priced (MoE models unless set to 0), else ''."""
        return f", expert overlap {self.expert_overlap:.2f}" if self.expert_overlap else ""


def deployment_view(model: ModelSpec, d) -> DeploymentView:
    """The deployment as resolved for this model (checkpoint dtypes filled in)."""
    return DeploymentView(tp=d.tp, ep=d.ep, dtype=d.weight_dtype(model).value,
                          expert_dtype=d.routed_expert_dtype(model).value, kv_dtype=d.kv_dtype.value,
                          cuda_graphs=d.cuda_graphs,
                          expert_overlap=routing_overlap(d.expert_overlap, model.moe_ffn is not None),
                          dp_attention=d.dp_attention)
