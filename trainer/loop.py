"""The trainer: follow the table, take off-policy-corrected steps, checkpoint, publish (register + gate), per group.

    run: load_batch -> step (a group at a time) -> maybe_checkpoint -> maybe_publish, again and again

The unit is the tenant group (trainer/groups/tenant_groups.py): one, `_shared`, whose alias is `champion`, unless
trainer.tenants.adapters names tenants, each then a group of its own (alias `champion-<tenant>`) with a LoRA adapter
on one shared base (trainer/groups/tenant_adapters.py), the shared group training the policy every other tenant is served.
Each group draws its own rows (within trainer.tenants.tokens_per_step when tenants are named) and waits for enough
of them (trainer/step/wait.py), steps its own policy, checkpoints, registers and is gated on its own held-out
sessions, and a pass moves its alias alone (trainer/io/publish.py). After trainer.tenants.rewind_after_refusals
refusals in a row a tenant group's adapter starts again from the champion that serves it.

Every checkpoint becomes a registered candidate (publish.CheckpointPublisher), judged by the gate beside the next
steps (gate_worker, trainer.gate.background) or before them; the state file written right after the DeepSpeed
checkpoint holds the group's table position, so a crash at any point resumes every group without gap or repeat.
The trainer keeps making candidates however many the gate refuses: staleness counts promotions since a row was
served (served_lineage), so a champion that stays put never starves training, and the progress line says when
promotion is blocked and why.

On several data-parallel ranks (the deepspeed launcher, torchrun) rank 0 alone follows the table, writes the state
file and publishes; it broadcasts each decision (the groups' step plans, "checkpoint now", the publish result, the
verdicts) and every rank trains its share of each step (training_step.run_step), saves its part of each DeepSpeed
checkpoint and takes part in the export's gather. The checkpoint folder must be shared by the ranks, as
DeepSpeed's is.
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
from trainer.gate.worker import GateWorker
from trainer.groups.tenant_groups import SHARED_GROUP, champion_alias, groups, tenant_of
from trainer.io.publish import CheckpointPublisher, CheckpointToPublish, PublishResult
from trainer.io.registry import Registry
from trainer.io.row_stream import RowStream
from trainer.io.served_lineage import ServedLineage, promoted_versions
from trainer.io.state import LAYOUT_ADAPTERS, LAYOUT_ONE_POLICY, GroupState, PendingPublish, TrainerState
from trainer.step.advantages import Baselines
from trainer.step.ranks import Ranks
from trainer.step.wait import StepHold

STOP_GATE_WAIT_S = 20.0  # a stopping trainer waits this long for a judgement in flight; the next start refuses it

if TYPE_CHECKING:
    from torch.nn import Module

    from trainer.groups.tenant_adapters import TenantPolicies
    from trainer.step.adapters import AdapterBase, TrainablePolicy
    from trainer.step.builder import StepPlan


@dataclass
class VersionWindow:
    """What a group trained since its last registered version (its lineage and metrics)."""

    commits: dict[int, TableCommit] = field(default_factory=dict)  # table version -> its commit
    trajectories: int = 0
    steps: int = 0
    reward_config_versions: set[str] = field(default_factory=set)
    step_metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Saved:
    """A group's DeepSpeed checkpoint saved on every rank and recorded in the state file, not yet registered."""

    group: str
    pending: PendingPublish
    step_metrics: list[tuple[int, dict[str, float]]] = field(default_factory=list)


@dataclass
class Group:
    """A tenant group's working parts beside its saved GroupState (the stream, timeline and gate: rank 0's)."""

    name: str
    publisher: CheckpointPublisher
    hold: StepHold
    window: VersionWindow = field(default_factory=VersionWindow)
    baselines: Baselines = field(default_factory=Baselines)  # every rank computes the step's advantages
    parent_folder: Path | None = None  # the policy folder the group's export copies tokenizer files from
    reference: Module | None = None  # frozen, only when trainer.loss.kl_to_reference > 0
    stream: RowStream | None = None  # rank 0: the group's rows of the table
    served: ServedLineage | None = None  # rank 0: the champion timeline the group's staleness counts on
    gates: GateWorker | None = None  # rank 0, with trainer.gate.background: candidates judged beside training


