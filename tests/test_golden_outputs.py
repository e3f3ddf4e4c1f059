"""Refactors keep outputs identical: `predict`/`explain --format json` key for key (floats to 1e-12), and the weight and memory
figures of several deployments exactly, against files captured before the typed views and the single weight
description were introduced (tests/golden/)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
CLI_CASES = json.loads((GOLDEN / "cli_json.json").read_text())


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_json_contract_is_unchanged(cli, name):
    case = CLI_CASES[name]
    code, out, err = cli(*case["argv"])
    assert code == 0, err
    _same_json(json.loads(out), json.loads(case["stdout"]), name)


def _same_json(got, want, where: str) -> None:
    """The same JSON: keys, order, strings and flags exactly; floats to 1e-12 relative (a reordered sum may move
    the last digit)."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            _same_json(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same_json(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300), where
    else:
        assert got == want and type(got) is type(want), where


def test_weight_and_memory_figures_are_unchanged():
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from _weights_snapshot import snapshot

    want = json.loads((GOLDEN / "weights.json").read_text())
    got = json.loads(json.dumps(snapshot(), sort_keys=True))
    assert got.keys() == want.keys()
    for key in want:
        for field, value in want[key].items():
            assert _same(got[key][field], value), (key, field, got[key][field], value)


def _same(a, b) -> bool:
    """Equal up to float rounding (1e-12 relative): a re-associated sum may change the last bit."""
    if isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
    return a == b
