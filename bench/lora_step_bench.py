"""LoRA step benchmark: liverl's DeepSpeed step (trainer/training_step.run_step) training an adapter, against a
plain peft + torch AdamW loop on the same batches (same model, same adapter initialisation, same tokens).

    .venv/bin/python bench/lora_step_bench.py                       # a tiny Llama built here
    .venv/bin/python bench/lora_step_bench.py --model DIR --seq 64  # a real Hugging Face folder (SmolLM2, ...)

Rounds alternate which side goes first, so load from other processes hits both alike; each round times `--steps`
optimizer steps of each side. Prints the median tokens/s of each, the median of the per-round ratios
DeepSpeed/plain, and memory: on a GPU each side's peak allocated memory over its steps, on CPU each side's
training state (parameters, gradients, optimizer state and the optimizer's parameter copies) and the process's
peak RSS. Not a test: figures vary with the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    measure(argv)
    return 0


def measure(argv: list[str] | None = None) -> dict:
    """Run the bench with these arguments, print its lines, and return what it records."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a HF policy folder; default: a tiny Llama")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps per side and round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per side first")
    parser.add_argument("--seq", type=int, default=128, help="most tokens per trajectory")
    parser.add_argument("--min-seq", type=int, default=32, help="fewest tokens per trajectory")
    parser.add_argument("--trajectories", type=int, default=8, help="trajectories per optimizer step")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--zero-stage", type=int, default=1)
    parser.add_argument("--layers", type=int, default=4, help="tiny Llama only")
    parser.add_argument("--embd", type=int, default=128, help="tiny Llama only")
    args = parser.parse_args(argv)

    import torch

    from bench.random_steps import random_plan
    from bench.report import environment, environment_line, record
    from demo.policy.tiny_policy import build_policy
    from liverl.config import load_config
    from trainer.io.policy_io import weights_digest
    from trainer.step.adapters import AdapterBase, trainable_policy
    from trainer.step.engine import build_engine

    folder = args.model or build_policy(Path(tempfile.mkdtemp()) / "llama", [f"w{i}" for i in range(500)],
                                        arch="llama", n_layer=args.layers, n_embd=args.embd,
                                        n_head=max(args.embd // 64, 1))
    budget = args.seq * args.trajectories  # one micro-batch a step on both sides: the same work, one optimizer step
    config = load_config(environ={}, overrides=[
        "--trainer.lora.enabled", "true", "--trainer.lora.rank", str(args.rank),
        "--trainer.deepspeed.zero_stage", str(args.zero_stage), "--trainer.deepspeed.micro_batch_tokens", str(budget),
        "--trainer.deepspeed.gradient_accumulation_steps", "1",
    ])
    measured_in = environment()
    base = AdapterBase("1", weights_digest(folder), Path(folder))
    device = "cuda" if torch.cuda.is_available() else "cpu"

    torch.manual_seed(0)
    engine = build_engine(trainable_policy(folder, base, config.trainer.lora).model, config.trainer)
    torch.manual_seed(0)  # the same adapter initialisation on the plain side
    plain = PlainLoop(trainable_policy(folder, base, config.trainer.lora).model.to(device), config)
    vocab = plain.model.config.vocab_size
    plans = [random_plan(args.trajectories, args.min_seq, args.seq, vocab, seed)
             for seed in range(args.warmup + args.rounds * args.steps)]
    sides = {"deepspeed": DeepSpeedSide(engine, config), "plain": plain}
    for side in sides.values():
        for step in range(args.warmup):
            side.step(plans[step], step)

    rates: dict[str, list[float]] = {name: [] for name in sides}
    peaks: dict[str, int] = {name: 0 for name in sides}
    for round_ in range(args.rounds):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        chunk = plans[args.warmup + round_ * args.steps:][:args.steps]
        for name in order:
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            started, tokens = time.perf_counter(), 0
            for step, plan in enumerate(chunk):
                tokens += sides[name].step(plan, step)
            if device == "cuda":
                torch.cuda.synchronize()
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated())
            rates[name].append(tokens / (time.perf_counter() - started))
        print(f"round {round_ + 1}/{args.rounds} | " + " | ".join(f"{n} {rates[n][-1]:.1f} tok/s" for n in sides),
              flush=True)
    ratios = [ds / pl for ds, pl in zip(rates["deepspeed"], rates["plain"])]
    median = {name: statistics.median(values) for name, values in rates.items()}
    state = {"deepspeed": training_state_bytes(engine.module, engine.optimizer),
             "plain": training_state_bytes(plain.model, plain.optimizer)}
    trainable = sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters() if p.requires_grad)
    total = sum(getattr(p, "ds_numel", p.numel()) for p in engine.module.parameters())

    print(environment_line())
    name = args.model.name if args.model else f"tiny llama {args.layers}x{args.embd}"
    print(f"lora step bench | {name} | {total / 1e6:.1f}M parameters, {trainable / 1e6:.2f}M in the rank-{args.rank} "
          f"adapter | {args.trajectories} traj x {args.min_seq}-{args.seq} tok / step | zero {args.zero_stage} "
          f"fp32 | {device} | {args.rounds} rounds x {args.steps} steps | torch threads "
          f"{torch.get_num_threads()}")
    for side in sides:
        memory = (f"peak allocated {peaks[side] / 2**20:8.1f} MiB" if device == "cuda"
                  else f"training state {state[side] / 2**20:8.1f} MiB")
        print(f"{side:9s} tok/s {median[side]:10.1f} (rounds: {', '.join(f'{r:.0f}' for r in rates[side])}) | {memory}")
    print(f"ratio deepspeed/plain, median of rounds {statistics.median(ratios):6.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}) | goal >= 0.9")
    print(f"process peak RSS {_peak_rss_mib():.0f} MiB")
    figures = {
        "tokens_per_s": median, "deepspeed_over_plain": statistics.median(ratios), "round_ratios": ratios,
        "rounds": args.rounds, "steps_per_round": args.steps, "parameters": total, "adapter_parameters": trainable,
        "peak_allocated_bytes" if device == "cuda" else "training_state_bytes": peaks if device == "cuda" else state,
    }
    record("lora_step" if args.model is None else f"lora_step_{args.model.name}", figures, measured_in=measured_in)
    if hasattr(engine, "destroy"):
        engine.destroy()
    return figures


