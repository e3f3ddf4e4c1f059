#!/usr/bin/env python3
"""Run the prefix-cache examples that docs/simulate.md and the README quote, and hold the docs to them.

    python scripts/serving_figures.py           rewrite docs/simulate.md's two router tables (between their markers)
                                                and check that the README quotes the same figures
    python scripts/serving_figures.py --check   rewrite nothing; exit 1 if a table or a quoted figure is stale

The examples (Llama-3.1-8B with EAGLE-3 on four H100s, the shipped defaults otherwise):
- shared prompts under cache pressure: 2,000 requests at 12 req/s, 128 prefixes of 8,192 tokens, 256 tokens of their
  own, 128 out (`--shared-prefix 8192:128`), per router;
- conversations: 2,000 turns of 10-turn conversations with 2 s to think, 96 at a time, behind 4 system prompts of
  2,048 tokens, messages and replies of 64-256 tokens (`--multi-turn 10:2 --shared-prefix 2048:4`), per router;
- the README's rollout as shared prompts (`--shared-prefix 2048:32 --input-len 1`), dsd.
About a minute on two cores.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOCS = ROOT / "docs" / "simulate.md"
README = ROOT / "README.md"
ROUTERS = ("round-robin", "least-loaded", "prefix-aware")
SHARED = dict(workload="poisson:12", requests=2000, input_len="256", output_len="128", policies="none,dsd",
              shared_prefix="8192:128", replicas=4)
TURNS = dict(workload="closed:96", requests=2000, input_len="uniform:64:256", output_len="uniform:64:256",
             policies="none,dsd", shared_prefix="2048:4", multi_turn="10:2", replicas=4)
ROLLOUT = dict(workload="rollout", requests=256, input_len="1", output_len="lognormal:1024:600", policies="dsd",
               shared_prefix="2048:32")


def _by_router(kwargs: dict) -> dict:
    """{router: {policy: its JSON}} for one example."""
    from dsdsim import simulate

    return {router: {p["name"]: p for p in simulate(router=router, **kwargs).report()["policies"]}
            for router in ROUTERS}


def _ms(x: float) -> str:
    return f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def table(runs: dict) -> str:
    """The markdown table docs/simulate.md shows for one example."""
    lines = ["| router | policy | prefix cache hit | TTFT p50 / p99 (ms) | TPOT p50 (ms) | out tok/s |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for router, policies in runs.items():
        for name, p in policies.items():
            lines.append(f"| {router} | {name} | {100 * p['prefix_cache_hit']:.1f}% | {_ms(p['ttft_ms']['p50'])} / "
                         f"{_ms(p['ttft_ms']['p99'])} | {p['tpot_ms']['p50']:.3g} | "
                         f"{p['output_tokens_per_s']:,.0f} |")
    return "\n".join(lines)


def quoted(shared: dict, turns: dict, rollout: dict) -> list[str]:
    """The figures the README's serving paragraph quotes, as it writes them."""
    rr, aware = shared["round-robin"]["none"], shared["prefix-aware"]["none"]
    trr, taware = turns["round-robin"]["dsd"], turns["prefix-aware"]["dsd"]
    return [f"{100 * aware['prefix_cache_hit']:.1f}% of the prompt tokens are found against "
            f"{100 * rr['prefix_cache_hit']:.1f}% under round-robin",
            f"from {_ms(rr['ttft_ms']['p50'])} ms to {_ms(aware['ttft_ms']['p50'])} ms",
            f"find {100 * taware['prefix_cache_hit']:.1f}% of their prompt tokens with",
            f"the prefix-aware router and {100 * trr['prefix_cache_hit']:.1f}% with round-robin",
            f"dsd serves {taware['output_tokens_per_s']:,.0f} against {trr['output_tokens_per_s']:,.0f} tokens/s",
            f"{rollout['output_tokens_per_s']:,.0f} tokens/s, TTFT p50 {rollout['ttft_ms']['p50']:,.0f} ms and "
            f"{100 * rollout['prefix_cache_hit']:.1f}% of the prompt tokens found"]


def _between(text: str, name: str, body: str) -> str:
    begin, end = f"<!-- {name}: written by scripts/serving_figures.py -->", f"<!-- end of {name} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{DOCS.name} has no markers for {name}")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a figure is stale")
    args = ap.parse_args(argv)
    from dsdsim import simulate

    shared, turns = _by_router(SHARED), _by_router(TURNS)
    rollout = simulate(**ROLLOUT).report()["policies"][0]
    docs = DOCS.read_text(encoding="utf-8")
    new = _between(_between(docs, "shared-prefix routers", table(shared)), "conversation routers", table(turns))
    readme = " ".join(README.read_text(encoding="utf-8").split())
    missing = [q for q in quoted(shared, turns, rollout) if q not in readme]
    for q in missing:
        print(f"README.md does not quote: {q}")
    if new != docs:
        print(f"{DOCS.relative_to(ROOT)}: the router tables {'would change' if args.check else 'rewritten'}")
        if not args.check:
            DOCS.write_text(new, encoding="utf-8")
    stale = bool(missing) or (args.check and new != docs)
    print("stale" if stale else "every figure as quoted")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
