"""Continuous RL on DeepSpeed. Owned by the trainer stage."""

from pathlib import Path

from liverl.config.section import Section


class TrainerConfig(Section):
    checkpoint_dir: Path | None = None
    """DeepSpeed checkpoints for resume and HF exports for serving; default: <data_dir>/checkpoints."""
    learning_rate: float = 1e-4
    steps_per_version: int = 4
    """Optimizer steps between registered versions."""
