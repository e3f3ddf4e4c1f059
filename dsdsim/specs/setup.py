"""A simulation's inputs resolved: names and paths looked up in the catalog, the drafter parsed, the
deployment checked against the model. The cost layer takes a Setup (specs), never names.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Optional

from dsdsim.defaults import DEFAULT_DRAFTER, DEFAULT_ENGINE, DEFAULT_HARDWARE, DEFAULT_MODEL
from dsdsim.errors import ArgumentWarning, DsdsimError
from dsdsim.records import frozen
from dsdsim.specs.catalog import (catalog_state, engine_and_file, engine_source, hardware_and_file, is_catalog_name,
                                   model_and_file, stamped, unchanged)
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DrafterKind, DrafterSpec, parse_drafter
from dsdsim.specs.drafters.mtp import no_mtp_module
from dsdsim.specs.engine import EngineParams, EngineSpec
from dsdsim.specs.hardware import HardwareSpec
from dsdsim.specs.model import ModelSpec


@frozen
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

    def __getstate__(self) -> dict:
        """Its fields only: what the cost layer keeps on a Setup (its step program, under names starting with an
        underscore) is rebuilt where it is unpickled (a worker process of a sweep)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    @property
    def draft_deployment(self) -> Deployment:
        """A draft model runs on the target's GPUs with the same tp and number formats."""
        return self.deployment.for_draft_model()


def resolve(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment: Optional[Deployment] = None,
            drafter=DEFAULT_DRAFTER, engine=DEFAULT_ENGINE, async_scheduling: Optional[bool] = None,
            engine_method: Optional[str] = None, model_runner: Optional[str] = None) -> Setup:
    """Accept names, paths or spec objects; check the deployment against the model. The defaults are the CLI's
    (``dsdsim predict``); ``drafter=None`` (or ``"none"``, the CLI's ``-d none``) for a server without one.
    ``deployment``: a Deployment, or a dict of its fields (``{"tp": 2}``). ``engine``: an engine name
    (``vllm``: its current release line; ``vllm@0.10.1``: the spec covering that version), path or spec (default
    vLLM); None for kernels only. ``async_scheduling``: force the engine's async scheduling on or off (None: the
    version's default). ``engine_method``: the engine's name for the speculative method where it differs from the
    drafter kind (what the engine's overlap rules key on, e.g. ``mtp`` for a draft model vLLM runs as MTP).

    Remembered: inputs that are catalog names or specs (equal by value: a ``Deployment(tp=1)`` built anew finds
    the Setup an equal one resolved) give the same Setup while the catalog (``catalog_state``) and the files it read
    are unchanged; paths are resolved each time."""
    deployment = as_deployment(deployment)
    if isinstance(drafter, str) and drafter.strip().lower() in ("", "none"):
        drafter = None
    args = (model, hardware, deployment, drafter, engine, async_scheduling, engine_method, model_runner)
    key = (*args, catalog_state())
    try:
        hit = _resolved.get(key)
    except TypeError:          # an input that does not hash: resolved each time
        return _resolve(*args)[0]
    if hit is not None and unchanged(hit[1]):
        return hit[0]
    setup, files = _resolve(*args)
    if _by_name_only(model, hardware, drafter, engine):
        if len(_resolved) >= _RESOLVED_MAX:
            _resolved.clear()
        _resolved[key] = (setup, stamped(files))
    return setup


def as_deployment(deployment) -> Optional[Deployment]:
    """A Deployment from a Deployment, None (the default one) or a dict of its fields; anything else, or a field
    out of range, is one DsdsimError naming it."""
    if deployment is None or isinstance(deployment, Deployment):
        return deployment
    if isinstance(deployment, dict):
        return Deployment(**deployment)         # a bad field is one line (Deployment.__init__)
    raise DsdsimError(f"deployment must be a dsdsim.Deployment or a dict of its fields (e.g. {{'tp': 2}}), got "
                      f"{type(deployment).__name__}")


