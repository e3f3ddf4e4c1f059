"""Fuzz the Hugging Face config parser with mutated real configs.

Contract (dsdsim.specs.hf_config): ``model_from_hf_config(config, name)`` returns a ModelSpec or raises
DsdsimError (SpecError) with one line. Any other exception (KeyError, TypeError, AttributeError, ...) is a crash
a user would see as a traceback. Each shipped model_specs/*.json is mutated with a seeded RNG: a key deleted, a
value set to None / -1 / 0 / "x" / [] / {} / huge / a float / a bool, a random key added, model_type changed,
garbage nested into a dict value. A few hundred cases in all, fully reproducible.

Crashes it found (NaN/Infinity numbers, absurd layer counts, list fields holding scalars, an unchecked
sliding_window, a pydantic ValidationError escaping) were fixed in hf_config.py and are pinned below as
regression tests. Pin a new crash as a minimal reproducer marked ``xfail(strict=True)`` until it is fixed.
"""
from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest

from dsdsim.errors import DsdsimError
from dsdsim.specs.hf_config import SUPPORTED_FAMILIES, model_from_hf_config
from dsdsim.specs.model import ModelSpec

SPECS = sorted((Path(__file__).resolve().parent.parent / "model_specs").glob("*.json"))
SEED = 20250107
CASES_PER_MODEL = 12          # x 28 shipped configs x 2 mutation depths ~ 670 cases

GARBAGE_VALUES = [None, -1, 0, "x", [], {}, 10**18, 2.5, 0.5, True, False, -(10**12), float("nan"),
                  float("inf"), [1, "a", None], {"nested": {"deeper": [None]}}, "", 1e308]


