"""Erasing a subject's rows from the Delta tables as the distiller writes them: no byte of the rows survives under
the table's folder, its log included, the other rows stay, and the vacuum's count is what it deleted."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from liverl.contracts.table_schema import DEAD_LETTER_SCHEMA, TRAJECTORY_PARTITION_BY, TRAJECTORY_SCHEMA
from liverl.io.table_history import TableHistory
from liverl.privacy.erase_table import erase_rows
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.subject import Subject, resolve
from pipelines import dead_letters, table
from pipelines.job import stamp_dead_letter
from pipelines.records import RawRecord

TENANT = "demo"

ADA = ["ada-erase-me-7f3a1", "ada-erase-me-9c2b4"]  # the erased user's sessions
BOB = ["bob-keep-me-41d07"]
ADA_MARKERS = ADA + ["task-ada-erase-me", "ada-erase-me"]  # session ids, a task id, the marker in every id and text


def _digest(*parts: str) -> str:
    """Row ids are digests, as the distiller makes them (a delete names rows by them, in the log)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]


def _trajectory(session_id: str, batch_id: str) -> dict:
    return {"trajectory_id": _digest("trajectory", session_id), "session_id": session_id, "tenant_id": TENANT,
            "task_family": "coding", "task_id": f"task-{session_id}", "agent_role": "single", "agent_id": "main",
            "token_ids": [1, 2], "loss_mask": [0, 1], "behaviour_logprobs": [0.0, -0.5],
            "reward_components": {"outcome": 1.0}, "batch_id": batch_id, "schema_version": 3,
            "distilled_at_ms": 7, "event_date": "2026-09-21", "segment_starts": [0]}


def _letter(session_id: str, batch_id: str) -> dict:
    row = {"dead_letter_id": _digest("dead letter", session_id), "reason": "token_mismatch",
           "message": f"session {session_id} broke", "session_id": session_id, "tenant_id": TENANT,
           "source_topic": None, "source_partition": None, "source_offset": None,
           "payload": f'{{"session": "{session_id}"}}'.encode()}
    return stamp_dead_letter(row, batch_id, 7)


def _commit_batches(folder: Path) -> tuple[str, str]:
    """Two distiller batches, each with an Ada session and (the first) Bob's, in both tables."""
    trajectories, letters = str(folder / "trajectories"), str(folder / "dead_letters")
    for seq, sessions in ((1, [ADA[0], *BOB]), (2, [ADA[1]])):
        batch_id = f"g-{seq:08d}"
        table.commit_dead_letters(letters, pa.Table.from_pylist([_letter(s, batch_id) for s in sessions],
                                                                schema=DEAD_LETTER_SCHEMA), seq, batch_id)
        table.commit_trajectories(trajectories, pa.Table.from_pylist([_trajectory(s, batch_id) for s in sessions],
                                                                     schema=TRAJECTORY_SCHEMA), seq, {})
    return trajectories, letters


def _ada(folder: Path) -> Subject:
    """The user Ada, linked to her sessions in the key store as capture links them."""
    store = FileKeyStore(folder / "keys")
    pseudonyms = Pseudonyms(store)
    store.link_many(TENANT, [(pseudonyms.user(TENANT, "ada"), pseudonyms.session(TENANT, s)) for s in ADA])
    return resolve(store, TENANT, user="ada")


def _files(uri: str) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in Path(uri).rglob("*") if path.is_file()}


def _holding(files: dict[Path, bytes], needle: str) -> list[Path]:
    return [path for path, data in files.items() if needle.encode() in data]


def _data_files(uri: str) -> set[Path]:
    return {path for path in Path(uri).rglob("*.parquet") if "_delta_log" not in path.parts}


