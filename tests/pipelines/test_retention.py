"""pipelines.table_retention_days / trace_retention_days on the real Delta tables and MLflow server, with the
clock injected: what is past the horizon is deleted (and its data files vacuumed), what is not stays readable."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable

from liverl.io.traces import TraceStore
from liverl.io.tracking import Tracking
from pipelines.distill import distill_once
from pipelines.retention import DAY_MS, apply_retention
from tests.pipelines.producing import T0, coding_session, produce

OLD, NEW = "old-session-marker", "new-session"
THREE_DAYS_S = 3 * 24 * 3600


def _session_ids_in_data_files(uri: str) -> set[str]:
    """session_id values in every Parquet file under the table's folder, referenced or not (what is on disk)."""
    found: set[str] = set()
    for path in Path(uri).rglob("*.parquet"):
        if "_liverl_distill" not in path.parts:
            found |= set(pq.read_table(path, columns=["session_id"]).column("session_id").to_pylist())
    return found


def _traces(config) -> set[str]:
    tracking = Tracking(config.mlflow.tracking_uri)
    experiment = tracking.experiment_id(config.mlflow.audit_experiment)
    return {t.info.tags.get("liverl.session_id") for t in TraceStore(tracking).search(experiment, "")}


def test_rows_dead_letters_and_traces_past_the_horizon_are_deleted(distill_config):
    config = distill_config.model_copy(deep=True)
    config.pipelines.audit = True  # traces of committed trajectories, written by the batch itself
    produce(config, *coding_session(OLD), raw=[(config.kafka.session_events_topic, b"x", b"\xff\x00garbage", ())])
    assert distill_once(config, now_ms=T0 + 3600_000).committed  # the dead letter is recorded at T0 + 1 h
    produce(config, *coding_session(NEW, t=THREE_DAYS_S))
    assert distill_once(config, now_ms=T0 + THREE_DAYS_S * 1000 + 3600_000).committed
    trajectories, dead_letters = config.table.trajectories_uri, config.table.dead_letters_uri
    assert _session_ids_in_data_files(trajectories) == {OLD, NEW} and _traces(config) == {OLD, NEW}
    assert DeltaTable(dead_letters).to_pyarrow_table().num_rows == 1
    version = DeltaTable(trajectories).version()

    config.pipelines.vacuum_grace_hours = 0
    report = apply_retention(config, now_ms=T0 + 5 * DAY_MS)  # nothing is 5 days old yet: settings are 0
    assert not report.applied and DeltaTable(trajectories).version() == version

    config.pipelines.table_retention_days = 2.0  # horizon T0 + 2 days: OLD's session is past it, NEW's not
    config.pipelines.trace_retention_days = 2.0
    report = apply_retention(config, now_ms=T0 + 4 * DAY_MS)
    assert report.trajectories_deleted > 0 and report.dead_letters_deleted == 1 and report.traces_deleted == 1
    assert report.files_vacuumed > 0, report
    rows = DeltaTable(trajectories).to_pyarrow_table().to_pylist()
    assert rows and {r["session_id"] for r in rows} == {NEW}
    assert _session_ids_in_data_files(trajectories) == {NEW}  # the old rows' files are gone from storage
    assert DeltaTable(dead_letters).to_pyarrow_table().num_rows == 0 and _traces(config) == {NEW}

    again = apply_retention(config, now_ms=T0 + 4 * DAY_MS)  # idempotent
    assert (again.trajectories_deleted, again.dead_letters_deleted, again.traces_deleted) == (0, 0, 0)
    assert "deleted 0 trajectories" in again.line()


def test_distill_follow_and_liverl_retention_apply_the_settings(distill_config, capsys):
    from liverl.cli import main
    from tests.pipelines.test_cli import _overrides

    produce(distill_config, *coding_session("cli-old"))  # T0: months before the wall clock
    retention = ["--pipelines.table_retention_days", "30", "--pipelines.vacuum_grace_hours", "0"]
    assert main(["distill", "--follow", "--max-batches", "1", *_overrides(distill_config), *retention]) == 0
    batch, applied = capsys.readouterr().out.splitlines()
    assert "trajectories 1" in batch and applied.startswith("retention: deleted 1 trajectories")
    assert DeltaTable(distill_config.table.trajectories_uri).to_pyarrow_table().num_rows == 0

    assert main(["retention", *_overrides(distill_config), *retention]) == 0
    assert capsys.readouterr().out.startswith("retention: deleted 0 trajectories, 0 dead letters, 0 traces")
    assert main(["retention", *_overrides(distill_config)]) == 0
    assert "keep forever" in capsys.readouterr().out
