"""The MLflow server as every stage reaches it: one client per URI, one error rule, experiments and runs.

The error rule: "not there" (MLflow's RESOURCE_DOES_NOT_EXIST) is an answer, and lookups return None
for it; anything else (server down, 5xx, auth, a URI that is not MLflow) is `RegistryUnavailable`,
never a silent None. The model registry (liverl.io.registry) lives on the same server and builds on this.

Nothing here sets MLflow's process-global tracking URI or active run: every call names its server,
so two servers in one process (tests, a migration) never cross.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

NOT_FOUND = "RESOURCE_DOES_NOT_EXIST"
ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
METRICS_PER_BATCH = 900  # MLflow caps one log_batch at 1000 metrics


class RegistryUnavailable(RuntimeError):
    """The MLflow server (tracking and model registry) did not answer: down, 5xx, auth, wrong URI.

    A missing model, alias, version or experiment is never this error: lookups return None for those.
    """

    def __init__(self, tracking_uri: str, what: str, cause: BaseException):
        self.tracking_uri = tracking_uri
        self.error_code = getattr(cause, "error_code", None)
        detail = " ".join(str(cause).split())[:400]
        super().__init__(
            f"MLflow at {tracking_uri} failed while {what} ({self.error_code or type(cause).__name__}: {detail}). "
            "Check that the server is up and reachable (`liverl status`, or `liverl up` for the embedded one), "
            "that mlflow.tracking_uri (env LIVERL_MLFLOW__TRACKING_URI) names it, and that its credentials "
            "(MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD) are set; then retry."
        )


class Tracking:
    """One MLflow server: the client, the error rule, experiments and runs (no process-global state)."""

    def __init__(self, tracking_uri: str):
        from mlflow import MlflowClient

        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    def answer(self, what: str, call: Callable[[], T]) -> T:
        """call()'s result; any failure becomes RegistryUnavailable naming this server and `what`."""
        try:
            return call()
        except _failures() as error:
            raise RegistryUnavailable(self.tracking_uri, what, error) from error

    def lookup(self, what: str, call: Callable[[], T]) -> T | None:
        """Like answer(), but None when MLflow says the thing does not exist."""
        try:
            return call()
        except _failures() as error:
            if getattr(error, "error_code", None) == NOT_FOUND:
                return None
            raise RegistryUnavailable(self.tracking_uri, what, error) from error

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, created when missing (a concurrent creator is fine)."""
        what = f"finding experiment {name!r}"
        experiment = self.lookup(what, lambda: self.client.get_experiment_by_name(name))
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.answer(f"creating experiment {name!r}", lambda: self.client.create_experiment(name))
        except RegistryUnavailable as error:
            if error.error_code != ALREADY_EXISTS:
                raise
            return self.answer(what, lambda: self.client.get_experiment_by_name(name)).experiment_id

    def find_run(self, experiment: str, tag: str, value: str) -> str | None:
        """The id of a run of `experiment` tagged tag=value, or None."""
        experiment_id = self.experiment_id(experiment)
        found = self.answer(
            f"searching runs of {experiment!r} for {tag}={value}",
            lambda: self.client.search_runs([experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=1),
        )
        return found[0].info.run_id if found else None

    def find_finished_run(self, experiment: str, tag: str, value: str) -> str | None:
        """The id of a FINISHED run tagged tag=value, or None; runs of it cut short (a process killed mid-run, so
        maybe partial) are deleted, so that the caller logs the run again whole."""
        experiment_id = self.experiment_id(experiment)
        runs = self.answer(f"searching runs of {experiment!r} for {tag}={value}", lambda: self.client.search_runs(
            [experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=20))
        for run in runs:
            if run.info.status == "FINISHED":
                return run.info.run_id
        for run in runs:
            self.answer(f"deleting the unfinished run {run.info.run_id}",
                        lambda run_id=run.info.run_id: self.client.delete_run(run_id))
        return None

    def run_ids(self, experiment: str, deleted: bool = False) -> list[str]:
        """The ids of every run of `experiment`, [] when there is no such experiment (nothing is created).
        deleted=True includes deleted runs: their artifacts stay in the store until `mlflow gc`."""
        from mlflow.entities import ViewType

        what = f"finding experiment {experiment!r}"
        found = self.lookup(what, lambda: self.client.get_experiment_by_name(experiment))
        if found is None:
            return []
        view = ViewType.ALL if deleted else ViewType.ACTIVE_ONLY
        ids: list[str] = []
        token = None
        while True:
            page = self.answer(f"listing the runs of {experiment!r}", lambda: self.client.search_runs(
                [found.experiment_id], run_view_type=view, max_results=1000, page_token=token))
            ids += [run.info.run_id for run in page]
            token = page.token
            if not token:
                return ids

    @contextmanager
    def run(self, experiment: str, run_name: str, tags: Mapping[str, str] | None = None) -> Iterator[TrackingRun]:
        """A new run of `experiment`, ended FINISHED, or FAILED when the block raises."""
        experiment_id = self.experiment_id(experiment)
        created = self.answer(
            f"creating run {run_name!r} in {experiment!r}",
            lambda: self.client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {})),
        )
        run = TrackingRun(self, created.info.run_id)
        try:
            yield run
        except BaseException:
            self.answer(f"ending run {run.run_id}", lambda: self.client.set_terminated(run.run_id, "FAILED"))
            raise
        self.answer(f"ending run {run.run_id}", lambda: self.client.set_terminated(run.run_id, "FINISHED"))


class TrackingRun:
    """One run being written through the client API (MLflow's fluent API would need global state)."""

    def __init__(self, tracking: Tracking, run_id: str):
        self.tracking = tracking
        self.run_id = run_id

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> None:
        client = self.tracking.client
        self.tracking.answer(f"{what} in run {self.run_id}",
                             lambda: getattr(client, method)(self.run_id, *args, **kwargs))

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        self.log_step_metrics([(step, metrics)])

    def log_step_metrics(self, step_metrics: Iterable[tuple[int, Mapping[str, float]]]) -> None:
        """Figures per step, e.g. [(1, {"loss": 0.3}), (2, {"loss": 0.2})], in as few batches as MLflow allows."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, step)
                   for step, figures in step_metrics for key, value in figures.items()]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self._call("logging metrics", "log_batch", metrics=metrics[start:start + METRICS_PER_BATCH])

    def log_params_and_metrics(self, params: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """Params and metrics together: one log_batch call (more only past MLflow's cap on metrics per call)."""
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        entries = [Metric(key, float(value), now, 0) for key, value in metrics.items()]
        for start in range(0, max(len(entries), 1), METRICS_PER_BATCH):
            first = [Param(key, str(value)) for key, value in params.items()] if start == 0 else []
            self._call("logging params and metrics", "log_batch", metrics=entries[start:start + METRICS_PER_BATCH],
                       params=first)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self._call("logging params", "log_batch", params=[Param(key, str(value)) for key, value in params.items()])

    def set_tag(self, key: str, value: str) -> None:
        self._call(f"setting tag {key}", "set_tag", key, value)

    def log_dict(self, dictionary: dict, artifact_file: str) -> None:
        self._call(f"logging {artifact_file}", "log_dict", dictionary, artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        self._call(f"logging {artifact_file}", "log_figure", figure, artifact_file)

    def log_table(self, data: dict[str, list], artifact_file: str) -> None:
        """A browsable table (columns of equal length) in the MLflow UI. Appends when artifact_file exists
        (MLflow's rule): to replace a table, write its JSON with log_text."""
        self._call(f"logging {artifact_file}", "log_table", data, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        """Write text as artifact_file, replacing the artifact of that path if there is one."""
        self._call(f"logging {artifact_file}", "log_text", text, artifact_file)

    def artifact_files(self, folder: str | None = None) -> list[str]:
        """The paths of every file artifact of the run under `folder` (all of them by default), folders walked."""
        client = self.tracking.client
        found = self.tracking.answer(f"listing the artifacts of run {self.run_id}",
                                     lambda: client.list_artifacts(self.run_id, folder))
        files: list[str] = []
        for item in found:
            files += self.artifact_files(item.path) if item.is_dir else [item.path]
        return files

    def read_artifact(self, artifact_file: str) -> bytes:
        """The bytes of one artifact (downloaded into a temporary folder, removed before returning)."""
        import tempfile

        client = self.tracking.client
        with tempfile.TemporaryDirectory(prefix="liverl-artifact-") as folder:
            local = self.tracking.answer(f"downloading {artifact_file} of run {self.run_id}",
                                         lambda: client.download_artifacts(self.run_id, artifact_file, folder))
            return Path(local).read_bytes()

    def log_artifacts(self, folder: Path, artifact_path: str | None = None) -> None:
        self._call(f"uploading {folder}", "log_artifacts", str(folder), artifact_path)


def _failures() -> tuple[type[BaseException], ...]:
    """What a failed MLflow call raises: its own exception, or a transport error from artifact transfers."""
    from mlflow.exceptions import MlflowException
    from requests import RequestException

    return MlflowException, RequestException, ConnectionError
