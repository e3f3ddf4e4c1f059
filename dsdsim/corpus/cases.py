"""A corpus case's conditions as dsdsim's inputs: the engine spec and the deployment a run is predicted with, the
tokens per step a constant acceptance gives, and how a case names its source. Shared by the step-level evaluation
(``dsdsim.corpus.evaluate``) and the end-to-end one (``dsdsim.corpus.serving``).
"""
from __future__ import annotations

from dsdsim.corpus.schema import Case, Conditions, CorpusFile


# The engine a case is predicted with when none is forced: the engine it was measured on, at its version.
# gpt-fast and MagicDec run whole compiled decode loops without a serving scheduler: kernels only.
ENGINE_OF_CASE = {"vllm": "vllm", "vllm-mrv2": "vllm-mrv2", "sglang": "sglang", "tensorrt-llm": "trtllm"}
NO_ENGINE = "ideal"


def case_engine(conditions: Conditions | Case, engine=None):
    """The engine spec (name, path or spec) for a run: ``engine`` when given, else the spec whose version range
    covers the engine version the run was measured on (``vllm@0.8.4``)."""
    if engine is not None:
        return engine
    c = conditions.conditions if isinstance(conditions, Case) else conditions
    family = ENGINE_OF_CASE.get(c.engine)
    if family is None:
        return NO_ENGINE
    return f"{family}@{c.engine_version}" if c.engine_version else family


def case_deployment(c: Conditions):
    """How a run's model is served: its tp, ep, weight and KV formats and data-parallel attention."""
    from dsdsim.specs.deployment import Deployment
    from dsdsim.units import DType, parse_dtype

    return Deployment(tp=c.tp, ep=c.ep, dtype=parse_dtype(c.dtype) if c.dtype else None,
                      kv_dtype=parse_dtype(c.kv_dtype) if c.kv_dtype else DType.bf16, dp_attention=c.dp_attention)


def tau_of_alpha(alpha: float, k: int) -> float:
    """Tokens per step for a constant conditional acceptance: (1 - alpha^(K+1)) / (1 - alpha)."""
    from dsdsim.policy.acceptance import constant

    return float(constant(alpha).tau(k))


def source_text(cf: CorpusFile, case: Case) -> str:
    return f"{cf.source.url} ({case.where})"
