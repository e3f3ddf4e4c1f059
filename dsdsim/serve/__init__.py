"""The serving simulator: a continuously batching server (vLLM V1's scheduler) that applies a K policy step by step.

Workloads (``workload``) and length distributions (``lengths``) make the requests, ``prefix`` what their prompts
share (shared prefixes, conversations) and the prefix cache that finds it; per-request acceptance is drawn in
``requests``; ``scheduler`` decides each step's requests and tokens; ``policies`` pick K; a pricer
(``dsdsim.cost.mixed.MixedPricer``, the ``step.StepPricer`` contract) times each step; ``metrics`` turns the run into
the figures ``vllm bench serve`` reports. The public entry point is ``dsdsim.serve.simulate.simulate``. Importing
this package imports nothing else.
"""
