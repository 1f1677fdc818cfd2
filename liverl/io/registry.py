"""The MLflow model registry with one set of alias semantics, for every stage (docs/architecture.md, contract 4).

One registered model per policy. A version is a policy folder logged under `names.POLICY_ARTIFACT_PATH`
in a run, plus tags (lineage: liverl.io.lineage). Aliases (`candidate`, `champion`) name versions.

The rule every caller relies on: `alias_version` is None only when the model or the alias does not
exist; a registry that is down, failing or refusing us raises `RegistryUnavailable`, so "no champion
yet" can never be a misread outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from liverl.contracts import names
from liverl.io.tracking import RegistryUnavailable, Tracking

__all__ = ["ModelRegistry", "ModelVersion", "RegistryUnavailable"]


@dataclass(frozen=True)
class ModelVersion:
    """One registered version as the registry holds it."""

    version: str
    run_id: str  # the run holding its files ("" when registered from elsewhere)
    source: str  # the artifact URI it was registered from
    created_ms: int
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def policy_uri(self) -> str:
        """Where its policy folder lives: the policy artifact of its run, or the URI it was registered from."""
        return policy_source(self.run_id) if self.run_id else self.source


class ModelRegistry:
    """One registered model on one MLflow server. Blocking HTTP calls: async callers use a thread."""

    def __init__(self, tracking_uri: str, model_name: str):
        self.tracking = Tracking(tracking_uri)
        self.tracking_uri = tracking_uri
        self.name = model_name

    @property
    def client(self):
        """The raw MlflowClient, for tests and tools that inspect runs; stage code uses the methods here."""
        return self.tracking.client

    # ---- aliases ---------------------------------------------------------------------------------
    def alias_version(self, alias: str) -> str | None:
        """The version `alias` points at; None when the model or the alias does not exist."""
        # The model's alias map, not get_model_version_by_alias: MLflow reports a missing alias there as
        # INVALID_PARAMETER_VALUE, which a bad request shares; here "missing" is unambiguous.
        return self.aliases().get(alias)

    def aliases(self) -> dict[str, str]:
        """{alias: version} of the model; {} when the model does not exist yet."""
        model = self.tracking.lookup(f"reading registered model {self.name!r}",
                                     lambda: self.client.get_registered_model(self.name))
        return {} if model is None else {alias: str(version) for alias, version in model.aliases.items()}

    def set_alias(self, alias: str, version: str) -> None:
        self.tracking.answer(f"pointing alias {alias!r} of {self.name!r} at version {version}",
                             lambda: self.client.set_registered_model_alias(self.name, alias, version))

    def delete_alias(self, alias: str) -> None:
        """Remove the alias; nothing when it names no version."""
        if self.alias_version(alias) is not None:
            self.tracking.answer(f"removing alias {alias!r} of {self.name!r}",
                                 lambda: self.client.delete_registered_model_alias(self.name, alias))

    # ---- versions and their tags -----------------------------------------------------------------
    def get(self, version: str) -> ModelVersion | None:
        """The version, or None when it (or the model) does not exist."""
        found = self.tracking.lookup(f"reading version {version} of {self.name!r}",
                                     lambda: self.client.get_model_version(self.name, version))
        return None if found is None else _model_version(found)

    def tags(self, version: str) -> dict[str, str]:
        return self.existing(version).tags

    def set_tag(self, version: str, key: str, value: str) -> None:
        self.tracking.answer(f"tagging version {version} of {self.name!r} with {key}",
                             lambda: self.client.set_model_version_tag(self.name, version, key, value))

    def versions(self) -> list[ModelVersion]:
        """Every version, oldest first; [] when the model does not exist yet."""
        found, token = [], None
        while True:
            page = self.tracking.answer(
                f"listing versions of {self.name!r}",
                lambda: self.client.search_model_versions(f"name='{self.name}'", page_token=token),
            )
            found.extend(_model_version(mv) for mv in page)
            token = page.token
            if not token:
                return sorted(found, key=lambda mv: int(mv.version))

    def find_by_tag(self, key: str, value: str) -> str | None:
        """The oldest version tagged key=value (idempotent registration keys), or None."""
        return next((mv.version for mv in self.versions() if mv.tags.get(key) == value), None)

    # ---- files -----------------------------------------------------------------------------------
    def ensure_model(self, description: str = "liverl policy (Hugging Face folder under 'policy')") -> None:
        """Create the registered model unless it exists (a concurrent creator is fine)."""
        if self.tracking.lookup(f"reading registered model {self.name!r}",
                                lambda: self.client.get_registered_model(self.name)) is not None:
            return
        try:
            self.tracking.answer(f"creating registered model {self.name!r}",
                                 lambda: self.client.create_registered_model(self.name, description=description))
        except RegistryUnavailable as error:
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise

    def register_folder(self, folder: Path, tags: Mapping[str, str], experiment: str, run_name: str,
                        step_metrics: Iterable[tuple[int, Mapping[str, float]]] = ()) -> str:
        """Log `folder` (with the figures per step) in a run of `experiment`; a new version from it, tagged."""
        self.ensure_model()
        with self.tracking.run(experiment, run_name, tags) as run:
            run.log_step_metrics(step_metrics)
            run.log_artifacts(Path(folder), names.POLICY_ARTIFACT_PATH)
        created = self.tracking.answer(
            f"creating a version of {self.name!r} from run {run.run_id}",
            lambda: self.client.create_model_version(self.name, source=policy_source(run.run_id), run_id=run.run_id,
                                                     tags=dict(tags)),
        )
        return str(created.version)

    def download(self, version: str, dst: Path) -> Path:
        """Download the version's policy folder into dst (created); returns the folder."""
        found = self.existing(version)
        dst = Path(dst)
        dst.mkdir(parents=True, exist_ok=True)
        if found.run_id:
            def call() -> str:
                return self.client.download_artifacts(found.run_id, names.POLICY_ARTIFACT_PATH, str(dst))
        else:  # registered from an artifact URI of its own
            def call() -> str:
                import mlflow.artifacts

                return mlflow.artifacts.download_artifacts(artifact_uri=found.source, dst_path=str(dst),
                                                           tracking_uri=self.tracking_uri)
        return Path(self.tracking.answer(f"downloading version {version} of {self.name!r}", call))

    def existing(self, version: str) -> ModelVersion:
        """The version; LookupError (saying how to list the versions) when it does not exist."""
        found = self.get(version)
        if found is None:
            raise LookupError(f"registered model {self.name!r} on {self.tracking_uri} has no version {version}; "
                              "list the versions with `liverl status`")
        return found


def policy_source(run_id: str) -> str:
    """The artifact URI of the policy folder a run holds (what a version is registered from)."""
    return f"runs:/{run_id}/{names.POLICY_ARTIFACT_PATH}"


def _model_version(mv) -> ModelVersion:
    return ModelVersion(version=str(mv.version), run_id=mv.run_id or "", source=mv.source or "",
                        created_ms=int(mv.creation_timestamp or 0), tags=dict(mv.tags or {}))
