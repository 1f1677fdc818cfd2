"""The DeepSpeed engine from TrainerConfig: one code path for one CPU process (gloo) and for GPU ranks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from liverl.config.trainer import TrainerConfig

if TYPE_CHECKING:
    import torch
    from deepspeed import DeepSpeedEngine


def prepare_environment(config: TrainerConfig) -> None:
    """Choose the accelerator and, when no launcher set them, the single-process rendezvous variables."""
    import torch

    accelerator = config.deepspeed.accelerator or ("cuda" if torch.cuda.is_available() else "cpu")
    os.environ.setdefault("DS_ACCELERATOR", accelerator)
    if "WORLD_SIZE" not in os.environ:  # not started by the deepspeed/torchrun launcher: a world of one
        from liverl.io.processes import free_port

        os.environ.update(
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1"
        )


def deepspeed_config(config: TrainerConfig) -> dict:
    ds = config.deepspeed
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return {
        # Micro-batches are token-budgeted, so the nominal per-GPU batch is one micro-batch.
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": ds.gradient_accumulation_steps,
        "train_batch_size": ds.gradient_accumulation_steps * world,
        "gradient_clipping": ds.gradient_clipping,
        "zero_optimization": {"stage": ds.zero_stage},
        "bf16": {"enabled": ds.precision == "bf16"},
        "fp16": {"enabled": ds.precision == "fp16"},
        "steps_per_print": 10**9,  # the trainer prints its own line per step
        "wall_clock_breakdown": False,
    }


def build_engine(model: torch.nn.Module, config: TrainerConfig) -> DeepSpeedEngine:
    """deepspeed.initialize with a torch AdamW (no fused/CPU Adam op build)."""
    import deepspeed
    import torch

    prepare_environment(config)
    ds = config.deepspeed
    backend = ds.backend or ("gloo" if os.environ["DS_ACCELERATOR"] == "cpu" else "nccl")
    if os.environ.get("WORLD_SIZE") == "1":
        # The shared-memory allreduce only helps ranks on one host; with one rank, skip its ~50 s gcc build.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(config))
    return engine


def full_state_dict(engine: DeepSpeedEngine) -> dict[str, torch.Tensor]:
    """Consolidated fp32 weights on CPU (ZeRO-3 partitions parameters, so gather them first)."""
    import deepspeed
    import torch

    module = engine.module

    def copy() -> dict[str, torch.Tensor]:
        return {name: tensor.detach().to("cpu", torch.float32).clone() for name, tensor in module.state_dict().items()}

    if engine.zero_optimization_stage() == 3:
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            return copy()
    return copy()
