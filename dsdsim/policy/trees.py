"""The best draft-tree shape per batch size, from a family of shapes each with its own measured acceptance length.

A draft tree (``DraftTree``: STEPS draft passes over TOPK candidates, TOKENS draft tokens verified) emits L tokens
per step on average, L measured with that tree (``TreeAcceptance``). A wider tree verifies more tokens per step: at
small batch sizes the verify pass is bound by weight reads and the extra tokens cost little, at large ones it is
bound by compute and they cost their FLOPs. EAGLE-4's harness and SGLang's launch arguments
(``--speculative-num-steps`` / ``-eagle-topk`` / ``-num-draft-tokens``) size the tree per batch size from those
costs (docs/reference/engines.md §3, §5); this is that choice, evaluated analytically.

For every batch size B and every tree i of the family (a server running that tree: K = the tree's steps) and for
plain decoding (a server without speculation),

    G_i(B) = B · L_i / T_i(B)        G_plain(B) = B / T_0(B)        tokens/s, NaN where the step does not fit,

from ``step_time_grid`` (one vectorised grid per tree). The choice per batch size is the argmax (ties go to plain
decoding, then to the earlier tree of the family). The best single tree is the tree with the highest mean over
batch sizes of G_i(B) / G_choice(B) (0 where it does not fit): the one tree a server would run everywhere.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from dsdsim.cost.step import step_time_grid
from dsdsim.defaults import (DEFAULT_BATCH_SIZES, DEFAULT_CONTEXT, DEFAULT_DRAFTER, DEFAULT_ENGINE,
                             DEFAULT_HARDWARE, DEFAULT_MODEL)
from dsdsim.errors import DsdsimError
from dsdsim.policy.acceptance import TreeAcceptance
from dsdsim.policy.goodput import goodput, inter_token_latency
from dsdsim.policy.intervals import ranged, shipped_intervals, step_interval
from dsdsim.policy.predict import (acceptance_for, check_context, check_grid_size, parse_batch_sizes,
                                   plain_setup)
from dsdsim.policy.table import ranges_from_k_per_batch
from dsdsim.records import frozen
from dsdsim.specs.deployment import Deployment
from dsdsim.specs.drafter import DraftTree, parse_draft_tree, with_tree
from dsdsim.specs.setup import Setup, resolve

PLAIN = "plain"          # the choice label of plain decoding (a server without speculation)
MAX_FAMILY = 32          # trees in one family: more is a typing mistake, not a family

_ITEM = re.compile(r"([^@]*)@(.*)")


@frozen
class TreeMember:
    """One tree of a family and the mean acceptance length measured with it (bonus token included)."""

    tree: DraftTree
    acceptance: TreeAcceptance

    @property
    def label(self) -> str:
        """``STEPS,TOPK,TOKENS``, the form ``--draft-tree`` takes."""
        return f"{self.tree.steps},{self.tree.topk},{self.tree.tokens}"

    @property
    def length(self) -> float:
        return self.acceptance.length


def parse_tree_family(text: str) -> tuple[TreeMember, ...]:
    """``STEPS,TOPK,TOKENS@AL;...`` (e.g. ``3,3,4@2.017;4,4,16@2.542``): each item a tree and the mean acceptance
    length measured with it. Each item gets a single tree's checks; a shape given twice is refused."""
    raw = str(text).strip()
    items = [p.strip() for p in raw.split(";")]
    if items and not items[-1] and len(items) > 1:          # one trailing ';' is harmless
        items = items[:-1]
    if not raw or any(not p for p in items):
        raise DsdsimError(f"tree family {raw!r} has an empty item; write STEPS,TOPK,TOKENS@AL items separated by "
                          "';', e.g. 3,3,4@2.017;4,4,16@2.542")
    members = []
    for item in items:
        m = _ITEM.fullmatch(item)
        if m is None:
            raise DsdsimError(f"tree family item {item!r} has no measured acceptance length; write "
                              "STEPS,TOPK,TOKENS@AL, e.g. 4,4,16@2.542")
        try:
            length = float(m.group(2))
        except ValueError:
            raise DsdsimError(f"tree family item {item!r}: cannot read the acceptance length {m.group(2)!r}; write "
                              "a number after '@', e.g. 4,4,16@2.542") from None
        members.append(_member(item, m.group(1), length))
    return tree_family(members)


def _member(item: str, shape, length) -> TreeMember:
    """A family member, every error naming the item."""
    try:
        tree = shape if isinstance(shape, DraftTree) else parse_draft_tree(shape)
        if not isinstance(length, (int, float)) or isinstance(length, bool) or not math.isfinite(length):
            raise DsdsimError(f"the acceptance length must be a finite number, got {length!r}")
        return TreeMember(tree, acceptance_for(TreeAcceptance(float(length)), tree))
    except DsdsimError as exc:
        raise DsdsimError(f"tree family item {item!r}: {exc}") from None


