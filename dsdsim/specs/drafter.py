"""Drafter specs: what proposes the K draft tokens, and what it costs beyond FLOPs and bytes.

Command-line forms: one per kind in ``dsdsim.specs.drafters`` (the registry: each kind's parameters, limits,
passes, acceptance convention and engine names), e.g. ``eagle3``, ``draft-model:MODEL``, ``dflash:5,5,16``.
"""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

import functools
from typing import Optional

from pydantic import Field, model_validator

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.specs.drafters.base import MAX_K, DrafterKind
from dsdsim.specs.model import Layer, Linear

class DraftTree(FrozenSpec):
    """A draft tree as SGLang / TensorRT-LLM run EAGLE-2/3 (--speculative-num-steps, -eagle-topk,
    -num-draft-tokens): ``steps`` draft passes over ``topk`` candidates per sequence (the first over the tokens
    accepted last step), and a verify pass over ``tokens`` + 1 tokens per sequence under a tree mask.

    ``tokens`` counts draft tokens; the verify pass adds the root (the last accepted token), so SGLang's
    ``--speculative-num-draft-tokens``, which counts the root, is ``tokens + 1``. The tree's tokens are picked from
    the candidates the draft passes produced: ``topk`` from the first pass and ``topk``² from each later one (every
    kept node expands into ``topk`` children, ``topk`` of them are kept), so ``tokens`` ≤ topk + (steps − 1)·topk².
    """

    steps: int = Field(ge=1, le=64)
    topk: int = Field(ge=1, le=64)
    tokens: int = Field(ge=1, le=1024)

    @model_validator(mode="after")
    def _check(self) -> "DraftTree":
        if self.tokens > self.candidates:
            raise ValueError(f"a tree of {self.steps} steps over top-{self.topk} candidates holds at most "
                             f"{self.candidates} draft tokens, got {self.tokens}")
        return self

    @property
    def candidates(self) -> int:
        """Draft tokens the passes produce to choose the tree from: topk + (steps − 1)·topk²."""
        return self.topk + (self.steps - 1) * self.topk ** 2

    @property
    def label(self) -> str:
        return f"tree {self.steps},{self.topk},{self.tokens}"


def parse_draft_tree(text: str) -> DraftTree:
    """'STEPS,TOPK,TOKENS' (e.g. '4,4,16'): draft passes, candidates kept per pass, draft tokens verified."""
    raw = str(text).strip()
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise DsdsimError(f"cannot read draft tree {raw!r}; write STEPS,TOPK,TOKENS as three whole numbers, e.g. 4,4,16")
    steps, topk, tokens = (int(p) for p in parts)
    for what, value, hi in (("steps", steps, 64), ("topk", topk, 64), ("tokens", tokens, 1024)):
        if not 1 <= value <= hi:
            raise DsdsimError(f"draft tree {raw!r}: {what} must be in 1..{hi}, got {value}")
    tree = DraftTree.model_construct(steps=steps, topk=topk, tokens=tokens)
    if tokens > tree.candidates:
        raise DsdsimError(f"draft tree {raw!r}: {steps} steps over top-{topk} candidates produce at most "
                          f"{tree.candidates} draft tokens (topk + (steps - 1) * topk^2), got {tokens}")
    return DraftTree(steps=steps, topk=topk, tokens=tokens)


