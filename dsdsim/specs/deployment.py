"""How a model is served: parallelism, number formats, CUDA graphs, memory headroom, routing statistics."""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

import math
from typing import Optional

from pydantic import Field, ValidationError

from dsdsim.errors import DsdsimError
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.specs.model import AttentionKind, ModelSpec
from dsdsim.units import DType


class Deployment(FrozenSpec):
    """One serving replica on ``tp`` x ``pp`` GPUs: ``pp`` pipeline stages, each on ``tp`` GPUs. Experts are split over
    ``ep`` groups inside a stage's GPUs (ep | tp)."""

    def __init__(self, **values):
        """As pydantic builds it, but a bad value is one line naming the field, the value and the bound (the API
        says what the command line says), not a pydantic report."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            from dsdsim.errors import pydantic_one_line

            raise DsdsimError(pydantic_one_line(exc, "Deployment")) from None


    tp: int = Field(default=1, ge=1, le=1024)
    # Pipeline stages (vLLM --pipeline-parallel-size, SGLang --pp-size): consecutive layers per stage, split as
    # vLLM's get_pp_indices splits them (dsdsim.cost.stages); 1 = no pipeline
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    dtype: Optional[DType] = None           # weights; None = the checkpoint's format
    expert_dtype: Optional[DType] = None    # routed experts; None = the checkpoint's format, else dtype
    kv_dtype: DType = DType.bf16
    act_dtype: DType = DType.bf16
    cuda_graphs: bool = True
    memory_utilization: float = Field(default=0.9, gt=0, le=1)   # vLLM gpu_memory_utilization default
    # share of a token's experts kept by the next token of its sequence; None: the measured routing locality on MoE
    # models (dsdsim.cost.experts.routing_overlap), 0 on dense ones; 0: independent routing
    expert_overlap: Optional[float] = Field(default=None, ge=0, lt=1)
    expert_popularity: Optional[tuple[float, ...]] = None        # P(token picks expert e), any scale
    # Data-parallel attention (SGLang --enable-dp-attention, for MLA models): each of the tp GPUs runs attention
    # for its own B/tp sequences with all heads (no attention all-reduce); MoE tokens are dispatched to and
    # combined from the expert ranks by all-to-all. False: tensor-parallel attention, as vLLM runs it.
    dp_attention: bool = False

    def weight_dtype(self, model: ModelSpec) -> DType:
        return self.dtype or model.default_dtype

    def routed_expert_dtype(self, model: ModelSpec) -> DType:
        if self.expert_dtype is not None:
            return self.expert_dtype
        if self.dtype is not None:
            return self.dtype
        return model.default_expert_dtype or model.default_dtype

    def for_draft_model(self) -> "Deployment":
        """A draft model runs on the target's GPUs with the same tp and number formats (tensor-parallel attention,
        no experts of its own)."""
        return Deployment(tp=self.tp, dtype=self.dtype, kv_dtype=self.kv_dtype, act_dtype=self.act_dtype,
                          cuda_graphs=self.cuda_graphs)

    def check(self, model: ModelSpec) -> "Deployment":
        """Refuse parallelism the model cannot be split by, with a one-line reason."""
        tp, ep = self.tp, self.ep
        if self.pp > 1:
            self._check_pp(model)
        for layer in model.layers:
            m = layer.mamba
            if m is not None and (m.num_heads % tp or (m.n_groups % tp and m.n_groups != 1)):
                raise DsdsimError(f"tp {tp} does not split {model.name}'s Mamba-2 mixers ({m.num_heads} heads, "
                                  f"{m.n_groups} groups: vLLM needs tp to divide both, or a single group); "
                                  f"choose a tp that divides "
                                  f"{m.num_heads if m.n_groups == 1 else math.gcd(m.num_heads, m.n_groups)}")
            if layer.attention is None:
                continue
            heads = layer.attention.num_heads
            if heads % tp:
                raise DsdsimError(f"tp {tp} does not divide {model.name}'s {heads} attention heads; "
                                  f"choose a tp that divides {heads}")
            kv = layer.attention.num_kv_heads
            if layer.attention.kind is not AttentionKind.mla and kv % tp and tp % kv:
                raise DsdsimError(f"tp {tp} and {model.name}'s {kv} KV heads do not divide one another")
        if ep > 1:
            moe = model.moe_ffn
            if moe is None:
                raise DsdsimError(f"{model.name} is dense; expert parallelism needs an MoE model (ep must be 1)")
            if moe.num_experts % ep:
                raise DsdsimError(f"ep {ep} does not divide {model.name}'s {moe.num_experts} experts")
            if tp % ep:
                raise DsdsimError(f"ep {ep} must divide tp {tp}: dsdsim places expert groups inside the tp GPUs")
        if self.dp_attention:
            self._check_dp_attention(model)
        if self.expert_overlap and model.moe_ffn is None:
            raise DsdsimError(f"{model.name} is dense; expert overlap describes MoE routing (leave --expert-overlap unset, or 0)")
        if self.expert_popularity is not None:
            moe = model.moe_ffn
            if moe is None or len(self.expert_popularity) != moe.num_experts:
                n = 0 if moe is None else moe.num_experts
                raise DsdsimError(f"expert popularity has {len(self.expert_popularity)} entries; "
                                  f"{model.name} has {n} routed experts")
        return self

    @property
    def gpus(self) -> int:
        """GPUs of the replica: tp per stage, pp stages."""
        return self.tp * self.pp

    def _check_pp(self, model: ModelSpec) -> None:
        """Every stage holds at least one layer (vLLM's get_pp_indices gives a stage num_layers // pp layers or one
        more); dsdsim models stages of tensor-parallel attention only."""
        if self.pp > model.num_layers:
            raise DsdsimError(f"pp {self.pp} is more stages than {model.name}'s {model.num_layers} layers; "
                              f"choose pp <= {model.num_layers}")
        if self.dp_attention:
            raise DsdsimError("pipeline parallelism is modelled with tensor-parallel attention only; "
                              "drop --dp-attention or use pp 1")

    def _check_dp_attention(self, model: ModelSpec) -> None:
        """Data-parallel attention is for MLA models on tp >= 2 GPUs, and dsdsim refuses it elsewhere.

        Why MLA: an MLA layer caches one latent per token that every attention head reads, so tensor-parallel
        attention cannot split the KV cache; each of the tp ranks holds the latent of all B sequences (tp copies).
        DP attention gives each rank its own ceil(B/tp) sequences, which removes the copies: tp times more
        sequences fit. This is the case SGLang's --enable-dp-attention was built for (DeepSeek-V2/V3).
        A GQA model with at least tp KV heads already splits its cache without copies, so DP attention would
        mostly trade the attention all-reduce for all-to-all plus whole attention weights on every rank, and
        the shipped engine figures were fitted on neither layout for GQA: dsdsim does not model that case.
        Why tp >= 2: with one GPU there is nothing to split; the option would change nothing.
        """
        if self.tp < 2:
            raise DsdsimError(f"data-parallel attention needs tp >= 2 GPUs (got tp {self.tp}): with one GPU there "
                              "is nothing to run in parallel")
        if any(layer.attention is None or layer.attention.kind is not AttentionKind.mla for layer in model.layers):
            raise DsdsimError(f"data-parallel attention is modelled for MLA models (e.g. deepseek-v3), where it "
                              f"removes the tp copies of the latent KV cache; {model.name} does not use MLA")
