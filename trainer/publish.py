"""Publish a checkpoint: register its exported policy as the candidate, then let the gate decide about champion.

    Publisher(registry, gate config, ...).publish(CheckpointToPublish) -> PublishResult

Idempotent, because a crash may land anywhere in here: the version is found again by its checkpoint key,
and a version that already carries a gate decision is not judged twice. The gate's verdict (decision and
report) is recorded on the candidate's version either way; only a pass moves `champion`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from liverl.contracts import names
from trainer.gate import GateReport, evaluate
from trainer.holdout import GateEvidence
from trainer.lineage import lineage_tags
from trainer.online_eval_process import online_evaluator
from trainer.registry import TAG_CHECKPOINT, Registry
from trainer.state import PendingPublish


@dataclass(frozen=True)
class CheckpointToPublish:
    """Produced by the loop right after a DeepSpeed checkpoint and its export; consumed by Publisher.publish."""

    pending: PendingPublish  # lineage of the window (also in the state file, so a restart can finish it)
    run_key: str  # with pending.checkpoint_tag: the version's idempotency key
    parent_version: str  # the version the window's training started from
    step: int  # trainer step of the checkpoint
    folder: Path  # the exported HF policy folder of the checkpoint's weights
    evidence: GateEvidence  # the gate's inputs, from the table snapshot the checkpoint was trained up to
    step_metrics: Sequence[tuple[int, dict[str, float]]] = ()  # (step, figures) logged on the version's run


@dataclass(frozen=True)
class PublishResult:
    version: str  # the registered candidate
    decision: str  # the gate's decision recorded on it: "pass" | "fail"
    reasons: tuple[str, ...]  # why it failed (empty on pass)
    champion: str | None  # the champion after publishing

    @property
    def promoted(self) -> bool:
        return self.decision == "pass" and self.champion == self.version


class Publisher:
    def __init__(self, registry: Registry, gate: GateConfig, loss: LossConfig, monitors: MonitorsConfig,
                 max_seq_len: int, reward_config_version: str, download_dir: Path,
                 say: Callable[[str], None] = print):
        self.registry = registry
        self.gate, self.loss, self.monitors, self.max_seq_len = gate, loss, monitors, max_seq_len
        self.reward_config_version = reward_config_version
        self.download_dir = download_dir  # the champion's folder is downloaded here to be judged against
        self.say = say
        self.online = online_evaluator(gate)  # the product's evaluator, if any (trainer/online_eval_process.py)

    def close(self) -> None:
        """Ends a persistent online evaluator; call when the trainer stops."""
        if self.online is not None:
            self.online.close()

    def publish(self, checkpoint: CheckpointToPublish) -> PublishResult:
        """Register, then judge, in the caller's thread (trainer/gate_worker.py judges beside training instead)."""
        return self.decide(self.register(checkpoint), checkpoint)

    def decide(self, version: str, checkpoint: CheckpointToPublish) -> PublishResult:
        """The gate's verdict on a registered candidate: recorded before a crash, or judged now."""
        tags = self.registry.tags(version)
        if names.TAG_GATE_DECISION in tags:  # judged before a crash: never twice
            report = json.loads(tags.get(names.TAG_GATE_REPORT) or "{}")
            return PublishResult(version, tags[names.TAG_GATE_DECISION], tuple(report.get("reasons", ())),
                                 self.registry.alias_version(names.ALIAS_CHAMPION))
        champion = self.registry.alias_version(names.ALIAS_CHAMPION)
        if names.TAG_GATE_REPORT in tags and champion == version:  # crashed after promoting: just record it
            self.registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
            return PublishResult(version, "pass", (), champion)
        return self.judge(version, checkpoint)

    def register(self, checkpoint: CheckpointToPublish) -> str:
        """The candidate version of this checkpoint, registered once, with its lineage; `candidate` points at it."""
        started = time.perf_counter()
        pending = checkpoint.pending
        key = f"{checkpoint.run_key}/{pending.checkpoint_tag}"
        version = self.registry.find_by_tag(TAG_CHECKPOINT, key)
        if version is None:
            tags = lineage_tags(pending, checkpoint.parent_version, checkpoint.step, self.reward_config_version,
                                checkpoint.run_key, checkpoint.folder)
            version = self.registry.register(checkpoint.folder, tags, run_name=f"train {pending.checkpoint_tag}",
                                             step_metrics=list(checkpoint.step_metrics))
        self.registry.set_alias(names.ALIAS_CANDIDATE, version)
        self.say(
            f"version {version} registered | parent v{checkpoint.parent_version} | step {checkpoint.step} "
            f"| table versions {pending.table_versions} | trajectories {pending.trajectories} "
            f"| {time.perf_counter() - started:.1f}s"
        )
        return version

    def judge(self, version: str, checkpoint: CheckpointToPublish) -> PublishResult:
        started = time.perf_counter()
        champion = self.registry.alias_version(names.ALIAS_CHAMPION)
        report = self.report(version, champion, checkpoint)
        body = {"decision": report.decision, "champion": champion, "reasons": report.reasons,
                "figures": report.figures}
        # Report, then champion, then decision: the decision tag last marks the gate as done for a restart.
        self.registry.set_tag(version, names.TAG_GATE_REPORT, json.dumps(body, sort_keys=True)[:5000])
        if report.passed:
            self.registry.set_alias(names.ALIAS_CHAMPION, version)
        self.registry.set_tag(version, names.TAG_GATE_DECISION, report.decision)
        figures = " | ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                             for key, value in report.figures.items() if not key.startswith("monitor."))
        why = f" ({'; '.join(report.reasons)})" if report.reasons else ""
        outcome = "champion" if report.passed else f"champion stays v{champion}"
        self.say(f"gate v{version} vs v{champion}: {report.decision}{why} -> {outcome} | {figures} "
                 f"| {time.perf_counter() - started:.1f}s")
        return PublishResult(version, report.decision, tuple(report.reasons),
                             version if report.passed else champion)

    def refuse(self, version: str, reason: str) -> PublishResult:
        """Record a refusal without judging (a candidate superseded before its turn, or one whose judging a stopped
        trainer left unfinished), so that every version carries a decision; the champion stays."""
        champion = self.registry.alias_version(names.ALIAS_CHAMPION)
        body = {"decision": "fail", "champion": champion, "reasons": [reason], "figures": {}}
        self.registry.set_tag(version, names.TAG_GATE_REPORT, json.dumps(body, sort_keys=True))
        self.registry.set_tag(version, names.TAG_GATE_DECISION, "fail")
        self.say(f"gate v{version}: not judged ({reason}) -> champion stays v{champion}")
        return PublishResult(version, "fail", (reason,), champion)

    def refuse_unjudged(self, run_key: str, keep: str | None = None) -> list[str]:
        """Versions of this trainer run (run_key) left without a decision by a stop while they were judged, except
        the checkpoint key `keep` (a pending publish the restart finishes): each is refused; returns them."""
        from trainer.registry import TAG_CHECKPOINT

        refused = []
        for mv in self.registry.versions():
            key = mv.tags.get(TAG_CHECKPOINT, "")
            if key.startswith(f"{run_key}/") and key != keep and names.TAG_GATE_DECISION not in mv.tags:
                self.refuse(mv.version, "not judged: the trainer stopped while it waited for or ran its gate")
                refused.append(mv.version)
        return refused

    def report(self, version: str, champion: str | None, checkpoint: CheckpointToPublish) -> GateReport:
        from trainer.policy_io import download_policy, load_policy

        if not self.gate.enabled:
            return GateReport("fail", ["gate disabled (trainer.gate.enabled=false): champion stays"], {})
        if champion is None or champion == version:
            return GateReport("fail", [f"no champion to compare with (champion: {champion})"], {})
        started = time.perf_counter()
        champion_folder = download_policy(self.registry, champion, self.download_dir)  # an adapter: its base too
        offline = evaluate(
            candidate=load_policy(checkpoint.folder),  # loading the export also checks that serving can
            champion=load_policy(champion_folder),
            evidence=checkpoint.evidence, config=self.gate, loss_config=self.loss, monitors=self.monitors,
            max_seq_len=self.max_seq_len,
        )
        offline_s = time.perf_counter() - started
        reasons, figures = self.online_verdict(checkpoint.folder, champion_folder)
        reasons = [*offline.reasons, *reasons]
        seconds = {"offline_s": offline_s, "online_s": time.perf_counter() - started - offline_s}
        return GateReport("fail" if reasons else "pass", reasons, {**offline.figures, **figures, **seconds})

    def online_verdict(self, candidate: Path, champion: Path) -> tuple[list[str], dict]:
        """The candidate run on held-out tasks by the configured evaluator (gate.online_eval_command), if any;
        fail-closed: an evaluator that fails refuses the candidate."""
        from trainer.online_eval import OnlineEvalError, judge_online

        if self.online is None:
            return [], {}
        try:
            online = self.online.evaluate(candidate, champion)
        except OnlineEvalError as error:
            return [f"online evaluation failed: {error}"], {"online": "failed"}
        return judge_online(online, self.gate), online.figures()
