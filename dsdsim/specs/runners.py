"""Which vLLM model runner a release runs a model on by default, and so which engine spec prices it.

vLLM's model runner V2 (``engine_specs/vllm-mrv2.yaml``) became the default by steps (docs/engine_graphs.md §1.4, read
in vllm/config/vllm.py of each tag):

    0.24        the architectures of ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` (Qwen3ForCausalLM, LlamaForCausalLM,
                MistralForCausalLM, DeepseekV2ForCausalLM, Qwen2MoeForCausalLM, GraniteMoeForCausalLM), never with a
                dynamic K table (``_get_v2_model_runner_unsupported_features@v0.24.0``: "dynamic speculative decoding")
    0.25-0.28   every generate model that is not MoE, not hybrid and not attention-free (PR #44443, first in v0.25.0:
                ``VllmConfig._is_default_v2_model_runner_model``), plus listed MoE architectures (0.25: DeepseekV2,
                Qwen2Moe, GraniteMoe; 0.26 + Inkling, LongcatFlashNgram; 0.27 + KimiK3; 0.28 + DeepseekV4)
    0.29 on     every model (PR #53183, first in v0.29.0: ``VllmConfig.use_v2_model_runner``; engine_specs/vllm-0.29.yaml)
    0.34 on     the only runner: v0.34.0 removed model runner V1 (vllm/platforms/interface.py@v0.34.0
                Platform.validate_environ: "Model Runner V1 has been removed")

A drafter V2 does not run sends the server to V1 in every release that has both, 0.24 to 0.33
(``_get_v2_model_runner_unsupported_features``, docs/engine_graphs.md §1.4): through v0.29.0 every method but eagle /
eagle3 / mtp / dflash / dspark (n-gram, Medusa, a draft model, ...); from v0.30.0 only the methods it does not list,
at v0.33.0 suffix decoding and custom classes (``v1_only``). From 0.34 there is no V1 to send it to: such a drafter,
if the release runs it at all, runs on V2, and is priced there with a warning (``removed_v1_warning``). Releases
before 0.24 run V1 here: no shipped spec covers V2 before the first release with a K table (0.22-0.23 ran it for
Qwen3 and Llama / Mistral dense models; docs/engine_graphs.md rule 4).
"""
from __future__ import annotations

from typing import Optional

from dsdsim.specs.engine import parse_version

V2_SPEC = "vllm-mrv2"       # model runner V2 for 0.24-0.28 (its own costs: full CUDA graphs, the drafter graphed)
V1_SPEC = "vllm-0.24"       # model runner V1 with a K table, 0.24-0.28

# DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES by release (vllm/config/vllm.py@v0.24.0 ... @v0.28.0)
_LISTED = {
    (0, 24): frozenset({"Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "DeepseekV2ForCausalLM",
                        "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}),
    (0, 25): frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"}),
}
_LISTED[(0, 26)] = _LISTED[(0, 25)] | {"InklingForCausalLM", "InklingForConditionalGeneration",
                                       "LongcatFlashNgramForCausalLM"}
_LISTED[(0, 27)] = _LISTED[(0, 26)] | {"KimiK3ForConditionalGeneration"}
_LISTED[(0, 28)] = _LISTED[(0, 27)] | {"DeepseekV4ForCausalLM"}
# the drafter kinds model runner V2 runs through v0.29.0 (vllm/config/vllm.py@v0.25.0
# _get_v2_model_runner_unsupported_features); from v0.30.0 every kind but those it lists (at v0.33.0: suffix and
# custom classes, docs/engine_graphs.md §1.4)
V2_DRAFTERS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})
V2_MOST_DRAFTERS_FROM = (0, 30)
V1_ONLY_DRAFTERS = frozenset({"suffix"})
V1_REMOVED = (0, 34)        # the first release without model runner V1 (module docstring)


def v1_only(version: str, drafter_kind: Optional[str]) -> bool:
    """Whether vLLM ``version`` (0.24-0.33) runs a drafter of ``drafter_kind`` on model runner V1 only."""
    if drafter_kind is None:
        return False
    if parse_version(version)[:2] >= V2_MOST_DRAFTERS_FROM:
        return drafter_kind in V1_ONLY_DRAFTERS
    return drafter_kind not in V2_DRAFTERS


