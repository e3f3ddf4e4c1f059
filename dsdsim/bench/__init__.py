"""Measurement on a real device with torch (imported only here): probe, validate, calibrate, the real loop.

Nothing outside this package imports it except the CLI. Modules:

    timing       the one place that times torch code (warm-up, synchronisation, median of repeats, rotated inputs)
    probe        measured ceilings -> a HardwareSpec (run_probe)
    shapes       torch implementations of the cost model's operator kinds, built from an OpCost's shape
    model        a small torch decoder (GQA / MoE / EAGLE-3 head) built from a ModelSpec, with a KV cache
    validate     a validation run, stage by stage (run_validate, validate, reanalyse):
    grid           what a run measures (the named grids of --grid)
    reduce         the reduced model a run measures (torch-free)
    measure        operator, pass and whole-step points timed with torch
                   (analysis in dsdsim.fit.validation, the report's files in dsdsim.export.validation)
    loop         a real batched speculative loop with rejection sampling (run_loop)
    distributed  gloo / NCCL all-reduce vs the link model, and a tensor-parallel MLP (run_distributed)

Fitting what it measures (the Calibrator, the kernel-shape figures of a probe) lives in ``dsdsim.fit`` and writing
hardware specs in ``dsdsim.specs.hardware_yaml``, both torch-free.
"""
