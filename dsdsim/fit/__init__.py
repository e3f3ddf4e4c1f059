"""Fitting, torch-free, one convention (scikit-learn's): parameters in ``__init__``, ``fit(...) -> self``, learned
values end in ``_``. Every fitted figure names what it was fitted on and is reproducible by a script in the repo.

    engine       EngineFit: engine-spec terms on the train split of the measurement corpus (scripts/fit_engines.py)
    points       a user's measured (batch, K) points: CSV, vllm bench serve JSON, SGLang bench_serving JSON lines
    shape        ShapeCalibration: bandwidth, compute, launch gap and engine factors from those points, MAP with the
                 shipped figures as priors (dsdsim calibrate --measurements); plan_points: which points to measure
                 (dsdsim calibrate --plan N); the points cross-validation (dsdsim accuracy --cv points)
    replay       the same fit through the serving simulation: each run saved with its requests replayed at the
                 figures being fitted, its target corrected by measured / replayed (calibrate --replay)
    calibrate    Calibrator: hardware efficiencies from a validation report (dsdsim calibrate --report)
    kernels      KernelFigureFit: kernel-shape figures from a probe's sweeps (dsdsim probe); MoEFamilyFit: fused-MoE
                 family figures from published kernel timings (scripts/fit_kernels.py)
    cv           leave-one-source-out refits: the error a new user should expect (dsdsim accuracy --cv source)
    intervals    split-conformal intervals from those residuals (the ranges predict, explain and plan print)
    summary      typed records of validation and calibration results
"""
