"""Erasing a subject from the audit runs' artifacts, on a real audit run in the real MLflow server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from liverl.config import LiverlConfig
from liverl.io.tracking import Tracking, TrackingRun
from liverl.privacy import key_store
from liverl.privacy.erase_audit import erase_audit_artifacts
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.subject import resolve
from tests.conftest import with_topics
from tests.pipelines.conftest import distiller_on
from tests.pipelines.producing import T0, coding_session, produce

TENANT = "demo"
ADA = ["ada-erase-me-7f3a1", "ada-erase-me-9c2b4"]  # two sessions of the user who is erased
BOB = ["bob-keep-me-41d07"]
SAMPLE = "trajectories_sample.json"


@pytest.fixture(scope="module")
def audited(stack: LiverlConfig, tmp_path_factory) -> tuple[LiverlConfig, dict]:
    """One distilled and audited batch holding Ada's two sessions and Bob's one, and a deleted copy of its run (an
    audit cut short: its artifacts stay until gc); both users linked to their sessions in the key store, as
    capture links them. Returns the config and the sample as the audit logged it."""
    from pipelines.distill import distill_once

    config = distiller_on(with_topics(stack, "erase-audit"), tmp_path_factory.mktemp("erase-audit"), "erase-audit")
    config.pipelines.audit = True
    for session_id in ADA + BOB:
        produce(config, *coding_session(session_id))
    assert distill_once(config, now_ms=T0 + 3600_000).committed
    logged = sample_table(config)
    log_sample_run(config, config.mlflow.audit_experiment, logged, deleted=True)
    store = key_store(config)
    pseudonyms = Pseudonyms(store)
    for user, sessions in (("ada", ADA), ("bob", BOB)):
        store.link_many(TENANT, [(pseudonyms.user(TENANT, user), pseudonyms.session(TENANT, s)) for s in sessions])
    return config, logged


def sample_table(config: LiverlConfig) -> dict:
    """The audit run's sample as MLflow serves it: {"columns": [...], "data": [[...], ...]}."""
    tracking = Tracking(config.mlflow.tracking_uri)
    (run_id,) = tracking.run_ids(config.mlflow.audit_experiment)
    return json.loads(TrackingRun(tracking, run_id).read_artifact(SAMPLE))


def log_sample_run(config: LiverlConfig, experiment: str, table: dict, deleted: bool = False) -> None:
    """A run of `experiment` holding `table` in a folder (tables are found at any depth), then deleted if asked."""
    tracking = Tracking(config.mlflow.tracking_uri)
    with tracking.run(experiment, "sample-copy") as run:
        run.log_text(json.dumps(table), "old/" + SAMPLE)
    if deleted:
        tracking.client.delete_run(run.run_id)


def sample_rows(config: LiverlConfig) -> list[dict]:
    """The audit run's sample, one dict per row."""
    table = sample_table(config)
    return [dict(zip(table["columns"], row)) for row in table["data"]]


def artifact_bytes(config: LiverlConfig) -> dict[Path, bytes]:
    """Every file under the embedded MLflow server's artifacts folder (hidden staging files included)."""
    folder = config.stack.data_dir / "mlflow" / "artifacts"
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def holding(files: dict[Path, bytes], needle: str) -> list[Path]:
    return [path for path, data in files.items() if needle.encode() in data]


def test_erasing_a_user_leaves_only_the_other_users_rows_and_no_bytes_of_theirs(audited):
    config, _ = audited
    before = sample_rows(config)
    assert sorted(row["session_id"] for row in before) == sorted(ADA + BOB)
    assert {row["tenant_id"] for row in before} == {TENANT}
    assert holding(artifact_bytes(config), ADA[0])

    ada = resolve(key_store(config), TENANT, user="ada")
    dropped = erase_audit_artifacts(config.mlflow.tracking_uri, config.mlflow.audit_experiment, ada)

    assert dropped == 2 * len(ADA)  # from the audit run and from its deleted copy
    after = sample_rows(config)
    assert [row["session_id"] for row in after] == BOB
    assert after == [row for row in before if row["session_id"] in BOB]  # the kept rows as they were
    files = artifact_bytes(config)
    for marker in ADA + ["t-" + s for s in ADA] + ["ada-erase-me"]:  # session ids, task ids, the marker
        assert not holding(files, marker), f"{marker} survives in {holding(files, marker)}"
    assert holding(files, BOB[0])  # the scan reads the files that hold the kept rows
    assert erase_audit_artifacts(config.mlflow.tracking_uri, config.mlflow.audit_experiment, ada) == 0


def test_an_erasure_matching_no_row_changes_nothing(audited):
    config, _ = audited
    before = artifact_bytes(config)
    stamps = {path: path.stat().st_mtime_ns for path in before}
    nobody = resolve(key_store(config), TENANT, session="no-such-session")
    other_tenant = resolve(key_store(config), "elsewhere", whole_tenant=True)  # no rows here

    for subject in (nobody, other_tenant):
        assert erase_audit_artifacts(config.mlflow.tracking_uri, config.mlflow.audit_experiment, subject) == 0

    assert artifact_bytes(config) == before
    assert {path: path.stat().st_mtime_ns for path in before} == stamps
    assert erase_audit_artifacts(config.mlflow.tracking_uri, "no-such-experiment", nobody) == 0


def test_a_sample_without_tenant_ids_is_matched_under_the_subjects_tenant(audited):
    """Samples logged before they carried tenant_id: a user's erasure drops their rows, a whole tenant's every row
    (a row without its tenant might be the tenant's)."""
    config, table = audited
    experiment = config.mlflow.audit_experiment + "-legacy"
    assert table["columns"][0] == "tenant_id"
    legacy = {"columns": table["columns"][1:], "data": [row[1:] for row in table["data"]]}
    log_sample_run(config, experiment, legacy)
    ada = resolve(key_store(config), TENANT, user="ada")
    bob = resolve(key_store(config), TENANT, user="bob")
    other_tenant = resolve(key_store(config), "elsewhere", whole_tenant=True)

    assert erase_audit_artifacts(config.mlflow.tracking_uri, experiment, ada) == len(ADA)
    assert erase_audit_artifacts(config.mlflow.tracking_uri, experiment, bob) == len(BOB)
    log_sample_run(config, experiment, legacy)  # a second run, whole again
    assert erase_audit_artifacts(config.mlflow.tracking_uri, experiment, other_tenant) == len(ADA + BOB)
