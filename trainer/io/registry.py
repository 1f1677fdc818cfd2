"""The registry as the trainer uses it: liverl.io.registry, plus its private tags, runs and download cache.

Alias semantics are the shared ones: `alias_version` is None only when the alias does not exist, and
an unreachable registry raises `RegistryUnavailable` (so it never reads as "register a base policy first").
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from liverl.config.mlflow import MlflowConfig
from liverl.contracts import names
from liverl.io.registry import ModelRegistry, RegistryUnavailable
from liverl.io.signing import folder_digest
from trainer.io.signing import TAG_FILES_DIGEST

__all__ = ["Registry", "RegistryUnavailable", "TAG_BASE_DIGEST", "TAG_CHECKPOINT", "TAG_METRICS"]

# Trainer-private tags (the shared lineage keys live in liverl.contracts.names).
TAG_CHECKPOINT = "liverl.trainer.checkpoint"  # "<run key>/<DeepSpeed tag>": makes re-registration idempotent
TAG_BASE_DIGEST = "liverl.trainer.base_digest"  # sha256 of a base policy's weights: `--init-from` is idempotent
TAG_METRICS = "liverl.metrics"  # JSON figures of the training since the parent version


class Registry(ModelRegistry):
    """The configured registered model; exports are logged as runs of mlflow.training_experiment."""

    def __init__(self, config: MlflowConfig):
        super().__init__(config.tracking_uri, config.registered_model)
        self.config = config

    def register(self, folder: Path, tags: dict[str, str], run_name: str,
                 step_metrics: Iterable[tuple[int, dict[str, float]]] = ()) -> str:
        """Log the exported folder (and the step metrics) in a training run; a new version from it, tagged with the
        digest of its files (what a signature of the version binds: trainer/io/signing.py)."""
        tags = {**tags, TAG_FILES_DIGEST: folder_digest(folder)}
        return self.register_folder(folder, tags, self.config.training_experiment, run_name, step_metrics)

    def download(self, version: str, cache_dir: Path) -> Path:
        """The version's policy folder, downloaded once into cache_dir/<version>/ (versions are immutable)."""
        target = Path(cache_dir) / version
        folder = target / names.POLICY_ARTIFACT_PATH
        if (target / ".complete").exists():
            return folder
        shutil.rmtree(target, ignore_errors=True)
        downloaded = super().download(version, target)
        (target / ".complete").write_text(json.dumps({"version": version}))
        return downloaded