class DeepSpeedSide:
    def __init__(self, engine, config):
        from trainer.step.advantages import Baselines

        self.engine, self.config, self.baselines = engine, config, Baselines()

    def step(self, plan, step: int) -> int:
        from trainer.step.training_step import run_step

        run_step(self.engine, plan, step, self.baselines, self.config)
        return sum(len(t.token_ids) for t in plan.trajectories)


class PlainLoop:
    """The same step without DeepSpeed: peft's model, torch AdamW over the adapter, the same loss on the same
    micro-batches, one optimizer step per trainer step, the same gradient clipping."""

    def __init__(self, model, config):
        import torch

        from trainer.step.advantages import Baselines

        self.model, self.config, self.baselines = model, config, Baselines()
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=config.trainer.learning_rate)

    def step(self, plan, step: int) -> int:
        import torch

        from trainer.step.advantages import step_signals
        from trainer.step.batching import collate_rows
        from trainer.step.packing import micro_batches
        from trainer.step.rewarding import mixed_rewards
        from trainer.step.training_step import batch_loss, step_objective, step_samples

        tc = self.config.trainer
        rewards = mixed_rewards(plan.trajectories, step, self.config.rewards)
        signals = step_signals(plan.trajectories, rewards, self.baselines, tc.advantages, tc.loss)
        samples = [s for _, s in step_samples(plan.trajectories, plan.weights, signals, tc.max_seq_len)]
        device = next(self.model.parameters()).device
        batches = [collate_rows(rows).to(device) for rows in micro_batches(samples, tc.deepspeed)]
        total = sum(batch.trained_tokens for batch in batches)
        for batch in batches:
            weights, losses, _ = batch_loss(self.model, batch, tc.loss)
            step_objective(losses, weights, total).backward()
        torch.nn.utils.clip_grad_norm_(self.trainable, tc.deepspeed.gradient_clipping)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sum(len(t.token_ids) for t in plan.trajectories)


def training_state_bytes(model, optimizer) -> int:
    """Bytes of the distinct tensors a training step keeps: parameters, gradients, and down the optimizer's
    wrappers (DeepSpeed's ZeRO optimizer wraps a torch one) their state and the parameters they update."""
    import torch

    seen: dict[int, int] = {}

    def add(tensor) -> None:
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            seen.setdefault(tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())

    for param in model.parameters():
        add(param)
        add(param.grad)
    while optimizer is not None:
        for group in getattr(optimizer, "param_groups", []):
            for param in group["params"]:
                add(param)
                add(param.grad)
        for values in getattr(optimizer, "state", {}).values():
            for value in values.values() if isinstance(values, dict) else ():
                add(value)
        optimizer = getattr(optimizer, "optimizer", None)
    return sum(seen.values())


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    raise SystemExit(main())
