"""A real speculative-decoding loop in torch: draft -> verify -> rejection sampling, batched, with KV caches.

Target and draft are small random-weight decoders built from ModelSpecs (dsdsim.bench.model). The draft is the
target truncated to its first layers with its weights perturbed, so the two disagree a little and acceptance is
neither 0 nor 1. One step, per sequence (Leviathan et al. 2023, Algorithm 1; gpt-fast ``speculative_decode``):

    draft:   K tokens d_1..d_K, d_i ~ q_i = q(. | prefix, d_<i)          (K sequential draft passes)
    verify:  one target pass over [last, d_1..d_K] gives p_1..p_{K+1}
    accept:  d_i with probability min(1, p_i(d_i) / q_i(d_i)), left to right; at the first rejection emit
             a token from norm(max(0, p_i - q_i)) and stop; if all K are accepted emit a bonus from p_{K+1}
    commit:  the caches keep the accepted prefix (a rollback is a length update)

The draft's first pass re-reads the last K + 1 committed tokens (the cost model's "first pass over q = K + 1
tokens"), so every draft step has one static shape whatever was accepted. Measured: conditional acceptance per
position alpha_i = accepted_i / reached_i, tau = mean tokens emitted per step per sequence, and step times.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from dsdsim.records import frozen
from dsdsim.specs.model import Attention, AttentionKind, FFN, FFNKind, Layer, ModelSpec


def loop_specs(hidden: int = 256, layers: int = 4, draft_layers: int = 2, heads: int = 4, kv_heads: int = 2,
               intermediate: int = 512, vocab: int = 512) -> tuple[ModelSpec, ModelSpec]:
    """Target and draft ModelSpecs for the CPU-sized loop (Llama-style: GQA, SwiGLU, RMSNorm)."""
    layer = Layer(attention=Attention(kind=AttentionKind.full, num_heads=heads, num_kv_heads=kv_heads,
                                      head_dim=hidden // heads),
                  ffn=FFN(kind=FFNKind.dense, intermediate_size=intermediate))
    target = ModelSpec(name="loop-target", family="llama", hidden_size=hidden, vocab_size=vocab,
                       layers=(layer,) * layers, source="dsdsim.bench.loop (random weights)")
    draft = target.model_copy(update={"name": "loop-draft", "layers": (layer,) * draft_layers})
    return target, draft


@dataclass
class LoopResult:
    """What one run of the loop measured, and how it compares with dsdsim's models."""

    k: int
    batch: int
    steps: int
    alpha: list[float]                     # conditional acceptance per position 1..K
    reached: list[int]                     # sequence-steps that reached position i
    tau_measured: float                    # mean tokens emitted per step per sequence
    tau_model: float                       # Acceptance.from_list(alpha).tau(K)
    tau_constant_alpha: float              # a single pooled alpha: (1 - a^(K+1)) / (1 - a)
    step_s_median: float
    predicted_step_s: Optional[float] = None
    extra: dict = field(default_factory=dict)

    @property
    def tau_rel_error(self) -> float:
        return abs(self.tau_model - self.tau_measured) / self.tau_measured

    @property
    def step_ratio(self) -> Optional[float]:
        """measured / predicted step time."""
        return None if not self.predicted_step_s else self.step_s_median / self.predicted_step_s

    def to_json(self) -> dict:
        return {"k": self.k, "batch": self.batch, "steps": self.steps, "alpha": self.alpha, "reached": self.reached,
                "tau_measured": self.tau_measured, "tau_model": self.tau_model,
                "tau_rel_error": self.tau_rel_error, "tau_constant_alpha": self.tau_constant_alpha,
                "step_s_median": self.step_s_median, "predicted_step_s": self.predicted_step_s,
                "measured_over_predicted": self.step_ratio, **self.extra}


def _perturbed_draft(target, draft_spec: ModelSpec, noise: float, seed: int):
    """The target's first layers (shared embedding and head) with every weight perturbed by noise * its std."""
    import torch

    from dsdsim.bench.model import TorchDecoder

    draft = TorchDecoder(draft_spec, dtype=target.dtype, device=target.device, seed=seed)
    src = dict(target.named_parameters())
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            base = src[name]
            p.copy_(base)
            if base.dim() >= 2 and noise > 0:
                p.add_(torch.randn(base.shape, generator=gen).to(base) * base.std() * noise)
    return draft


