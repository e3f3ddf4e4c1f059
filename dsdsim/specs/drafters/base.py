"""What every drafter kind declares: its command-line form and parameters, its limits, how its draft passes run,
what its acceptance figures mean, and which engines run it under what name (or why not).

One module per kind in this package holds its ``INFO``; ``dsdsim.specs.drafters`` gathers them in one registry, and
``dsdsim.cost.drafters`` holds each kind's passes, weights and memory. Pure data: nothing here knows about costs.
"""
# Annotations stay objects here (no `from __future__ import annotations`): pydantic compiles a string one first.

from dataclasses import field
from enum import Enum
from typing import Callable, Mapping, Optional

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

MAX_K = 16     # the largest K dsdsim considers for a drafter without a limit of its own


class DrafterKind(str, Enum):
    """The drafter kinds; each has its module in ``dsdsim.specs.drafters`` and ``dsdsim.cost.drafters``."""

    draft_model = "draft-model"   # a separate small model: K sequential passes
    eagle = "eagle"               # EAGLE-1/2 head: fc(2h->h) + one decoder layer, drafts with the TARGET lm_head
    eagle3 = "eagle3"             # EAGLE-3 head: fc(3h->h) on fused features, 2h-input layer, reduced vocabulary
    mtp = "mtp"                   # the model's own next-n prediction module(s): a full layer, MoE included
    medusa = "medusa"             # K heads (ResBlock + own lm_head) in one pass
    ngram = "ngram"               # prompt lookup: no device work, a host-side cost
    self_spec = "self-spec"       # the target itself with a sparse KV budget
    dflash = "dflash"             # block diffusion: a small layer stack over K + 1 positions in ONE pass
    pard = "pard"                 # parallel draft model: a draft model over q + K positions in ONE pass
    suffix = "suffix"             # suffix-tree lookup on the host, no device work
    dspark = "dspark"             # DFlash-style block pass, then K sequential low-rank Markov steps


ENGINES = ("vllm", "sglang", "trtllm")

# the acceptance convention of a chain drafter that vLLM serves with its per-position acceptance counters
CHAIN_ACCEPTANCE = "conditional alpha per draft position; vLLM exports unconditional per-position counts"


class DraftPasses(str, Enum):
    """How many sequential draft passes a step runs for K draft tokens."""

    chain = "chain"     # K sequential passes (a tree: its steps)
    one = "one"         # one pass proposes all K (Medusa heads, block diffusion, parallel drafting)
    none = "none"       # no device pass: a host-side lookup


@frozen
class EngineRun:
    """How one engine runs a drafter kind: its name there (``method``, with ``extra`` config keys), or the engine's
    reason it cannot (``refusal``, one line). ``source``: where that is documented."""

    method: Optional[str] = None
    refusal: Optional[str] = None
    source: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)


def no_argument(kind: str) -> Callable[[str, str], dict]:
    def parse(arg: str, raw: str) -> dict:
        if arg.strip():
            raise DsdsimError(f"drafter {kind} takes no argument, got {raw!r}")
        return {}
    return parse


def needs_model(form: str, example: str) -> Callable[[str, str], dict]:
    """The argument names a draft model (catalog name or config path): ``KIND:MODEL``."""
    kind = form.split(":")[0]

    def parse(arg: str, raw: str) -> dict:
        if not arg.strip():
            raise DsdsimError(f"{kind} needs a model: write {form} (e.g. {example})")
        return {"model": arg.strip()}
    return parse


def whole_numbers(text: str, raw: str, names: tuple[str, ...], form: str) -> list[int]:
    """Comma-separated whole numbers > 0 for ``names`` (fewer may be given); one-line errors naming ``form``."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    if len(parts) > len(names) or not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
        raise DsdsimError(f"cannot read drafter {raw!r}; write {form} with whole numbers > 0 "
                          f"({', '.join(names)})")
    return [int(p) for p in parts]


@frozen
class DrafterInfo:
    """One drafter kind. ``parse(arg, raw)`` turns the text after ``KIND:`` into DrafterSpec fields; ``label`` names a
    spec of this kind the way ``-d`` reads it back; ``check`` returns what a spec lacks (None: complete)."""

    kind: "object"                                   # DrafterKind (specs.drafter), kept untyped against the cycle
    form: str                                        # command-line form(s), e.g. "dflash[:LAYERS[,TAPS]]"
    summary: str                                     # one line: what it is, how it is costed
    passes: DraftPasses
    acceptance: str                                  # what K and the acceptance figures mean for this kind
    engines: Mapping[str, EngineRun]
    aliases: tuple[str, ...] = ()
    max_k: int = MAX_K
    max_k_source: str = "no limit of its own (dsdsim's MAX_K)"
    parse: Optional[Callable[[str, str], dict]] = None
    label: Optional[Callable[[object], str]] = None
    check: Optional[Callable[[object], Optional[str]]] = None
    trees: bool = False                              # runs as a draft tree (--draft-tree)
    loads_model: bool = False                        # the spec's ``model`` names a draft model to load
    host_only: bool = False                          # no device work (no draft/verify hand-off either)
    validated: bool = False                          # dsdsim.bench builds its passes in torch: validate times them
    # the example acceptance of this kind where the user gives none, as (mean acceptance length, the K it was measured
    # at, its source); None: the generic example (dsdsim.policy.acceptance.DEFAULT_ACCEPTANCE)
    default_acceptance: Optional[tuple[float, int, str]] = None

    @property
    def name(self) -> str:
        return self.kind.value

    def read(self, arg: str, raw: str) -> dict:
        return (self.parse or no_argument(self.name))(arg, raw)

    def label_of(self, spec) -> str:
        return self.label(spec) if self.label is not None else self.name

    def on(self, engine: str) -> EngineRun:
        """How ``engine`` (vllm, sglang, trtllm) runs this kind."""
        return self.engines.get(engine) or EngineRun(refusal=f"dsdsim knows no {engine} method for {self.name}")
