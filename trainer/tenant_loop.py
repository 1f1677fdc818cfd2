"""The trainer with a policy per tenant (trainer.tenants.adapters): every step draws each active tenant group's rows
within its token budget and steps that group's adapter alone; each group checkpoints, registers and is gated on
its own.

    run: build_tenant_steps -> a step per group with enough rows (trainer/group_hold.py) -> maybe_publish per group

Groups (trainer/tenant_groups.py): each named tenant, and the shared group of every other tenant, whose adapter is
the shared policy (`champion`). All adapters sit on one base, the shared champion's full weights when the trainer
first started (trainer/tenant_adapters.py). A group's version is registered with its tenant, its base, and the
table versions and Kafka offset ranges of the commits its rows came from, then judged on the group's own held-out
sessions against its champion (the shared one until it has its own), and a pass moves that group's alias alone
(trainer/publish.py). Staleness counts the promotions that changed what served the group
(served_lineage.promoted_versions), and each group's refusals in a row show on its progress lines; after
trainer.tenants.rewind_after_refusals of them the group's adapter starts again from its champion. A tenant without a
champion of its own starts (and restarts) from the shared champion's adapter, the policy serving it.

The state file (trainer/tenant_state.py) holds each group's table position with its DeepSpeed checkpoint, so a
crash resumes every group where its saved adapter stopped. One rank only, and the gate judges in the loop (not
beside it as trainer.gate.background does for the single policy).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.io.lineage import merge_offsets
from liverl.io.table_history import TableCommit, TableHistory
from liverl.privacy import row_opener_for
from trainer.advantages import Baselines
from trainer.group_hold import GroupHold
from trainer.publish import CheckpointToPublish, Publisher, PublishResult
from trainer.registry import Registry
from trainer.served_lineage import promoted_versions
from trainer.state import PendingPublish
from trainer.step_builder import StepPlan
from trainer.tenant_groups import (SHARED_GROUP, build_tenant_steps, champion_alias, group_evidence, group_streams,
                                   groups)
from trainer.tenant_state import GroupState, TenantState


@dataclass
class GroupWindow:
    """What a group trained since its last registered version (its lineage and metrics)."""

    commits: dict[int, TableCommit] = field(default_factory=dict)
    trajectories: int = 0
    steps: int = 0
    reward_config_versions: set[str] = field(default_factory=set)
    step_metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


def tenant_of(group: str) -> str | None:
    """The tenant a group's versions are registered for (None: the shared policy)."""
    return None if group == SHARED_GROUP else group


