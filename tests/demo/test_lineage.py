"""The demo's lineage audit: registry tags + table commits -> the sessions each version (and its ancestors) saw."""

from __future__ import annotations

import uuid

import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

from demo.lineage import read_lineage, read_table_sessions
from liverl.contracts import names
from liverl.io.lineage import Lineage, encode, encode_offsets
from liverl.io.registry import ModelRegistry


def _commit(uri: str, batch_id: str, sessions: list[str]) -> None:
    rows = pa.table({"trajectory_id": [f"t-{s}" for s in sessions], "session_id": sessions,
                     "batch_id": [batch_id] * len(sessions)})
    metadata = {names.COMMIT_BATCH_ID: batch_id, names.COMMIT_KAFKA_OFFSETS: encode_offsets({"e": {"0": [0, 1]}})}
    write_deltalake(uri, rows, mode="append", commit_properties=CommitProperties(custom_metadata=metadata))


def test_each_version_inherits_the_sessions_its_ancestors_trained_on(stack, tmp_path):
    table_uri = str(tmp_path / "table")
    _commit(table_uri, "batch-0", ["s1", "s2"])  # table v0
    _commit(table_uri, "batch-1", ["s3"])  # table v1
    registry = ModelRegistry(stack.mlflow.tracking_uri, f"lineage-{uuid.uuid4().hex[:8]}")
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    for lineage in (Lineage(), Lineage(table_versions=(0,), parent_version="1", kafka_offsets={"e": {"0": [0, 4]}}),
                    Lineage(table_versions=(1,), parent_version="2")):
        registry.register_folder(folder, encode(lineage), "lineage-tests", "v")

    lineages = read_lineage(stack.mlflow.tracking_uri, registry.name, read_table_sessions(table_uri))
    assert sorted(lineages) == ["1", "2", "3"]
    assert lineages["1"].parent == "" and lineages["1"].all_sessions == set()
    assert lineages["2"].table_versions == [0] and lineages["2"].kafka_offsets == {"e": {"0": [0, 4]}}
    assert lineages["2"].own_sessions == {"s1", "s2"}
    assert lineages["3"].own_sessions == {"s3"} and lineages["3"].all_sessions == {"s1", "s2", "s3"}
    assert lineages["3"].created_ms >= lineages["1"].created_ms > 0


def test_commits_landing_while_the_audit_reads_are_left_for_the_next_read(tmp_path, monkeypatch):
    """The pipelines keep committing while the demo's summary reads the table (a CI run once failed with
    KeyError on a version that landed between two reads): each read sees one snapshot."""
    import demo.lineage as audit

    table_uri = str(tmp_path / "table")
    _commit(table_uri, "batch-0", ["s1"])
    _commit(table_uri, "batch-1", ["s2"])
    read_commits = audit.TableHistory.commits_after
    landed = []

    def commits_then_one_lands(history, version=-1):
        commits = read_commits(history, version)
        _commit(table_uri, f"batch-late-{len(landed)}", [f"late-{len(landed)}"])
        landed.append(True)
        return commits

    monkeypatch.setattr(audit.TableHistory, "commits_after", commits_then_one_lands)
    first = audit.committed_at(audit.read_table_sessions(table_uri))
    assert sorted(first) == ["s1", "s2"] and landed
    assert first["s1"] <= first["s2"]
