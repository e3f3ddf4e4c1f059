"""dsdsim: analytical roofline simulator and K-policy designer for (dynamic) speculative decoding.

Public API (imported lazily so ``import dsdsim`` stays fast and never pulls in torch or matplotlib):

    load_model, load_hardware, model_names, hardware_names   specs and the catalog
    Deployment, parse_drafter, DrafterSpec                   how the model is served and drafted
    resolve, Setup                                           names looked up once (engine@version too), reused per call
    simulate_step, step_time_grid                            the cost model (vectorised over B, K, c)
    load_engine, engine_names                                engine specs by version range
    parse_acceptance, Acceptance                             acceptance models
    predict, PredictOptions                                  the K* table per batch size, and its options
    predict_tree_family                                      the best draft tree of a family per batch size
    plan                                                     capacity planning
    simulate                                                 the serving simulation (dsdsim simulate; .to_json())
    accuracy, AccuracyReport                                 predictions against the public measurement corpus
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "dsdsim.specs.catalog",
    "load_hardware": "dsdsim.specs.catalog",
    "model_names": "dsdsim.specs.catalog",
    "hardware_names": "dsdsim.specs.catalog",
    "ModelSpec": "dsdsim.specs.model",
    "HardwareSpec": "dsdsim.specs.hardware",
    "Deployment": "dsdsim.specs.deployment",
    "DrafterSpec": "dsdsim.specs.drafter",
    "parse_drafter": "dsdsim.specs.drafter",
    "resolve": "dsdsim.specs.setup",
    "Setup": "dsdsim.specs.setup",
    "load_engine": "dsdsim.specs.catalog",
    "engine_names": "dsdsim.specs.catalog",
    "simulate_step": "dsdsim.cost.step",
    "step_time_grid": "dsdsim.cost.step",
    "Acceptance": "dsdsim.policy.acceptance",
    "parse_acceptance": "dsdsim.policy.acceptance_input",
    "predict": "dsdsim.policy.predict",
    "PredictOptions": "dsdsim.policy.options",
    "Prediction": "dsdsim.policy.predict",
    "predict_tree_family": "dsdsim.policy.trees",
    "plan": "dsdsim.plan",
    "simulate": "dsdsim.simulation",
    "accuracy": "dsdsim.corpus.evaluate",
    "AccuracyReport": "dsdsim.corpus.evaluate",
    "DsdsimError": "dsdsim.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dsdsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))      # a name already loaded is in both: listed once
