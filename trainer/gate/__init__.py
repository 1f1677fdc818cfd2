"""The promotion gate: held-out evidence, the verdict with stated error rates, judging beside training."""
