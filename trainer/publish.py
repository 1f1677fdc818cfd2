"""Turn a DeepSpeed checkpoint into a registered candidate, then let the gate decide about champion.

Idempotent, because a crash may land anywhere in here: the version is found again by its
checkpoint tag, and a version that already carries a gate decision is not judged twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from liverl.contracts import names
from trainer.lineage import lineage_tags
from trainer.registry import TAG_CHECKPOINT
from trainer.state import PendingPublish

if TYPE_CHECKING:
    from trainer.loop import Trainer


def publish_checkpoint(trainer: "Trainer", pending: PendingPublish, step_metrics=()) -> tuple[str, Path]:
    from trainer.engine import full_state_dict
    from trainer.policy_io import export_policy

    started = time.perf_counter()
    registry, state = trainer.registry, trainer.state
    key = f"{state.run_key}/{pending.checkpoint_tag}"
    folder = trainer.dir / "exports" / pending.checkpoint_tag
    version = registry.find_by_tag(TAG_CHECKPOINT, key)
    if version is None:
        export_policy(trainer.engine.module, full_state_dict(trainer.engine), folder, trainer.parent_folder)
        tags = lineage_tags(
            pending, state.parent_version, state.step, trainer.config.rewards.version, state.run_key
        )
        version = registry.register(folder, tags, run_name=f"train {pending.checkpoint_tag}", step_metrics=step_metrics)
    elif not folder.exists():
        folder = registry.download(version, trainer.dir / "registry")
    registry.set_alias(names.ALIAS_CANDIDATE, version)
    trainer.say(
        f"version {version} registered | parent v{state.parent_version} | step {state.step} "
        f"| table versions {pending.table_versions} | trajectories {pending.trajectories} "
        f"| {time.perf_counter() - started:.1f}s"
    )
    tags = registry.tags(version)
    if names.TAG_GATE_DECISION not in tags:
        if names.TAG_GATE_REPORT in tags and registry.alias_version(names.ALIAS_CHAMPION) == version:
            registry.set_tag(version, names.TAG_GATE_DECISION, "pass")  # crashed after promoting: just record it
        else:
            run_gate(trainer, version, folder)
    return version, folder


def run_gate(trainer: "Trainer", version: str, folder: Path) -> None:
    from trainer.gate import GateReport, evaluate
    from trainer.holdout import holdout_inputs
    from trainer.policy_io import load_policy

    started = time.perf_counter()
    registry, tc = trainer.registry, trainer.tc
    champion = registry.alias_version(names.ALIAS_CHAMPION)
    if not tc.gate.enabled:
        report = GateReport("fail", ["gate disabled (trainer.gate.enabled=false): champion stays"], {})
    elif champion is None or champion == version:
        report = GateReport("fail", [f"no champion to compare with (champion: {champion})"], {})
    else:
        holdout, advantages, drift = holdout_inputs(trainer)
        report = evaluate(
            candidate=load_policy(folder),  # loading the export is itself a check that serving can load it
            champion=load_policy(registry.download(champion, trainer.dir / "registry")),
            holdout=holdout, advantages=advantages, loss_config=tc.loss, config=tc.gate,
            max_seq_len=tc.max_seq_len, drift=drift,
        )
    body = {"decision": report.decision, "champion": champion, "reasons": report.reasons, "figures": report.figures}
    # Report, then champion, then decision: the decision tag last marks the gate as done for a restart.
    registry.set_tag(version, names.TAG_GATE_REPORT, json.dumps(body, sort_keys=True)[:5000])
    if report.passed:
        registry.set_alias(names.ALIAS_CHAMPION, version)
    registry.set_tag(version, names.TAG_GATE_DECISION, report.decision)
    figures = " | ".join(
        f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
        for key, value in report.figures.items()
    )
    why = f" ({'; '.join(report.reasons)})" if report.reasons else ""
    outcome = "champion" if report.passed else f"champion stays v{champion}"
    trainer.say(
        f"gate v{version} vs v{champion}: {report.decision}{why} -> {outcome} | {figures} "
        f"| {time.perf_counter() - started:.1f}s"
    )
