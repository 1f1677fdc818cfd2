"""Tenant trainer benchmark: the trainer (trainer/loop.py) with tenant groups training the same rows spread
over 8 tenants, each with an adapter of its own, against all of them in one tenant (one adapter), side by side.

    .venv/bin/python bench/tenant_trainer_bench.py --rows 352 --rounds 3

The tenants demo's policy and trainer settings (configs/demo-tenants.toml): a tiny Llama (2 layers, width 64),
rank-16 adapters, tokens_per_step 2048 per group, micro-batches of 1024 tokens, 2 per step. Starts its own embedded
stack (MLflow holds the base both trainers start from) in a temporary folder, registers the tiny Llama as the shared
champion and starts two Trainers on it, each on a Delta table of its own: one with trainer.tenants.adapters
naming 8 tenants, the other naming 1. Each round commits `--rows` new trajectories (random tokens, lengths in
[min-seq, seq]) to both tables, the same rows but for their tenant_id: spread round-robin over the 8 tenants on one
side, all the one tenant's on the other. Then each trainer trains everything new, the two sides taking turns going
first (after an untimed round: each engine's first step). Timed: the trainer's loop without its publishing
(build_tenant_steps draws each group's next step from the group's own stream of the table, Trainer.step trains
it on the group's adapter); checkpoints, exports, gates and registrations (once per group and version) are left out.
Prints trained tokens/s of each side, the per-round ratio 8 tenants / 1, the medians, and the share of each side's
time spent drawing steps (reading the table).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

WORDS = [f"w{i}" for i in range(200)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=352, help="trajectories per round, on each side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", type=int, default=8, help="tenants on the spread side")
    parser.add_argument("--seq", type=int, default=72, help="most tokens per trajectory")
    parser.add_argument("--min-seq", type=int, default=8, help="fewest tokens per trajectory")
    parser.add_argument("--tokens-per-step", type=int, default=2048, help="trainer.tenants.tokens_per_step")
    parser.add_argument("--micro-batch-tokens", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--embd", type=int, default=64)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoConfig

    from bench.random_steps import random_rows
    from bench.report import environment, environment_line, record
    from bench.serving_stack import embedded_stack
    from demo.policy.tiny_policy import build_policy
    from tests.trainer.conftest import commit_batch
    from trainer.io.base_policy import register_base

    sides = {"spread": [f"t{i}" for i in range(args.tenants)], "one": ["t0"]}
    labels = {"spread": f"{args.tenants} tenants", "one": "1 tenant"}
    measured_in = environment()
    with embedded_stack("tenant-trainer-bench-", "tenant-trainer-bench",
                        "--trainer.lora.enabled", "true", "--trainer.lora.rank", str(args.rank),
                        "--trainer.lora.alpha", str(2.0 * args.rank),
                        "--trainer.tenants.tokens_per_step", str(args.tokens_per_step),
                        "--trainer.deepspeed.micro_batch_tokens", str(args.micro_batch_tokens),
                        "--trainer.deepspeed.gradient_accumulation_steps", "2",
                        "--trainer.gate.holdout_fraction", "0") as (config, tmp):
        folder = build_policy(tmp / "base", WORDS, arch="llama", n_layer=args.layers, n_embd=args.embd,
                              n_head=max(args.embd // 32, 1))  # head_dim 32, as tiny_policy's default
        register_base(config, folder, say=lambda *_: None)
        vocab = AutoConfig.from_pretrained(folder).vocab_size
        trainers, started_s = {}, {}
        for side, tenants in sides.items():
            began = time.perf_counter()
            trainers[side] = _trainer(config, tmp / side, tenants)
            started_s[side] = time.perf_counter() - began
            print(f"{labels[side]}: trainer started in {started_s[side]:.1f} s "
                  f"({len(trainers[side].policies.engines)} adapters and engines, the shared group's included)",
                  flush=True)
        rates: dict[str, list[float]] = {side: [] for side in sides}
        drawing: dict[str, list[float]] = {side: [] for side in sides}
        steps: dict[str, list[int]] = {side: [] for side in sides}
        try:
            for round_ in range(args.rounds + 1):  # round 0 untimed: every group's engine takes its first step
                rows = random_rows(args.rows, args.min_seq, args.seq, vocab, seed=round_, prefix=f"r{round_}")
                for side, tenants in sides.items():
                    commit_batch(trainers[side].config.table.trajectories_uri,
                                 [row | {"tenant_id": tenants[i % len(tenants)]} for i, row in enumerate(rows)],
                                 f"batch-{round_}", round_)
                if round_ == 0:
                    for trainer in trainers.values():
                        train_available(trainer)
                    continue
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for side in order:
                    tokens, seconds, drawn_s, count = train_available(trainers[side])
                    rates[side].append(tokens / seconds)
                    drawing[side].append(drawn_s / seconds)
                    steps[side].append(count)
                print(f"round {round_}/{args.rounds} | " + " | ".join(
                    f"{labels[s]} {rates[s][-1]:.0f} tok/s ({steps[s][-1]} steps)" for s in sides)
                    + f" | ratio {rates['spread'][-1] / rates['one'][-1]:.3f}", flush=True)
        finally:
            for trainer in trainers.values():
                trainer.close()

    ratios = [spread / one for spread, one in zip(rates["spread"], rates["one"])]
    median = {side: statistics.median(values) for side, values in rates.items()}
    print(environment_line())
    print(f"tenant trainer bench | tiny llama {args.layers}x{args.embd}, rank-{args.rank} adapters | {args.rows} "
          f"trajectories x {args.min_seq}-{args.seq} tokens a round | tokens_per_step {args.tokens_per_step}, "
          f"micro-batches {args.micro_batch_tokens} x 2 | cpu threads {torch.get_num_threads()} | "
          f"{args.rounds} rounds")
    for side in sides:
        print(f"{labels[side]:>11} | tok/s {median[side]:8.1f} (rounds: {', '.join(f'{r:.0f}' for r in rates[side])}) "
              f"| drawing steps {100 * statistics.median(drawing[side]):.0f}% of the time | steps a round "
              f"{statistics.median(steps[side]):.0f} | trainer start {started_s[side]:.1f} s")
    print(f"ratio {labels['spread']} / {labels['one']}, median of rounds {statistics.median(ratios):6.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
    record("tenant_trainer", {
        "tokens_per_s": {labels[s]: median[s] for s in sides}, "spread_over_one": statistics.median(ratios),
        "round_ratios": ratios, "drawing_share": {labels[s]: statistics.median(drawing[s]) for s in sides},
        "start_s": {labels[s]: started_s[s] for s in sides}, "args": vars(args),
    }, measured_in=measured_in)
    return 0


def _trainer(config, folder: Path, tenants: list[str]):
    """A started Trainer with a table and checkpoints of its own, a named adapter per tenant."""
    from trainer.loop import Trainer

    side = config.model_copy(deep=True)
    side.table.trajectories_uri = str(folder / "table")
    side.trainer.checkpoint_dir = folder / "checkpoints"
    side.trainer.tenants.adapters = tenants
    trainer = Trainer(side, say=lambda *_: None)
    trainer.start()
    return trainer


def train_available(trainer) -> tuple[int, float, float, int]:
    """Train every group on everything new, as Trainer.run's loop does but without its maybe_publish (nor the wait
    for trainer.min_step_rows):
    (trajectory tokens trained, seconds, of them seconds drawing steps, steps)."""
    from trainer.groups.tenant_groups import build_tenant_steps

    tokens, drawing, steps = 0, 0.0, 0
    started = time.perf_counter()
    while True:
        drawn = time.perf_counter()
        plans = build_tenant_steps({name: group.stream for name, group in trainer.groups.items()}, trainer.trained,
                                   {name: group.served for name, group in trainer.groups.items()},
                                   int(time.time() * 1000), trainer.tc, trainer.say, opener=trainer.opener)
        drawing += time.perf_counter() - drawn
        if not plans:
            return tokens, time.perf_counter() - started, drawing, steps
        for group, plan in plans.items():
            if not plan.empty:
                trainer.step(group, plan)
                tokens += sum(len(t.token_ids) for t in plan.trajectories)
                steps += 1


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    raise SystemExit(main())
