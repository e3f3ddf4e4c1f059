"""Elementwise helpers that keep a single point in plain Python floats and hand arrays to numpy.

The cost equations are written once and evaluated either over numpy arrays (a grid) or over Python floats (one
point). numpy on 0-d arrays costs about a microsecond a call, Python float arithmetic a few tens of nanoseconds;
both are IEEE double arithmetic, so +, -, *, /, min, max, ceil and round give the same bits. ``num`` turns a
0-d input into a float; the helpers below take floats or arrays and return the same kind.
"""
from __future__ import annotations

import math

import numpy as np

_SCALARS = (float, int, bool, np.floating, np.integer, np.bool_)


def num(x):
    """``x`` as a float when it is one number (a Python or numpy scalar, a 0-d array), else a float array."""
    if type(x) is float:
        return x
    if isinstance(x, _SCALARS):
        return float(x)
    a = np.asarray(x, dtype=float)
    return float(a) if a.ndim == 0 else a


def is_scalar(x) -> bool:
    return type(x) is float or isinstance(x, _SCALARS)


def where(cond, a, b):
    """np.where, or a plain choice when ``cond`` is one truth value (the result then a float)."""
    if isinstance(cond, (bool, np.bool_)):
        return num(a) if cond else num(b)
    return np.where(cond, a, b)


def maximum(a, b):
    if type(a) is float and type(b) is float:
        return a if a >= b or a != a else b
    return np.maximum(a, b)


def minimum(a, b):
    if type(a) is float and type(b) is float:
        return a if a <= b or a != a else b
    return np.minimum(a, b)


def ceil(x):
    return float(math.ceil(x)) if type(x) is float else np.ceil(x)


def rint(x):
    """np.round(x) (halves to even), as Python's round does."""
    return float(round(x)) if type(x) is float else np.round(x)


def as_float(x):
    """A truth value or array of them as 0.0/1.0."""
    return float(x) if isinstance(x, (bool, np.bool_)) else np.asarray(x, dtype=float)


def isfinite(x):
    return math.isfinite(x) if type(x) is float else np.isfinite(x)
