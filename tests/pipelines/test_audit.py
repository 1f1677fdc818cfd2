"""The MLflow audit of committed batches, on the real MLflow server, including recovery after a crash."""

from __future__ import annotations

import json

import pytest

from liverl.contracts import names
from pipelines.distill import distill_once
from tests.pipelines.producing import T0, coding_session, orchestrator_session, produce


def test_each_committed_batch_gets_one_audit_run_even_after_a_crash(distill_config, tmp_path):
    import mlflow

    config = distill_config
    config.pipelines.audit = True
    produce(config, *coding_session("a1"))
    first = distill_once(config, now_ms=T0 + 3600_000)

    produce(config, *orchestrator_session("a2"))

    def crash_after_commit(phase):
        if phase == "after_commit":
            raise RuntimeError("killed before auditing")

    with pytest.raises(RuntimeError):
        distill_once(config, now_ms=T0 + 3600_000, on_phase=crash_after_commit)
    client = mlflow.MlflowClient(config.mlflow.tracking_uri)
    experiment = client.get_experiment_by_name(config.mlflow.audit_experiment)
    cut_short = client.create_run(experiment.experiment_id, run_name="liverl-distill-00000002",  # killed mid-audit
                                  tags={names.COMMIT_BATCH_ID: "liverl-distill-00000002"})
    assert not distill_once(config, now_ms=T0 + 3600_000).committed  # nothing new, but audits batch 2

    assert client.get_run(cut_short.info.run_id).info.lifecycle_stage == "deleted"  # replaced by a whole run
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.data.tags[names.COMMIT_BATCH_ID] for run in runs) == [first.batch_id, "liverl-distill-00000002"]
    second = next(run for run in runs if run.info.run_name == "liverl-distill-00000002")
    assert second.info.status == "FINISHED"
    assert second.data.metrics["trajectories"] == 2 and second.data.metrics["sessions"] == 1
    assert second.data.metrics["reward.outcome.mean"] == pytest.approx(0.75)  # orchestrator 0.5, sub-agent 1.0
    assert json.loads(second.data.params["kafka_offsets"])
    artifacts = {item.path for item in client.list_artifacts(second.info.run_id)}
    assert {"batch.json", "trajectories_sample.json", "reward_components.png"} <= artifacts
    sample = json.loads(open(client.download_artifacts(second.info.run_id, "trajectories_sample.json",
                                                       str(tmp_path))).read())
    assert len(sample["data"]) == 2
    assert sample["columns"][:2] == ["tenant_id", "session_id"]  # what `liverl forget` matches rows by
    assert {row[0] for row in sample["data"]} == {"demo"}
