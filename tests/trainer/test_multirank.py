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

import torch
from safetensors.torch import load_file

from liverl.contracts import names
from liverl.io.processes import free_port
from tests.trainer.conftest import cli_overrides, commit_batch, run_trainer, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.registry import TAG_METRICS, Registry
from trainer.io.state import TrainerState
from trainer.step.training_step import deal

# The 2-rank update is the 1-rank update up to the order of floating-point sums (gradients summed per rank, then
# allreduced and averaged): the tolerance leaves room for that rounding, far below what training moves the weights
# (asserted below).
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
    states = {name: TrainerState.load(config.trainer.checkpoint_dir, SHARED_GROUP) for name, config in runs.items()}
    shared = {name: state.groups[SHARED_GROUP] for name, state in states.items()}
    assert states["two_ranks"].trained_ids == states["one_rank"].trained_ids
    assert shared["two_ranks"].trajectories_trained == shared["one_rank"].trajectories_trained  # no repeat
    assert shared["two_ranks"].step == shared["one_rank"].step

    # Rank 0 alone prints the progress: one line per step, with the loss of the whole step.
    steps_printed = [m[1] for line in resumed if (m := re.match(r"step (\d+) \| loss", line))]
    assert len(steps_printed) == len(set(steps_printed))
    losses, reference_losses = _losses([*killed, *resumed]), _losses(reference)
    for step, loss in reference_losses.items():
        assert abs(losses[step] - loss) <= LOSS_TOLERANCE, (step, losses[step], loss)

    # One version per 2 steps (one per step group), none registered twice, same lineage; same final weights.
    one, two = _trained_versions(runs["one_rank"]), _trained_versions(runs["two_ranks"])
    assert len(two) == len(one) == -(-shared["one_rank"].step // 2)
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


def test_a_tenant_group_trains_on_two_ranks_with_the_kl_reference(stack, tmp_path):
    """Tenant groups are the trainer's unit, so they get what the one policy has: acme's adapter and the shared one
    each train on 2 ranks (each rank a share of every step, none twice) with the KL-to-reference term on, and each
    group registers its own adapter version."""
    from demo.policy.tiny_policy import build_policy
    from tests.trainer.conftest import TrajectoryFactory

    llama = build_policy(tmp_path / "base", ["edit", "search", "ask", "fix", "file", "done"], arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    config.trainer.gate.holdout_fraction = 0.0  # every row trains: the counts are exact
    base = register_base(config, llama, say=lambda *_: None)
    rows = [row | {"tenant_id": tenant, "session_id": f"s-{row['trajectory_id']}"}
            for tenant, n in (("acme", 6), ("zed", 2)) for row in factory.batch(tenant, n)]
    commit_batch(config.table.trajectories_uri, rows, "batch-0", 0)

    lines = run_trainer([str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2",
                         "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                         "-m", "liverl.cli", "train", *cli_overrides(config),
                         "--trainer.deepspeed.rank_secret", "multirank-test-secret",
                         "--trainer.deepspeed.zero_stage", "1", "--trainer.deepspeed.gradient_accumulation_steps", "1",
                         "--trainer.tenants.adapters", '["acme"]', "--trainer.lora.enabled", "true",
                         "--trainer.loss.kl_to_reference", "0.1", "--trainer.log_trained_ids", "true"],
                        timeout_s=420)
    print("\n".join(lines))
    assert any(line.startswith(f"trainer ready | base v{base} | groups acme") and "ranks 2" in line for line in lines)
    audit: dict[str, dict[int, set[str]]] = defaultdict(dict)
    for line in lines:
        if match := re.match(r"trained ids \| rank (\d+) \| (\S+) \| step 1 \|\s*(.*)$", line):
            audit[match[2]][int(match[1])] = set(match[3].split(",")) if match[3] else set()
    assert sorted(audit["acme"]) == [0, 1] and all(audit["acme"].values())  # both ranks train acme's step
    assert not audit["acme"][0] & audit["acme"][1]
    assert audit["acme"][0] | audit["acme"][1] == {f"acme-{i:03d}" for i in range(6)}
    assert audit["_shared"][0] | audit["_shared"][1] == {"zed-000", "zed-001"}
    steps = [line.split(" | ")[0] for line in lines if re.match(r"\S+ \| step \d+ \| loss ", line)]
    assert steps == ["acme", SHARED_GROUP]

    versions = [mv for mv in Registry(config.mlflow).versions() if mv.version != base]
    assert sorted((mv.tags.get(names.TAG_TENANT) or "", int(mv.tags[names.TAG_TRAJECTORIES])) for mv in versions) == \
        [("", 2), ("acme", 6)]
    assert all(mv.tags[names.TAG_WEIGHTS_KIND] == names.WEIGHTS_ADAPTER for mv in versions)
    state = TrainerState.load(config.trainer.checkpoint_dir, SHARED_GROUP)
    assert {name: gs.trajectories_trained for name, gs in state.groups.items()} == {"acme": 6, SHARED_GROUP: 2}
