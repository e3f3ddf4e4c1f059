"""A simulation's inputs resolved: names and paths looked up in the catalog, the drafter parsed, the
deployment checked against the model. The cost layer takes a Setup (specs), never names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dsdsim.defaults import DEFAULT_ENGINE
from dsdsim.errors import DsdsimError
from dsdsim.specs.catalog import engine_source, load_engine, load_hardware, load_model
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, parse_drafter
from dsdsim.specs.engine import EngineParams, EngineSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec


@dataclass(frozen=True)
class Setup:
    """Resolved inputs of a simulation (names looked up, deployment checked)."""

    model: ModelSpec
    hardware: HardwareSpec
    deployment: Deployment
    drafter: Optional[DrafterSpec]
    draft_model: Optional[ModelSpec]
    engine: Optional[EngineSpec] = None       # None: kernels only (what dsdsim.bench measures)
    engine_params: Optional[EngineParams] = None   # overrides the engine's figures (fitting); None: the spec's
    engine_source: Optional[str] = None       # the engine spec's file (engine_specs/NAME.yaml for shipped ones)

    @property
    def draft_deployment(self) -> Deployment:
        """A draft model runs on the target's GPUs with the same tp and number formats."""
        return self.deployment.for_draft_model()


def resolve(model, hardware, deployment: Optional[Deployment] = None, drafter=None, engine=DEFAULT_ENGINE,
            async_scheduling: Optional[bool] = None, engine_method: Optional[str] = None) -> Setup:
    """Accept names, paths or spec objects; check the deployment against the model. ``engine``: an engine name
    (``vllm``: its current release line; ``vllm@0.10.1``: the spec covering that version), path or spec (default
    vLLM); None for kernels only. ``async_scheduling``: force the engine's async scheduling on or off (None: the
    version's default). ``engine_method``: the engine's name for the speculative method where it differs from the
    drafter kind (what the engine's overlap rules key on, e.g. ``mtp`` for a draft model vLLM runs as MTP)."""
    m = load_model(model)
    hw = load_hardware(hardware)
    dep = (deployment or Deployment()).check(m)
    d = parse_drafter(drafter) if isinstance(drafter, str) else drafter
    draft_model = load_model(d.model) if d is not None and d.kind is DrafterKind.draft_model else None
    eng = load_engine(engine) if engine is not None else None
    params = None
    if eng is not None and (async_scheduling is not None or engine_method is not None):
        params = EngineParams.of(eng, async_scheduling=async_scheduling,
                                 drafter_kind=engine_method or (d.kind.value if d is not None else None),
                                 tree=d is not None and d.tree is not None)
    setup = Setup(m, hw, dep, d, draft_model, eng, params,
                  engine_source=engine_source(engine) if engine is not None else None)
    if draft_model is not None:
        setup.draft_deployment.check(draft_model)
        if draft_model.vocab_size != m.vocab_size:
            raise DsdsimError(f"draft model {draft_model.name} has vocabulary {draft_model.vocab_size}, "
                              f"target {m.name} has {m.vocab_size}: a draft model must share the tokenizer")
    if d is not None and d.kind is DrafterKind.mtp and not m.mtp_layers:
        raise DsdsimError(f"{m.name} has no MTP module (num_nextn_predict_layers = 0); "
                          "choose eagle3, eagle or draft-model:MODEL")
    return setup
