"""Prompt and output length distributions, read from text: whole tokens, each sample clipped to >= 1.

Forms (``LENGTH_FORMS``): a number (``512``: every request alike), ``uniform:A:B`` (whole numbers A..B inclusive),
``normal:MEAN:STD``, ``lognormal:MEAN:STD`` (MEAN and STD of the lengths themselves; the log's parameters are
derived: σ² = ln(1 + STD²/MEAN²), μ = ln MEAN − σ²/2), or a named preset (``PRESETS``: ``sharegpt``, ``mt-bench``,
``long-context``), which gives an input and an output distribution and says where its figures come from.

Samples are rounded to whole tokens and clipped to >= 1 (a preset may also cap them, as the benchmark it stands for
does); clipping moves the mean of a wide normal up a little, which ``describe`` does not hide: it names the form.
"""
from __future__ import annotations

import math
import re
from typing import Optional

import numpy as np

from dsdsim.errors import DsdsimError
from dsdsim.records import frozen

MAX_LENGTH = 2 ** 24       # tokens; the same bound predict puts on a context (no released model holds more)
LENGTH_FORMS = ("a number of tokens (512)", "uniform:A:B", "normal:MEAN:STD", "lognormal:MEAN:STD",
                "a preset: sharegpt, mt-bench, long-context")
# a number as the command line writes one, signed: a negative figure is read and refused by the range check that names
# it ("the std must be ... >= 0"), not by a "write it with numbers" that a number does not explain
NUMBER = r"[+-]?[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?"


@frozen
class LengthDist:
    """One distribution of lengths in tokens. kind: fixed, uniform, normal or lognormal; a, b: its two figures
    (fixed: the length, b unused; uniform: low, high; normal / lognormal: mean, std of the lengths); high: an upper
    cap applied after rounding (None: none); source: where a preset's figures come from ("" for typed forms)."""

    kind: str
    a: float
    b: float = 0.0
    high: Optional[int] = None
    source: str = ""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths as int64, each >= 1 (and <= ``high`` when set). Shape (n,)."""
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, size=n).astype(float)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        else:
            sigma2 = math.log1p((self.b / self.a) ** 2)
            x = rng.lognormal(math.log(self.a) - sigma2 / 2, math.sqrt(sigma2), size=n)
        out = np.maximum(np.rint(x), 1.0)
        if self.high is not None:
            out = np.minimum(out, self.high)
        return out.astype(np.int64)

    def mean(self) -> float:
        """The distribution's mean before rounding and clipping (what the form says)."""
        return float(self.a if self.kind != "uniform" else (self.a + self.b) / 2)

    def describe(self) -> str:
        cap = f", capped at {self.high}" if self.high is not None else ""
        if self.kind == "fixed":
            return f"{int(self.a)} tokens"
        if self.kind == "uniform":
            return f"uniform {int(self.a)}-{int(self.b)} tokens{cap}"
        return f"{self.kind} mean {self.a:g} std {self.b:g} tokens{cap}"


@frozen
class LengthPreset:
    """A named workload's input and output lengths, with the source of its figures."""

    name: str
    input: LengthDist
    output: LengthDist
    source: str


# ShareGPT as `vllm bench serve` samples it: vLLM PR #18566 (https://github.com/vllm-project/vllm/pull/18566, the
# description's run of 1000 ShareGPT_Vicuna_unfiltered requests on Llama-3.1-8B-Instruct) reports 229,711 input and
# 203,068 generated tokens: means of 230 and 203 tokens per request. vLLM's ShareGPT sampler drops prompts over 1024
# tokens and requests over 2048 in all (vllm/benchmarks/datasets.py, is_valid_sequence), hence the caps. The spread
# is not reported there: a coefficient of variation of 1 (std = mean) is this preset's assumption.
_SHAREGPT_SOURCE = ("vLLM PR #18566: 1000 ShareGPT requests, 229,711 input and 203,068 output tokens (Llama-3.1-8B "
                    "tokenizer); std = mean assumed; capped at 1024 as vLLM's ShareGPT sampler filters")
# MT-Bench (80 single-turn questions, philschmid/mt-bench as vLLM's MTBenchDataset reads it): vLLM PR #16035
# (https://github.com/vllm-project/vllm/pull/16035, comment of 2025-04-09) ran the 80 questions at max_num_seqs 1
# without speculation: 1.61 s per request at 47.09 input and 128.64 output tokens/s, i.e. about 76 input and 207
# output tokens per request, outputs capped by the example's max_tokens of 256. The spreads are assumptions.
_MT_BENCH_SOURCE = ("vLLM PR #16035: MT-Bench at batch 1, 1.61 s/request at 47.09 input and 128.64 output tokens/s "
                    "(about 76 in, 207 out; outputs capped at 256); spreads assumed")
