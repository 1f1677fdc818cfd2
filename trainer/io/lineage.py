"""Lineage tags of a version the trainer registers: the shared codec's, plus the trainer's private ones."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from liverl.contracts import names
from liverl.contracts.adapter import is_adapter_folder, read_manifest
from liverl.io.lineage import Lineage, encode
from liverl.io.traces import training_traces_tag
from trainer.io.registry import TAG_CHECKPOINT, TAG_METRICS
from trainer.io.state import PendingPublish


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
    pending: PendingPublish, parent_version: str, step: int, reward_config_version: str, run_key: str,
    folder: Path | None = None,
) -> dict[str, str]:
    """The shared lineage tags (liverl.io.lineage) plus the trainer's own: its metrics and idempotency key; with
    the exported folder, also what kind of weights it holds (weights_tags)."""
    lineage = Lineage(
        table_versions=tuple(pending.table_versions),
        kafka_offsets=pending.kafka_offsets,
        reward_config_version=reward_config_version,
        parent_version=parent_version,
        code_version=code_version(),
        trajectories=pending.trajectories,
        step=step,
    )
    return {
        **encode(lineage),
        **training_traces_tag(pending.table_versions),  # the search that opens its training data's MLflow traces
        TAG_METRICS: json.dumps(
            {**pending.metrics, "label_reward_config_versions": sorted(pending.reward_config_versions)}, sort_keys=True
        ),
        TAG_CHECKPOINT: f"{run_key}/{pending.checkpoint_tag}",
        **(weights_tags(folder) if folder is not None else {}),
    }


def weights_tags(folder: Path) -> dict[str, str]:
    """liverl.weights (full | adapter) and, for an adapter, liverl.base_version: the version serving loads it on."""
    if not is_adapter_folder(folder):
        return {names.TAG_WEIGHTS_KIND: names.WEIGHTS_FULL}
    manifest = read_manifest(folder)
    return {names.TAG_WEIGHTS_KIND: names.WEIGHTS_ADAPTER, names.TAG_BASE_VERSION: manifest.base_version}