@frozen
class LoopConfig:
    """One run of the loop. ``seed`` fixes the weights; ``sample_seed`` (default: derived from ``seed``) the
    prompts and every random draw of sampling and acceptance, so two runs can share models but not samples."""

    k: int = 4
    batch: int = 8
    new_tokens: int = 48
    prompt: int = 16
    noise: float = 0.2                  # draft weights = target's + noise x their std
    logit_scale: float = 4.0            # sharpens the random target's distributions
    device: str = "cpu"
    seed: int = 0
    sample_seed: Optional[int] = None
    threads: Optional[int] = 1
    warmup_steps: int = 2               # steps left out of the step-time median

    @property
    def samples_seed(self) -> int:
        return self.seed + 11 if self.sample_seed is None else self.sample_seed


def run_loop(k: int = 4, batch: int = 8, new_tokens: int = 48, prompt: int = 16, *, hardware=None,
             target_spec: Optional[ModelSpec] = None, draft_spec: Optional[ModelSpec] = None, noise: float = 0.2,
             logit_scale: float = 4.0, device: str = "cpu", seed: int = 0, threads: Optional[int] = 1,
             sample_seed: Optional[int] = None) -> LoopResult:
    """Generate ``new_tokens`` per sequence for ``batch`` sequences with K-token speculation; measure
    acceptance, tau and step times; predict tau from the measured alpha and the step time with simulate_step
    (draft-model drafter, eager launches) on ``hardware`` when given. See LoopConfig for the seeds."""
    cfg = LoopConfig(k=k, batch=batch, new_tokens=new_tokens, prompt=prompt, noise=noise, logit_scale=logit_scale,
                     device=device, seed=seed, sample_seed=sample_seed, threads=threads)
    return run(cfg, hardware=hardware, target_spec=target_spec, draft_spec=draft_spec)


def run(cfg: LoopConfig, hardware=None, target_spec: Optional[ModelSpec] = None,
        draft_spec: Optional[ModelSpec] = None) -> LoopResult:
    import torch

    from dsdsim.bench.timing import cpu_threads

    if cfg.k < 1:
        raise ValueError(f"a speculative loop needs K >= 1, got {cfg.k}")
    if cfg.prompt < cfg.k + 2:
        raise ValueError(f"the prompt ({cfg.prompt} tokens) must be longer than K + 1 = {cfg.k + 1}")
    if target_spec is None or draft_spec is None:
        target_spec, draft_spec = loop_specs()
    with cpu_threads(cfg.device, cfg.threads), torch.inference_mode():
        target, draft = _models(cfg, target_spec, draft_spec)
        tally = _decode(cfg, target, draft, target_spec.vocab_size)
    result = tally.result(cfg)
    if hardware is not None:
        result.predicted_step_s = predicted_step(target_spec, draft_spec, hardware, cfg.batch, cfg.k,
                                                 context=cfg.prompt + cfg.new_tokens / 2)
        result.extra["hardware"] = getattr(hardware, "name", str(hardware))
    return result


def _models(cfg: LoopConfig, target_spec: ModelSpec, draft_spec: ModelSpec):
    """The random-weight target and its perturbed draft (the global RNG is left as it was)."""
    import torch

    from dsdsim.bench.model import TorchDecoder

    with torch.random.fork_rng(devices=[]):
        target = TorchDecoder(target_spec, dtype=torch.float32, device=cfg.device, seed=cfg.seed,
                              logit_scale=cfg.logit_scale)
        draft = _perturbed_draft(target, draft_spec, cfg.noise, cfg.seed + 7)
    return target, draft