def tree_family(family) -> tuple[TreeMember, ...]:
    """The family as checked members: a text (``parse_tree_family``) or a sequence of ``TreeMember``,
    ``(DraftTree or 'S,T,N', AL)`` pairs or ``'S,T,N@AL'`` texts; at least one tree, no shape twice."""
    if isinstance(family, str):
        return parse_tree_family(family)
    members = []
    for m in family or ():
        if isinstance(m, TreeMember):
            members.append(_member(m.label, m.tree, m.length))
        elif isinstance(m, str):
            members.extend(parse_tree_family(m))
        elif isinstance(m, (tuple, list)) and len(m) == 2:
            members.append(_member(f"{m[0]}@{m[1]}" if not isinstance(m[0], DraftTree) else
                                   f"{m[0].steps},{m[0].topk},{m[0].tokens}@{m[1]}", m[0], m[1]))
        else:
            raise DsdsimError(f"tree family item {m!r}: give a tree and its acceptance length, e.g. "
                              "('4,4,16', 2.542) or '4,4,16@2.542'")
    if not members:
        raise DsdsimError("the tree family is empty; give at least one tree, e.g. 4,4,16@2.542")
    if len(members) > MAX_FAMILY:
        raise DsdsimError(f"the tree family has {len(members)} trees; the most accepted is {MAX_FAMILY}")
    seen: dict[str, TreeMember] = {}
    for m in members:
        if m.label in seen:
            raise DsdsimError(f"tree family: the tree {m.label} is given twice (@{seen[m.label].length:g} and "
                              f"@{m.length:g}); give each shape once, with the length measured with it")
        seen[m.label] = m
    return tuple(members)


@frozen
class TreeFamilyRow:
    """One evaluated batch size: the best choice (a tree ``STEPS,TOPK,TOKENS`` or ``plain``) and its figures."""

    batch: int
    choice: Optional[str]            # None where nothing fits in memory
    tau: Optional[float]             # tokens per step (the tree's measured length; 1 for plain decoding)
    step_ms: Optional[float]
    itl_ms: Optional[float]
    tokens_per_s: Optional[float]
    vs_best_single: Optional[float]  # goodput / the best single tree's at this batch size (None where it does not fit)
    vs_plain: Optional[float]        # goodput / a server without speculation's
    fits: bool
    # the interval of comparable held-out corpus errors (dsdsim.policy.intervals), as ``predict`` gives them
    step_ms_low: Optional[float] = None
    step_ms_high: Optional[float] = None
    itl_ms_low: Optional[float] = None
    itl_ms_high: Optional[float] = None
    tokens_per_s_low: Optional[float] = None
    tokens_per_s_high: Optional[float] = None


@frozen
class TreeFamilyPrediction:
    """The best tree (or plain decoding) per batch size over a family.

    choices: the family's labels with ``plain`` first; index c of ``step_s``/``feasible``/``goodput`` rows is
    choices[c] (0 plain decoding, i + 1 the i-th tree).
    """

    setup: Setup                     # the drafter without a tree; each member's drafter is with_tree(drafter, tree)
    family: tuple[TreeMember, ...]
    context: int
    batch_sizes: np.ndarray          # (B,)
    step_s: np.ndarray               # (1 + N, B): plain decoding, then each tree
    feasible: np.ndarray             # (1 + N, B)
    tau: np.ndarray                  # (1 + N,)
    goodput: np.ndarray              # (1 + N, B) tokens/s, NaN where infeasible
    choice: np.ndarray               # (B,) index into choices; -1 where nothing fits
    best_single: int                 # index into family of the best single tree
    mean_relative_goodput: np.ndarray    # (N,) each tree's mean of G_i / G_choice over batch sizes where any fits
    intervals: Optional[object] = None   # dsdsim.policy.intervals.IntervalTable (None: none shipped)

    def interval(self, batch: int):
        """The interval factors for a step at ``batch``: those of the K table's at the same setup and batch."""
        return step_interval(self.intervals, self.setup, batch, self.__dict__.setdefault("_interval_of_regime", {}))

    @property
    def choices(self) -> tuple[str, ...]:
        return (PLAIN, *(m.label for m in self.family))

    @property
    def best_single_label(self) -> str:
        return self.family[self.best_single].label

    @property
    def rows(self) -> list[TreeFamilyRow]:
        return [self.row(j) for j in range(len(self.batch_sizes))]

    def row(self, j: int) -> TreeFamilyRow:
        b = int(self.batch_sizes[j])
        c = int(self.choice[j])
        if c < 0:
            return TreeFamilyRow(b, None, None, None, None, None, None, None, False)
        g = float(self.goodput[c, j])
        g_single = self.goodput[1 + self.best_single, j]
        g_plain = self.goodput[0, j]
        step = float(self.step_s[c, j])
        step_ms, itl_ms = step * 1e3, float(inter_token_latency(self.tau[c], step)) * 1e3
        return TreeFamilyRow(
            batch=b, choice=self.choices[c], tau=float(self.tau[c]), step_ms=step_ms, itl_ms=itl_ms, tokens_per_s=g,
            vs_best_single=g / float(g_single) if np.isfinite(g_single) else None,
            vs_plain=g / float(g_plain) if np.isfinite(g_plain) else None, fits=True,
            **ranged(self.interval(b), step_ms, itl_ms, g))

    def ranges(self) -> list[tuple[int, int, str]]:
        """(first batch, last batch, choice) over consecutive batch sizes with the same choice, from batch 1 (sizes
        between evaluated ones take the choice of the evaluated size below), ending at the last size that fits."""
        ok = self.choice >= 0
        if not ok.any():
            return []
        idx = ranges_from_k_per_batch([int(b) for b in self.batch_sizes[ok]], [int(c) for c in self.choice[ok]])
        return [(s, e, self.choices[c]) for s, e, c in idx]

    def gain_over_best_single(self) -> tuple[float, float]:
        """(mean, max) of G_choice / G_best_single − 1 over batch sizes where the best single tree fits."""
        ok = self.choice >= 0
        g_c = self.goodput[self.choice[ok], np.flatnonzero(ok)]
        g_s = self.goodput[1 + self.best_single, ok]
        fine = np.isfinite(g_s)
        if not fine.any():
            return (math.nan, math.nan)
        gain = g_c[fine] / g_s[fine] - 1.0
        return (float(gain.mean()), float(gain.max()))

    def member(self, label: str) -> TreeMember:
        return {m.label: m for m in self.family}[label]