def test_erased_rows_leave_no_byte_in_either_table_log_included(tmp_path):
    trajectories, letters = _commit_batches(tmp_path)
    ada = _ada(tmp_path)
    for uri, id_column in ((trajectories, "trajectory_id"), (letters, "dead_letter_id")):
        assert _holding(_files(uri), ADA[0])  # the ids are in the data files (their footers) before
        data_before = _data_files(uri)

        erased = erase_rows(uri, ada, id_column)

        assert erased.rows == 2 and erased.batch_ids == {"g-00000001", "g-00000002"}
        rows = DeltaTable(uri).to_pyarrow_table().to_pylist()
        assert [row["session_id"] for row in rows] == BOB
        files = _files(uri)
        for marker in ADA_MARKERS:
            assert not _holding(files, marker), f"{marker} survives in {_holding(files, marker)}"
        assert _holding(files, BOB[0])  # the scan reads the files that hold the kept rows
        assert erased.files_removed == len(data_before - _data_files(uri)) == 2  # both batches' files rewritten

        again = erase_rows(uri, ada, id_column)  # the files vacuumed before are not counted again
        assert (again.rows, again.files_removed) == (0, 0)


def test_the_log_keeps_statistics_only_of_columns_that_name_no_one(tmp_path):
    trajectories, letters = _commit_batches(tmp_path)
    assert DeltaTable(trajectories).metadata().configuration == {
        table.STATS_PROPERTY: ",".join(table.TRAJECTORY_STATS_COLUMNS)}
    assert DeltaTable(letters).metadata().configuration == {
        table.STATS_PROPERTY: ",".join(table.DEAD_LETTER_STATS_COLUMNS)}
    log = _files(f"{trajectories}/_delta_log")
    assert not _holding(log, BOB[0]) and not _holding(log, f"task-{BOB[0]}")
    assert _holding(log, '\\"batch_id\\":\\"g-00000001\\"')  # stats of the batch id: readers skip other batches' files
    assert [row["session_id"] for row in TableHistory(trajectories).batch_rows("g-00000001")] == [ADA[0], *BOB]


def test_a_table_created_before_gets_the_property_on_its_next_commit(tmp_path):
    uri = str(tmp_path / "trajectories")
    old = pa.Table.from_pylist([_trajectory(BOB[0], "g-00000001")], schema=TRAJECTORY_SCHEMA)
    write_deltalake(uri, old, mode="append", partition_by=TRAJECTORY_PARTITION_BY)  # as the distiller wrote before
    assert _holding(_files(uri), BOB[0])  # that commit's statistics quote the session id

    version = table.commit_trajectories(uri, pa.Table.from_pylist([_trajectory(ADA[0], "g-00000002")],
                                                                  schema=TRAJECTORY_SCHEMA), 2, {})

    assert DeltaTable(uri).metadata().configuration[table.STATS_PROPERTY] == ",".join(table.TRAJECTORY_STATS_COLUMNS)
    assert version == 2 and table.read_committed(uri).seq == 2  # version 1 set the property, 2 is the batch
    assert not _holding(_files(f"{uri}/_delta_log"), ADA[0])
    assert {row["session_id"] for row in DeltaTable(uri).to_pyarrow_table().to_pylist()} == {BOB[0], ADA[0]}


def test_a_letter_named_only_by_its_sealed_record_key_is_the_subjects(tmp_path):
    """A record whose body did not read is dead-lettered under its key; a sealed record's key is
    "<tenant>/<subject id>", the one name it has."""
    ada = _ada(tmp_path)
    uri = str(tmp_path / "dead_letters")
    keys = [f"{TENANT}/{subject}" for subject in sorted(ada.sessions)] + [f"{TENANT}/{ADA[0]}", f"{TENANT}/{BOB[0]}",
                                                                        f"other/{ADA[0]}"]
    records = [RawRecord("ev", 0, offset, 7, key.encode(), b"\x01sealed", ()) for offset, key in enumerate(keys)]
    letters = [stamp_dead_letter(dead_letters.record_dead_letter(
        dead_letters.MALFORMED_EVENT, "not a SessionEvent", record,
        None if record.key.startswith(b"other/") else TENANT, record.key.decode()), "g-00000001", 7)
        for record in records]
    table.commit_dead_letters(uri, pa.Table.from_pylist(letters, schema=DEAD_LETTER_SCHEMA), 1, "g-00000001")

    erased = erase_rows(uri, ada, "dead_letter_id")

    assert erased.rows == len(ADA) + 1  # her sessions' sealed keys and a key in clear of her session
    left = {row["session_id"] for row in DeltaTable(uri).to_pyarrow_table().to_pylist()}
    assert left == {f"{TENANT}/{BOB[0]}", f"other/{ADA[0]}"}  # another tenant's equal session id is not hers
