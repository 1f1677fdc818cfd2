"""Trainer benchmark: the same model and batches through the DeepSpeed trainer step and a plain PyTorch loop.

    .venv/bin/python bench/trainer_bench.py [--steps 12] [--seq 128] [--trajectories 16] [--zero-stage 1]

Prints the median tokens/s of each and their ratio (DeepSpeed / plain). Not a test: figures vary with the machine.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128, help="tokens per trajectory")
    parser.add_argument("--trajectories", type=int, default=16, help="trajectories per optimizer step")
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    args = parser.parse_args(argv)

    import torch

    from liverl.config import load_config
    from demo.policy.tiny_policy import build_policy
    from trainer.engine import build_engine
    from trainer.policy_io import load_policy
    from trainer.step_builder import StepPlan
    from trainer.training_step import run_step
    from trainer.trajectory import Trajectory

    torch.manual_seed(0)
    folder = build_policy(Path(tempfile.mkdtemp()) / "policy", [f"w{i}" for i in range(200)],
                          n_layer=args.layers, n_embd=args.embd, n_head=max(args.embd // 32, 1))
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(args.zero_stage),
        "--trainer.deepspeed.micro_batch_tokens", str(args.seq * args.trajectories // 2),
        "--trainer.deepspeed.gradient_accumulation_steps", "2",
    ])
    vocab = load_policy(folder).config.vocab_size
    plans = [_plan(Trajectory, StepPlan, args, vocab, seed) for seed in range(args.steps + args.warmup)]

    base = load_policy(folder)
    plain_model = copy.deepcopy(base)
    engine = build_engine(base, config.trainer)
    engine.module.eval()
    plain = PlainLoop(plain_model, config)
    deepspeed_baselines = _baselines()
    deepspeed_rates, plain_rates = [], []
    for step, plan in enumerate(plans):  # interleaved, so load from other processes hits both alike
        deepspeed_rates.append(run_step(engine, plan, step, deepspeed_baselines, config).metrics["tokens_per_s"])
        plain_rates.append(plain.step(plan, step))
    deepspeed_rates, plain_rates = deepspeed_rates[args.warmup:], plain_rates[args.warmup:]

    ds, plain = statistics.median(deepspeed_rates), statistics.median(plain_rates)
    print(f"trainer bench | model {args.layers}x{args.embd} | {args.trajectories} traj x {args.seq} tok / step "
          f"| {args.steps} steps (median) | zero {args.zero_stage} | torch threads {torch.get_num_threads()}")
    print(f"deepspeed trainer  tok/s {ds:10.0f}")
    print(f"plain pytorch loop tok/s {plain:10.0f}")
    print(f"ratio deepspeed/plain     {ds / plain:10.3f}")
    return 0


def _baselines():
    from trainer.advantages import Baselines

    return Baselines()


def _plan(Trajectory, StepPlan, args, vocab: int, seed: int):
    import random

    rng = random.Random(seed)
    trajectories, weights = [], []
    for i in range(args.trajectories):
        tokens = tuple(rng.randrange(4, vocab) for _ in range(args.seq))
        mask = tuple([0] * 8 + [1] * (args.seq - 8))
        behaviour = tuple([0.0] * 8 + [-5.0 + rng.random()] * (args.seq - 8))
        trajectories.append(Trajectory(f"{seed}-{i}", 0, "coding", "", "single", ("1",), tokens, mask, behaviour,
                                       reward_components={"outcome": float(i % 2)}))
        weights.append(1.0)
    return StepPlan(trajectories=trajectories, weights=weights, lags=[0] * len(trajectories))


class PlainLoop:
    """The same step without DeepSpeed: torch AdamW, the same loss, micro-batches, accumulation and clipping."""

    def __init__(self, model, config):
        import torch

        self.model, self.config = model, config
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.trainer.learning_rate)
        self.baselines = _baselines()

    def step(self, plan, step: int) -> float:
        import torch

        from trainer.advantages import compute_advantages
        from trainer.batching import collate, pack, trajectory_samples
        from trainer.rewarding import mixed_rewards
        from trainer.training_step import batch_loss, step_objective

        tc = self.config.trainer
        started = time.perf_counter()
        rewards = mixed_rewards(plan.trajectories, step, self.config.rewards)
        advantages = compute_advantages(plan.trajectories, rewards, self.baselines, tc.advantages)
        samples = [s for t, a in zip(plan.trajectories, advantages)
                   for s in trajectory_samples(t, 1.0, tc.max_seq_len, a)]
        batches = [collate(group) for group in pack(samples, tc.deepspeed.micro_batch_tokens)]
        total = sum(batch.trained_tokens for batch in batches)
        for batch in batches:
            weights, losses, _ = batch_loss(self.model, batch, tc.loss)
            step_objective(losses, weights, total).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.deepspeed.gradient_clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sum(len(s.token_ids) for s in samples) / (time.perf_counter() - started)


if __name__ == "__main__":
    raise SystemExit(main())
