"""Row tables: a list of operators' seconds at every row count, replayed from a CUDA graph and launched eagerly.

Most operators of a pass are sized by one row count: the tokens of a GEMM, a norm or a collective, the rows that
reach the lm_head. Their seconds at every count 0..n-1 are worked out once as numpy arrays (the same equations as
at one point: ``dsdsim.cost.timing.seconds_at_two_gaps``), so a grid gathers them with one index per size and a point
or a serving step reads one float. A table grows by doubling when a larger count is asked for.

``RowTable`` is the primitive; ``RowTables`` keeps the tables of one step program (``dsdsim.cost.step.StepPlan``)
by the operators they sum, each operator's own table shared by the sums it is part of.
"""
from __future__ import annotations

from array import array
from typing import Callable, Optional

import numpy as np

from dsdsim.cost.timing import launch_overhead, seconds_at_two_gaps

_BLOCK = 1024                 # tables are built over whole blocks of this many rows


def table_size(top: int, held: int = 0) -> int:
    """Rows a table is built over to hold row count ``top``: whole blocks of 1024 past it, and twice the rows it held
    when it has to grow (a sweep of rising sizes rebuilds it a few times, not at every block)."""
    need = max(_BLOCK, -(-(top + 1) // _BLOCK) * _BLOCK)
    return max(need, 2 * held)


class RowTable:
    """sum(count x seconds of one occurrence) of ``members`` ((Timed, count) pairs: ``dsdsim.cost.step.Timed``) at
    every row count 0..n-1; ``values(top)[0]`` replayed from a CUDA graph, ``[1]`` launched eagerly.

    ``demand_at(t, rows)``: an operator's demand over an array of row counts (default ``t.demand(rows)``, an
    operator sized by one row count). ``parts``: the table is this sum of other tables (``RowTables`` sums each
    operator's own table) instead of evaluating its members. ``empty_free``: no rows, no launch (row 0 costs 0 s)."""

    __slots__ = ("members", "_hw", "_demand_at", "_parts", "_empty_free", "_values", "_floats")

    def __init__(self, hw, members: list[tuple[object, float]], demand_at: Optional[Callable] = None,
                 parts: Optional[list[tuple["RowTable", float]]] = None, empty_free: bool = False):
        self.members, self._hw, self._demand_at, self._parts = members, hw, demand_at, parts
        self._empty_free = empty_free
        self._values = np.zeros((2, 0))
        self._floats: Optional[tuple[array, array]] = None

    @property
    def rows(self) -> int:
        """Row counts the table holds (0..rows-1)."""
        return self._values.shape[1]

    def values(self, top: int) -> np.ndarray:
        """(2, n) with n > ``top``: graphed and eager seconds at every row count."""
        if self._values.shape[1] <= top:
            self._values = self._build(table_size(top, self._values.shape[1]))
            self._floats = None
        return self._values

    def floats(self, top: int) -> tuple[array, array]:
        """The same as arrays of Python floats (graphed, eager), holding ``top``: what a point reads by index."""
        values = self.values(top)
        if self._floats is None:
            self._floats = (array("d", values[0].tobytes()), array("d", values[1].tobytes()))
        return self._floats

    def seconds(self, rows: int, graphed: bool) -> float:
        """One row count's seconds."""
        f = self._floats
        if f is None or rows >= len(f[0]):
            f = self.floats(rows)
        return f[0 if graphed else 1][rows]

    def gather(self, index: np.ndarray, graphed) -> np.ndarray:
        """The seconds at an array of row counts; ``graphed`` True, False or an array (the gap chosen per entry)."""
        table = self.values(int(index.max()))
        if graphed is True:
            return table[0][index]
        if graphed is False:
            return table[1][index]
        return np.where(graphed, table[0][index], table[1][index])

    def _build(self, n: int) -> np.ndarray:
        if self._parts is not None:
            out = None
            for table, c in self._parts:
                part = table.values(n - 1)[:, :n] * c
                out = part if out is None else out + part
            return out
        rows = np.arange(n, dtype=float)
        gaps = launch_overhead(self._hw, True), launch_overhead(self._hw, False)
        out = None
        for t, c in self.members:
            demand = t.demand(rows) if self._demand_at is None else self._demand_at(t, rows)
            both = seconds_at_two_gaps(t.rates, demand, *gaps)
            part = np.stack([np.broadcast_to(s, rows.shape) for s in both])
            part = part if c == 1.0 else part * c
            out = part if out is None else out + part
        if out is None:
            out = np.zeros((2, n))
        if self._empty_free:
            out[:, 0] = 0.0
        return out


class RowTables:
    """The row tables of one step program: one per list of (operator, count) asked for, each operator's own table
    (count 1) kept once and shared by the sums that hold it."""

    def __init__(self):
        self._tables: dict[tuple, RowTable] = {}

    @staticmethod
    def key(members: list[tuple[object, float]]) -> tuple:
        return tuple((id(t), c) for t, c in members)

    def of(self, members: list[tuple[object, float]], hw) -> RowTable:
        """The table of sum(count x operator) over ``members``."""
        key = self.key(members)
        table = self._tables.get(key)
        if table is None:
            if len(members) == 1 and members[0][1] == 1.0:
                table = RowTable(hw, members)
            else:
                table = RowTable(hw, members, parts=[(self.of([(t, 1.0)], hw), c) for t, c in members])
            self._tables[key] = table
        return table
