"""The MLflow registry as serving sees it: which version an alias points at, its files, its tags.

Blocking calls (HTTP to MLflow); the server runs them on worker threads.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from liverl.contracts import names


class Registry:
    def __init__(self, tracking_uri: str, model_name: str):
        from mlflow import MlflowClient

        self.tracking_uri = tracking_uri
        self.model_name = model_name
        self._client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def alias_version(self, alias: str) -> str | None:
        """The version the alias points at now; None when the model or the alias does not exist yet."""
        from mlflow.exceptions import MlflowException

        try:
            return str(self._client.get_model_version_by_alias(self.model_name, alias).version)
        except MlflowException as error:
            if error.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise

    def download(self, version: str, versions_dir: Path) -> tuple[Path, str]:
        """Download a version's policy folder; returns (folder, source uri)."""
        import mlflow.artifacts

        model_version = self._client.get_model_version(self.model_name, version)
        dst = Path(versions_dir) / f"v{version}-{int(time.time() * 1000)}"
        dst.mkdir(parents=True, exist_ok=True)
        local = mlflow.artifacts.download_artifacts(run_id=model_version.run_id,
                                                    artifact_path=names.POLICY_ARTIFACT_PATH,
                                                    dst_path=str(dst), tracking_uri=self.tracking_uri)
        return Path(local), f"runs:/{model_version.run_id}/{names.POLICY_ARTIFACT_PATH}"

    def tag_rollback(self, version: str, reason: str, detail: dict) -> None:
        """Mark a version serving rolled back (or refused), with why, on the registry version itself."""
        value = json.dumps({"reason": reason, "at_ms": int(time.time() * 1000), **detail})
        self._client.set_model_version_tag(self.model_name, version, names.TAG_SERVING_ROLLBACK, value)
