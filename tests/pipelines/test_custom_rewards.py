"""rewards.custom through a real distill (broker, Beam runner, Delta table, MLflow audit): the docs' example lands in
the table and the trace; a function that raises flags its trajectory and the batch still commits."""

from __future__ import annotations

import logging

from deltalake import DeltaTable

from liverl.io.tracking import Tracking
from liverl.rewards.custom import reward_version
from pipelines import table
from pipelines.distill import distill_once
from tests.liverl.rewards.test_custom import docs_example
from tests.pipelines.producing import T0, coding_session, produce


def explodes(view):
    raise RuntimeError("the team's scorer is down")


def test_the_docs_custom_reward_is_in_the_table_and_the_mlflow_trace(distill_config, monkeypatch, caplog):
    import mlflow

    config = distill_config.model_copy(deep=True)
    config.pipelines.audit = True
    rewards = docs_example()[0]["rewards"]
    rewards["custom"]["down"] = {"function": "tests.pipelines.test_custom_rewards:explodes", "components": ["x"]}
    config.rewards = config.rewards.model_validate(rewards)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", config.mlflow.tracking_uri)  # for mlflow.search_traces only
    produce(config, *coding_session("c1"))

    with caplog.at_level(logging.WARNING, logger="liverl.rewards.custom"):
        report = distill_once(config, now_ms=T0 + 3600_000)
    assert report.committed and not report.dead_letters, report.line()
    assert report.counters["custom_reward_failures"] == 1  # counted, and the batch committed anyway
    assert any("custom reward down failed" in r.getMessage() and "the team's scorer is down" in r.getMessage()
               for r in caplog.records)

    (row,) = DeltaTable(config.table.trajectories_uri).to_pyarrow_table().to_pylist()
    components, signals = dict(row["reward_components"]), dict(row["signals"])
    assert components["custom.tool_success.rate"] == 1.0 and "custom.down.x" not in components
    assert signals["custom.down.failed"] == 1.0 and signals["custom.failed"] == 1.0
    version = reward_version(config.rewards)
    assert row["reward_config_version"] == version and version.startswith(f"{config.rewards.version}+custom-")
    assert table.read_committed(config.table.trajectories_uri).metadata[table.COMMIT_REWARD_CONFIG_VERSION] == version

    experiment = Tracking(config.mlflow.tracking_uri).experiment_id(config.mlflow.audit_experiment)
    (trace,) = mlflow.search_traces(locations=[experiment], return_type="list")
    rewards_traced = {a.name: a for a in trace.info.assessments if a.name.startswith("reward.")}
    assert rewards_traced["reward.custom.tool_success.rate"].value == 1.0
    assert rewards_traced["reward.custom.tool_success.rate"].source.source_id == f"liverl.rewards/{version}"
    assert "reward.custom.down.x" not in rewards_traced
    assert trace.data.spans[0].attributes["liverl.signals"]["custom.down.failed"] == 1.0
