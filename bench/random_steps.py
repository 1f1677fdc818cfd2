"""Synthetic steps and table rows for the trainer benches: random tokens, lengths in [min_seq, seq], served behaviour
logprobs."""

from __future__ import annotations

import random


def random_plan(trajectories: int, min_seq: int, seq: int, vocab: int, seed: int):
    """A StepPlan of `trajectories` single-agent coding trajectories (prompt masked, alternating outcomes)."""
    from trainer.step.builder import StepPlan
    from trainer.step.trajectory import Trajectory

    rng = random.Random(seed)
    rows = []
    for i in range(trajectories):
        length = rng.randint(min_seq, seq)
        prompt = min(8, length // 2)
        tokens = tuple(rng.randrange(4, vocab) for _ in range(length))
        mask = tuple([0] * prompt + [1] * (length - prompt))
        behaviour = tuple([0.0] * prompt + [-5.0 + rng.random()] * (length - prompt))
        rows.append(Trajectory(f"{seed}-{i}", 0, "coding", "", "single", ("1",), tokens, mask, behaviour,
                               reward_components={"outcome": float(i % 2)}))
    return StepPlan(trajectories=rows, weights=[1.0] * len(rows), lags=[0] * len(rows))


def random_rows(count: int, min_seq: int, seq: int, vocab: int, seed: int, prefix: str) -> list[dict]:
    """`count` table rows of the same kind of trajectories, as the pipelines commit them (tests/trainer/conftest.py
    make_row), ids `<prefix>-<i>`; every row's tenant_id is "t1": set your own."""
    from tests.trainer.conftest import make_row

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        length = rng.randint(min_seq, seq)
        prompt = min(8, length // 2)
        rows.append(make_row(f"{prefix}-{i:05d}", "", [rng.randrange(4, vocab) for _ in range(length)],
                             [0] * prompt + [1] * (length - prompt),
                             [0.0] * prompt + [-5.0 + rng.random()] * (length - prompt), reward=float(i % 2)))
    return rows
