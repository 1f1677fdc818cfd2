"""The audit off the critical path (`liverl distill --follow`), on the real broker, Beam runner, Delta and MLflow:
the next batch commits while the audit waits, an MLflow outage loses no audit, prune keeps what the audit needs."""

from __future__ import annotations

import socket
import threading
import time

from liverl.cli import main
from liverl.contracts import names
from liverl.io.tracking import Tracking
from pipelines.audit import ensure_audited
from pipelines.audit_follower import AuditFollower
from pipelines.distill import distill_once, state_uri
from pipelines.state import StateStore
from tests.pipelines.producing import T0, coding_session, orchestrator_session, produce
from tests.pipelines.test_cli import _overrides

LATER = T0 + 3600_000


def _audit_runs(config) -> dict[str, object]:
    """batch id -> its audit run."""
    tracking = Tracking(config.mlflow.tracking_uri)
    runs = tracking.client.search_runs([tracking.experiment_id(config.mlflow.audit_experiment)])
    return {run.data.tags[names.COMMIT_BATCH_ID]: run for run in runs}


def _staged(config) -> list[int]:
    return StateStore(state_uri(config)).staged_seqs()


def test_prune_keeps_the_staging_folders_of_unaudited_batches(tmp_path):
    store = StateStore(str(tmp_path / "state"))
    for seq in (1, 2, 3, 4):
        store.reset_batch_dir(seq)
    store.prune(committed_seq=4, keep=1, audited_seq=1)  # 2 and 3 still wait for their audit
    assert store.staged_seqs() == [2, 3, 4]
    store.prune(committed_seq=4, keep=1, audited_seq=4)
    assert store.staged_seqs() == [4]
    store.reset_batch_dir(5)
    store.prune(committed_seq=5, keep=1)  # no audit waits (audit off)
    assert store.staged_seqs() == [5]


def test_follow_mode_commits_the_next_batch_while_the_audit_waits(distill_config):
    config = distill_config
    config.pipelines.audit = True
    config.pipelines.keep_state_batches = 1
    gate, audited = threading.Event(), []

    def slow_audit(batch):  # the real audit, held back until the test lets it go
        assert gate.wait(300)
        ensure_audited(config, batch)
        audited.append(batch.seq)

    follower = AuditFollower(config, StateStore(state_uri(config)), audit_batch=slow_audit)
    try:
        produce(config, *coding_session("f1"))
        first = distill_once(config, now_ms=LATER, auditor=follower)
        produce(config, *orchestrator_session("f2"))
        second = distill_once(config, now_ms=LATER, auditor=follower)
        assert first.committed and second.committed  # batch 2 committed while batch 1's audit was stuck
        assert audited == [] and follower.lag() == 2
        assert _staged(config) == [1, 2]  # keep 1, but batch 1's trace sources wait for its audit

        began = time.monotonic()
        follower.stop(grace_s=0.5)  # Ctrl-C while batch 1's audit is stuck: the distiller does not wait
        assert time.monotonic() - began < 5
    finally:
        gate.set()
        follower.stop(grace_s=300)
    assert audited == [1]  # the batch it was on finished; none begun after the stop

    assert not distill_once(config, now_ms=LATER).committed  # the next start audits the rest
    runs = _audit_runs(config)
    assert set(runs) == {first.batch_id, second.batch_id}
    assert runs[second.batch_id].data.metrics["traces"] == 2  # traced from the kept staging folder
    assert runs[first.batch_id].data.metrics["traces"] == 1


def _dead_mlflow() -> str:
    with socket.socket() as probe:  # a port nobody listens on: MLflow is down
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_an_mlflow_outage_neither_stops_distilling_nor_loses_an_audit(distill_config, capsys, monkeypatch):
    config = distill_config
    config.pipelines.audit = True
    config.pipelines.keep_state_batches = 1
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail fast while it is down
    args = _overrides(config)
    args[args.index("--pipelines.audit") + 1] = "true"
    args += ["--mlflow.tracking_uri", _dead_mlflow(), "--mlflow.audit_experiment", config.mlflow.audit_experiment,
             "--pipelines.keep_state_batches", "1"]

    for session in ("o1", "o2"):  # two follow runs while MLflow is down: a backlog of two unaudited batches
        produce(config, *coding_session(session))
        assert main(["distill", "--follow", "--max-batches", "1", *args]) == 0
        captured = capsys.readouterr()
        (line,) = captured.out.splitlines()
        assert "trajectories 1" in line and "| audit lag " in line
        assert "audit failed (1 failures so far" in captured.err and "batches not audited yet" in captured.err
    assert _staged(config) == [1, 2]  # nothing audited: prune kept batch 1's folder despite keep 1

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    args[args.index("--mlflow.tracking_uri") + 1] = config.mlflow.tracking_uri  # MLflow is back
    produce(config, *coding_session("o3"))
    assert main(["distill", "--follow", "--max-batches", "1", *args]) == 0  # catches up 1 and 2, drains 3
    assert "audit lag" in capsys.readouterr().out
    runs = _audit_runs(config)
    assert sorted(runs) == [f"liverl-distill-0000000{seq}" for seq in (1, 2, 3)]
    assert all(run.data.metrics["traces"] == 1 and run.info.status == "FINISHED" for run in runs.values())
