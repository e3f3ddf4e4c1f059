"""What a validation run measures: the grid of batch sizes, draft lengths and contexts, and the named grids
(``dsdsim validate --grid quick | full | gpu | tiny``)."""
from __future__ import annotations

from dsdsim.records import frozen



@frozen
class Grid:
    """What to measure. ``contexts[0]`` is the operators' table context; later contexts vary attention only.
    ``spec_*``: the whole speculative steps (draft passes + verify pass + rejection sampling, the full layer
    stack) that the K table is checked on."""

    batches: tuple[int, ...]
    ks: tuple[int, ...]
    contexts: tuple[int, ...]
    step_batches: tuple[int, ...]
    step_ks: tuple[int, ...]
    warmup: int
    repeats: int
    budget_s: float
    max_rotate: int = 64
    spec_batches: tuple[int, ...] = ()
    spec_ks: tuple[int, ...] = ()
    spec_contexts: tuple[int, ...] = ()
    warmup_s: float = 0.0          # warm-up wall time per timed thing (GPU clocks ramp from idle)
    graphs: bool = True            # CUDA: time kernels as CUDA-graph replays (no host dispatch)


QUICK_GRID = Grid(batches=(1, 4, 16), ks=(0, 1, 2, 3), contexts=(512, 2048), step_batches=(1, 16), step_ks=(0, 3),
                  warmup=1, repeats=5, budget_s=0.3, spec_batches=(1, 4, 16), spec_ks=(0, 1, 2, 3),
                  spec_contexts=(512,))
FULL_GRID = Grid(batches=(1, 2, 4, 8, 16, 32, 64), ks=(0, 1, 2, 3, 4, 5, 6), contexts=(1024, 4096),
                 step_batches=(1, 4, 16, 64), step_ks=(0, 1, 3, 6), warmup=2, repeats=9, budget_s=1.0,
                 spec_batches=(1, 2, 4, 8, 16, 32, 64), spec_ks=(0, 1, 2, 3, 4, 5, 6), spec_contexts=(1024,))
GPU_GRID = Grid(batches=(1, 2, 4, 8, 16, 32, 64, 128), ks=(0, 1, 2, 3, 4, 5, 6), contexts=(1024, 8192),
                step_batches=(1, 8, 64), step_ks=(0, 3, 6), warmup=3, repeats=15, budget_s=0.05,
                spec_batches=(1, 2, 4, 8, 16, 32, 64, 128), spec_ks=(0, 1, 2, 3, 4, 5, 6), spec_contexts=(1024, 8192),
                warmup_s=0.025)
TINY_GRID = Grid(batches=(1, 2), ks=(0, 2), contexts=(64, 128), step_batches=(2,), step_ks=(0, 2), warmup=1,
                 repeats=2, budget_s=0.05, spec_batches=(1, 2), spec_ks=(0, 1, 2), spec_contexts=(64,))
GRIDS = {"quick": QUICK_GRID, "full": FULL_GRID, "gpu": GPU_GRID, "tiny": TINY_GRID}
