"""The DeepSpeed engine from TrainerConfig: one code path for one CPU process (gloo) and for GPU ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config.trainer import TrainerConfig
from trainer.step.rank_messages import check_secret
from trainer.step.ranks import Ranks

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
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
        )
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # a world of one talks to nobody: loopback only


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
        **_warmup(config),
    }


def _warmup(config: TrainerConfig) -> dict:
    """DeepSpeed's WarmupLR for trainer.warmup_steps W: linear from learning_rate/(W + 1) to learning_rate.

    Built at iteration 0 (its default, -1, would take the minimum for two updates and log a warning), which
    build_engine then applies to the optimizer: update k (1-based) takes min + (lr - min)·(k - 1)/W, which with
    min = lr/(W + 1) is lr·k/(W + 1), and the full rate from update W + 1. Saved and restored with each checkpoint
    (engine.save_checkpoint / load_checkpoint), so a resume goes on where the schedule was."""
    steps = config.warmup_steps
    if not steps:
        return {}
    lr = config.learning_rate
    return {"scheduler": {"type": "WarmupLR", "params": {
        "warmup_min_lr": lr / (steps + 1), "warmup_max_lr": lr, "warmup_num_steps": steps, "warmup_type": "linear",
        "last_batch_iteration": 0,
    }}}


def start_distributed(config: TrainerConfig) -> Ranks:
    """Join the launcher's world (deepspeed, torchrun), or make a world of one; idempotent."""
    import deepspeed
    import torch.distributed as dist

    prepare_environment(config)
    ds = config.deepspeed
    accelerator = os.environ["DS_ACCELERATOR"]
    secret = check_secret(ds.rank_secret, int(os.environ["WORLD_SIZE"]))  # before joining anyone
    backend = ds.backend or ("gloo" if accelerator == "cpu" else "nccl")
    if os.environ["WORLD_SIZE"] == "1" or (accelerator == "cpu" and not ds.shm_allreduce):
        # The shared-memory allreduce only helps CPU ranks on one host; without it, skip its ~50 s gcc build.
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    if os.environ["WORLD_SIZE"] == "1":
        # A file rendezvous: a TCP store would listen on every interface for a world nobody else joins.
        import tempfile

        store = Path(tempfile.mkdtemp(prefix="liverl-rendezvous-")) / "store"
        deepspeed.init_distributed(dist_backend=backend, init_method=f"file://{store}", rank=0, world_size=1)
    else:
        deepspeed.init_distributed(dist_backend=backend)
    device = "cpu"
    if accelerator != "cpu":
        from deepspeed.accelerator import get_accelerator

        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        get_accelerator().set_device(local_rank)
        device = f"{get_accelerator().device_name()}:{local_rank}"
    ranks = Ranks(dist.get_rank(), dist.get_world_size(), device, secret=secret)
    ranks.authenticate()  # before any decision: a process without the secret is refused by every rank
    return ranks


def build_engine(model: torch.nn.Module, config: TrainerConfig) -> DeepSpeedEngine:
    """deepspeed.initialize with a torch AdamW (no fused/CPU Adam op build) over the parameters that require
    gradients: all of them for full fine-tuning, only the adapter's with LoRA (the base stays frozen); its learning
    rate warms up over trainer.warmup_steps from this build on (a loaded checkpoint brings its own schedule)."""
    import deepspeed
    import torch

    start_distributed(config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise ValueError(f"{type(model).__name__} has no parameter that requires gradients: nothing to train; "
                         "load the policy with trainer.io.policy_io.load_policy or trainer.step.adapters.trainable_policy")
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(config))
    if engine.lr_scheduler is not None:  # trainer.warmup_steps: the first update's rate, lr/(W + 1) (see _warmup)
        engine.lr_scheduler.step(0)
    return engine


def full_state_dict(engine: DeepSpeedEngine, keep: bool = True) -> dict[str, torch.Tensor]:
    """Consolidated fp32 weights on CPU. ZeRO-3 partitions parameters, so every rank must call this (the gather
    is collective); keep=False on ranks that only take part in the gather (they get {})."""
    module = engine.module
    return _gathered(engine, list(module.parameters()), module.state_dict, keep)


def adapter_state_dict(engine: DeepSpeedEngine, adapter: torch.nn.Module, keep: bool = True
                       ) -> dict[str, torch.Tensor]:
    """The trained adapter's fp32 weights on CPU under the names of its peft wrapper (what peft's save_pretrained
    takes): the parameters that require gradients. Collective under ZeRO-3 like full_state_dict."""
    trained = {name: param for name, param in adapter.named_parameters() if param.requires_grad}
    return _gathered(engine, list(trained.values()), lambda: trained, keep)


def _gathered(engine: DeepSpeedEngine, parameters: list, tensors, keep: bool) -> dict[str, torch.Tensor]:
    """tensors() copied to CPU fp32 while `parameters` are gathered whole (ZeRO-3 partitions them)."""
    import deepspeed
    import torch

    def copy() -> dict[str, torch.Tensor]:
        if not keep:
            return {}
        return {name: tensor.detach().to("cpu", torch.float32).clone() for name, tensor in tensors().items()}

    if engine.zero_optimization_stage() == 3:
        with deepspeed.zero.GatheredParameters(parameters, modifier_rank=None):
            return copy()
    return copy()