# Long context: SPEED-Bench's throughput split (arXiv 2604.09557, https://arxiv.org/abs/2604.09557) buckets prompts
# by input length from 1k to 32k tokens; this preset spans its 8k-32k buckets uniformly. The output length is not
# fixed by that source: 512 +/- 128 is this preset's assumption.
_LONG_CONTEXT_SOURCE = ("SPEED-Bench throughput split (arXiv 2604.09557): input buckets up to 32k, 8k-32k taken "
                        "uniformly; output 512 +/- 128 assumed")

PRESETS: dict[str, LengthPreset] = {
    "sharegpt": LengthPreset("sharegpt", LengthDist("lognormal", 230.0, 230.0, 1024, _SHAREGPT_SOURCE),
                             LengthDist("lognormal", 203.0, 203.0, 1024, _SHAREGPT_SOURCE), _SHAREGPT_SOURCE),
    "mt-bench": LengthPreset("mt-bench", LengthDist("lognormal", 76.0, 38.0, None, _MT_BENCH_SOURCE),
                             LengthDist("normal", 207.0, 50.0, 256, _MT_BENCH_SOURCE), _MT_BENCH_SOURCE),
    "long-context": LengthPreset("long-context", LengthDist("uniform", 8192.0, 32768.0, None, _LONG_CONTEXT_SOURCE),
                                 LengthDist("normal", 512.0, 128.0, None, _LONG_CONTEXT_SOURCE),
                                 _LONG_CONTEXT_SOURCE),
}


def parse_lengths(text, what: str = "--input-len", *, side: Optional[str] = None) -> LengthDist:
    """A LengthDist from text (``LENGTH_FORMS``) or an int. ``what`` names the argument in errors; ``side`` picks a
    preset's ``input`` or ``output`` distribution (None: ``output`` when ``what`` mentions output, else ``input``)."""
    if isinstance(text, LengthDist):
        return text
    if isinstance(text, bool):
        raise _bad(what, text)
    if isinstance(text, (int, np.integer)):
        return LengthDist("fixed", float(_length(float(text), what, text)))
    raw = str(text).strip()
    lower = raw.lower().replace(" ", "")
    if lower in PRESETS:
        half = side or ("output" if "output" in what.lower() else "input")
        if half not in ("input", "output"):
            raise DsdsimError(f"{what}: side must be 'input' or 'output', got {side!r}")
        return getattr(PRESETS[lower], half)
    if re.fullmatch(NUMBER, lower):
        return LengthDist("fixed", float(_length(float(lower), what, raw, whole=True)))
    head, _, rest = lower.partition(":")
    parts = rest.split(":") if rest else []
    if head in ("uniform", "normal", "lognormal"):
        if len(parts) != 2 or not all(re.fullmatch(NUMBER, p) for p in parts):
            raise DsdsimError(f"{what} {raw!r}: write {head}:{'A:B' if head == 'uniform' else 'MEAN:STD'} with two "
                              "numbers (e.g. " + {"uniform": "uniform:128:1024", "normal": "normal:512:128",
                                                  "lognormal": "lognormal:512:256"}[head] + ")")
        a, b = float(parts[0]), float(parts[1])
        if head == "uniform":
            lo, hi = _length(a, what, raw, whole=True), _length(b, what, raw, whole=True)
            if lo > hi:
                raise DsdsimError(f"{what} {raw!r}: uniform:A:B needs A <= B")
            return LengthDist("uniform", float(lo), float(hi))
        mean = _length(a, what, raw)
        if not (math.isfinite(b) and b >= 0):
            raise DsdsimError(f"{what} {raw!r}: the std must be a finite number >= 0")
        if b > MAX_LENGTH:
            raise DsdsimError(f"{what} {raw!r}: a std of {b:g} tokens is absurd (at most {MAX_LENGTH})")
        return LengthDist(head, float(mean), b)
    raise _bad(what, raw)


def _length(v: float, what: str, raw, whole: bool = False) -> float:
    if not math.isfinite(v) or v < 1:
        raise DsdsimError(f"{what} {raw!r}: lengths are tokens >= 1; accepted forms: {', '.join(LENGTH_FORMS)}")
    if whole and v != round(v):
        raise DsdsimError(f"{what} {raw!r}: {v:g} is not a whole number of tokens")
    if v > MAX_LENGTH:
        raise DsdsimError(f"{what} {raw!r}: {v:g} tokens is absurd; the largest accepted is {MAX_LENGTH}")
    return v


def _bad(what: str, raw) -> DsdsimError:
    return DsdsimError(f"cannot read {what} {raw!r}; accepted forms: {', '.join(LENGTH_FORMS)}")
