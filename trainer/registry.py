"""The MLflow model registry as the trainer uses it (contract 2): versions, aliases, lineage, downloads."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from liverl.contracts import names
from liverl.config.mlflow import MlflowConfig

# Trainer-private tags (the shared lineage keys live in liverl.contracts.names).
TAG_CHECKPOINT = "liverl.trainer.checkpoint"  # "<run key>/<DeepSpeed tag>": makes re-registration idempotent
TAG_BASE_DIGEST = "liverl.trainer.base_digest"  # sha256 of a base policy's weights: `--init-from` is idempotent
TAG_METRICS = "liverl.metrics"  # JSON figures of the training since the parent version


class Registry:
    def __init__(self, config: MlflowConfig):
        from mlflow import MlflowClient

        self.config = config
        self.name = config.registered_model
        self.client = MlflowClient(tracking_uri=config.tracking_uri, registry_uri=config.tracking_uri)

    def _ensure_model(self) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(self.name)
        except MlflowException:
            self.client.create_registered_model(self.name, description="liverl policy (HF folder under 'policy')")

    def versions(self) -> list:
        self._ensure_model()
        return list(self.client.search_model_versions(f"name='{self.name}'", max_results=10_000))

    def find_by_tag(self, key: str, value: str) -> str | None:
        matches = [mv.version for mv in self.versions() if mv.tags.get(key) == value]
        return min(matches, key=int) if matches else None

    def alias_version(self, alias: str) -> str | None:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_model_version_by_alias(self.name, alias).version
        except MlflowException:
            return None

    def tags(self, version: str) -> dict[str, str]:
        return dict(self.client.get_model_version(self.name, version).tags)

    def set_alias(self, alias: str, version: str) -> None:
        self.client.set_registered_model_alias(self.name, alias, version)

    def set_tag(self, version: str, key: str, value: str) -> None:
        self.client.set_model_version_tag(self.name, version, key, value)

    def register(
        self,
        folder: Path,
        tags: dict[str, str],
        run_name: str,
        step_metrics: list[tuple[int, dict[str, float]]] = (),
    ) -> str:
        """Log the folder under artifact path "policy" in a training run and create a version from it."""
        from mlflow.entities import Metric

        self._ensure_model()
        experiment = self.client.get_experiment_by_name(self.config.training_experiment)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(self.config.training_experiment)
        )
        run = self.client.create_run(experiment_id, run_name=run_name, tags={k: v for k, v in tags.items()})
        run_id = run.info.run_id
        now = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), now, step) for step, figures in step_metrics for key, value in figures.items()
        ]
        for start in range(0, len(metrics), 900):  # MLflow caps a batch at 1000 metrics
            self.client.log_batch(run_id, metrics=metrics[start:start + 900])
        self.client.log_artifacts(run_id, str(folder), names.POLICY_ARTIFACT_PATH)
        self.client.set_terminated(run_id)
        version = self.client.create_model_version(
            self.name, source=f"runs:/{run_id}/{names.POLICY_ARTIFACT_PATH}", run_id=run_id, tags=tags
        )
        return version.version

    def download(self, version: str, cache_dir: Path) -> Path:
        """The version's policy folder, downloaded once into cache_dir/<version>/ (versions are immutable)."""
        import mlflow

        target = cache_dir / version
        folder = target / names.POLICY_ARTIFACT_PATH
        if (target / ".complete").exists():
            return folder
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        run_id = self.client.get_model_version(self.name, version).run_id
        mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=names.POLICY_ARTIFACT_PATH, dst_path=str(target),
            tracking_uri=self.config.tracking_uri,
        )
        (target / ".complete").write_text(json.dumps({"version": version}))
        return folder
