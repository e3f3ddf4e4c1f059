"""Refactors keep outputs identical: `predict`/`explain --format json` byte for byte, and the weight and memory
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
    assert out == case["stdout"]


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