def rejection_sample(p, q, drafts, generator):
    """Speculative sampling (Leviathan et al. 2023, Algorithm 1), batched and pure.

    p: target probabilities (B, K+1, V) at the K drafted positions and the bonus position; q: draft
    probabilities (B, K, V); drafts: drafted tokens (B, K); generator: the only source of randomness.
    Returns (accepted (B,): the accepted prefix length, emitted (B, K+1): drafts then the correction or bonus
    token at index accepted; positions past it are meaningless)."""
    import torch

    b, k = drafts.shape
    rows = torch.arange(b, device=drafts.device)
    p_d = p[:, :k].gather(-1, drafts.unsqueeze(-1)).squeeze(-1)                      # p_i(d_i)
    q_d = q.gather(-1, drafts.unsqueeze(-1)).squeeze(-1)                             # q_i(d_i)
    u = torch.rand(b, k, generator=generator, device=drafts.device)
    ok = u < torch.clamp(p_d / q_d, max=1.0)
    accepted = torch.cumprod(ok.int(), dim=1).sum(dim=1)                              # (B,)
    idx = torch.clamp(accepted, max=k - 1)
    resid = torch.clamp(p[rows, idx] - q[rows, idx], min=0.0)                         # max(0, p - q)
    mass = resid.sum(-1, keepdim=True)
    resid = torch.where(mass > 0, resid / mass.clamp_min(1e-30), p[rows, idx])
    fix = torch.multinomial(resid, 1, generator=generator).squeeze(1)
    bonus = torch.multinomial(p[:, k], 1, generator=generator).squeeze(1)            # all accepted: from p_{K+1}
    extra = torch.where(accepted == k, bonus, fix)
    emitted = torch.cat([drafts, torch.zeros_like(extra).unsqueeze(1)], dim=1)
    emitted[rows, accepted] = extra
    return accepted, emitted


@dataclass
class _Tally:
    """Per-position acceptance counts, tokens emitted and step times of one run."""

    k: int
    accepted_at: np.ndarray
    reached_at: np.ndarray
    emitted: int = 0
    seq_steps: int = 0
    steps: int = 0
    step_times: list = field(default_factory=list)

    def add(self, accepted: np.ndarray, seconds: float, warmup: int) -> None:
        for i in range(self.k):
            self.reached_at[i] += int((accepted >= i).sum())
            self.accepted_at[i] += int((accepted >= i + 1).sum())
        self.emitted += int(accepted.sum()) + accepted.size
        self.seq_steps += accepted.size
        if self.steps >= warmup:
            self.step_times.append(seconds)
        self.steps += 1

    def result(self, cfg: LoopConfig) -> LoopResult:
        from dsdsim.policy.acceptance import constant, from_list

        alpha = [float(a / r) if r else 0.0 for a, r in zip(self.accepted_at, self.reached_at)]
        pooled = float(self.accepted_at.sum() / max(self.reached_at.sum(), 1))
        res = LoopResult(k=cfg.k, batch=cfg.batch, steps=self.steps, alpha=alpha,
                         reached=[int(r) for r in self.reached_at], tau_measured=self.emitted / self.seq_steps,
                         tau_model=float(from_list(alpha).tau(cfg.k)) if any(alpha) else 1.0,
                         tau_constant_alpha=float(constant(min(pooled, 0.999999)).tau(cfg.k)),
                         step_s_median=float(np.median(self.step_times)) if self.step_times else float("nan"))
        res.extra["context_mean"] = float(cfg.prompt + cfg.new_tokens / 2)
        res.extra["sample_seed"] = cfg.samples_seed
        return res