class TenantTrainer:
    def __init__(self, config: LiverlConfig, say: Callable[[str], None] = print):
        self.config = config
        self.tc = config.trainer
        self.dir = Path(self.tc.checkpoint_dir)
        self.say = say
        self.registry = Registry(config.mlflow)
        self.follower = TableHistory(config.table.trajectories_uri)
        self.opener = row_opener_for(config)  # rows' token ids are sealed per data subject (privacy.keys_dir)
        self.publishers = {group: Publisher(
            self.registry, self.tc.gate, self.tc.loss, config.rewards.monitors, self.tc.max_seq_len,
            config.rewards.version, self.dir / "registry", say, signing_key_file=self.tc.signing_key_file,
            tenant=tenant_of(group)) for group in groups(self.tc.tenants)}
        self.stop_requested = False
        self.windows = {group: GroupWindow() for group in self.publishers}
        self.holds = {group: GroupHold(self.tc.min_step_rows, self.tc.tenants.tokens_per_step, self.tc.max_step_wait_s)
                      for group in self.publishers}  # each group's step waits for enough of its own rows

    # ---- start: fresh from the champions, or resume from each group's last checkpoint ----------------------
    def start(self) -> None:
        import torch

        from trainer.adapters import AdapterBase, adapter_base
        from trainer.engine import start_distributed
        from trainer.policy_io import weights_digest
        from trainer.tenant_adapters import tenant_policies

        ranks = start_distributed(self.tc)
        if ranks.world > 1:
            raise ValueError(f"per-tenant adapters (trainer.tenants.adapters) train on one rank; this is a world of "
                             f"{ranks.world}: start `liverl train` without a launcher, or empty trainer.tenants.adapters")
        if self.tc.loss.kl_to_reference > 0:
            raise ValueError("per-tenant adapters have no frozen reference policy yet: set "
                             "trainer.loss.kl_to_reference = 0, or empty trainer.tenants.adapters")
        downloads = self.dir / "registry"
        state = TenantState.load(self.dir)
        if state is None:
            champion = self.registry.alias_version(names.ALIAS_CHAMPION)
            if champion is None:
                raise RuntimeError(f"registered model {self.registry.name!r} has no {names.ALIAS_CHAMPION!r} "
                                   "version; register a base policy first: liverl train --init-from POLICY_DIR")
            folder = self.registry.download(champion, downloads)
            base = adapter_base(champion, folder, self.registry, downloads)
            state = TenantState(run_key=uuid.uuid4().hex[:12], base_version=base.version)
        else:
            folder = self.registry.download(state.base_version, downloads)
            base = AdapterBase(state.base_version, weights_digest(folder), folder)
        for group in self.publishers:  # a group named since the last start begins now
            state.groups.setdefault(group, GroupState(parent_version=self._fresh_parent(group, base.version)))
        self.state = state
        self.base = base
        parents = {group: (self.registry.download(gs.parent_version, downloads) if gs.parent_version else None)
                   for group, gs in state.groups.items() if group in self.publishers}
        torch.manual_seed(self.tc.seed)  # the new adapters' initialisation
        self.policies = tenant_policies(base, parents, self.tc)
        for group, gs in state.groups.items():
            if group in self.publishers and gs.checkpoint_tag:  # the adapter alone was saved: the base is shared
                self.policies.activate(group).load_checkpoint(str(self.dir / "deepspeed" / group), tag=gs.checkpoint_tag,
                                                              load_module_strict=False)
        self.policies.model.eval()
        self.streams = group_streams(self.follower, {g: gs.position for g, gs in state.groups.items()}, self.tc)
        self.trained = dict(state.trained_ids)
        self.baselines = {group: Baselines(dict(state.groups[group].baselines)) for group in self.publishers}
        self.served = {group: promoted_versions(self.registry, tenant_of(group)) for group in self.publishers}
        for group, publisher in self.publishers.items():
            publisher.refuse_unjudged(self._run_key(group), self._pending_key(group))
        self.say(f"tenant trainer ready | base v{base.version} | groups "
                 + ", ".join(f"{g} (parent v{state.groups[g].parent_version or '-'}, step {state.groups[g].step})"
                             for g in self.publishers))
        for group in self.publishers:
            if state.groups[group].pending is not None:  # crashed between checkpoint and registration
                self._publish(group, state.groups[group].pending, [])

    def _fresh_parent(self, group: str, base_version: str) -> str | None:
        """A new or rewound group's parent: the champion that serves the group, when it is an adapter of this base;
        otherwise None, a new adapter on the base (the base's policy). That champion is the group's own, or, for a
        tenant without one yet, the shared champion: serving gives such a tenant the shared policy, so its rows were
        sampled from that adapter, and an adapter of its own that began from the base would learn away from the
        behaviour policy (and a rewind would take it further away still)."""
        version = self._serving_champion(group)
        if version is None or version == base_version:
            return None
        tags = self.registry.tags(version)
        if tags.get(names.TAG_WEIGHTS_KIND) != names.WEIGHTS_ADAPTER or tags.get(names.TAG_BASE_VERSION) != base_version:
            return None
        return version

    def _serving_champion(self, group: str) -> str | None:
        """The version serving follows for the group: its champion alias, else (a tenant) the shared champion."""
        own = self.registry.alias_version(champion_alias(group))
        return own if own is not None or group == SHARED_GROUP else self.registry.alias_version(names.ALIAS_CHAMPION)

    # ---- the loop -----------------------------------------------------------------------------------------------
    def run(self, follow: bool) -> int:
        """Train every group on everything new; with follow, keep waiting for more. Returns the versions registered."""
        registered = 0
        while not self.stop_requested:
            before = {group: stream.position for group, stream in self.streams.items()}
            plans = build_tenant_steps(self.streams, self.trained, self.served, int(time.time() * 1000), self.tc,
                                       self.say, opener=self.opener)
            for group in self.publishers:
                drawn = plans.get(group)
                if drawn is not None and drawn.empty:  # rows consumed, none to train: their commits are read
                    self.windows[group].commits.update(drawn.commits)
                ready = self.holds[group].take(drawn, before[group])
                if ready is not None:
                    self.step(group, ready)
            for group in self.publishers:
                registered += self.maybe_publish(group)
            if not plans:
                if not follow:
                    break
                time.sleep(self.tc.follow_interval_s)
        if not self.stop_requested:  # the end of what the table holds: train what waited for company
            for group, hold in self.holds.items():
                if (held := hold.release()) is not None:
                    self.step(group, held)
        for group in self.publishers:
            registered += self.maybe_publish(group, force=True)
        return registered

    def step(self, group: str, plan: StepPlan) -> None:
        """One optimizer step of the group's adapter on the group's rows, with one progress line."""
        from trainer.training_step import run_step

        gs = self.state.groups[group]
        result = run_step(self.policies.activate(group), plan, gs.step, self.baselines[group], self.config)
        gs.step += 1
        window = self.windows[group]
        window.commits.update(plan.commits)
        window.steps += 1
        window.trajectories += len(plan.trajectories)
        window.reward_config_versions.update(t.reward_config_version for t in plan.trajectories)
        window.step_metrics.append((gs.step, {**result.metrics, "gate_refusals_in_a_row": float(gs.gate_refusals)}))
        blocked = f" | blocked: gate refused {gs.gate_refusals} in a row ({gs.last_refusal[:200]})" if gs.gate_refusals else ""
        self.say(f"{group} | {result.line(gs.step, sorted(plan.commits))}{blocked}")

    # ---- checkpoint, publish ------------------------------------------------------------------------------------
    def maybe_publish(self, group: str, force: bool = False) -> int:
        """Checkpoint, export, register and gate the group's adapter when its window is due; 0 or 1 version."""
        window = self.windows[group]
        minutes = (time.monotonic() - window.started) / 60
        due = window.steps >= self.tc.steps_per_version or (
            self.tc.minutes_per_version > 0 and minutes >= self.tc.minutes_per_version)
        if not window.steps or not (due or force):
            return 0
        gs = self.state.groups[group]
        tag = f"step-{gs.step}"
        engine = self.policies.activate(group)  # what requires gradients is what the checkpoint saves: this adapter
        engine.save_checkpoint(str(self.dir / "deepspeed" / group), tag=tag, exclude_frozen_parameters=True)
        # Rows a group holds for its next step are not in this checkpoint: a restart draws them again.
        position = self.holds[group].start or self.streams[group].position
        gs.table_version, gs.cursor, gs.version_done = position.table_version, position.cursor, position.done
        gs.checkpoint_tag = tag
        gs.baselines = dict(self.baselines[group].means)
        gs.pending = PendingPublish(
            checkpoint_tag=tag, table_versions=sorted(window.commits),
            kafka_offsets=merge_offsets([c.kafka_offsets for _, c in sorted(window.commits.items())]),
            trajectories=window.trajectories, reward_config_versions=sorted(v for v in window.reward_config_versions if v),
            metrics=_summary(window.step_metrics),
        )
        self.state.trained_ids = sorted(self.trained.items())
        self.state.save(self.dir)  # from here a crash resumes at this checkpoint and finishes its registration
        self.windows[group] = GroupWindow()
        self._publish(group, gs.pending, window.step_metrics)
        return 1

    def _publish(self, group: str, pending: PendingPublish, step_metrics: list[tuple[int, dict[str, float]]]) -> None:
        from trainer.weight_probe import measure_weight_probe

        gs = self.state.groups[group]
        folder = self.dir / "exports" / group / pending.checkpoint_tag
        self.policies.activate(group)
        if not folder.exists():  # the export is atomic: present means complete
            self.policies.export(group, folder, self.base.folder)
        measure_weight_probe(self.policies.model).write(folder)  # the group's adapter active: its weights' probe
        evidence = group_evidence(self.follower.rows_up_to(self.streams[group].version), group, gs.step,
                                  self.baselines[group], self.config, self.opener)
        checkpoint = CheckpointToPublish(
            pending=pending, run_key=self._run_key(group), parent_version=gs.parent_version or self.base.version,
            step=gs.step, folder=folder, evidence=evidence, step_metrics=step_metrics,
        )
        result = self.publishers[group].publish(checkpoint)
        gs.parent_version = result.version
        gs.pending = None
        self._record(group, result)  # may rewind the group to its champion
        self.state.save(self.dir)
        self.served[group] = promoted_versions(self.registry, tenant_of(group))

    def _record(self, group: str, result: PublishResult) -> None:
        gs = self.state.groups[group]
        if result.decision == "pass":
            gs.gate_refusals, gs.last_refusal = 0, ""
            return
        if result.deferred:  # too little evidence is no refusal: it neither counts toward a rewind nor resets one
            return
        gs.gate_refusals += 1
        gs.last_refusal = "; ".join(result.reasons)
        every = self.tc.tenants.rewind_after_refusals
        if every and self.tc.gate.enabled and gs.gate_refusals % every == 0:
            self._rewind(group)

    def _rewind(self, group: str) -> None:
        """The group's adapter back to the champion that serves it (trainer.tenants.rewind_after_refusals) with a new
        optimizer, whose learning rate warms up again (trainer.warmup_steps), as a fresh start of the group would hold
        them (the caller saves the state: a restart then starts from there)."""
        gs = self.state.groups[group]
        target = self._fresh_parent(group, self.base.version)
        self.policies.rewind(group, self.registry.download(target, self.dir / "registry") if target else None, self.tc)
        gs.parent_version, gs.checkpoint_tag = target, None  # a restart loads the parent, no checkpoint of the drift
        whose = "its" if target == self.registry.alias_version(champion_alias(group)) else "the shared"
        to = f"{whose} champion v{target}" if target else f"a new adapter on base v{self.base.version}"
        self.say(f"{group} | rewound to {to} after {gs.gate_refusals} candidates refused in a row "
                 "(trainer.tenants.rewind_after_refusals)")

    def _run_key(self, group: str) -> str:
        return f"{self.state.run_key}-{group}"

    def _pending_key(self, group: str) -> str | None:
        pending = self.state.groups[group].pending
        return f"{self._run_key(group)}/{pending.checkpoint_tag}" if pending else None

    def close(self) -> None:
        for publisher in self.publishers.values():
            publisher.close()


def _summary(step_metrics: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Mean of each metric over the window's steps (recorded on the version)."""
    if not step_metrics:
        return {}
    keys = step_metrics[-1][1].keys()
    return {key: sum(m[key] for _, m in step_metrics) / len(step_metrics) for key in keys}
