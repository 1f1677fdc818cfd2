"""Experiments and runs through the shared client, on a real MLflow server."""

from __future__ import annotations

import uuid

import pytest

from liverl.io.tracking import Tracking


def test_runs_end_finished_or_failed_and_are_found_by_tag(stack):
    tracking = Tracking(stack.mlflow.tracking_uri)
    experiment = f"tracking-test-{uuid.uuid4().hex[:8]}"
    assert tracking.experiment_id(experiment) == tracking.experiment_id(experiment)  # created once
    assert tracking.find_run(experiment, "liverl.batch_id", "b1") is None

    with tracking.run(experiment, "b1", tags={"liverl.batch_id": "b1"}) as run:
        run.log_params({"seq": 1})
        run.log_metrics({"trajectories": 3})
        run.log_dict({"offsets": {}}, "batch.json")
        run.log_table({"session_id": ["s1", "s2"], "tokens": [4, 5]}, "sample.json")
    with pytest.raises(RuntimeError):
        with tracking.run(experiment, "b2", tags={"liverl.batch_id": "b2"}):
            raise RuntimeError("died mid-run")

    assert tracking.find_run(experiment, "liverl.batch_id", "b1") == run.run_id
    logged = tracking.client.get_run(run.run_id)
    assert logged.info.status == "FINISHED" and logged.data.params == {"seq": "1"}
    assert logged.data.metrics == {"trajectories": 3.0}
    assert {item.path for item in tracking.client.list_artifacts(run.run_id)} == {"batch.json", "sample.json"}
    failed = tracking.find_run(experiment, "liverl.batch_id", "b2")
    assert tracking.client.get_run(failed).info.status == "FAILED"