def _decode(cfg: LoopConfig, target, draft, vocab: int) -> _Tally:
    """Prefill, then speculative steps until every sequence has ``new_tokens`` more tokens."""
    import torch

    from dsdsim.bench.timing import synchronize

    k, batch, prompt, device = cfg.k, cfg.batch, cfg.prompt, cfg.device
    gen = torch.Generator(device=device).manual_seed(cfg.samples_seed)
    max_len = prompt + (cfg.new_tokens + k + 1) * (k + 1) + 4    # a lucky sequence may run ahead of the slowest
    t_cache, d_cache = target.new_cache(batch, max_len), draft.new_cache(batch, max_len)
    tokens = torch.zeros(batch, max_len, dtype=torch.long, device=device)
    tokens[:, :prompt] = torch.randint(0, vocab, (batch, prompt), generator=gen, device=device)
    n = torch.full((batch,), prompt, dtype=torch.long, device=device)        # committed tokens per sequence
    # prefill: the target caches all prompt tokens but the last, the draft all of them (its first pass of every
    # step re-reads the last K + 1 committed tokens anyway)
    target.hidden(tokens[:, :prompt - 1], t_cache, uniform=0)
    t_cache.lengths.fill_(prompt - 1)
    draft.hidden(tokens[:, :prompt], d_cache, uniform=0)
    d_cache.lengths.fill_(prompt)
    rows = torch.arange(batch, device=device)
    tally = _Tally(k, np.zeros(k, dtype=np.int64), np.zeros(k, dtype=np.int64))
    while int(n.min()) < prompt + cfg.new_tokens:
        synchronize(device)
        t0 = time.perf_counter()
        drafts, qs = _draft(draft, d_cache, tokens, n, rows, k, gen)
        last = tokens[rows, n - 1].unsqueeze(1)                                   # verify: [last, d_1..d_K]
        p = torch.softmax(target.logits(target.hidden(torch.cat([last, drafts], dim=1), t_cache)), dim=-1)
        accepted, emitted = rejection_sample(p, qs, drafts, gen)
        pos = n.unsqueeze(1) + torch.arange(k + 1, device=device)                 # commit the accepted prefix
        keep = torch.arange(k + 1, device=device).unsqueeze(0) <= accepted.unsqueeze(1)
        tokens[rows.unsqueeze(1).expand_as(pos)[keep], pos[keep]] = emitted[keep]
        n = n + accepted + 1
        t_cache.lengths.copy_(n - 1)
        synchronize(device)
        tally.add(accepted.cpu().numpy(), time.perf_counter() - t0, cfg.warmup_steps)
    return tally


def _draft(draft, d_cache, tokens, n, rows, k: int, gen):
    """K draft tokens per sequence: a first pass over the last K + 1 committed tokens, then K - 1 single-token
    passes; d_i ~ q_i drawn from ``gen``. Returns (drafts (B, K), q (B, K, V))."""
    import torch

    device = tokens.device
    start = n - (k + 1)
    window = tokens[rows.unsqueeze(1), start.unsqueeze(1) + torch.arange(k + 1, device=device)]   # (B, K+1)
    d_cache.lengths.copy_(start)
    h = draft.hidden(window, d_cache)
    d_cache.lengths.copy_(n)
    q_list, d_tok = [], []
    logits = draft.logits(h[:, -1])
    for i in range(k):
        q = torch.softmax(logits, dim=-1)                                         # q_i (B, V)
        tok = torch.multinomial(q, 1, generator=gen).squeeze(1)                   # d_i ~ q_i
        q_list.append(q)
        d_tok.append(tok)
        if i + 1 < k:
            h = draft.hidden(tok.unsqueeze(1), d_cache)
            d_cache.lengths.add_(1)
            logits = draft.logits(h[:, -1])
    return torch.stack(d_tok, dim=1), torch.stack(q_list, dim=1)


def predicted_step(target: ModelSpec, draft: ModelSpec, hardware, batch: int, k: int, context: float) -> float:
    """simulate_step for the loop's own specs: a draft-model drafter, fp32 weights/KV, eager launches."""
    from dsdsim.cost.step import Setup, simulate_step
    from dsdsim.specs.catalog import load_hardware
    from dsdsim.specs.deployment import Deployment
    from dsdsim.specs.drafter import DrafterKind, DrafterSpec
    from dsdsim.units import DType

    hw = load_hardware(hardware)
    dep = Deployment(dtype=DType.fp32, act_dtype=DType.fp32, kv_dtype=DType.fp32, cuda_graphs=False,
                     expert_overlap=0.0)      # random-weight routers route independently
    drafter = DrafterSpec(kind=DrafterKind.draft_model, model=draft.name)
    step = simulate_step(None, None, batch=batch, k=k, context=context, setup=Setup(target, hw, dep, drafter, draft))
    return float(np.asarray(step.step_time_s))
