"""Sealed record values: unreadable without their subject's key, bound to their record, gone with the key."""

from __future__ import annotations

import pytest

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.io.kafka_writer import KafkaWriter, Record
from liverl.io.spool import Spool
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.sealing import Forgotten, Opener, Sealer

MARKER = b"zebra-marker-4711 dave@example.com"


def record(session: str = "conv-1", value: bytes = MARKER, topic: str = "events") -> Record:
    return Record(topic, f"acme/{session}".encode(), value, ((names.HEADER_TENANT, b"acme"),), 5)


def test_a_sealed_value_opens_only_with_its_key_and_its_record(tmp_path):
    store = FileKeyStore(tmp_path)
    sealed = Sealer(store).seal(record())
    subject = dict(sealed.headers)[names.HEADER_SEALED].decode()
    assert subject.startswith("s-") and "conv" not in subject
    # Kafka keys cannot be erased: the sealed record is keyed by the session's pseudonym, not its id
    assert MARKER not in sealed.value and sealed.key == f"acme/{subject}".encode() and sealed.event_time_ms == 5
    opener = Opener(store)
    assert opener.open(sealed.topic, sealed.key, sealed.headers, sealed.value) == MARKER
    with pytest.raises(ValueError, match="altered or moved"):
        opener.open("calls", sealed.key, sealed.headers, sealed.value)  # another topic: another identity
    assert opener.open("events", b"acme/x", (), b"plain") == b"plain"  # unsealed values pass through


def test_forgetting_the_subject_makes_every_copy_unreadable_and_drops_new_records(tmp_path):
    store = FileKeyStore(tmp_path)
    sealer = Sealer(store)
    sealed = sealer.seal(record())
    kept = sealer.seal(record("conv-2"))
    subject = dict(sealed.headers)[names.HEADER_SEALED].decode()
    store.forget("acme", [subject])
    with pytest.raises(Forgotten):
        Opener(store).open(sealed.topic, sealed.key, sealed.headers, sealed.value)
    assert Opener(store).open(kept.topic, kept.key, kept.headers, kept.value) == MARKER
    assert [r.key for r in Sealer(store).seal_all([record(), record("conv-2")])] == [kept.key]  # conv-1: dropped


def test_a_record_sealed_before_is_passed_on_as_it_is_and_makes_no_key(tmp_path):
    """A spooled record is sealed again when it is sent: its key is a pseudonym by then, never hashed again."""
    store = FileKeyStore(tmp_path)
    sealer = Sealer(store)
    sealed = sealer.seal(record())
    assert sealer.seal_all([sealed]) == [sealed]
    assert len(list((tmp_path).rglob("keys.log"))) == 1
    assert sum(1 for line in next(tmp_path.rglob("keys.log")).read_text().splitlines() if line) == 1


def test_the_writer_spools_only_sealed_values(tmp_path):
    config = LiverlConfig()
    config.kafka.bootstrap_servers = "127.0.0.1:9"  # never contacted: park() goes straight to the spool
    store = FileKeyStore(tmp_path / "keys")
    spool = Spool(tmp_path / "spool")
    writer = KafkaWriter(config.kafka, spool, 0.1, seal=Sealer(store).seal_all)
    writer.park([record(), record("conv-2")])
    raw = b"".join(p.read_bytes() for p in (tmp_path / "spool").rglob("*") if p.is_file())
    assert raw and MARKER not in raw and b"dave@example.com" not in raw and b"conv-" not in raw
    spool.close()


def test_a_process_that_cached_the_key_stops_at_once_when_another_process_forgets_it(tmp_path):
    """A running distiller (or capture, or trainer) caches ciphers; `liverl forget` runs in its own process. Records
    of the subject still waiting in Kafka must not open in the running distiller after the erasure, or their rows
    come back into the table; a running capture must not seal new ones."""
    from liverl.contracts.trajectory_row import TrajectoryRow
    from liverl.privacy.row_sealing import RowOpener, RowSealer

    capture_store, distiller_store, trainer_store = (FileKeyStore(tmp_path) for _ in range(3))
    sealer, opener = Sealer(capture_store), Opener(distiller_store)
    waiting = sealer.seal(record())
    assert opener.open(waiting.topic, waiting.key, waiting.headers, waiting.value) == MARKER  # key now cached
    row = RowSealer(distiller_store).seal_row(TrajectoryRow(
        trajectory_id="t1", session_id="conv-1", tenant_id="acme", agent_role="single", agent_id="main",
        batch_id="b1", event_date="2026-12-03", token_ids=[5, 6], loss_mask=[1, 1], behaviour_logprobs=[-1.0, -1.0]))
    rows = RowOpener(trainer_store)
    assert rows.open_row(row.to_arrow())["token_ids"] == [5, 6]  # cached too

    subject = dict(waiting.headers)[names.HEADER_SEALED].decode()
    FileKeyStore(tmp_path).forget("acme", [subject])  # `liverl forget`, another process

    assert distiller_store.key("acme", subject) is None
    with pytest.raises(Forgotten):
        opener.open(waiting.topic, waiting.key, waiting.headers, waiting.value)
    with pytest.raises(Forgotten):
        rows.open_row(row.to_arrow())
    assert sealer.seal_all([record()]) == [] and sealer.dropped_forgotten == 1
    other = sealer.seal(record("conv-9"))  # another session of the tenant is untouched
    assert opener.open(other.topic, other.key, other.headers, other.value) == MARKER
