"""Multi-rank trainer benchmark: tokens/s of the same steps on N data-parallel ranks vs 1 (torchrun, gloo on CPU).

    .venv/bin/python bench/trainer_multirank_bench.py [--ranks 2] [--rounds 3] [--steps 6] [--zero-stage 1]

Each round launches a 1-rank and an N-rank trainer step loop (alternating, so load from other processes hits
both alike) on the same synthetic steps: the 1-rank run accumulates all of a step's micro-batches, each of the
N ranks 1/N of them (trainer/step/training_step.py), so both take the same optimizer steps. Every rank gets one torch
thread, one device per rank as on GPUs: where fewer cores are free than ranks, the ranks share cores and the
ratio shows it. Prints the median over rounds of each run's median step tokens/s, and the ratio N / 1.
Not a test: figures vary with the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORLD_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128, help="tokens per trajectory")
    parser.add_argument("--trajectories", type=int, default=16, help="trajectories per optimizer step")
    parser.add_argument("--micro-batches", type=int, default=4, help="micro-batches per step, all ranks together")
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    parser.add_argument("--worker", metavar="RESULT_JSON", help=argparse.SUPPRESS)  # one run, under a launcher
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.micro_batches % args.ranks:
        parser.error(f"--micro-batches {args.micro_batches} must be a multiple of --ranks {args.ranks}")
    if args.worker:
        return worker(args)

    from bench.report import environment_line, record
    from demo.policy.tiny_policy import build_policy

    scratch = Path(tempfile.mkdtemp(prefix="multirank-bench-"))
    policy = build_policy(scratch / "policy", [f"w{i}" for i in range(200)], n_layer=args.layers, n_embd=args.embd,
                          n_head=max(args.embd // 32, 1))
    rates: dict[int, list[float]] = {1: [], args.ranks: []}
    for round_ in range(args.rounds):
        for ranks in rates:
            rate = _launch(args, ranks, policy, scratch / f"round-{round_}-ranks-{ranks}.json")
            rates[ranks].append(rate)
            print(f"round {round_ + 1} | {ranks} rank(s) | tok/s {rate:.0f}", flush=True)
    one, many = statistics.median(rates[1]), statistics.median(rates[args.ranks])

    print(environment_line())
    print(f"trainer multirank bench | model {args.layers}x{args.embd} | {args.trajectories} traj x {args.seq} tok / step "
          f"| {args.micro_batches} micro-batches / step | {args.steps} steps (median) x {args.rounds} rounds (median) "
          f"| zero {args.zero_stage} | 1 torch thread per rank")
    print(f"1 rank   tok/s {one:10.0f}")
    print(f"{args.ranks} ranks  tok/s {many:10.0f}")
    print(f"ratio {args.ranks} ranks / 1 rank {many / one:8.3f}")
    record("trainer_multirank", {
        "ranks": args.ranks, "tokens_per_s": {"1": one, str(args.ranks): many}, "ratio": many / one,
        "rounds": {str(k): v for k, v in rates.items()}, "steps": args.steps, "zero_stage": args.zero_stage,
    })
    return 0


def _launch(args, ranks: int, policy: Path, result: Path) -> float:
    """One run of `steps` trainer steps on `ranks` ranks; its median step tokens/s (all ranks together)."""
    from liverl.io.processes import free_port

    script = [str(Path(__file__).resolve()), "--worker", str(result), "--policy", str(policy),
              "--ranks", str(ranks), *_shared_flags(args)]
    if ranks == 1:
        argv = [sys.executable, *script]
    else:
        argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", str(ranks),
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *script]
    env = {key: value for key, value in os.environ.items() if key not in WORLD_VARIABLES}
    env["OMP_NUM_THREADS"] = "1"
    completed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1200)
    if completed.returncode != 0:
        raise RuntimeError(f"{ranks}-rank run failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return statistics.median(json.loads(result.read_text())["tokens_per_s"])


def _shared_flags(args) -> list[str]:
    return ["--steps", str(args.steps), "--warmup", str(args.warmup), "--seq", str(args.seq),
            "--trajectories", str(args.trajectories), "--micro-batches", str(args.micro_batches),
            "--zero-stage", str(args.zero_stage)]


def worker(args) -> int:
    """Every rank: the same plans; rank 0 writes the step rates."""
    import torch

    from liverl.config import load_config
    from trainer.io.policy_io import load_policy
    from trainer.step.advantages import Baselines
    from trainer.step.engine import build_engine, start_distributed
    from trainer.step.training_step import run_step

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = load_config(environ={}, overrides=[
        "--trainer.deepspeed.zero_stage", str(args.zero_stage),
        "--trainer.deepspeed.micro_batch_tokens", str(args.seq * args.trajectories // args.micro_batches),
        "--trainer.deepspeed.gradient_accumulation_steps", str(args.micro_batches // args.ranks),
    ])
    ranks = start_distributed(config.trainer)
    engine = build_engine(load_policy(Path(args.policy)), config.trainer)
    engine.module.eval()
    vocab = engine.module.config.vocab_size
    baselines = Baselines()
    rates = []
    for step in range(args.steps + args.warmup):
        plan = _plan(args, vocab, step)
        metrics = run_step(engine, plan, step, baselines, config, ranks=ranks).metrics
        rates.append(metrics["tokens_per_s"])
    if ranks.main:
        Path(args.worker).write_text(json.dumps({"tokens_per_s": rates[args.warmup:]}))
    return 0


def _plan(args, vocab: int, seed: int):
    """A step of `trajectories` random trajectories of `seq` tokens, half rewarded (the same on every rank)."""
    import random

    from trainer.step.builder import StepPlan
    from trainer.step.trajectory import Trajectory

    rng = random.Random(seed)
    trajectories = []
    for i in range(args.trajectories):
        prompt = 8
        tokens = tuple(rng.randrange(4, vocab) for _ in range(args.seq))
        mask = tuple([0] * prompt + [1] * (args.seq - prompt))
        behaviour = tuple([0.0] * prompt + [-5.0 + rng.random()] * (args.seq - prompt))
        trajectories.append(Trajectory(f"{seed}-{i}", 0, "coding", "", "single", ("1",), tokens, mask, behaviour,
                                       reward_components={"outcome": float(i % 2)}))
    return StepPlan(trajectories=trajectories, weights=[1.0] * len(trajectories), lags=[0] * len(trajectories))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    raise SystemExit(main())
