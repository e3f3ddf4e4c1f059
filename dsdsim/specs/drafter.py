"""Drafter specs: what proposes the K draft tokens, and what it costs beyond FLOPs and bytes.

Command-line forms: ``eagle3``, ``eagle``, ``mtp``, ``medusa``, ``ngram``, ``draft-model:MODEL``,
``self-spec:KV_BUDGET``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from pydantic import Field, model_validator

from dsdsim.errors import DsdsimError
from dsdsim.specs.frozen import FrozenSpec
from dsdsim.specs.model import Layer, Linear

MAX_K = 16


class DrafterKind(str, Enum):
    draft_model = "draft-model"   # a separate small model: K sequential passes
    eagle = "eagle"               # EAGLE-1/2 head: fc(2h->h) + one decoder layer, drafts with the TARGET lm_head
    eagle3 = "eagle3"             # EAGLE-3 head: fc(3h->h) on fused features, 2h-input layer, reduced vocabulary
    mtp = "mtp"                   # the model's own next-n prediction module(s): a full layer, MoE included
    medusa = "medusa"             # K heads (ResBlock + own lm_head) in one pass
    ngram = "ngram"               # prompt lookup: no device work, a host-side cost
    self_spec = "self-spec"       # the target itself with a sparse KV budget


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
    intermediate_size: Optional[int] = Field(default=None, gt=0)  # eagle/eagle3 head FFN width override
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
        if self.kind is DrafterKind.draft_model and not self.model:
            raise ValueError("draft-model needs a model: write draft-model:MODEL (e.g. draft-model:llama-3.2-1b)")
        if self.kind is DrafterKind.self_spec and self.kv_budget is None:
            raise ValueError("self-spec needs a KV budget: write self-spec:KV_BUDGET (e.g. self-spec:512)")
        return self

    @property
    def label(self) -> str:
        if self.kind is DrafterKind.draft_model:
            return f"draft-model:{self.model}"
        if self.kind is DrafterKind.self_spec:
            return f"self-spec:{self.kv_budget}"
        return self.kind.value


# Drafters the cost layer runs as trees (dsdsim.cost.drafts): passes of a model-based drafter over topk candidates.
TREE_KINDS = (DrafterKind.eagle, DrafterKind.eagle3, DrafterKind.mtp, DrafterKind.draft_model)


def with_tree(drafter: DrafterSpec, tree: Optional[DraftTree]) -> DrafterSpec:
    """``drafter`` drafting ``tree`` instead of a chain (None: unchanged). With a tree, any K ≥ 1 runs the tree,
    and K = tree.steps stands for it in K tables (the tree's depth)."""
    if tree is None:
        return drafter
    if drafter.kind not in TREE_KINDS:
        kinds = ", ".join(k.value for k in TREE_KINDS)
        raise DsdsimError(f"drafter {drafter.label} drafts a chain only; draft trees are modelled for {kinds}")
    return drafter.model_copy(update={"tree": tree, "max_k": max(drafter.max_k, tree.steps)})


# Medusa: the paper evaluates up to 5 heads (Cai et al. 2024, arXiv 2401.10774); K cannot exceed the heads.
_KIND_MAX_K = {DrafterKind.medusa: 5}


@functools.lru_cache(maxsize=256)
def parse_drafter(text: str) -> DrafterSpec:
    """'eagle3' | 'eagle' | 'mtp' | 'medusa' | 'ngram' | 'draft-model:MODEL' | 'self-spec:KV_BUDGET'. Remembered
    per text (a DrafterSpec is frozen: callers share it)."""
    raw = text.strip()
    head, _, arg = raw.partition(":")
    head = head.strip().lower().replace("_", "-")
    aliases = {"eagle-3": "eagle3", "draft": "draft-model", "draftmodel": "draft-model", "self-speculation":
               "self-spec", "selfspec": "self-spec", "prompt-lookup": "ngram", "n-gram": "ngram"}
    head = aliases.get(head, head)
    try:
        kind = DrafterKind(head)
    except ValueError:
        forms = "eagle3, eagle, mtp, medusa, ngram, draft-model:MODEL, self-spec:KV_BUDGET"
        raise DsdsimError(f"unknown drafter {raw!r}; use one of: {forms}") from None
    kwargs: dict = {"kind": kind, "max_k": _KIND_MAX_K.get(kind, MAX_K)}
    if kind is DrafterKind.draft_model:
        if not arg.strip():
            raise DsdsimError("draft-model needs a model: write draft-model:MODEL (e.g. draft-model:llama-3.2-1b)")
        kwargs["model"] = arg.strip()
    elif kind is DrafterKind.self_spec:
        try:
            budget = int(arg)
        except ValueError:
            raise DsdsimError(f"self-spec needs a whole-number KV budget: write self-spec:512, got {raw!r}") from None
        if budget <= 0:
            raise DsdsimError(f"self-spec KV budget must be > 0 tokens, got {budget}")
        kwargs["kv_budget"] = budget
    elif arg.strip():
        if kind is DrafterKind.eagle3:
            try:
                kwargs["draft_vocab_size"] = int(arg)
            except ValueError:
                raise DsdsimError(f"eagle3 takes an optional draft vocabulary size (eagle3:32000), got {raw!r}") from None
            if kwargs["draft_vocab_size"] <= 0:
                raise DsdsimError(f"eagle3 draft vocabulary size must be > 0 (e.g. eagle3:32000), got {raw!r}")
        else:
            raise DsdsimError(f"drafter {kind.value} takes no argument, got {raw!r}")
    return DrafterSpec(**kwargs)


# --- draft heads: their weights, described once ----------------------------------------------------------------


@dataclass(frozen=True)
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
