"""Kill a real `liverl train` mid-run, run it again: the result equals an uninterrupted run (no gap, no repeat)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from safetensors.torch import load_file

from liverl.contracts import names
from tests.trainer.conftest import cli_overrides, commit_batch, run_trainer, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.registry import Registry
from trainer.io.state import TrainerState

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow


def _train(config, kill_after: str | None = None) -> list[str]:
    """Run `liverl train` once; with kill_after, SIGKILL it right after printing a line starting so."""
    argv = [sys.executable, "-m", "liverl.cli", "train", *cli_overrides(config)]
    return run_trainer(argv, kill_after, timeout_s=300)


def _final_weights(config) -> dict[str, torch.Tensor]:
    registry = Registry(config.mlflow)
    version = registry.alias_version(names.ALIAS_CANDIDATE)
    folder = registry.download(version, config.trainer.checkpoint_dir / "final")
    return load_file(folder / "model.safetensors")


def test_resume_after_kill_matches_an_uninterrupted_run(stack, tiny_policy_dir, trajectories, tmp_path):
    rows = [trajectories.batch(name, 8) for name in ("a", "b")]
    runs = {}
    for name in ("reference", "killed"):
        config = trainer_config(stack, tmp_path / name, steps_per_version=1)
        config.trainer.deepspeed.micro_batch_tokens = 16  # 2 trajectories a micro-batch: several short steps
        register_base(config, tiny_policy_dir, say=lambda *_: None)
        for sequence, batch in enumerate(rows):
            commit_batch(config.table.trajectories_uri, batch, f"batch-{sequence}", sequence)
        runs[name] = config

    reference = _train(runs["reference"])
    killed = _train(runs["killed"], kill_after="version 2 registered")
    resumed = _train(runs["killed"])
    print("\n".join(["-- reference", *reference, "-- killed", *killed, "-- resumed", *resumed]))
    assert any(line.startswith("trainer ready") and "checkpoint step-" in line for line in resumed)

    states = {name: TrainerState.load(config.trainer.checkpoint_dir, SHARED_GROUP) for name, config in runs.items()}
    shared = {name: state.groups[SHARED_GROUP] for name, state in states.items()}
    assert states["killed"].trained_ids == states["reference"].trained_ids  # no gap
    assert shared["killed"].trajectories_trained == shared["reference"].trajectories_trained  # no repeat
    assert shared["killed"].step == shared["reference"].step
    expected, got = _final_weights(runs["reference"]), _final_weights(runs["killed"])
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-6, msg=f"{name} differs after resume")

    # One version per checkpoint, none registered twice, and together they trained on every table version.
    versions = [mv for mv in Registry(runs["killed"].mlflow).versions() if mv.tags.get(names.TAG_PARENT_VERSION)]
    assert len(versions) == shared["killed"].step
    assert set().union(*(json.loads(mv.tags[names.TAG_TABLE_VERSIONS]) for mv in versions)) == {0, 1}