def _load(path: Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("_dsdsim", None)
    return data


def _dict_paths(cfg: dict) -> list[tuple[dict, str]]:
    """(container, key) for every key at the top level and inside nested dicts (text_config, rope_scaling...)."""
    out = []
    for k, v in cfg.items():
        out.append((cfg, k))
        if isinstance(v, dict):
            out += _dict_paths(v)
    return out


def _mutate(cfg: dict, rng: random.Random) -> tuple[dict, str]:
    cfg = copy.deepcopy(cfg)
    op = rng.choice(["delete", "set", "set", "set", "add", "model_type", "nest", "list_shrink"])
    paths = _dict_paths(cfg)
    container, key = rng.choice(paths)
    if op == "delete":
        del container[key]
        return cfg, f"delete {key}"
    if op == "set":
        value = rng.choice(GARBAGE_VALUES)
        container[key] = copy.deepcopy(value)
        return cfg, f"{key} = {value!r}"
    if op == "add":
        name = rng.choice(["linear_num_key_heads", "layer_types", "sliding_window", "sliding_window_pattern",
                           "attention_chunk_size", "no_rope_layers", "moe_layers", "quantization_config",
                           "text_config", "head_dim", "num_nextn_predict_layers", "first_k_dense_replace",
                           "mlp_only_layers", "decoder_sparse_step", "moe_layer_freq", "use_sliding_window",
                           "q_lora_rank", "zzz_random_key"])
        value = copy.deepcopy(rng.choice(GARBAGE_VALUES + [3, 7, ["sliding_attention"], ["weird_layer"],
                                                           {"quant_method": "fp8"}, {"quant_method": None}]))
        container[name] = value
        return cfg, f"add {name} = {value!r}"
    if op == "model_type":
        value = rng.choice(list(SUPPORTED_FAMILIES) + ["qwen3_next", "mamba", "", 7, None, ["llama"]])
        cfg["model_type"] = value
        return cfg, f"model_type = {value!r}"
    if op == "nest":
        container[key] = {"garbage": copy.deepcopy(container[key]), "more": [None, {"x": -1}]}
        return cfg, f"nest {key}"
    # list_shrink: chop a list value (layer_types, no_rope_layers, mlp_only_layers...) or turn a scalar into a list
    v = container[key]
    container[key] = v[: len(v) // 2] if isinstance(v, list) else [v]
    return cfg, f"list {key}"


def _cases():
    rng = random.Random(SEED)
    cases = []
    for path in SPECS:
        base = _load(path)
        for i in range(CASES_PER_MODEL):
            cfg, what = _mutate(base, rng)
            cases.append(pytest.param(cfg, f"{path.stem}: {what}", id=f"{path.stem}-{i}"))
            cfg2, what2 = _mutate(cfg, rng)                     # two mutations stacked
            cases.append(pytest.param(cfg2, f"{path.stem}: {what}; {what2}", id=f"{path.stem}-{i}-2"))
    return cases


# Crashes this fuzz found, since fixed in hf_config.py: kept as plain regression tests.
FIXED_CRASHES = [
    ("llama-3.1-8b", {"vocab_size": float("nan")}),          # _Cfg.int: int(NaN) -> ValueError
    ("llama-3.1-8b", {"hidden_size": float("inf")}),         # _Cfg.int: int(inf) -> OverflowError
    ("deepseek-v3", {"n_shared_experts": float("inf")}),
    ("mixtral-8x7b", {"num_experts_per_tok": 9}),            # FFN ValidationError escaped _build_standard
    ("gpt-oss-120b", {"num_experts_per_tok": 10**6}),
    ("llama-3.1-8b", {"num_hidden_layers": 10**18}),         # no bound: MemoryError building 1e18 layers
    ("llama-3.1-8b", {"num_hidden_layers": 1e308}),          # OverflowError
    ("qwen3-30b-a3b", {"mlp_only_layers": 2}),               # list fields not type-checked -> TypeError
    ("qwen3-30b-a3b", {"mlp_only_layers": 0.5}),
    ("command-a", {"sliding_window": "x"}),                  # int(window) unchecked -> ValueError
    ("command-a", {"sliding_window": {"quant_method": None}}),   # -> TypeError
    ("command-a", {"sliding_window": float("nan")}),
]


@pytest.mark.parametrize("model, changes", FIXED_CRASHES,
                         ids=[f"{m}-{k}={v!r}"[:60] for m, c in FIXED_CRASHES for k, v in c.items()])
def test_fixed_crash_stays_fixed(model, changes):
    with pytest.raises(DsdsimError):
        model_from_hf_config({**_load(SPECS[0].parent / f"{model}.json"), **changes}, "fuzz")


def test_llama4_list_fields_checked():
    cfg = _load(SPECS[0].parent / "llama-4-scout.json")
    for key, value in (("no_rope_layers", True), ("no_rope_layers", 2.5), ("moe_layers", 3)):
        bad = copy.deepcopy(cfg)
        (bad["text_config"] if "text_config" in bad else bad)[key] = value
        with pytest.raises(DsdsimError):
            model_from_hf_config(bad, "fuzz")


def _check(cfg, what: str) -> None:
    try:
        spec = model_from_hf_config(cfg, "fuzz")
    except DsdsimError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg, f"{what}: error is not one non-empty line: {msg!r}"
        return
    except Exception as exc:  # noqa: BLE001 - the point of the fuzz
        pytest.fail(f"{what}: crashed with {type(exc).__name__}: {exc}")
    assert isinstance(spec, ModelSpec)


def test_fuzz_inputs_exist():
    assert len(SPECS) >= 20


def test_unmutated_configs_parse():
    for path in SPECS:
        assert isinstance(model_from_hf_config(_load(path), path.stem), ModelSpec)


@pytest.mark.parametrize("cfg, what", _cases())
def test_mutated_config_parses_or_raises_spec_error(cfg, what):
    _check(cfg, what)


@pytest.mark.parametrize("obj", [None, [], "config", 3, [{"model_type": "llama"}], {"model_type": None},
                                 {"model_type": "llama"}, {"model_type": "llama", "num_hidden_layers": 0}])
def test_not_a_config(obj):
    _check(obj, repr(obj))