def default_runner(version: str, model, drafter_kind: Optional[str] = None, dynamic_k: bool = True) -> str:
    """'v1' or 'v2': the model runner vLLM ``version`` runs ``model`` (a ModelSpec) on by default, with a drafter of
    ``drafter_kind`` (None: no speculation) on a server that may run a K table (``dynamic_k``)."""
    v = parse_version(version)[:2]
    if v < (0, 24):
        return "v1"
    if v >= V1_REMOVED:
        return "v2"
    if v1_only(version, drafter_kind):
        return "v1"
    if v >= (0, 29):
        return "v2"
    listed = model.architecture in _LISTED.get(v, frozenset())
    if v == (0, 24):
        return "v2" if listed and not (dynamic_k and drafter_kind is not None) else "v1"
    return "v2" if listed or not (model.is_moe or model.is_hybrid) else "v1"


def runner_engine(name: str, spec, model, drafter_kind: Optional[str], runner: Optional[str] = None
                  ) -> Optional[str]:
    """The engine spec name pricing the runner vLLM's default picks (or ``runner``, v1 / v2, as
    VLLM_USE_V2_MODEL_RUNNER=0 / 1 forces it), where it differs from ``spec`` (the spec ``name`` resolved to, ``vllm``
    or ``vllm@VERSION``); None where ``spec`` already prices it (or the name is not a vLLM release). A drafter the last
    release read ran on V1 only, asked of a release without V1, is priced on V2 with a warning (``removed_v1_warning``)."""
    family, at, version = str(name).strip().partition("@")
    if family != "vllm" or spec.name != "vllm" or spec.versions is None or spec.runner is None:
        return None
    if runner not in (None, "v1", "v2"):
        from dsdsim.errors import DsdsimError

        raise DsdsimError(f"model runner {runner!r}: write v1 or v2 (vLLM's VLLM_USE_V2_MODEL_RUNNER=0 / 1)")
    version = version.strip() if at else spec.versions.first
    if runner == "v1" and parse_version(version)[:2] >= V1_REMOVED:
        from dsdsim.errors import DsdsimError

        raise DsdsimError(f"vLLM {version} has no model runner V1 (removed in v0.34.0: vllm/platforms/interface.py@v0.34.0"
                          "); drop --model-runner or give a release up to 0.33")
    warning = removed_v1_warning(version, drafter_kind)
    if warning is not None:
        import warnings

        from dsdsim.errors import ArgumentWarning

        warnings.warn(ArgumentWarning(warning), stacklevel=4)
    want = runner or default_runner(version, model, drafter_kind)
    if want == spec.runner:
        return None
    v = parse_version(version)[:2]
    if want == "v2" and (0, 24) <= v <= (0, 28):
        return V2_SPEC
    if want == "v1" and v >= (0, 24):
        return V1_SPEC
    return None


def removed_v1_warning(version: str, drafter_kind: Optional[str]) -> Optional[str]:
    """The warning for a drafter of ``drafter_kind`` on vLLM ``version`` from 0.34, where only model runner V2 is
    left and the last release read (v0.33.0) ran that kind on V1 only; None where that does not arise."""
    if drafter_kind not in V1_ONLY_DRAFTERS or parse_version(version)[:2] < V1_REMOVED:
        return None
    return (f"vLLM {version} has no model runner V1 (removed in v0.34.0), and v0.33.0 ran {drafter_kind} drafting on V1 "
            f"only (vllm/config/vllm.py@v0.33.0 _get_v2_model_runner_unsupported_features); it is priced on model "
            f"runner V2, as the release must run it if it runs it at all; -e vllm@0.33 prices it on V1")


def v1_drafter_note(engine, drafter_kind: Optional[str]) -> Optional[str]:
    """Why a vLLM release is priced with the model runner V1 spec of 0.24-0.28: its drafter runs on V1 only there
    (``v1_only``); None for any other engine or drafter."""
    if (engine is None or engine.name != "vllm" or getattr(engine, "runner", None) != "v1" or drafter_kind is None
            or drafter_kind in V2_DRAFTERS):
        return None
    v2_from = V1_REMOVED if drafter_kind in V1_ONLY_DRAFTERS else V2_MOST_DRAFTERS_FROM
    return (f"vLLM runs {drafter_kind} drafting on model runner V1 from 0.24 to {v2_from[0]}.{v2_from[1] - 1} "
            f"(vllm/config/vllm.py _get_v2_model_runner_unsupported_features; docs/engine_graphs.md), priced with "
            f"the model runner V1 spec ({engine.version_label})"
            + (f"; {V1_REMOVED[0]}.{V1_REMOVED[1]} has no V1" if v2_from == V1_REMOVED else
               f"; from {v2_from[0]}.{v2_from[1]} model runner V2 runs it: give -e vllm@{v2_from[0]}.{v2_from[1]} "
               "or later for that"))
