"""Self-speculation: the target itself drafts with a sparse KV budget."""
from __future__ import annotations

from dsdsim.errors import DsdsimError
from dsdsim.specs.drafters._engines import sglang_refusal, trtllm_refusal
from dsdsim.specs.drafters.base import DraftPasses, DrafterInfo, DrafterKind, EngineRun


def _parse(arg: str, raw: str) -> dict:
    try:
        budget = int(arg)
    except ValueError:
        raise DsdsimError(f"self-spec needs a whole-number KV budget: write self-spec:512, got {raw!r}") from None
    if budget <= 0:
        raise DsdsimError(f"self-spec KV budget must be > 0 tokens, got {budget}")
    return {"kv_budget": budget}


INFO = DrafterInfo(
    kind=DrafterKind.self_spec, form="self-spec:KV_BUDGET", aliases=("self-speculation", "selfspec"), parse=_parse,
    label=lambda d: f"self-spec:{d.kv_budget}",
    check=lambda d: None if d.kv_budget is not None else "self-spec needs a KV budget: write self-spec:KV_BUDGET "
                                                         "(e.g. self-spec:512)",
    summary="the target with a sparse KV budget: K sequential passes", passes=DraftPasses.chain,
    acceptance="conditional alpha per draft position",
    engines={"vllm": EngineRun(refusal="vLLM has no self-speculation method; export this table in the csv or json "
                                       "format instead", source="vllm/config/speculative.py SpeculativeMethod"),
             "sglang": sglang_refusal("self-speculation"),
             "trtllm": trtllm_refusal("self-speculation")})
