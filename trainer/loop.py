"""The trainer: follow the table, take off-policy-corrected steps, checkpoint, publish (register + gate).

    run: load_batch -> step -> maybe_checkpoint -> maybe_publish, again and again

Every checkpoint becomes a registered candidate (publish.Publisher), judged by the gate beside the next steps
(gate_worker, trainer.gate.background) or before them; the state file written right after
the DeepSpeed checkpoint holds the table position, so a crash at any point resumes without gap or repeat.
The trainer keeps making candidates however many the gate refuses: staleness counts promotions since a
row was served (served_lineage), so a champion that stays put never starves training, and the progress
line says when promotion is blocked and why.

On several data-parallel ranks (the deepspeed launcher, torchrun) rank 0 alone follows the table, writes the
state file and publishes; it broadcasts each decision (the step plan, "checkpoint now", the publish result)
and every rank trains its share of each step (sharded_step), saves its part of each DeepSpeed checkpoint and
takes part in the export's gather. The checkpoint folder must be shared by the ranks, as DeepSpeed's is.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.io.lineage import merge_offsets
from liverl.io.table_history import TableCommit, TableHistory
from liverl.privacy import row_opener_for
from trainer.advantages import Baselines
from trainer.gate_worker import GateWorker
from trainer.holdout import gate_evidence
from trainer.publish import CheckpointToPublish, Publisher, PublishResult
from trainer.ranks import Ranks
from trainer.registry import Registry
from trainer.row_stream import Position, RowStream
from trainer.served_lineage import ServedLineage, promoted_versions
from trainer.state import PendingPublish, TrainerState
from trainer.step_wait import RowWait

STOP_GATE_WAIT_S = 20.0  # a stopping trainer waits this long for a judgement in flight; the next start refuses it

if TYPE_CHECKING:
    from deepspeed import DeepSpeedEngine
    from torch.nn import Module

    from trainer.adapters import AdapterBase, TrainablePolicy
    from trainer.step_builder import StepPlan


@dataclass
class Window:
    """What was trained since the last registered version (its lineage and metrics)."""

    commits: dict[int, TableCommit] = field(default_factory=dict)  # table version -> its commit
    trajectories: int = 0
    steps: int = 0
    reward_config_versions: set[str] = field(default_factory=set)
    step_metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Saved:
    """A DeepSpeed checkpoint saved on every rank and recorded in the state file, not yet registered."""

    pending: PendingPublish
    step_metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)


class Trainer:
    def __init__(self, config: LiverlConfig, say: Callable[[str], None] = print):
        self.config = config
        self.tc = config.trainer
        self.dir = Path(self.tc.checkpoint_dir)
        self.say = say
        self.registry = Registry(config.mlflow)
        self.follower = TableHistory(config.table.trajectories_uri)
        self.opener = row_opener_for(config)  # rows' token ids are sealed per data subject (privacy.keys_dir)
        self.publisher = Publisher(
            self.registry, self.tc.gate, self.tc.loss, config.rewards.monitors, self.tc.max_seq_len,
            config.rewards.version, self.dir / "registry", say, signing_key_file=self.tc.signing_key_file,
        )
        self.gates: GateWorker | None = None  # rank 0, with trainer.gate.background: candidates judged beside training
        self.stop_requested = False
        self.ranks = Ranks()  # joined in start()
        self.window = Window()
        self.row_wait = RowWait(self.tc.min_step_rows, self.tc.max_step_wait_s)
        self.state: TrainerState
        self.engine: DeepSpeedEngine
        self.parent_folder: Path  # the policy folder the current weights' export copies tokenizer files from
        self.policy: TrainablePolicy  # what the engine trains: full weights, or an adapter on a frozen base
        self.served: ServedLineage  # the champion timeline staleness counts on
        self.reference: Module | None  # frozen, only when trainer.loss.kl_to_reference > 0

    # ---- start: fresh from the champion, or resume from the last checkpoint -------------------------
    def start(self) -> None:
        import torch

        from trainer.adapters import trainable_policy
        from trainer.engine import build_engine, start_distributed
        from trainer.policy_io import load_policy

        self.ranks = start_distributed(self.tc)
        if not self.ranks.main:
            self.say = lambda _line: None  # one progress line per step, from rank 0
        # Rank 0 reads the state and downloads the parent; the others build the same model from its folder.
        state, self.parent_folder, base = self.ranks.decide(self._load_state)
        self.state = state
        torch.manual_seed(self.tc.seed)  # also a new adapter's initialisation
        self.policy = trainable_policy(self.parent_folder, base, self.tc.lora)
        self.engine = build_engine(self.policy.model, self.tc)
        if state.checkpoint_tag:  # an adapter's checkpoint holds the adapter alone: the base is the parent's
            self.engine.load_checkpoint(str(self.dir / "deepspeed"), tag=state.checkpoint_tag,
                                        load_module_strict=not self.policy.is_adapter)
        self.engine.module.eval()  # no dropout: the policy's logprobs must be comparable with serving's
        # The optional KL-to-reference term's reference: the policy this process started from, frozen.
        self.reference = (load_policy(self.parent_folder, base_folder=base.folder).eval()
                          if self.tc.loss.kl_to_reference > 0 else None)
        self.baselines = Baselines(dict(state.baselines))  # every rank computes the step's advantages
        if self.ranks.main:  # the table position and the champion timeline are rank 0's
            self.trained = {tid: version for tid, version in state.trained_ids}
            self.stream = RowStream(
                self.follower, Position(state.table_version, state.cursor, state.version_done),
                self.tc.passes_per_trajectory,
            )
            self.served = promoted_versions(self.registry)
        where = f"step {state.step}, table v{state.table_version} row {state.cursor}"
        ranks = f" | ranks {self.ranks.world}" if self.ranks.world > 1 else ""
        self.say(f"trainer ready | parent v{state.parent_version} | {where} | checkpoint {state.checkpoint_tag or '-'}"
                 f" | {self.policy.describe()}{ranks}")
        if self.ranks.main and self.tc.gate.background:
            keep = f"{state.run_key}/{state.pending.checkpoint_tag}" if state.pending else None
            self.publisher.refuse_unjudged(state.run_key, keep)  # a stop while they were judged left them undecided
            self.gates = GateWorker(self.publisher, self.say)
        if state.pending:  # crashed between checkpoint and registration: finish it first
            self.maybe_publish(Saved(state.pending))

    def _load_state(self) -> tuple[TrainerState, Path, AdapterBase]:
        """Rank 0: the saved state (or a fresh one from the champion), the parent version's folder, and the base
        an adapter trained from it applies to (downloaded when the parent is itself an adapter)."""
        from trainer.adapters import adapter_base

        state = TrainerState.load(self.dir)
        if state is None:
            champion = self.registry.alias_version(names.ALIAS_CHAMPION)
            if champion is None:
                raise RuntimeError(
                    f"registered model {self.registry.name!r} has no {names.ALIAS_CHAMPION!r} version; "
                    "register a base policy first: liverl train --init-from POLICY_DIR"
                )
            state = TrainerState(run_key=uuid.uuid4().hex[:12], parent_version=champion)
        downloads = self.dir / "registry"
        parent_folder = self.registry.download(state.parent_version, downloads)
        return state, parent_folder, adapter_base(state.parent_version, parent_folder, self.registry, downloads)

    # ---- the loop ---------------------------------------------------------------------------------------
    def run(self, follow: bool) -> int:
        """Train on everything new; with follow, keep waiting for more. Returns the versions registered."""
        registered = 0
        while not self.ranks.any(self.stop_requested):
            plan = self.load_batch()
            if plan is not None:
                self.step(plan)
            registered += self.maybe_publish(self.maybe_checkpoint())
            self.collect_verdicts()
            if plan is None:
                if not follow:
                    break
                time.sleep(self.tc.follow_interval_s)
        registered += self.maybe_publish(self.maybe_checkpoint(force=True))
        if self.gates is not None:  # a stop waits a little for the judging in flight; a finished run for all of it
            self.gates.drain(STOP_GATE_WAIT_S if self.stop_requested else None)
            self.collect_verdicts()
        return registered

    def collect_verdicts(self) -> None:
        """Rank 0, background gate: take in the verdicts reached since the last call."""
        if self.gates is None:
            return
        results = self.gates.finished()
        for result in results:
            self._record(result)
        if any(result.promoted for result in results):
            self.served = promoted_versions(self.registry)  # a promotion moves the staleness timeline

    def close(self) -> None:
        """Stop the background gate and the online evaluator (the end of `liverl train`)."""
        if self.gates is not None:
            self.gates.close()
        self.publisher.close()

    def load_batch(self) -> StepPlan | None:
        """The next step's trajectories (rank 0's plan, on every rank), or None when the table has nothing new."""
        return self.ranks.decide(self._next_plan)

    def _next_plan(self) -> StepPlan | None:
        from trainer.step_builder import build_step

        if self.tc.min_step_rows > 1 and not self.row_wait.ready(self.stream.pending_rows()):
            return None
        while True:
            plan = build_step(
                self.stream, self.trained, self.served, int(time.time() * 1000), self.tc, self.say,
                world=self.ranks.world, opener=self.opener,
            )
            self.window.commits.update(plan.commits)
            if not plan.empty:
                return plan
            if plan.consumed == 0:
                return None  # nothing new in the table
            stale = plan.skipped.get("stale", 0)
            why = f" | blocked: {stale} rows stale (champion v{self.served.promoted[-1]})" if stale else ""
            self.say(f"skipped {plan.consumed} rows of table v{self.stream.version}: {dict(plan.skipped)}{why}")

    def step(self, plan: StepPlan) -> None:
        """One optimizer step on the plan's trajectories, with one progress line."""
        from trainer.sharded_step import run_sharded_step
        from trainer.training_step import run_step

        if self.ranks.world == 1:
            result = run_step(self.engine, plan, self.state.step, self.baselines, self.config, reference=self.reference)
            mine = sorted(t.trajectory_id for t in plan.trajectories)
        else:
            result, mine = run_sharded_step(self.engine, plan, self.state.step, self.baselines, self.config,
                                            self.ranks, reference=self.reference)
        if self.tc.log_trained_ids:  # every rank: the audit that no trajectory is trained twice
            # One write per line: the ranks share the launcher's stdout, and print() writes the newline apart.
            sys.stdout.write(f"trained ids | rank {self.ranks.rank} | step {self.state.step + 1} | {','.join(mine)}\n")
            sys.stdout.flush()
        self.state.step += 1
        self.state.trajectories_trained += len(plan.trajectories)
        self.window.steps += 1
        self.window.trajectories += len(plan.trajectories)
        self.window.reward_config_versions.update(t.reward_config_version for t in plan.trajectories)
        metrics = {**result.metrics, "gate_refusals_in_a_row": float(self.state.gate_refusals)}
        self.window.step_metrics.append((self.state.step, metrics))
        if self.ranks.main:  # the champion timeline behind blocked() is rank 0's
            self.say(result.line(self.state.step, sorted(plan.commits)) + self.blocked())

    def blocked(self) -> str:
        """The progress line's note while the gate keeps refusing: how long, and the last reasons."""
        if not self.state.gate_refusals:
            return ""
        return (f" | blocked: gate refused {self.state.gate_refusals} candidates in a row, champion "
                f"v{self.served.promoted[-1]} ({self.state.last_refusal[:200]})")

    # ---- checkpoint, publish -----------------------------------------------------------------------------
    def maybe_checkpoint(self, force: bool = False) -> Saved | None:
        """Save a DeepSpeed checkpoint (every rank) when the window is due (or forced and not empty)."""
        # Rank 0's clock decides: the ranks' minutes_per_version would expire at different steps.
        if not self.window.steps or not self.ranks.decide(lambda: force or self._window_due()):
            return None
        tag = f"step-{self.state.step}"
        # Collective: each rank its shards. An adapter's frozen base is the parent's: only the adapter is saved.
        self.engine.save_checkpoint(str(self.dir / "deepspeed"), tag=tag,
                                    exclude_frozen_parameters=self.policy.is_adapter)
        self.ranks.barrier()  # every shard written before the state file points at them
        self.state.checkpoint_tag = tag
        self.state.pending = self.ranks.decide(lambda: self._record_checkpoint(tag))
        saved = Saved(self.state.pending, self.window.step_metrics)
        self.window = Window()
        return saved

    def _record_checkpoint(self, tag: str) -> PendingPublish:
        """Rank 0: the table position and the window's lineage, saved with the checkpoint they belong to."""
        position = self.stream.position
        state = self.state
        state.table_version, state.cursor, state.version_done = position.table_version, position.cursor, position.done
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
        return state.pending

    def maybe_publish(self, saved: Saved | None) -> int:
        """Export, register and gate a saved checkpoint (rank 0; the others take part in the export's gather and
        wait for the verdict); returns the versions registered (0 or 1)."""
        if saved is None:
            return 0
        checkpoint = self._to_publish(saved.pending, saved.step_metrics)
        if self.tc.gate.background:  # registered now, judged beside the next steps (rank 0's GateWorker)
            version = self.ranks.decide(lambda: self.publisher.register(checkpoint))
            if self.gates is not None:
                self.gates.submit(version, checkpoint)
        else:
            result = self.ranks.decide(lambda: self.publisher.publish(checkpoint))
            self._record(result)
            version = result.version
        self.state.parent_version = version
        self.state.pending = None
        self.parent_folder = self.dir / "exports" / saved.pending.checkpoint_tag
        if self.ranks.main:
            self.state.save(self.dir)
            if self.gates is None:
                self.served = promoted_versions(self.registry)  # a promotion moves the staleness timeline
            self._prune_checkpoints()
        return 1

    def _record(self, result: PublishResult) -> None:
        if result.decision == "pass":
            self.state.gate_refusals, self.state.last_refusal = 0, ""
        elif result.deferred:  # too little evidence: no refusal; the next candidate is judged on more sessions
            if self.ranks.main and self.gates is None:
                self.say(f"gate deferred v{result.version}: {'; '.join(result.reasons)[:300]}")
        else:
            self.state.gate_refusals += 1
            self.state.last_refusal = "; ".join(result.reasons)
            if self.ranks.main and self.gates is None:  # in the background, training went on long ago
                self.say(f"training goes on from v{result.version}{self.blocked()}")

    def _window_due(self) -> bool:
        if self.window.steps >= self.tc.steps_per_version:
            return True
        minutes = (time.monotonic() - self.window.started) / 60
        return self.tc.minutes_per_version > 0 and minutes >= self.tc.minutes_per_version

    def _to_publish(self, pending: PendingPublish,
                    step_metrics: list[tuple[int, dict[str, float]]] = ()) -> CheckpointToPublish | None:
        """Export the engine's weights (they are the checkpoint's) and gather the gate's evidence: rank 0's
        CheckpointToPublish; None on the other ranks, which only take part in gathering ZeRO-3 weights."""
        from trainer.weight_probe import measure_weight_probe

        folder = self.dir / "exports" / pending.checkpoint_tag
        self._export(folder)
        # Every rank (a forward pass is collective under ZeRO-3); with an adapter the module runs base + adapter.
        probe = measure_weight_probe(self.engine.module)
        if not self.ranks.main:
            return None
        probe.write(folder)  # serving proves its replicas load these weights (a resumed export gets it too)
        evidence = gate_evidence(self.follower.rows_up_to(self.stream.version), self.state.step, self.baselines,
                                 self.config, self.opener)
        return CheckpointToPublish(
            pending=pending, run_key=self.state.run_key, parent_version=self.state.parent_version,
            step=self.state.step, folder=folder, evidence=evidence, step_metrics=step_metrics,
        )

    def _export(self, folder: Path) -> None:
        """The engine's weights as a policy folder (rank 0 writes; every rank takes part in ZeRO-3's gather): the
        adapter alone with its manifest, or the full weights."""
        from trainer.engine import adapter_state_dict, full_state_dict
        from trainer.policy_io import export_adapter, export_policy

        policy = self.policy
        if policy.adapter is not None:
            weights = adapter_state_dict(self.engine, policy.adapter, keep=self.ranks.main)  # collective under ZeRO-3
        else:
            weights = full_state_dict(self.engine, keep=self.ranks.main)
        if not self.ranks.main or folder.exists():  # the export is atomic: present means complete
            return
        if policy.adapter is not None:
            export_adapter(policy.adapter, weights, folder, policy.manifest(), self.parent_folder)
        else:
            export_policy(self.engine.module, weights, folder, self.parent_folder)

    def _prune_checkpoints(self) -> None:
        root = self.dir / "deepspeed"
        tags = sorted((p for p in root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1]))
        for old in tags[: -self.tc.keep_checkpoints]:
            if old.name != self.state.checkpoint_tag:
                shutil.rmtree(old, ignore_errors=True)
        exports = sorted(self.dir.glob("exports/step-*"), key=lambda p: int(p.name.split("-")[1]))
        judged = self.gates.in_use() if self.gates is not None else set()
        for old in exports[: -self.tc.keep_checkpoints]:
            if old != self.parent_folder and old not in judged:  # the next export copies its tokenizer files
                shutil.rmtree(old, ignore_errors=True)  # registered: the registry holds a copy


def _summary(step_metrics: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Mean of each metric over the window's steps (recorded on the version)."""
    if not step_metrics:
        return {}
    keys = step_metrics[-1][1].keys()
    return {key: sum(m[key] for _, m in step_metrics) / len(step_metrics) for key in keys}
