"""Cost model: FLOPs and bytes of every operator (ops.py), experts touched (experts.py), layers and passes
(layers.py), drafters (drafts.py), roofline timing (timing.py), memory (memory.py), whole steps (step.py)."""
