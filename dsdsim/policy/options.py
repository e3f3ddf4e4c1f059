"""What predict takes besides what is simulated: the K policy's options as one frozen object (no numpy here, so
the command line can declare its options from it without loading the cost model)."""
from __future__ import annotations

from dataclasses import replace
from numbers import Real
from typing import TYPE_CHECKING, Optional, Sequence

from dsdsim.defaults import DEFAULT_CONTEXT, DEFAULT_MAX_RANGES, DEFAULT_TOLERANCE
from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

if TYPE_CHECKING:
    from dsdsim.policy.acceptance import Acceptance, TreeAcceptance


@frozen
class PredictOptions:
    """How the K table is chosen: everything ``predict`` takes besides what is simulated (model, hardware,
    deployment, drafter, engine). Frozen; ``replace(options, context=8192)`` derives another.

    acceptance: an Acceptance, a parse_acceptance text (0.8; 0.8,0.7,0.6; al=2.79@3; beta:0.8:20; a file) or a
        constant alpha; None: the default per-position rates (an example, not your drafter).
    context: tokens already in each sequence's KV cache.
    batch_sizes: '1-1024', '1,2,4,8', '1-64:8' or a list; None: 1-1024.
    max_k: largest K considered (None: 8, or the drafter's limit when lower, e.g. Medusa's heads).
    fixed_k: the static K compared against (None: min(3, max_k)).
    max_distinct_k: at most this many distinct K; the subset is chosen first (``compress``), then the fewest ranges
        within it, the tolerance measured against the best K of the subset (the losses reported against K*).
    acceptance_band: +/- absolute change of every alpha; adds a robust K choice and the regret at the edges.
    tolerance: goodput share (0.005 = 0.5%, or the text '0.5%') each batch size may give up against its best K so
        that the table has fewer ranges; 0 exports the exact per-batch best (``Prediction.k_best`` either way).
    robust: choose each batch size's K by the low end of its gain interval (``dsdsim.policy.margin.ROBUST_RULE``)
        instead of the point estimate; the margins say which rule chose each range.
    max_ranges: the range budget: where the tolerance still leaves more ranges, the table of at most this many
        ranges with the most goodput (``dsdsim.policy.table.most_goodput_in_ranges``); 0 exports the exact table
        (as tolerance 0 does); None: no budget.
    batch_weights: the share of serving time at each batch size the budget weighs goodput by: a file
        (``dsdsim.policy.batch_weights.FORMS``) or a mapping {batch size: weight}; None: every evaluated size alike.
    """

    acceptance: Acceptance | TreeAcceptance | str | float | None = None
    context: int = DEFAULT_CONTEXT
    batch_sizes: str | Sequence[int] | None = None
    max_k: Optional[int] = None
    fixed_k: Optional[int] = None
    max_distinct_k: Optional[int] = None
    acceptance_band: Optional[float] = None
    tolerance: float | str = DEFAULT_TOLERANCE
    robust: bool = False
    max_ranges: Optional[int] = DEFAULT_MAX_RANGES
    batch_weights: Optional[object] = None

    def with_values(self, values: dict) -> "PredictOptions":
        """These options with some fields replaced; an unknown name is a one-line error listing the known ones."""
        unknown = sorted(set(values) - set(self.__dataclass_fields__))
        if unknown:
            from dsdsim.specs.deployment import Deployment

            if unknown[0] in Deployment.model_fields:
                raise DsdsimError(f"{unknown[0]!r} is how the model is served, not a predict option: pass "
                                  f"deployment=Deployment({unknown[0]}=...)")
            raise DsdsimError(f"unknown predict option {unknown[0]!r}; the options are "
                              f"{', '.join(self.__dataclass_fields__)}")
        return replace(self, **values) if values else self



# a bare fraction this large is almost always a percentage written without its sign (0.5 meant as 0.5%)
BARE_TOLERANCE_LIMIT = 0.1


def parse_tolerance(tolerance) -> float:
    """A goodput tolerance as a fraction in [0, 1): a number (0.005 = 0.5%) or a text, '0.005' or '0.5%'.

    A bare number of 0.1 or more is refused: it is a percentage written without its sign (write 10% for 10%)."""
    if isinstance(tolerance, str):
        raw = tolerance.strip()
        percent = raw.endswith("%")
        try:
            value = float(raw[:-1] if percent else raw)
        except ValueError:
            raise DsdsimError(f"cannot read the tolerance {tolerance!r}; write a fraction (0.005) or a percentage "
                              "(0.5%)") from None
        if percent:
            value /= 100.0
        elif value >= 1.0:
            raise DsdsimError(f"the tolerance {raw} is a fraction of goodput (0.005 = 0.5%); for {value:g}% write "
                              f"{value:g}%")
        elif value >= BARE_TOLERANCE_LIMIT:
            raise DsdsimError(f"the tolerance {raw} reads as {100 * value:g}% of goodput (a fraction: 0.005 = 0.5%); "
                              f"for {value:g}% write {value:g}%, and write {100 * value:g}% if you mean that much")
        if not 0.0 <= value < 1.0:      # NaN fails too
            raise DsdsimError(f"the tolerance must be in [0%, 100%) of goodput, got {raw}")
        return value
    if isinstance(tolerance, bool) or not isinstance(tolerance, Real):
        raise DsdsimError(f"the goodput tolerance must be a number (a fraction: 0.005 = 0.5%), got {tolerance!r}")
    t = float(tolerance)
    if not (0.0 <= t < 1.0):
        raise DsdsimError(f"the goodput tolerance must be a fraction in [0, 1) (0.005 = 0.5%), got {t:g}")
    return t


def parse_max_ranges(value) -> Optional[int]:
    """A range budget: a whole number >= 0 (0: the exact table) or None (no budget)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, Real)) or value != int(value) or value < 0:
        raise DsdsimError(f"--max-ranges is a whole number of ranges >= 0 (0: the exact table), got {value!r}")
    return int(value)
