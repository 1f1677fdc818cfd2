"""Trainer benchmark: the same model and batches through the DeepSpeed trainer step, packed and padded, and a
plain PyTorch loop.

    .venv/bin/python bench/trainer_bench.py [--steps 12] [--seq 128] [--min-seq 16] [--trajectories 16]
    .venv/bin/python bench/trainer_bench.py --demo   # the demo's short sessions at micro_batch_tokens 1024

Trajectory lengths are drawn uniformly from [min-seq, seq]. Prints the median tokens/s of each, the ratios
packed/padded and DeepSpeed/plain, and the useful share (real / computed tokens) of both layouts, beside the
cores and load average. Not a test: figures vary with the machine.
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
    parser.add_argument("--seq", type=int, default=128, help="most tokens per trajectory")
    parser.add_argument("--min-seq", type=int, default=16, help="fewest tokens per trajectory")
    parser.add_argument("--micro-batch-tokens", type=int, default=None, help="default: seq x trajectories / 2")
    parser.add_argument("--demo", action="store_true",
                        help="the demo's sessions: 8 to 72 tokens, 40 a step, micro_batch_tokens 1024, model 2x64")
    parser.add_argument("--trajectories", type=int, default=16, help="trajectories per optimizer step")
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    args = parser.parse_args(argv)
    if args.demo:
        args.seq, args.min_seq, args.trajectories, args.micro_batch_tokens = 72, 8, 40, 1024
        args.layers, args.embd = 2, 64
    budget = args.micro_batch_tokens or args.seq * args.trajectories // 2

    import torch

    from bench.random_steps import random_plan
    from bench.report import environment_line, record
    from demo.policy.tiny_policy import build_policy
    from liverl.config import load_config
    from trainer.io.policy_io import load_policy
    from trainer.step.engine import build_engine
    from trainer.step.training_step import run_step

    torch.manual_seed(0)
    folder = build_policy(Path(tempfile.mkdtemp()) / "policy", [f"w{i}" for i in range(200)],
                          n_layer=args.layers, n_embd=args.embd, n_head=max(args.embd // 32, 1))
    configs = {layout: load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(args.zero_stage),
        "--trainer.deepspeed.micro_batch_tokens", str(budget),
        "--trainer.deepspeed.gradient_accumulation_steps", "2",
        "--trainer.deepspeed.pack_sequences", str(layout == "packed").lower(),
    ]) for layout in ("packed", "padded")}
    vocab = load_policy(folder).config.vocab_size
    plans = [random_plan(args.trajectories, args.min_seq, args.seq, vocab, seed)
             for seed in range(args.steps + args.warmup)]

    base = load_policy(folder)
    plain = PlainLoop(copy.deepcopy(base), configs["packed"])
    engines = {layout: build_engine(copy.deepcopy(base), config.trainer) for layout, config in configs.items()}
    baselines = {layout: _baselines() for layout in engines}
    rates: dict[str, list[float]] = {"packed": [], "padded": [], "plain": []}
    useful: dict[str, list[float]] = {"packed": [], "padded": []}
    for step, plan in enumerate(plans):  # interleaved, so load from other processes hits all alike
        for layout, engine in engines.items():
            metrics = run_step(engine, plan, step, baselines[layout], configs[layout]).metrics
            rates[layout].append(metrics["tokens_per_s"])
            useful[layout].append(metrics["useful_share"])
        rates["plain"].append(plain.step(plan, step))
    median = {name: statistics.median(values[args.warmup:]) for name, values in rates.items()}
    share = {name: statistics.median(values[args.warmup:]) for name, values in useful.items()}

    print(environment_line())
    print(f"trainer bench | model {args.layers}x{args.embd} | {args.trajectories} traj x {args.min_seq}-{args.seq} tok "
          f"/ step | micro_batch_tokens {budget} | {args.steps} steps (median) | zero {args.zero_stage} "
          f"| torch threads {torch.get_num_threads()}")
    print(f"deepspeed packed   tok/s {median['packed']:10.0f} | useful share {share['packed']:.3f}")
    print(f"deepspeed padded   tok/s {median['padded']:10.0f} | useful share {share['padded']:.3f}")
    print(f"plain pytorch loop tok/s {median['plain']:10.0f} (packed)")
    print(f"ratio packed/padded       {median['packed'] / median['padded']:10.3f}")
    print(f"ratio deepspeed/plain     {median['packed'] / median['plain']:10.3f}")
    record("trainer_demo" if args.demo else "trainer", {
        "tokens_per_s": median, "useful_share": share, "steps": args.steps, "micro_batch_tokens": budget,
        "packed_over_padded": median["packed"] / median["padded"],
        "deepspeed_over_plain": median["packed"] / median["plain"],
    })
    return 0


def _baselines():
    from trainer.step.advantages import Baselines

    return Baselines()


class PlainLoop:
    """The same step without DeepSpeed: torch AdamW, the same loss, micro-batches (the config's layout),
    accumulation and clipping."""

    def __init__(self, model, config):
        import torch

        self.model, self.config = model, config
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.trainer.learning_rate)
        self.baselines = _baselines()

    def step(self, plan, step: int) -> float:
        import torch

        from trainer.step.advantages import compute_advantages
        from trainer.step.batching import collate_rows, trajectory_samples
        from trainer.step.packing import micro_batches
        from trainer.step.rewarding import mixed_rewards
        from trainer.step.training_step import batch_loss, step_objective

        tc = self.config.trainer
        started = time.perf_counter()
        rewards = mixed_rewards(plan.trajectories, step, self.config.rewards)
        advantages = compute_advantages(plan.trajectories, rewards, self.baselines, tc.advantages)
        samples = [s for t, a in zip(plan.trajectories, advantages)
                   for s in trajectory_samples(t, 1.0, tc.max_seq_len, a)]
        batches = [collate_rows(rows) for rows in micro_batches(samples, tc.deepspeed)]
        total = sum(batch.trained_tokens for batch in batches)
        for batch in batches:
            weights, losses, _ = batch_loss(self.model, batch, tc.loss)
            step_objective(losses, weights, total).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), tc.deepspeed.gradient_clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sum(len(s.token_ids) for s in samples) / (time.perf_counter() - started)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    raise SystemExit(main())
