"""Small helpers the operator-count tests share: a plain bf16 pass context, records by name, one point as a float."""
from __future__ import annotations

import numpy as np

from dsdsim.cost.layers import PassContext
from dsdsim.units import DType


def ctx(tp: int = 1) -> PassContext:
    return PassContext(tp=tp, ep=1, w_dtype=DType.bf16, expert_dtype=DType.bf16, kv_dtype=DType.bf16,
                       act_dtype=DType.bf16, tile_m=1)


def by_name(ops_list) -> dict:
    return {o.name: o for o in ops_list}


def f(x) -> float:
    return float(np.asarray(x, dtype=float).reshape(-1)[0])
