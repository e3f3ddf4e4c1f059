"""Per-request acceptance, sampled and seeded: how many drafts each verify step of each request accepts.

The population is ``dsdsim.policy.acceptance``'s: with a spread κ every request r draws a quality
a_r ~ Beta(m κ, (1 − m) κ), m = max_j α_j, and verifies with α_{r,j} = α_j · a_r / m; without a spread every request
has α_j. A step that drafts K tokens for request r accepts draft i (i = 1..K) with probability α_{r,i} given drafts
1..i−1 were accepted, and stops at the first rejection: the accepted count A has P(A >= i) = Π_{j<=i} α_{r,j}, so over
requests E[1 + A] = 1 + Σ_i p_i E[a^i] / m^i = ``Acceptance.tau(K)`` (spread included).

Common random numbers: request r's draws come from one stream of uniforms indexed by output position (the draft
for output token t uses u_{r,t}). Every policy that simulates the same requests reads the same uniforms for the same
tokens. No uniform decides twice: a step that starts at output position g decides with u_{r,g..g+A} (A accepted,
the last one the rejection) and the next step starts past the bonus token, at g + A + 1; the uniforms it shares
with the step before never decided anything there, and A is a stopping time of the i.i.d. stream, so the next
step's draws are independent of the past.

A draft tree (``TreeAcceptance``, a measured mean length L with a tree of ``steps`` draft passes) is drawn as the
chain of ``steps`` positions with the constant α whose τ(steps) = L (``from_mean_acceptance_length``): the mean
emitted per step is L; how the length spreads around it is the chain's, which a tree's need not match.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.policy.acceptance import Acceptance, TreeAcceptance, from_mean_acceptance_length
from dsdsim.records import frozen


@frozen
class RequestAcceptance:
    """Acceptance draws for n requests.

    alpha:       (max_k,) the population's conditional α_1..α_max_k (before each request's multiplier).
    multiplier:  (n,) a_r / m, each request's scale on every α (ones without a spread).
    uniforms:    flat uniforms in [0, 1), request r's at offsets[r] .. offsets[r] + output_len[r] + max_k − 1.
    offsets:     (n,) where each request's uniforms start.
    """

    alpha: np.ndarray
    multiplier: np.ndarray
    uniforms: np.ndarray
    offsets: np.ndarray

    @property
    def max_k(self) -> int:
        return int(self.alpha.size)

    def accepted(self, ids: np.ndarray, k: int, positions: np.ndarray) -> np.ndarray:
        """Drafts accepted (0..k) by requests ``ids`` drafting ``k`` tokens from output positions ``positions``
        (tokens each has emitted so far). Shape like ``ids``, int64; not capped at the remaining output."""
        if k <= 0 or ids.size == 0:
            return np.zeros(ids.size, dtype=np.int64)
        if k > self.max_k:
            raise DsdsimError(f"K = {k} is beyond the {self.max_k} positions the acceptance draws were made for")
        idx = (self.offsets[ids] + positions)[:, None] + np.arange(k)             # (B, k)
        ok = self.uniforms[idx] < self.alpha[:k][None, :] * self.multiplier[ids][:, None]
        return np.add.reduce(np.logical_and.accumulate(ok, axis=1), axis=1, dtype=np.int64)   # the leading run


def draw_acceptance(model: Acceptance | TreeAcceptance, output_lens: np.ndarray, max_k: int,
                    rng: np.random.Generator, tree_steps: Optional[int] = None) -> RequestAcceptance:
    """Draw every request's multiplier and uniform stream. ``output_lens`` (n,) sizes each stream; ``max_k`` is the
    largest K any policy may run. Draw order: the n multipliers (only with a spread), then the uniforms."""
    out = np.asarray(output_lens, dtype=np.int64)
    if isinstance(model, TreeAcceptance):
        if tree_steps is None or tree_steps < 1:
            raise DsdsimError("a tree's mean acceptance length needs the tree's number of draft passes to be drawn")
        model.check_tree(tree_steps)
        model = from_mean_acceptance_length(model.length, tree_steps)
        max_k = max(max_k, tree_steps)
    max_k = max(int(max_k), 1)
    alpha = model.alpha_at(max_k)
    n = out.size
    m = max(model.alpha)
    if model.spread is not None and 0.0 < m < 1.0:
        kappa = float(model.spread)
        multiplier = rng.beta(m * kappa, (1.0 - m) * kappa, size=n) / m
    else:
        multiplier = np.ones(n)
    sizes = out + max_k
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    uniforms = rng.random(int(sizes.sum()))
    return RequestAcceptance(alpha, multiplier, uniforms, offsets)