_resolved: dict[tuple, tuple] = {}     # resolve's inputs and catalog state -> (Setup, the files read, stamped)
_RESOLVED_MAX = 512


def _by_name_only(model, hardware, drafter, engine) -> bool:
    """Whether every input given as text is a catalog name (paths follow the working folder)."""
    if isinstance(drafter, str):
        _, _, arg = drafter.partition(":")
        if parse_drafter(drafter).info.loads_model and arg.strip() and not is_catalog_name("model_specs",
                                                                                           arg.strip()):
            return False
    return ((not isinstance(model, (str, Path)) or is_catalog_name("model_specs", str(model)))
            and (not isinstance(hardware, (str, Path)) or is_catalog_name("hw_specs", str(hardware)))
            and (not isinstance(engine, (str, Path)) or is_catalog_name("engine_specs", str(engine).strip())))


def _resolve(model, hardware, deployment, drafter, engine, async_scheduling, engine_method, model_runner=None
             ) -> tuple[Setup, list]:
    """The Setup, and the spec files it read."""
    files = []
    m, path = (model, None) if isinstance(model, ModelSpec) else model_and_file(model)
    files.append(path)
    hw, path = (hardware, None) if isinstance(hardware, HardwareSpec) else hardware_and_file(hardware)
    files.append(path)
    dep = check_deployment(deployment or Deployment(), m)
    d = parse_drafter(drafter) if isinstance(drafter, str) else drafter
    draft_model = None
    if d is not None and d.info.loads_model:
        draft_model, path = model_and_file(d.model)
        files.append(path)
    eng = None
    if engine is not None:
        eng, path = (engine, None) if isinstance(engine, EngineSpec) else engine_and_file(engine)
        if not isinstance(engine, EngineSpec):
            from dsdsim.specs.runners import runner_engine

            alt = runner_engine(str(engine), eng, m, engine_method or (d.kind.value if d is not None else None),
                                model_runner)
            if alt is not None:          # the release runs this model on its other model runner by default
                engine = alt
                eng, path = engine_and_file(alt)
        files.append(path)
    if eng is not None and eng.calibration is not None:
        hw = calibrated_hardware(hw, eng)
    if eng is not None and dep.cuda_graphs and eng.cuda_graphs is not None \
            and eng.cuda_graphs.off_by_default(eng.release):
        dep = dep.model_copy(update={"cuda_graphs": False})
        _warn_graphs_off(eng)
    if eng is not None and eng.value_projection is not None and eng.value_projection.value:
        m = m.with_value_projections()      # e.g. vLLM's Gemma-4: the k_proj loaded again as a v_proj
    params = None
    if eng is not None and (async_scheduling is not None or engine_method is not None):
        params = EngineParams.of(eng, async_scheduling=async_scheduling,
                                 drafter_kind=engine_method or (d.kind.value if d is not None else None),
                                 tree=d is not None and d.tree is not None)
    d = _check_drafter_against_target(d, draft_model, m)
    setup = Setup(m, hw, dep, d, draft_model, eng, params,
                  engine_source=engine_source(engine) if engine is not None else None)
    if draft_model is not None:
        check_deployment(setup.draft_deployment, draft_model)
        if draft_model.vocab_size != m.vocab_size:
            raise DsdsimError(f"draft model {draft_model.name} has vocabulary {draft_model.vocab_size}, "
                              f"target {m.name} has {m.vocab_size}: a draft model must share the tokenizer")
    if eng is not None and eng.calibration is not None:
        _warn_calibrated_elsewhere(eng, m, hw, dep)
    taps = getattr(d, "taps", None) if d is not None else None
    if taps is not None and taps > m.num_layers:
        raise DsdsimError(f"{d.label} taps {taps} target layers, but {m.name} has {m.num_layers}: give at most "
                          f"{m.num_layers} taps ({d.kind.value}:LAYERS,TAPS,...)")
    if d is not None and d.kind is DrafterKind.mtp and not m.mtp_layers:
        raise DsdsimError(no_mtp_module(m.name))
    return setup, [f for f in files if f is not None]


