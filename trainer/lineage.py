"""Lineage tags of a registered version: what it was trained on, from what, by which code (contract 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from liverl.contracts import names
from trainer.registry import TAG_CHECKPOINT, TAG_METRICS
from trainer.state import PendingPublish


def code_version() -> str:
    """The git commit of the trainer's checkout, or the package version when it is not a checkout."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
        if result.returncode == 0 and result.stdout.strip():
            return result.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    import liverl

    return liverl.__version__


def lineage_tags(
    pending: PendingPublish, parent_version: str, step: int, reward_config_version: str, run_key: str
) -> dict[str, str]:
    return {
        names.TAG_TABLE_VERSIONS: json.dumps(sorted(pending.table_versions)),
        names.TAG_KAFKA_OFFSETS: json.dumps(pending.kafka_offsets, sort_keys=True),
        names.TAG_REWARD_CONFIG_VERSION: reward_config_version,
        names.TAG_PARENT_VERSION: parent_version,
        names.TAG_CODE_VERSION: code_version(),
        names.TAG_TRAJECTORIES: str(pending.trajectories),
        names.TAG_TRAINER_STEP: str(step),
        TAG_METRICS: json.dumps(
            {**pending.metrics, "label_reward_config_versions": sorted(pending.reward_config_versions)}, sort_keys=True
        ),
        TAG_CHECKPOINT: f"{run_key}/{pending.checkpoint_tag}",
    }
