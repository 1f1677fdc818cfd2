"""`liverl retention`: apply pipelines.table_retention_days and pipelines.trace_retention_days once.

    liverl retention                         delete what is past its horizon, vacuum, print one line
    liverl retention --pipelines.table_retention_days 30 --pipelines.trace_retention_days 7

Trajectory rows whose session started before the horizon, and dead letters recorded before it, are deleted
from their Delta tables (one commit each, with no batch id: the trainer reads no rows from it), then the files
that held them are vacuumed once replaced for pipelines.vacuum_grace_hours. MLflow traces of sessions that
started before the trace horizon are deleted from mlflow.audit_experiment. `liverl distill --follow` runs the
same every pipelines.retention_interval_s, between batches, so it never races its own commits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

DAY_MS = 24 * 3600 * 1000
COMMIT_RETENTION_HORIZON = "liverl.retention.horizon_ms"  # commit metadata of a retention delete


@dataclass
class RetentionReport:
    trajectories_deleted: int = 0
    dead_letters_deleted: int = 0
    files_vacuumed: int = 0
    traces_deleted: int = 0
    applied: bool = False  # False: both settings are 0 (keep forever)

    def line(self) -> str:
        if not self.applied:
            return "retention: keep forever (pipelines.table_retention_days and trace_retention_days are 0)"
        return (f"retention: deleted {self.trajectories_deleted} trajectories, {self.dead_letters_deleted} dead "
                f"letters, {self.traces_deleted} traces; vacuumed {self.files_vacuumed} files")


def add_arguments(parser) -> None:
    """No flags of its own: the settings are pipelines.* (config file, environment or --pipelines.x flags)."""


def run(config, args) -> int:
    print(apply_retention(config).line(), flush=True)
    return 0


def apply_retention(config, now_ms: int | None = None) -> RetentionReport:
    """Delete what is older than the configured horizons, as of now_ms (default: the wall clock)."""
    settings = config.pipelines
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    report = RetentionReport(applied=bool(settings.table_retention_days or settings.trace_retention_days))
    if settings.table_retention_days:
        horizon_ms = now_ms - int(settings.table_retention_days * DAY_MS)
        deleted, vacuumed = expire_rows(config.table.trajectories_uri, "session_start_ms", horizon_ms,
                                        settings.vacuum_grace_hours)
        report.trajectories_deleted, report.files_vacuumed = deleted, vacuumed
        deleted, vacuumed = expire_rows(config.table.dead_letters_uri, "recorded_at_ms", horizon_ms,
                                        settings.vacuum_grace_hours)
        report.dead_letters_deleted, report.files_vacuumed = deleted, report.files_vacuumed + vacuumed
    if settings.trace_retention_days:
        report.traces_deleted = expire_traces(config, now_ms - int(settings.trace_retention_days * DAY_MS))
    return report


def expire_rows(uri: str, time_column: str, horizon_ms: int, grace_hours: int) -> tuple[int, int]:
    """Delete the rows of the table at uri older than horizon_ms (by time_column, else by their event_date
    partition when the time is missing), then vacuum; returns (rows deleted, files removed)."""
    from deltalake import CommitProperties, DeltaTable

    from pipelines.dead_letters import utc_date

    if not DeltaTable.is_deltatable(uri):
        return 0, 0
    table = DeltaTable(uri)
    # Whole days before the horizon's date go by partition; the rest by the row's own time.
    predicate = (f"event_date < '{utc_date(horizon_ms)}' OR "
                 f"({time_column} IS NOT NULL AND {time_column} < {int(horizon_ms)})")
    metrics = table.delete(predicate, commit_properties=CommitProperties(
        custom_metadata={COMMIT_RETENTION_HORIZON: str(int(horizon_ms))}))
    deleted = int(metrics.get("num_deleted_rows") or 0)
    removed = table.vacuum(retention_hours=grace_hours, dry_run=False, enforce_retention_duration=False)
    return deleted, len(removed)


def expire_traces(config, horizon_ms: int) -> int:
    """Delete the traces of mlflow.audit_experiment that started before horizon_ms; how many were deleted."""
    from liverl.io.tracking import Tracking

    tracking = Tracking(config.mlflow.tracking_uri)
    name = config.mlflow.audit_experiment
    experiment = tracking.lookup(f"finding experiment {name!r}", lambda: tracking.client.get_experiment_by_name(name))
    if experiment is None:
        return 0
    return int(tracking.answer(f"deleting traces of {name!r} older than {horizon_ms} ms",
                               lambda: tracking.client.delete_traces(experiment.experiment_id,
                                                                     max_timestamp_millis=horizon_ms)) or 0)