class DrafterSpec(FrozenSpec):
    """A drafter and its fixed costs. Defaults are stated assumptions, overridable per field."""

    kind: DrafterKind
    model: Optional[str] = None               # draft-model: the draft model's name or config path
    draft_vocab_size: int = Field(default=32000, gt=0)   # eagle3 (SafeAILab EAGLE-3 heads use 32000)
    kv_budget: Optional[int] = Field(default=None, gt=0)  # self-spec: KV tokens the draft attends to
    intermediate_size: Optional[int] = Field(default=None, gt=0)  # eagle/eagle3/dflash layer FFN width override
    layers: Optional[int] = Field(default=None, gt=0)     # dflash, dspark: draft decoder layers
    taps: Optional[int] = Field(default=None, gt=0)       # dflash, dspark: target layers whose hidden states feed fc
    markov_rank: Optional[int] = Field(default=None, gt=0)  # dspark: the Markov head's rank r (W1: V x r, W2: r x V)
    max_k: int = Field(default=MAX_K, ge=1, le=64)
    tree: Optional[DraftTree] = None          # None: a chain of K tokens; else any K >= 1 runs this tree
    # Fixed per-step cost of handing over between draft and verify (input preparation, the extra sync).
    # Assumption, not a measurement: about 25 kernel-launch gaps of a graphed engine; calibrate replaces it.
    handoff_s: float = Field(default=50e-6, ge=0)
    # n-gram lookup on the host (assumption; vLLM runs a numba KMP over the context per request).
    host_s_per_step: float = Field(default=20e-6, ge=0)
    host_s_per_sequence: float = Field(default=2e-6, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "DrafterSpec":
        check = self.info.check
        missing = check(self) if check is not None else None
        if missing:
            raise ValueError(missing)
        return self

    @property
    def info(self):
        """This kind's entry in the registry (``dsdsim.specs.drafters.DrafterInfo``)."""
        from dsdsim.specs.drafters import drafter_info

        return drafter_info(self.kind)

    @property
    def label(self) -> str:
        return self.info.label_of(self)


def _tree_kinds() -> tuple:
    from dsdsim.specs.drafters import REGISTRY

    return tuple(info.kind for info in REGISTRY.values() if info.trees)


def with_tree(drafter: DrafterSpec, tree: Optional[DraftTree]) -> DrafterSpec:
    """``drafter`` drafting ``tree`` instead of a chain (None: unchanged). With a tree, any K ≥ 1 runs the tree,
    and K = tree.steps stands for it in K tables (the tree's depth)."""
    if tree is None:
        return drafter
    tree_kinds = _tree_kinds()
    if drafter.kind not in tree_kinds:
        kinds = ", ".join(k.value for k in tree_kinds)
        raise DsdsimError(f"drafter {drafter.label} drafts a chain only; draft trees are modelled for {kinds}")
    return drafter.model_copy(update={"tree": tree, "max_k": max(drafter.max_k, tree.steps)})


@functools.lru_cache(maxsize=256)
def parse_drafter(text: str) -> DrafterSpec:
    """``KIND[:ARGS]``, a kind of the registry (``dsdsim.specs.drafters``: eagle3, eagle, mtp, medusa, ngram,
    draft-model:MODEL, self-spec:KV_BUDGET, dflash[:LAYERS[,TAPS[,BLOCK]]], dspark[:...], pard:MODEL,
    suffix[:...]). Remembered per text (a DrafterSpec is frozen: callers share it)."""
    from dsdsim.specs.drafters import lookup

    raw = text.strip()
    head, _, arg = raw.partition(":")
    info = lookup(head.strip().lower().replace("_", "-"), raw)
    kwargs: dict = {"kind": info.kind, "max_k": info.max_k}
    kwargs.update(info.read(arg, raw))
    return DrafterSpec(**kwargs)


# --- draft heads: their weights, described once ----------------------------------------------------------------


@frozen
class DraftHead:
    """The weights an EAGLE, EAGLE-3 or Medusa head keeps beside the target, and the shapes its passes run.

    Element counts. The head shares the target's embedding (EAGLE also its lm_head) and does not count it.
    hidden:       the target's hidden size h.
    fc:           projection of the target's features into the draft (EAGLE 2h -> h with bias; EAGLE-3 3h -> h).
    layer:        the draft decoder layer; its q/k/v read ``layer_input`` (None: h).
    resblock:     Medusa's ResBlock: h -> h with bias, SiLU, residual.
    lm_head:      the head's own lm_head; None: it drafts with the target's.
    copies:       heads of this shape (Medusa: one per draft position).
    """

    hidden: int
    fc: Optional[Linear] = None
    layer: Optional[Layer] = None
    layer_input: Optional[int] = None
    resblock: Optional[Linear] = None
    lm_head: Optional[Linear] = None
    copies: int = 1

    @property
    def layer_params(self) -> int:
        """The decoder layer's weights: what data-parallel attention keeps whole on every rank."""
        return 0 if self.layer is None else self.layer.params(self.hidden, self.layer_input)

    @property
    def params(self) -> int:
        linears = sum(lin.params for lin in (self.fc, self.resblock, self.lm_head) if lin is not None)
        return self.copies * (linears + self.layer_params)


def eagle_head(hidden: int, layer: Layer) -> DraftHead:
    """EAGLE-1/2 (SafeAILab/EAGLE ``eagle/model/cnets1.py``): fc(2h -> h, bias) on token embedding ++ target
    feature, one decoder layer, the target's lm_head."""
    return DraftHead(hidden, fc=Linear(2 * hidden, hidden, bias=True), layer=layer)


def eagle3_head(hidden: int, layer: Layer, draft_vocab: int) -> DraftHead:
    """EAGLE-3 (SafeAILab/EAGLE ``eagle/model/cnets.py``): fc(3h -> h) on fused low/mid/high target features, one
    layer whose q/k/v read 2h (embedding ++ hidden), an own lm_head over the reduced draft vocabulary."""
    return DraftHead(hidden, fc=Linear(3 * hidden, hidden), layer=layer, layer_input=2 * hidden,
                     lm_head=Linear(hidden, draft_vocab))


def medusa_heads(hidden: int, vocab: int, heads: int) -> DraftHead:
    """Medusa (FasterDecoding/Medusa ``medusa/model/medusa_model.py``, one ResBlock per head): ``heads`` heads, each
    a ResBlock (h -> h, bias) and an own lm_head h -> V."""
    return DraftHead(hidden, resblock=Linear(hidden, hidden, bias=True), lm_head=Linear(hidden, vocab), copies=heads)