def _warn_graphs_off(eng: EngineSpec) -> None:
    """A release that ran without CUDA graphs unless configured is priced eager, and says so (one line)."""
    g = eng.cuda_graphs
    warnings.warn(ArgumentWarning(
        f"{eng.name} {eng.release} ran without CUDA graphs unless configured (on by default from {g.default_from}: "
        f"the engine spec's cuda_graphs.default_from); priced eager. For a server started with CUDA graphs give "
        f"--engine {eng.name}@{g.default_from} (the {eng.name} spec prices its releases alike otherwise)"),
        stacklevel=3)


def _check_drafter_against_target(d, draft_model, m: ModelSpec):
    """The drafter, checked against its target: one that cannot serve it is an error, one that cannot pay a warning
    (README "Arguments checked against each other"). EAGLE-3's default draft vocabulary (32000, the SafeAILab heads')
    is the target's own where the target has fewer tokens; one given larger than the target's is an error."""
    if d is None:
        return d
    if (d.kind is DrafterKind.eagle3 and d.draft_vocab_size > m.vocab_size
            and "draft_vocab_size" not in d.model_fields_set):
        d = d.model_copy(update={"draft_vocab_size": m.vocab_size})
    if d.kind is DrafterKind.eagle3 and d.draft_vocab_size > m.vocab_size:
        raise DsdsimError(f"{d.label}: a draft vocabulary of {d.draft_vocab_size} is larger than {m.name}'s "
                          f"{m.vocab_size}; EAGLE-3's draft vocabulary maps into the target's (d2t), so give at most "
                          f"{m.vocab_size} (eagle3:{min(32000, m.vocab_size)})")
    if draft_model is not None and draft_model.params_total >= m.params_total:
        warnings.warn(ArgumentWarning(
            f"draft model {draft_model.name} ({draft_model.params_total / 1e9:.1f} B parameters) is not smaller than "
            f"the target {m.name} ({m.params_total / 1e9:.1f} B): each draft pass costs about a target pass, so "
            "speculation cannot pay"), stacklevel=4)
    return d


_warned_calibrations: set = set()


def _warn_calibrated_elsewhere(eng: EngineSpec, m: ModelSpec, hw: HardwareSpec, dep: Deployment) -> None:
    """A calibrated engine spec used for another model, GPU or tp than it was fitted on: a warning, once per
    combination (its factors were fitted on that deployment's points)."""
    cal = eng.calibration
    base_hw = hw.name
    got = (m.name, base_hw, dep.tp)
    want = (cal.model, cal.hardware, cal.tp)
    if got == want or (eng.name, got) in _warned_calibrations:
        return
    _warned_calibrations.add((eng.name, got))
    differ = [f"{what} {g} (calibrated on {w})" for what, g, w in zip(("model", "GPU", "tp"), got, want) if g != w]
    warnings.warn(ArgumentWarning(
        f"engine spec {eng.name} was calibrated on {cal.model} on {cal.hardware} tp {cal.tp}; used here with "
        f"{', '.join(differ)}: its fitted factors may not carry over"), stacklevel=4)


@functools.lru_cache(maxsize=64)
def calibrated_hardware(hw: HardwareSpec, engine: EngineSpec) -> HardwareSpec:
    """``hw`` with the factors of ``engine``'s calibration (``dsdsim calibrate --measurements``) applied to its
    bandwidth fractions, compute fractions and launch gaps, each changed figure naming the calibrated spec."""
    cal = engine.calibration
    return hw.scaled(cal.bandwidth_scale, cal.compute_scale, cal.launch_scale,
                     source=f"calibrated engine spec {engine.name} ({cal.source})")


@functools.lru_cache(maxsize=256)
def check_deployment(dep: Deployment, model: ModelSpec) -> Deployment:
    """``dep.check(model)``, once per pair of values (specs hash by value)."""
    return dep.check(model)