class Trainer:
    def __init__(self, config: LiverlConfig, say: Callable[[str], None] = print):
        self.config = config
        self.tc = config.trainer
        self.dir = Path(self.tc.checkpoint_dir)
        self.say = say
        self.registry = Registry(config.mlflow)
        self.follower = TableHistory(config.table.trajectories_uri)
        self.opener = row_opener_for(config)  # rows' token ids are sealed per data subject (privacy.keys_dir)
        self.tenants = bool(self.tc.tenants.adapters)  # a LoRA adapter per tenant group on one base
        share = self.tc.tenants.tokens_per_step if self.tenants else None  # each group's share of a step
        self.groups = {name: Group(
            name=name,
            publisher=CheckpointPublisher(
                self.registry, self.tc.gate, self.tc.loss, config.rewards.monitors, self.tc.max_seq_len,
                config.rewards.version, self.dir / "registry", say, signing_key_file=self.tc.signing_key_file,
                tenant=tenant_of(name)),
            hold=StepHold(self.tc.min_step_rows, share, self.tc.max_step_wait_s),
        ) for name in groups(self.tc.tenants)}
        self.stop_requested = False
        self.ranks = Ranks()  # joined in start()
        self.state: TrainerState
        self.base: AdapterBase  # the full-weights version the adapters apply to (one policy: its parent's)
        self.policies: TrainablePolicy | TenantPolicies  # what the engines train, reached per group
        self.trained: dict[str, int]  # rank 0: trajectory id -> table version it was trained from

    # ---- start: fresh from the champions, or resume from each group's last checkpoint ------------------------
    def start(self) -> None:
        import torch

        from trainer.step.engine import start_distributed

        self.ranks = start_distributed(self.tc)
        if not self.ranks.main:
            self.say = lambda _line: None  # one progress line per step, from rank 0
        # Rank 0 reads the state and downloads the parents; the others build the same models from their folders.
        self.state, self.base, parents = self.ranks.decide(self._load_state)
        torch.manual_seed(self.tc.seed)  # also a new adapter's initialisation
        self.policies = self._build_policies(parents)
        references: dict[Path, Module] = {}  # groups that start from the same folder share one frozen reference
        for name, group in self.groups.items():
            gs = self.state.groups[name]
            group.parent_folder = self.base.folder if self.tenants else parents[name]
            if gs.checkpoint_tag:  # an adapter's checkpoint holds the adapter alone: the base is the parent's
                self.policies.activate(name).load_checkpoint(str(self._checkpoints(name)), tag=gs.checkpoint_tag,
                                                             load_module_strict=not self.policies.is_adapter)
            group.baselines = Baselines(dict(gs.baselines))
            if self.tc.loss.kl_to_reference > 0:  # the KL term's reference: the policy the group started from, frozen
                group.reference = self._reference(parents[name] or self.base.folder, references)
        self.policies.activate(SHARED_GROUP).module.eval()  # no dropout: logprobs comparable with serving's
        if self.ranks.main:  # the table positions and the champion timelines are rank 0's
            from trainer.groups.tenant_groups import group_streams

            self.trained = dict(self.state.trained_ids)
            streams = group_streams(self.follower, {g: gs.position for g, gs in self.state.groups.items()}, self.tc)
            for name, group in self.groups.items():
                group.stream = streams[name]
                group.served = promoted_versions(self.registry, tenant_of(name))
                pending = self.state.groups[name].pending
                keep = f"{self.state.groups[name].run_key}/{pending.checkpoint_tag}" if pending else None
                # a stop while they were judged (or registered) left them undecided
                group.publisher.refuse_unjudged(self.state.groups[name].run_key, keep)
                if self.tc.gate.background:
                    group.gates = GateWorker(group.publisher, self.say, self.dir / "gate" / f"open-test-{name}.json")
        self.say(self._ready_line())
        for name in self.groups:
            if self.state.groups[name].pending:  # crashed between checkpoint and registration: finish it first
                self.maybe_publish(Saved(name, self.state.groups[name].pending))

    def _ready_line(self) -> str:
        ranks = f" | ranks {self.ranks.world}" if self.ranks.world > 1 else ""
        if not self.tenants:
            gs = self.state.groups[SHARED_GROUP]
            where = f"step {gs.step}, table v{gs.table_version} row {gs.cursor}"
            return (f"trainer ready | parent v{gs.parent_version} | {where} | checkpoint {gs.checkpoint_tag or '-'}"
                    f" | {self.policies.describe()}{ranks}")
        states = self.state.groups
        parts = ", ".join(f"{g} (parent v{states[g].parent_version or '-'}, step {states[g].step})"
                          for g in self.groups)
        return f"trainer ready | base v{self.base.version} | groups {parts} | {self.policies.describe()}{ranks}"

    def _load_state(self) -> tuple[TrainerState, AdapterBase, dict[str, Path | None]]:
        """Rank 0: the saved state (or a fresh one from the champion) with every group in it, the base the adapters
        apply to, and each group's parent folder (None: a new adapter on the base)."""
        from trainer.io.policy_io import weights_digest
        from trainer.step.adapters import AdapterBase, adapter_base

        downloads = self.dir / "registry"
        state = TrainerState.load(self.dir, SHARED_GROUP)
        if state is None:
            champion = self.registry.alias_version(names.ALIAS_CHAMPION)
            if champion is None:
                raise RuntimeError(
                    f"registered model {self.registry.name!r} has no {names.ALIAS_CHAMPION!r} version; "
                    "register a base policy first: liverl train --init-from POLICY_DIR"
                )
            state = TrainerState(run_key=uuid.uuid4().hex[:12])
            if not self.tenants:  # the one policy's versions keep the run's own key
                state.groups[SHARED_GROUP] = GroupState(parent_version=champion, run_key=state.run_key)
        layout = LAYOUT_ADAPTERS if self.tenants else LAYOUT_ONE_POLICY
        switched = state.layout != layout
        if switched:  # the checkpoints hold another layout's modules: go on from each group's registered parent
            for name, gs in state.groups.items():
                if gs.pending:
                    raise RuntimeError(
                        f"group {name!r}'s checkpoint {gs.pending.checkpoint_tag!r} was saved with trainer.tenants."
                        f"adapters {'empty' if self.tenants else 'set'} and is not registered yet: run once more as "
                        "it was configured, then change trainer.tenants.adapters")
                gs.checkpoint_tag = None  # the parent holds the checkpoint's weights; the optimizer starts anew
            state.layout = layout
        if not self.tenants:
            gs = state.groups[SHARED_GROUP]
            gs.parent_version = gs.parent_version or state.base_version  # after adapters: a new one was its base
            folder = self.registry.download(gs.parent_version, downloads)
            base = adapter_base(gs.parent_version, folder, self.registry, downloads)
            state.base_version = base.version
            return state, base, {SHARED_GROUP: folder}
        if state.base_version is None or switched:  # the base every adapter applies to: the shared policy's
            shared = state.groups.get(SHARED_GROUP)
            parent = (shared.parent_version if shared else None) or self.registry.alias_version(names.ALIAS_CHAMPION)
            if parent is None:
                raise RuntimeError(f"registered model {self.registry.name!r} has no {names.ALIAS_CHAMPION!r} version; "
                                   "register a base policy first: liverl train --init-from POLICY_DIR")
            base = adapter_base(parent, self.registry.download(parent, downloads), self.registry, downloads)
        else:
            folder = self.registry.download(state.base_version, downloads)
            base = AdapterBase(state.base_version, weights_digest(folder), folder)
        state.base_version = base.version
        for name in self.groups:  # a group named since the last start begins now
            gs = state.groups.setdefault(name, GroupState(parent_version=self._fresh_parent(name, base.version),
                                                          run_key=f"{state.run_key}-{name}"))
            if gs.parent_version == base.version:  # the one policy trained from the base: a new adapter on it
                gs.parent_version, gs.checkpoint_tag = None, None
        parents = {name: (self.registry.download(state.groups[name].parent_version, downloads)
                          if state.groups[name].parent_version else None) for name in self.groups}
        return state, base, parents

    def _build_policies(self, parents: dict[str, Path | None]) -> TrainablePolicy | TenantPolicies:
        from trainer.groups.tenant_adapters import tenant_policies
        from trainer.step.adapters import trainable_policy
        from trainer.step.engine import build_engine

        if self.tenants:
            return tenant_policies(self.base, parents, self.tc)
        policy = trainable_policy(parents[SHARED_GROUP], self.base, self.tc.lora)
        policy.engine = build_engine(policy.model, self.tc)
        return policy

    def _reference(self, folder: Path, loaded: dict[Path, Module]) -> Module:
        from trainer.io.policy_io import load_policy

        if folder not in loaded:
            loaded[folder] = load_policy(folder, base_folder=self.base.folder).eval()
        return loaded[folder]

    def _fresh_parent(self, group: str, base_version: str) -> str | None:
        """A new or rewound tenant group's parent: the champion that serves the group, when it is an adapter of this
        base; otherwise None, a new adapter on the base (the base's policy). That champion is the group's own, or,
        for a tenant without one yet, the shared champion: serving gives such a tenant the shared policy, so its rows
        were sampled from that adapter, and an adapter of its own that began from the base would learn away from the
        behaviour policy (and a rewind would take it further away still)."""
        version = self._serving_champion(group)
        if version is None or version == base_version:
            return None
        tags = self.registry.tags(version)
        if (tags.get(names.TAG_WEIGHTS_KIND) != names.WEIGHTS_ADAPTER
                or tags.get(names.TAG_BASE_VERSION) != base_version):
            return None
        return version

    def _serving_champion(self, group: str) -> str | None:
        """The version serving follows for the group: its champion alias, else (a tenant) the shared champion."""
        own = self.registry.alias_version(champion_alias(group))
        return own if own is not None or group == SHARED_GROUP else self.registry.alias_version(names.ALIAS_CHAMPION)

    # ---- the loop ---------------------------------------------------------------------------------------------
    def run(self, follow: bool) -> int:
        """Train every group on everything new; with follow, keep waiting for more. Returns the versions registered."""
        registered = 0
        while not self.ranks.any(self.stop_requested):
            drew, plans = self.load_batch()
            for name, plan in plans.items():
                self.step(name, plan)
            for name in self.groups:
                registered += self.maybe_publish(self.maybe_checkpoint(name))
            self.collect_verdicts()
            if not drew:
                if not follow:
                    break
                time.sleep(self.tc.follow_interval_s)
        if not self.ranks.any(self.stop_requested):  # the end of what the table holds: train what waited for company
            for name, plan in self.ranks.decide(self._held_plans).items():
                self.step(name, plan)
        for name in self.groups:
            registered += self.maybe_publish(self.maybe_checkpoint(name, force=True))
        if self.tc.gate.background:  # a stop waits a little for the judging in flight; a finished run for all of it
            for group in self.groups.values():
                if group.gates is not None:
                    group.gates.drain(STOP_GATE_WAIT_S if self.stop_requested else None)
            self.collect_verdicts()
        return registered

    def collect_verdicts(self) -> None:
        """Background gate: take in the verdicts rank 0's gate workers reached since the last call (every rank)."""
        if not self.tc.gate.background:
            return
        verdicts = self.ranks.decide(lambda: [(name, result) for name, group in self.groups.items()
                                              if group.gates is not None for result in group.gates.finished()])
        for name, result in verdicts:
            self._record(name, result)
        if self.ranks.main:
            for name in {name for name, result in verdicts if result.promoted}:  # a promotion moves the timeline
                self.groups[name].served = promoted_versions(self.registry, tenant_of(name))

    def close(self) -> None:
        """Stop the background gates and the online evaluators (the end of `liverl train`)."""
        for group in self.groups.values():
            if group.gates is not None:
                group.gates.close()
            group.publisher.close()

    def steps_line(self) -> str:
        """Where training stands: `step N`, or with tenant groups `steps <group> N, ...`."""
        if not self.tenants:
            return f"step {self.state.groups[SHARED_GROUP].step}"
        return "steps " + ", ".join(f"{name} {self.state.groups[name].step}" for name in self.groups)

    def load_batch(self) -> tuple[bool, dict[str, StepPlan]]:
        """(whether any group drew rows, the groups' plans ready to step) as rank 0 decided them, on every rank."""
        return self.ranks.decide(self._next_plans)

    def _next_plans(self) -> tuple[bool, dict[str, StepPlan]]:
        from trainer.groups.tenant_groups import build_tenant_steps

        before = {name: group.stream.position for name, group in self.groups.items()}
        drawn = build_tenant_steps({name: group.stream for name, group in self.groups.items()}, self.trained,
                                   {name: group.served for name, group in self.groups.items()},
                                   int(time.time() * 1000), self.tc, self.say, world=self.ranks.world,
                                   opener=self.opener)
        ready = {}
        for name, group in self.groups.items():
            plan = drawn.get(name)
            if plan is not None and plan.empty:  # rows consumed, none to train: their commits are read
                group.window.commits.update(plan.commits)
                stale = plan.skipped.get("stale", 0)
                why = f" | blocked: {stale} rows stale (champion v{group.served.promoted[-1]})" if stale else ""
                self.say(f"{self._prefix(name)}skipped {plan.consumed} rows of table v{group.stream.version}: "
                         f"{dict(plan.skipped)}{why}")
            if (held := group.hold.take(plan, before[name])) is not None:
                ready[name] = held
        return bool(drawn), ready

    def _held_plans(self) -> dict[str, StepPlan]:
        return {name: plan for name, group in self.groups.items() if (plan := group.hold.release()) is not None}

    def step(self, name: str, plan: StepPlan) -> None:
        """One optimizer step of the group's policy on the plan's trajectories, with one progress line."""
        from trainer.step.training_step import run_step

        gs, group = self.state.groups[name], self.groups[name]
        result = run_step(self.policies.activate(name), plan, gs.step, group.baselines, self.config,
                          reference=group.reference, ranks=self.ranks)
        if self.tc.log_trained_ids:  # every rank: the audit that no trajectory is trained twice
            mine = (sorted(t.trajectory_id for t in plan.trajectories) if self.ranks.world == 1
                    else list(result.trained_ids))
            # One write per line: the ranks share the launcher's stdout, and print() writes the newline apart.
            sys.stdout.write(f"trained ids | rank {self.ranks.rank} | {self._prefix(name)}step {gs.step + 1} | "
                             f"{','.join(mine)}\n")
            sys.stdout.flush()
        gs.step += 1
        gs.trajectories_trained += len(plan.trajectories)
        window = group.window
        window.commits.update(plan.commits)
        window.steps += 1
        window.trajectories += len(plan.trajectories)
        window.reward_config_versions.update(t.reward_config_version for t in plan.trajectories)
        window.step_metrics.append((gs.step, {**result.metrics, "gate_refusals_in_a_row": float(gs.gate_refusals)}))
        if self.ranks.main:  # the champion timeline behind blocked() is rank 0's
            self.say(self._prefix(name) + result.line(gs.step, sorted(plan.commits)) + self.blocked(name))

    def blocked(self, name: str = SHARED_GROUP) -> str:
        """The progress line's note while the gate keeps refusing a group: how long, and the last reasons."""
        gs = self.state.groups[name]
        if not gs.gate_refusals:
            return ""
        return (f" | blocked: gate refused {gs.gate_refusals} candidates in a row, champion "
                f"v{self.groups[name].served.promoted[-1]} ({gs.last_refusal[:200]})")

    def _prefix(self, name: str) -> str:
        return f"{name} | " if self.tenants else ""

    # ---- checkpoint, publish --------------------------------------------------------------------------------
    def maybe_checkpoint(self, name: str, force: bool = False) -> Saved | None:
        """Save the group's DeepSpeed checkpoint (every rank) when its window is due (or forced and not empty)."""
        group, gs = self.groups[name], self.state.groups[name]
        # Rank 0's clock decides: the ranks' minutes_per_version would expire at different steps.
        if not group.window.steps or not self.ranks.decide(lambda: force or self._window_due(group.window)):
            return None
        tag = f"step-{gs.step}"
        # Collective: each rank its shards. An adapter's frozen base is the parent's: only the adapter is saved
        # (with tenant groups, what requires gradients is the activated group's adapter).
        self.policies.activate(name).save_checkpoint(str(self._checkpoints(name)), tag=tag,
                                                     exclude_frozen_parameters=self.policies.is_adapter)
        self.ranks.barrier()  # every shard written before the state file points at them
        gs.checkpoint_tag = tag
        gs.pending = self.ranks.decide(lambda: self._record_checkpoint(name, tag))
        saved = Saved(name, gs.pending, group.window.step_metrics)
        group.window = VersionWindow()
        return saved

    def _record_checkpoint(self, name: str, tag: str) -> PendingPublish:
        """Rank 0: the group's table position and its window's lineage, saved with the checkpoint they belong to."""
        group, gs = self.groups[name], self.state.groups[name]
        # Rows the group holds for its next step are not in this checkpoint: a restart draws them again.
        gs.position = group.hold.start or group.stream.position
        gs.baselines = dict(group.baselines.means)
        window = group.window
        gs.pending = PendingPublish(
            checkpoint_tag=tag,
            table_versions=sorted(window.commits),
            kafka_offsets=merge_offsets([c.kafka_offsets for _, c in sorted(window.commits.items())]),
            trajectories=window.trajectories,
            reward_config_versions=sorted(v for v in window.reward_config_versions if v),
            metrics=_summary(window.step_metrics),
        )
        self.state.trained_ids = sorted(self.trained.items())
        self.state.save(self.dir)  # from here a crash resumes at this checkpoint and finishes its registration
        return gs.pending

    def maybe_publish(self, saved: Saved | None) -> int:
        """Export, register and gate a group's saved checkpoint (rank 0; the others take part in the export's gather
        and wait for the verdict); returns the versions registered (0 or 1)."""
        if saved is None:
            return 0
        name = saved.group
        group, gs = self.groups[name], self.state.groups[name]
        checkpoint = self._to_publish(saved)
        result = None
        if self.tc.gate.background:  # registered now, judged beside the next steps (rank 0's GateWorker)
            version = self.ranks.decide(lambda: group.publisher.register(checkpoint))
            if group.gates is not None:
                group.gates.submit(version, checkpoint)
        else:
            result = self.ranks.decide(lambda: group.publisher.publish(checkpoint))
            version = result.version
        gs.parent_version = version
        gs.pending = None
        if not self.tenants:  # the next export copies its tokenizer files from this one
            group.parent_folder = self._exports(name) / saved.pending.checkpoint_tag
        if result is not None:
            self._record(name, result)  # may rewind the group to its champion
        if self.ranks.main:
            self.state.save(self.dir)
            if group.gates is None:
                group.served = promoted_versions(self.registry, tenant_of(name))  # a promotion moves the timeline
            self._prune_checkpoints(name)
        return 1

    def _record(self, name: str, result: PublishResult) -> None:
        """A verdict on one of the group's candidates (every rank: a rewind changes every rank's adapter)."""
        gs = self.state.groups[name]
        said = self.ranks.main and not self.tc.gate.background  # in the background, training went on long ago
        if result.decision == "pass":
            gs.gate_refusals, gs.last_refusal = 0, ""
            return
        if result.deferred:  # too little evidence: no refusal (nor a step toward a rewind); the next one is judged
            if said:
                self.say(f"{self._prefix(name)}gate deferred v{result.version}: {'; '.join(result.reasons)[:300]}")
            return
        if not result.judged:  # superseded before its turn: nothing was learned of it, so no refusal either (a
            return  # slow gate on a busy machine would otherwise rewind a tenant, and call it "refused")
        gs.gate_refusals += 1
        gs.last_refusal = "; ".join(result.reasons)
        if said:
            self.say(f"{self._prefix(name)}training goes on from v{result.version}{self.blocked(name)}")
        every = self.tc.tenants.rewind_after_refusals
        if self.tenants and every and self.tc.gate.enabled and gs.gate_refusals % every == 0:
            self._rewind(name)

    def _rewind(self, name: str) -> None:
        """The group's adapter back to the champion that serves it (trainer.tenants.rewind_after_refusals) with a new
        optimizer, whose learning rate warms up again (trainer.warmup_steps), as a fresh start of the group would
        hold them; the state is saved, so a restart starts from there."""
        gs = self.state.groups[name]
        # A verdict reached in the background finds steps taken since the last checkpoint: they become a candidate
        # first, so that what the state file says below is a checkpoint's (position, step) and the parent's weights.
        self.maybe_publish(self.maybe_checkpoint(name, force=True))
        target, folder, whose = self.ranks.decide(lambda: self._rewind_target(name))
        self.policies.rewind(name, folder, self.tc)
        gs.parent_version, gs.checkpoint_tag = target, None  # a restart loads the parent, no checkpoint of the drift
        if self.ranks.main:
            self.state.save(self.dir)
        to = f"{whose} champion v{target}" if target else f"a new adapter on base v{self.base.version}"
        self.say(f"{name} | rewound to {to} after {gs.gate_refusals} candidates refused in a row "
                 "(trainer.tenants.rewind_after_refusals)")

    def _rewind_target(self, name: str) -> tuple[str | None, Path | None, str]:
        """Rank 0: the version a rewound group starts from, its folder, and whose champion it is."""
        target = self._fresh_parent(name, self.base.version)
        if target is None:
            return None, None, ""
        whose = "its" if target == self.registry.alias_version(champion_alias(name)) else "the shared"
        return target, self.registry.download(target, self.dir / "registry"), whose

    def _window_due(self, window: VersionWindow) -> bool:
        if window.steps >= self.tc.steps_per_version:
            return True
        minutes = (time.monotonic() - window.started) / 60
        return self.tc.minutes_per_version > 0 and minutes >= self.tc.minutes_per_version

    def _to_publish(self, saved: Saved) -> CheckpointToPublish | None:
        """Export the group's weights (they are the checkpoint's) and gather the gate's evidence: rank 0's
        CheckpointToPublish; None on the other ranks, which only take part in gathering ZeRO-3 weights."""
        from trainer.groups.tenant_groups import group_evidence
        from trainer.io.weight_probe import measure_weight_probe

        name = saved.group
        group, gs = self.groups[name], self.state.groups[name]
        folder = self._exports(name) / saved.pending.checkpoint_tag
        engine = self.policies.activate(name)
        self.policies.export(name, folder, group.parent_folder, keep=self.ranks.main)  # collective under ZeRO-3
        # Every rank (a forward pass is collective under ZeRO-3); the module runs the group's policy.
        probe = measure_weight_probe(engine.module)
        if not self.ranks.main:
            return None
        probe.write(folder)  # serving proves its replicas load these weights (a resumed export gets it too)
        evidence = group_evidence(self.follower.rows_up_to(group.stream.version), name, gs.step, group.baselines,
                                  self.config, self.opener)
        return CheckpointToPublish(
            pending=saved.pending, run_key=gs.run_key, parent_version=gs.parent_version or self.base.version,
            step=gs.step, folder=folder, evidence=evidence, step_metrics=saved.step_metrics,
        )

    def _checkpoints(self, name: str) -> Path:
        return self.dir / "deepspeed" / name

    def _exports(self, name: str) -> Path:
        return self.dir / "exports" / name

    def _prune_checkpoints(self, name: str) -> None:
        group, gs = self.groups[name], self.state.groups[name]
        tags = sorted((p for p in self._checkpoints(name).glob("step-*") if p.is_dir()),
                      key=lambda p: int(p.name.split("-")[1]))
        for old in tags[: -self.tc.keep_checkpoints]:
            if old.name != gs.checkpoint_tag:
                shutil.rmtree(old, ignore_errors=True)
        exports = sorted(self._exports(name).glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
        judged = group.gates.in_use() if group.gates is not None else set()
        for old in exports[: -self.tc.keep_checkpoints]:
            if old != group.parent_folder and old not in judged:  # the next export copies its tokenizer files
                shutil.rmtree(old, ignore_errors=True)  # registered: the registry holds a copy


def _summary(step_metrics: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """Mean of each metric over the window's steps (recorded on the version)."""
    if not step_metrics:
        return {}
    keys = step_metrics[-1][1].keys()
    return {key: sum(m[key] for _, m in step_metrics) / len(step_metrics) for key in keys}
