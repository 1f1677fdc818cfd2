"""The trainer: follow the table, take off-policy-corrected steps, checkpoint, register, gate.

    load_batch -> step -> maybe_checkpoint (DeepSpeed checkpoint, state, export, register, gate)

Every checkpoint is a registered candidate version; the state file written right after the
DeepSpeed checkpoint holds the table position, so a crash at any point resumes without gap or repeat.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from liverl.contracts import names
from liverl.config import LiverlConfig
from trainer.advantages import Baselines
from trainer.row_stream import Position, RowStream
from trainer.state import PendingPublish, TrainerState
from trainer.table_follower import TableFollower, merge_offsets


@dataclass
class Window:
    """What was trained since the last registered version (its lineage and metrics)."""

    commits: dict = field(default_factory=dict)  # table version -> TableCommit
    trajectories: int = 0
    steps: int = 0
    reward_config_versions: set = field(default_factory=set)
    step_metrics: list = field(default_factory=list)  # (step, {name: value})
    started: float = field(default_factory=time.monotonic)


class Trainer:
    def __init__(self, config: LiverlConfig, say=print):
        from trainer.registry import Registry

        self.config = config
        self.tc = config.trainer
        self.dir = Path(self.tc.checkpoint_dir)
        self.say = say
        self.registry = Registry(config.mlflow)
        self.follower = TableFollower(config.table.trajectories_uri)
        self.stop_requested = False
        self.window = Window()

    # ---- start: fresh from the champion, or resume from the last checkpoint -------------------------
    def start(self) -> None:
        import torch

        from trainer.engine import build_engine
        from trainer.policy_io import load_policy

        state = TrainerState.load(self.dir)
        if state is None:
            champion = self.registry.alias_version(names.ALIAS_CHAMPION)
            if champion is None:
                raise RuntimeError(
                    f"registered model {self.registry.name!r} has no {names.ALIAS_CHAMPION!r} version; "
                    "register a base policy first: liverl train --init-from POLICY_DIR"
                )
            state = TrainerState(run_key=uuid.uuid4().hex[:12], parent_version=champion)
        self.state = state
        self.parent_folder = self.registry.download(state.parent_version, self.dir / "registry")
        torch.manual_seed(self.tc.seed)
        self.engine = build_engine(load_policy(self.parent_folder), self.tc)
        if state.checkpoint_tag:
            self.engine.load_checkpoint(str(self.dir / "deepspeed"), tag=state.checkpoint_tag)
        self.engine.module.eval()  # no dropout: the policy's logprobs must be comparable with serving's
        self.trained = {tid: version for tid, version in state.trained_ids}
        self.baselines = Baselines(dict(state.baselines))
        self.stream = RowStream(
            self.follower, Position(state.table_version, state.cursor, state.version_done),
            self.tc.passes_per_trajectory,
        )
        where = f"step {state.step}, table v{state.table_version} row {state.cursor}"
        self.say(f"trainer ready | parent v{state.parent_version} | {where} | checkpoint {state.checkpoint_tag or '-'}")
        if state.pending:  # crashed between checkpoint and registration: finish it first
            self.publish(state.pending)

    # ---- the loop ---------------------------------------------------------------------------------------
    def run(self, follow: bool) -> int:
        """Train on everything new; with follow, keep waiting for more. Returns the versions registered."""
        registered = 0
        while not self.stop_requested:
            trained = self.train_step()
            if self.should_checkpoint():
                registered += self.checkpoint_and_publish()
            if not trained:
                if not follow:
                    break
                time.sleep(self.tc.follow_interval_s)
        if self.window.steps:
            registered += self.checkpoint_and_publish()
        return registered

    def should_checkpoint(self) -> bool:
        if not self.window.steps:
            return False
        if self.window.steps >= self.tc.steps_per_version:
            return True
        minutes = (time.monotonic() - self.window.started) / 60
        return self.tc.minutes_per_version > 0 and minutes >= self.tc.minutes_per_version

    def train_step(self) -> bool:
        """One optimizer step on the next trajectories; False when the table had nothing trainable."""
        from trainer.step_builder import build_step
        from trainer.training_step import run_step

        while True:
            plan = build_step(
                self.stream, self.trained, self.state.parent_version, int(time.time() * 1000), self.tc, self.say
            )
            self.window.commits.update(plan.commits)
            if not plan.empty:
                break
            if plan.consumed == 0:
                return False  # nothing new in the table
            self.say(f"skipped {plan.consumed} rows of table v{self.stream.version}: {dict(plan.skipped)}")
        result = run_step(self.engine, plan, self.state.step, self.baselines, self.config)
        self.state.step += 1
        self.state.trajectories_trained += len(plan.trajectories)
        self.window.steps += 1
        self.window.trajectories += len(plan.trajectories)
        self.window.reward_config_versions.update(t.reward_config_version for t in plan.trajectories)
        self.window.step_metrics.append((self.state.step, result.metrics))
        self.say(result.line(self.state.step, sorted(plan.commits)))
        return True

    # ---- checkpoint, register, gate ------------------------------------------------------------------
    def checkpoint_and_publish(self) -> int:
        tag = f"step-{self.state.step}"
        self.engine.save_checkpoint(str(self.dir / "deepspeed"), tag=tag)
        position = self.stream.position
        state = self.state
        state.table_version, state.cursor, state.version_done = position.table_version, position.cursor, position.done
        state.checkpoint_tag = tag
        state.baselines = dict(self.baselines.means)
        state.trained_ids = sorted(self.trained.items())
        state.pending = PendingPublish(
            checkpoint_tag=tag,
            table_versions=sorted(self.window.commits),
            kafka_offsets=merge_offsets([c.kafka_offsets for _, c in sorted(self.window.commits.items())]),
            trajectories=self.window.trajectories,
            reward_config_versions=sorted(v for v in self.window.reward_config_versions if v),
            metrics=_summary(self.window.step_metrics),
        )
        state.save(self.dir)  # from here a crash resumes at this checkpoint and finishes its registration
        self.publish(state.pending, self.window.step_metrics)
        self.window = Window()
        self._prune_checkpoints()
        return 1

    def publish(self, pending: PendingPublish, step_metrics=()) -> None:
        from trainer.publish import publish_checkpoint

        version, folder = publish_checkpoint(self, pending, step_metrics)
        self.state.parent_version = version
        self.state.pending = None
        self.state.save(self.dir)
        self.parent_folder = folder

    def _prune_checkpoints(self) -> None:
        import shutil

        root = self.dir / "deepspeed"
        tags = sorted((p for p in root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1]))
        for old in tags[: -self.tc.keep_checkpoints]:
            if old.name != self.state.checkpoint_tag:
                shutil.rmtree(old, ignore_errors=True)
        exports = sorted(self.dir.glob("exports/step-*"), key=lambda p: int(p.name.split("-")[1]))
        for old in exports[: -self.tc.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)  # registered: the registry holds a copy


def _summary(step_metrics: list) -> dict[str, float]:
    """Mean of each metric over the window's steps (recorded on the version)."""
    if not step_metrics:
        return {}
    keys = step_metrics[-1][1].keys()
    return {key: sum(m[key] for _, m in step_metrics) / len(step_metrics) for key in keys}
