"""Learnability calibration: does a plain off-policy PG loop raise the product's served reward?

    python -m demo.policy.calibrate                      # bootstraps a base policy, then 20 iterations
    python -m demo.policy.calibrate --base DIR --reward library   # train on liverl.rewards' mixed reward

Samples sessions with the local policy (behaviour weights lag the learner by --sync-every
iterations, like served versions), rewards them with the product's served reward (or the rewards
library's mixed reward, as the real trainer does), updates with offpolicy_pg, and prints the served
reward per family before and after on fixed evaluation tasks.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from demo.policy.offpolicy_pg import PgSample, pg_loss

EVAL_SEED = 424242


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, help="a base policy folder; default: bootstrap one now")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=48, help="sessions sampled per iteration")
    parser.add_argument("--epochs", type=int, default=2, help="optimizer steps on each iteration's batch")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--sync-every", type=int, default=3,
                        help="iterations between behaviour weight syncs (a served version every N iterations)")
    parser.add_argument("--baseline-decay", type=float, default=0.8, help="per-family running baseline EMA")
    parser.add_argument("--eval-sessions", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reward", choices=("served", "library"), default="served",
                        help="served: the product's outcome score; library: liverl.rewards label + mix")
    return parser.parse_args(argv)


def evaluate(policy, n_sessions: int) -> dict[str, float]:
    from demo.product.memory_recorder import MemoryRecorder
    from demo.product.traffic import run_traffic

    stats = run_traffic(policy, MemoryRecorder(), n_sessions=n_sessions, seed=EVAL_SEED, feedback_delay_s=0.0)
    return {"all": stats.mean_reward(), **stats.mean_reward_by_family()}


def samples_from(stats, turns, rewards_of: list[float], baselines: dict[str, float], decay: float) -> list[PgSample]:
    """Advantage = the session's reward - its family's running baseline, on every call of the trained agent."""
    rewards = defaultdict(list)
    for session, reward in zip(stats.sessions, rewards_of):
        rewards[session.family].append(reward)
    for family, values in rewards.items():
        baselines.setdefault(family, statistics.fmean(values))
    samples = [
        PgSample(t.completion.prompt_token_ids, t.completion.token_ids, t.completion.logprobs,
                 reward - baselines[session.family])
        for session, reward, session_turns in zip(stats.sessions, rewards_of, turns)
        for t in session_turns
        if t.completion.token_ids
    ]
    for family, values in rewards.items():
        baselines[family] = decay * baselines[family] + (1 - decay) * statistics.fmean(values)
    return samples


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    threads = torch.get_num_threads()
    try:
        return calibrate(args)
    finally:
        torch.set_num_threads(threads)


def calibrate(args) -> int:
    import torch

    from demo.policy.bootstrap import bootstrap_base_policy
    from demo.policy.library_reward import RecordingPolicy, library_rewards
    from demo.product.local_policy import LocalPolicy
    from demo.product.memory_recorder import MemoryRecorder
    from demo.product.traffic import run_traffic
    from liverl.config import load_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.monotonic()
    base = args.base
    if base is None:
        base = bootstrap_base_policy(Path(tempfile.mkdtemp(prefix="liverl-calibrate-")) / "base", args.seed)
        print(f"bootstrapped base policy in {time.monotonic() - started:.1f}s")
    behaviour = LocalPolicy(base, version="0", seed=args.seed)
    learner = copy.deepcopy(behaviour.model).train()
    optimizer = torch.optim.Adam(learner.parameters(), lr=args.learning_rate)
    pad_id = behaviour.tokenizer.pad_token_id

    before = evaluate(behaviour, args.eval_sessions)
    print("before | " + " | ".join(f"{k} {v:.3f}" for k, v in before.items()))
    baselines: dict[str, float] = {}
    rewards_config = load_config(environ={}).rewards
    loop_started = time.monotonic()
    for iteration in range(args.iterations):
        turns: list = []
        recorder, sampler = MemoryRecorder(), RecordingPolicy(behaviour)
        stats = run_traffic(sampler, recorder, n_sessions=args.sessions, seed=args.seed * 10_000 + iteration,
                            feedback_delay_s=0.0, turns=turns)
        if args.reward == "library":
            rewards = library_rewards(recorder, sampler, stats.sessions, iteration * args.epochs, rewards_config)
        else:
            rewards = [s.reward for s in stats.sessions]
        samples = samples_from(stats, turns, rewards, baselines, args.baseline_decay)
        if not samples:
            raise RuntimeError(f"iteration {iteration}: no session produced a completion ({stats.errors[:3]})")
        for _ in range(args.epochs):
            loss, ratio = pg_loss(learner, samples, pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(learner.parameters(), 1.0)
            optimizer.step()
        if (iteration + 1) % args.sync_every == 0:
            behaviour.model.load_state_dict(learner.state_dict())
            behaviour.version = str(iteration + 1)
        family = stats.mean_reward_by_family()
        print(
            f"iter {iteration:3d} | served {stats.mean_reward():.3f} | trained on {statistics.fmean(rewards):+.3f} | "
            + " ".join(f"{k} {v:.2f}" for k, v in family.items())
            + f" | loss {loss.item():+.4f} | ratio {ratio:.3f} | samples {len(samples)}"
            + f" | {time.monotonic() - loop_started:.0f}s",
            flush=True,
        )
    behaviour.model.load_state_dict(learner.state_dict())
    after = evaluate(behaviour, args.eval_sessions)
    print("before | " + " | ".join(f"{k} {v:.3f}" for k, v in before.items()))
    print("after  | " + " | ".join(f"{k} {v:.3f}" for k, v in after.items()))
    print(f"loop {time.monotonic() - loop_started:.0f}s, total {time.monotonic() - started:.0f}s, "
          f"{args.iterations * args.sessions} training sessions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