def predict_tree_family(model=DEFAULT_MODEL, hardware=DEFAULT_HARDWARE, deployment: Optional[Deployment] = None,
                        drafter=DEFAULT_DRAFTER, *, family, engine=DEFAULT_ENGINE, context: int = DEFAULT_CONTEXT,
                        batch_sizes: str | Sequence[int] | None = None) -> TreeFamilyPrediction:
    """The best tree of ``family`` (or plain decoding) per batch size, and the best single tree for the range.

    model, hardware, deployment, drafter, engine: names, paths or specs, as ``predict`` takes them (the drafter
    without a tree: each member brings its own). family: ``'3,3,4@2.017;4,4,16@2.542'`` or a sequence
    (``tree_family``). batch_sizes: ``'1-1024'``, ``'1,2,4,8'`` or a list (default 1-1024).

    Each tree is a server running that tree (one tree per server, as SGLang runs it); plain decoding is a server
    without speculation."""
    members = tree_family(family)
    setup = resolve(model, hardware, deployment, drafter, engine)
    if setup.drafter is None:
        raise DsdsimError("a tree family needs a drafter that drafts the trees (e.g. eagle3)")
    if setup.drafter.tree is not None:
        raise DsdsimError(f"the drafter already drafts one tree ({setup.drafter.tree.label}); a tree family brings "
                          "its own trees: give the drafter without a tree")
    ctx = check_context(context, setup)
    b = parse_batch_sizes(DEFAULT_BATCH_SIZES if batch_sizes is None else batch_sizes)
    check_grid_size(len(b), 1 + len(members), 1)
    tree_setups = [replace(setup, drafter=with_tree(setup.drafter, m.tree)) for m in members]
    plain = plain_setup(setup)
    step = np.empty((1 + len(members), len(b)))
    fits = np.empty(step.shape, dtype=bool)
    s0, f0 = step_time_grid(plain.model, plain.hardware, plain.deployment, None, b, [0], [ctx], setup=plain)
    step[0], fits[0] = s0[:, 0, 0], f0[:, 0, 0]
    for i, (m, s) in enumerate(zip(members, tree_setups), start=1):      # K = the tree's steps stands for the tree
        si, fi = step_time_grid(s.model, s.hardware, s.deployment, s.drafter, b, [m.tree.steps], [ctx], setup=s)
        step[i], fits[i] = si[:, 0, 0], fi[:, 0, 0]
    tau = np.array([1.0, *(m.length for m in members)])
    g = goodput(b[None, :], tau[:, None], step, fits)                                   # (1 + N, B)
    choice, mean_rel, best = _choose(g)
    return TreeFamilyPrediction(setup, members, ctx, b, step, fits, tau, g, choice, best, mean_rel,
                                shipped_intervals())


def _choose(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(choice per batch size, each tree's mean relative goodput, the best single tree) from a (1 + N, B) grid."""
    finite = np.isfinite(g)
    any_ok = finite.any(axis=0)
    choice = np.where(any_ok, np.argmax(np.where(finite, g, -np.inf), axis=0), -1)     # ties: the first row
    envelope = np.where(any_ok, np.max(np.where(finite, g, -np.inf), axis=0), np.nan)   # (B,)
    trees = g[1:, any_ok]
    relative = np.where(np.isfinite(trees), trees / envelope[any_ok], 0.0)
    mean_rel = relative.mean(axis=1) if any_ok.any() else np.zeros(g.shape[0] - 1)
    return choice.astype(int), mean_rel, int(np.argmax(mean_rel))
