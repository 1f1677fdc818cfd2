"""Sealed table rows: the token ids are unreadable in the Delta files, open exactly with the subject's key, are
bound to their row, and are gone for every copy once the key is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from liverl.contracts import names
from liverl.contracts.table_schema import TRAJECTORY_PARTITION_BY
from liverl.contracts.trajectory_row import TrajectoryRow, rows_to_table
from liverl.io.kafka_writer import Record
from liverl.privacy.keystore import FileKeyStore, SubjectForgotten
from liverl.privacy.row_sealing import RowOpener, RowSealer
from liverl.privacy.sealing import Forgotten, Sealer

MARKER = b"quokka-tokens-8812!!"  # 20 bytes: five int32 token ids whose raw bytes spell the marker
MARKER_IDS = [int.from_bytes(MARKER[i:i + 4], "little", signed=True) for i in range(0, len(MARKER), 4)]


def row(trajectory_id: str = "t1", session_id: str = "conv-1", token_ids: list[int] = MARKER_IDS) -> TrajectoryRow:
    n = len(token_ids)
    return TrajectoryRow(
        trajectory_id=trajectory_id, session_id=session_id, tenant_id="acme", agent_role="single", agent_id="main",
        batch_id="b1", event_date="2026-12-01", token_ids=list(token_ids), loss_mask=[0] * (n - 1) + [1],
        behaviour_logprobs=[0.0] * (n - 1) + [-0.5])


def parquet_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*.parquet")))


def write_table(uri: Path, rows: list[TrajectoryRow]) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(uri), rows_to_table(rows), mode="append", partition_by=TRAJECTORY_PARTITION_BY)


def test_a_sealed_row_opens_to_its_exact_token_ids(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    sealed = RowSealer(store).seal_row(row())
    assert sealed.token_ids == [] and sealed.subject_id.startswith("s-") and MARKER not in sealed.sealed_token_ids
    opened = RowOpener(store).open_row(sealed.to_arrow())
    assert opened["token_ids"] == MARKER_IDS and opened["sealed_token_ids"] is None
    assert TrajectoryRow.from_arrow(opened).validate().token_ids == MARKER_IDS
    assert RowOpener(store).open_row(row().to_arrow())["token_ids"] == MARKER_IDS  # rows in clear pass through


def test_a_row_is_sealed_under_the_key_its_sessions_kafka_records_were_sealed_with(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    record = Sealer(store).seal(Record("events", b"acme/conv-1", b"value", ((names.HEADER_TENANT, b"acme"),), 5))
    sealed = RowSealer(FileKeyStore(tmp_path / "keys")).seal_row(row())
    assert sealed.subject_id == dict(record.headers)[names.HEADER_SEALED].decode()
    assert len(store.forgotten("acme")) == 0 and store.key("acme", sealed.subject_id) is not None


def test_the_delta_files_of_a_sealed_row_hold_no_token_id(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    write_table(tmp_path / "clear", [row()])
    assert MARKER in parquet_bytes(tmp_path / "clear")  # the grep finds ids written in clear
    write_table(tmp_path / "sealed", [RowSealer(store).seal_row(row())])
    assert MARKER not in parquet_bytes(tmp_path / "sealed")


def test_forgetting_the_subject_leaves_a_copy_of_the_old_files_unreadable(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    sealer = RowSealer(store)
    doomed, kept = sealer.seal_row(row("t1", "conv-1")), sealer.seal_row(row("t2", "conv-2"))
    write_table(tmp_path / "table", [doomed, kept])
    shutil.copytree(tmp_path / "table", tmp_path / "backup")  # a backup, or the history before the vacuum
    store.forget("acme", [doomed.subject_id])
    copied = {r["trajectory_id"]: r for path in (tmp_path / "backup").rglob("*.parquet")
              for r in pq.read_table(path).to_pylist()}
    opener = RowOpener(FileKeyStore(tmp_path / "keys"))
    with pytest.raises(Forgotten, match="liverl forget"):
        opener.open_row(copied["t1"])
    assert opener.open_row(copied["t2"])["token_ids"] == MARKER_IDS  # another subject's row still opens
    with pytest.raises(SubjectForgotten):
        RowSealer(store).seal_row(row("t3", "conv-1"))  # a forgotten subject's row is never sealed again


def test_a_tampered_or_moved_blob_does_not_open(tmp_path):
    store = FileKeyStore(tmp_path / "keys")
    sealer, opener = RowSealer(store), RowOpener(store)
    first = sealer.seal_row(row("t1")).to_arrow()
    second = sealer.seal_row(row("t2")).to_arrow()  # the same session: the same subject and key
    with pytest.raises(ValueError, match="altered or moved"):
        opener.open_row(second | {"sealed_token_ids": first["sealed_token_ids"]})
    flipped = bytearray(first["sealed_token_ids"])
    flipped[-1] ^= 1
    with pytest.raises(ValueError, match="altered or moved"):
        opener.open_row(first | {"sealed_token_ids": bytes(flipped)})
    with pytest.raises(ValueError, match="envelope"):
        opener.open_row(first | {"sealed_token_ids": b"\x09" + first["sealed_token_ids"][1:]})
