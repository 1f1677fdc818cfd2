"""`liverl train` on 2 ranks (torchrun, gloo, CPU) equals 1 rank: same trajectories, none twice, same updates.

The 2-rank run is killed after its first registered version, then resumed; the 1-rank reference runs
uninterrupted. Both use ZeRO-1 and take the same steps: the 1-rank run accumulates 4 micro-batches a step,
each of the 2 ranks 2 of the same 4. (ZeRO-3 runs the same way on 2 ranks; on one rank every stage equals plain
torch AdamW with accumulation: tests/trainer/test_zero_accumulation.py.)
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from liverl.contracts import names
from liverl.io.processes import free_port
from tests.trainer.conftest import cli_overrides, commit_batch, run_trainer, trainer_config
from trainer.base_policy import register_base
from trainer.registry import TAG_METRICS, Registry
from trainer.sharded_step import deal
from trainer.state import TrainerState

# The 2-rank update is the 1-rank update up to the order of floating-point sums (gradients summed per rank, then
# allreduced and averaged): observed weight differences up to 5e-6 after 3 steps at lr 1e-3 (fp32), against
# moves of 3e-3; step losses equal to the printed 4 decimals, window mean losses within 1e-5.
WEIGHT_TOLERANCE = 2e-5
LOSS_TOLERANCE = 1e-4  # progress lines print 4 decimals


def test_deal_gives_every_micro_batch_to_exactly_one_rank():
    for count, world in ((8, 2), (12, 3), (4, 4), (6, 1)):
        dealt = [list(deal(count, world, rank)) for rank in range(world)]
        assert sorted(i for share in dealt for i in share) == list(range(count))
        assert len({len(share) for share in dealt}) == 1  # equal shares: the ranks step together


def _train(config, ranks: int, zero_stage: int, accumulation: int, kill_after: str | None = None) -> list[str]:
    """Run `liverl train` on `ranks` ranks; with kill_after, SIGKILL every process right after a line so starting."""
    command = ["-m", "liverl.cli", "train", *cli_overrides(config),
               "--trainer.deepspeed.zero_stage", str(zero_stage),
               "--trainer.deepspeed.gradient_accumulation_steps", str(accumulation),
               "--trainer.log_trained_ids", "true", "--trainer.learning_rate", "1e-3"]
    if ranks == 1:
        argv = [sys.executable, *command]
    else:
        argv = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", str(ranks),
                "--master_addr", "127.0.0.1", "--master_port", str(free_port()), *command,
                "--trainer.deepspeed.rank_secret", "multirank-test-secret"]
    return run_trainer(argv, kill_after)


def _trained_ids(lines: list[str]) -> dict[int, dict[int, list[str]]]:
    """step -> rank -> trajectory ids, from the "trained ids" audit lines (a later run's step replaces an
    earlier one's: a killed run's steps after its last checkpoint are trained again after resume)."""
    steps: dict[int, dict[int, list[str]]] = defaultdict(dict)
    for line in lines:
        if match := re.match(r"trained ids \| rank (\d+) \| step (\d+) \|\s*(.*)$", line):
            rank, step, ids = int(match[1]), int(match[2]), match[3]
            steps[step][rank] = ids.split(",") if ids else []
    return steps


def _losses(lines: list[str]) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for line in lines if (m := re.match(r"step (\d+) \| loss ([-+0-9.]+)", line))}


def _candidate_weights(config) -> dict[str, torch.Tensor]:
    registry = Registry(config.mlflow)
    folder = registry.download(registry.alias_version(names.ALIAS_CANDIDATE), config.trainer.checkpoint_dir / "final")
    return load_file(folder / "model.safetensors")


def _trained_versions(config) -> list:
    versions = [mv for mv in Registry(config.mlflow).versions() if mv.tags.get(names.TAG_PARENT_VERSION)]
    return sorted(versions, key=lambda mv: int(mv.version))


def test_two_ranks_train_each_trajectory_once_and_match_one_rank(stack, tiny_policy_dir, trajectories, tmp_path):
    rows = [trajectories.batch(name, 16) for name in ("a", "b")]
    runs = {}
    for name in ("one_rank", "two_ranks"):
        config = trainer_config(stack, tmp_path / name, steps_per_version=2)
        register_base(config, tiny_policy_dir, say=lambda *_: None)
        for sequence, batch in enumerate(rows):
            commit_batch(config.table.trajectories_uri, batch, f"batch-{sequence}", sequence)
        runs[name] = config

    reference = _train(runs["one_rank"], ranks=1, zero_stage=1, accumulation=4)
    killed = _train(runs["two_ranks"], ranks=2, zero_stage=1, accumulation=2, kill_after="version 2 registered")
    resumed = _train(runs["two_ranks"], ranks=2, zero_stage=1, accumulation=2)
    print("\n".join(["-- one rank", *reference, "-- two ranks, killed", *killed, "-- two ranks, resumed", *resumed]))
    assert any(line.startswith("trainer ready") and "checkpoint step-" in line and "ranks 2" in line
               for line in resumed)

    # The same trajectories in the same steps; each step's split over the ranks, none trained twice.
    expected, got = _trained_ids(reference), _trained_ids([*killed, *resumed])
    assert sorted(got) == sorted(expected) and len(expected) >= 3
    for step, by_rank in got.items():
        assert sorted(by_rank) == [0, 1], f"step {step}: every rank takes part"
        shares = [set(ids) for ids in by_rank.values()]
        assert not shares[0] & shares[1], f"step {step}: a trajectory trained on both ranks"
        assert sorted(shares[0] | shares[1]) == expected[step][0], f"step {step}"
    # Work really is shared (a last short step may fit one micro-batch: the other rank then steps on fillers).
    assert any(by_rank[0] and by_rank[1] for by_rank in got.values())
    states = {name: TrainerState.load(config.trainer.checkpoint_dir) for name, config in runs.items()}
    assert states["two_ranks"].trained_ids == states["one_rank"].trained_ids
    assert states["two_ranks"].trajectories_trained == states["one_rank"].trajectories_trained  # no repeat
    assert states["two_ranks"].step == states["one_rank"].step

    # Rank 0 alone prints the progress: one line per step, with the loss of the whole step.
    steps_printed = [m[1] for line in resumed if (m := re.match(r"step (\d+) \| loss", line))]
    assert len(steps_printed) == len(set(steps_printed))
    losses, reference_losses = _losses([*killed, *resumed]), _losses(reference)
    for step, loss in reference_losses.items():
        assert abs(losses[step] - loss) <= LOSS_TOLERANCE, (step, losses[step], loss)

    # One version per 2 steps (one per step group), none registered twice, same lineage; same final weights.
    one, two = _trained_versions(runs["one_rank"]), _trained_versions(runs["two_ranks"])
    assert len(two) == len(one) == -(-states["one_rank"].step // 2)
    for a, b in zip(one, two):
        assert a.tags[names.TAG_TRAJECTORIES] == b.tags[names.TAG_TRAJECTORIES]
        assert a.tags[names.TAG_TABLE_VERSIONS] == b.tags[names.TAG_TABLE_VERSIONS]
        metrics_a, metrics_b = json.loads(a.tags[TAG_METRICS]), json.loads(b.tags[TAG_METRICS])
        assert abs(metrics_a["loss"] - metrics_b["loss"]) <= 1e-5, (metrics_a, metrics_b)  # full precision
    base = load_file(tiny_policy_dir / "model.safetensors")
    expected_weights, got_weights = _candidate_weights(runs["one_rank"]), _candidate_weights(runs["two_ranks"])
    moved = max(float((got_weights[name] - base[name]).abs().max()) for name in base if name in got_weights)
    differ = max(float((got_weights[name] - tensor).abs().max()) for name, tensor in expected_weights.items())
    print(f"weights moved by training up to {moved:.2e}; 2 ranks vs 1 rank differ up to {differ:.2e}")
    assert moved > 10 * WEIGHT_TOLERANCE  # training moved the weights far more than the tolerance
    for name, tensor in expected_weights.items():
        torch.testing.assert_close(got_weights[name], tensor, rtol=0, atol=WEIGHT_TOLERANCE,
                                   msg=f"{name}: 2 ranks differ from 1 rank")
