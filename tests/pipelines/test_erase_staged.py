"""Erasing a subject from the distiller's state: every staged kind (trajectories, dead letters, pending records,
closed sessions, trace sources) is rewritten without the subject's rows, the others stay, and the next batch
reads the rewritten carried state as if nothing had happened."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from liverl.contracts.table_schema import DEAD_LETTER_SCHEMA
from liverl.io.kafka_writer import Record
from liverl.io.records import MODEL_CALL, SESSION_EVENT, session_record
from liverl.privacy import key_store
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.sealing import Sealer
from liverl.privacy.subject import resolve
from liverl.v1 import session_event_pb2 as se
from pipelines import dead_letters
from pipelines.distill import distill_once, state_uri
from pipelines.erase_staged import IDENTITIES, erase_staged_sessions
from pipelines.job import STAGED, stamp_dead_letter
from pipelines.parse import parse_record
from pipelines.records import RAW_RECORD_SCHEMA, RawRecord
from pipelines.state import StateStore
from tests.pipelines.producing import T0, call, coding_session, event, produce

LATER = T0 + 3600_000
TENANT = "demo"
ADA = ["ada-erase-me-7f3a1", "ada-erase-me-9c2b4", "ada-erase-me-5e8d0"]  # emitted, dead-lettered, pending
BOB = ["bob-keep-me-41d07", "bob-keep-me-22c90"]  # emitted, pending until the next batch
MARKER = "ada-erase-me"  # in Ada's session ids, task ids and her message text


def _session(session_id: str, end: bool = True, broken: bool = False) -> tuple[list, list]:
    events, calls = coding_session(session_id, end=end)
    events[1].user_message.text = f"fix the bug, says {session_id}"
    if broken:
        calls[0].completion_logprobs.append(-1.0)  # token mismatch: a session-level dead letter
    return events, calls


def _state_contents(folder: Path) -> dict[Path, str]:
    """Every file under the state folder as text a search can read: its bytes, and a Parquet file's rows too
    (Beam may compress them), byte strings (record values, payloads) included."""
    contents = {}
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("latin-1")
            if path.suffix == ".parquet":
                text += repr(pq.read_table(path).to_pylist())
            contents[path] = text
    return contents


def _holding(contents: dict[Path, str], needle: str) -> list[Path]:
    return [path for path, text in contents.items() if needle in text]


def test_every_staged_kind_loses_the_subject_and_the_next_batch_still_runs(distill_config):
    config = distill_config
    config.pipelines.audit = True  # trace sources are staged for the audit's traces
    config.pipelines.trace_sample_rate = 1.0
    for session_id, end, broken in ((ADA[0], True, False), (ADA[1], True, True), (ADA[2], False, False),
                                    (BOB[0], True, False), (BOB[1], False, False)):
        produce(config, *_session(session_id, end, broken))
    produce(config, raw=[(config.kafka.session_events_topic, ADA[0].encode(), b"\xff\x00garbage",
                          [("liverl-tenant", TENANT.encode())])])  # a malformed record: keyed by Ada's session
    first = distill_once(config, now_ms=LATER)
    assert first.committed and first.sessions == 2 and first.counters.get("sessions_pending") == 2
    store = key_store(config)
    pseudonyms = Pseudonyms(store)
    store.link_many(TENANT, [(pseudonyms.user(TENANT, "ada"), pseudonyms.session(TENANT, s)) for s in ADA])
    ada = resolve(store, TENANT, user="ada")
    folder = Path(state_uri(config))
    before = _state_contents(folder)
    assert all(_holding(before, session_id) for session_id in ADA)

    dropped = erase_staged_sessions(state_uri(config), ada.holds)

    assert set(dropped) == set(STAGED) and all(dropped[kind] > 0 for kind in STAGED), dropped
    # Her two complete sessions were ready (the broken one fails only when built): both closed, both sampled.
    assert dropped["trace_sources"] == 2 and dropped["closed"] == 2 and dropped["pending"] == 9
    assert dropped["dead_letters"] == 2  # the broken session's letter and the garbage record keyed by her session
    after = _state_contents(folder)
    assert not _holding(after, MARKER), f"{MARKER} survives in {_holding(after, MARKER)}"
    for session_id in BOB:  # the other user's rows are still there (the search reads the rewritten files)
        assert _holding(after, session_id)
    assert erase_staged_sessions(state_uri(config), ada.holds) == dict.fromkeys(STAGED, 0)

    events, calls = _session(BOB[1])
    late = event(BOB[0], 20, user_message=se.UserMessage(text="one more thing"))
    produce(config, events[len(coding_session(BOB[1], end=False)[0]):] + [late])  # Bob's pending session ends
    second = distill_once(config, now_ms=LATER)
    assert second.committed and second.sessions == 1 and second.dead_letters == {dead_letters.LATE_EVENT: 1}
    rows = DeltaTable(config.table.trajectories_uri).to_pyarrow_table().to_pylist()
    (bob,) = [row for row in rows if row["batch_id"] == second.batch_id]
    assert bob["session_id"] == BOB[1] and bob["num_model_calls"] == len(calls)  # its records carried whole
    assert not any(row["session_id"] == ADA[2] for row in rows)  # her pending records are gone for good
    assert second.counters.get("sessions_pending", 0) == 0


def _raw(record: Record, offset: int) -> RawRecord:
    return RawRecord(record.topic, 0, offset, T0, record.key, record.value, tuple(record.headers))


def _write(path: Path, rows: list[dict], schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_pending_records_and_letters_name_their_session_in_the_key_or_the_value(tmp_path):
    """A pending record has no id column: a sealed one is keyed by its subject id and opens only with the
    (destroyed) key, so that id says whose it is; a value in clear names its session itself, whatever its key. A
    letter of a record from an unplanned topic names no session in its columns, only in its payload."""
    keys = FileKeyStore(tmp_path / "keys")
    events, calls = _session(ADA[0])
    production = [session_record("ev", SESSION_EVENT, TENANT, ADA[0], events[1].SerializeToString()),
                  session_record("mc", MODEL_CALL, TENANT, ADA[0], calls[0].SerializeToString()),
                  session_record("ev", SESSION_EVENT, TENANT, BOB[0], _session(BOB[0])[0][1].SerializeToString())]
    sealed = Sealer(keys).seal_all(production)  # keyed "<tenant>/<session>", values sealed, as capture sends them
    plain = [Record("ev", b"some-other-key", events[2].SerializeToString(), ()),  # only the value names Ada
             Record("mc", ADA[1].encode(), call(ADA[1], 1, "r", [1], [2]).SerializeToString(),
                    (("liverl-tenant", TENANT.encode()),))]  # keyed by the session id alone, as tests produce
    store = StateStore(str(tmp_path / "state"))
    batch = Path(store.batch_dir(1))
    pending = [_raw(record, offset).to_row() for offset, record in enumerate(sealed + plain)]
    _write(batch / "pending-00000-of-00001.parquet", pending, RAW_RECORD_SCHEMA)
    _write(batch / "beam-temp-pending-0a1b/5f2e.pending.parquet", pending, RAW_RECORD_SCHEMA)  # a write cut short
    (batch / "closed-00000-of-00001.parquet.erasing").write_bytes(b"an erasure cut short: " + ADA[0].encode())
    unplanned = parse_record(_raw(plain[0], 9), "t.events", "t.calls")  # a letter with no session in its columns
    letters = [stamp_dead_letter(unplanned, "b-1", T0),
               stamp_dead_letter(dead_letters.session_dead_letter(
                   dead_letters.NO_MODEL_CALLS, "none", TENANT, BOB[0], {"session": BOB[0]}), "b-1", T0)]
    assert letters[0]["session_id"] is None and letters[0]["reason"] == dead_letters.UNKNOWN_TOPIC
    _write(batch / "dead_letters-00000-of-00001.parquet", letters, DEAD_LETTER_SCHEMA)

    pseudonyms = Pseudonyms(keys)
    keys.link_many(TENANT, [(pseudonyms.user(TENANT, "ada"), pseudonyms.session(TENANT, s)) for s in ADA])
    ada = resolve(keys, TENANT, user="ada")
    keys.forget(TENANT, sorted(ada.sessions), ada.user)  # as `liverl forget` does: her keys first, then the stores
    in_clear = erase_staged_sessions(store.root, ada.holds)  # her sealed records name only her subject ids
    assert in_clear == {**dict.fromkeys(STAGED, 0), "pending": 4, "dead_letters": 1}  # 2 records in each file
    sealed_too = erase_staged_sessions(store.root, ada.holds, lambda tenant, subject: tenant == ada.tenant
                                       and subject in ada.sessions)
    assert sealed_too == {**dict.fromkeys(STAGED, 0), "pending": 4}
    assert not (batch / "closed-00000-of-00001.parquet.erasing").exists()
    for name in ("pending-00000-of-00001.parquet", "beam-temp-pending-0a1b/5f2e.pending.parquet"):
        left = [RawRecord.from_row(row) for row in pq.read_table(batch / name).to_pylist()]
        assert [record.key for record in left] == [sealed[2].key]  # Bob's sealed record, byte for byte
        assert left[0] == _raw(sealed[2], 2)
    (letter,) = store.read_staged(store.batch_dir(1), "dead_letters", DEAD_LETTER_SCHEMA).to_pylist()
    assert letter["session_id"] == BOB[0]


def test_a_whole_tenant_leaves_every_kind_and_each_kind_says_how_it_names_a_session(tmp_path):
    assert set(IDENTITIES) == set(STAGED)  # a new staged kind must say how its rows name a session
    keys = FileKeyStore(tmp_path / "keys")
    store = StateStore(str(tmp_path / "state"))
    batch = Path(store.batch_dir(3))
    for kind, schema in STAGED.items():
        rows = [{"tenant_id": tenant, "session_id": "same-id"} for tenant in ("acme", TENANT)]
        if kind == "pending":
            rows = [_raw(session_record("ev", SESSION_EVENT, tenant, "same-id", b""), 0).to_row()
                    for tenant in ("acme", TENANT)]
        elif kind == "dead_letters":
            rows = [stamp_dead_letter(dead_letters.session_dead_letter("r", "m", r["tenant_id"], "same-id", {}),
                                      "b-3", T0) for r in rows]
        table = pa.Table.from_pylist(rows, schema=pa.schema([schema.field(name) for name in rows[0]]))
        _write(batch / f"{kind}-00000-of-00001.parquet", table.to_pylist(), table.schema)

    dropped = erase_staged_sessions(store.root, resolve(keys, "acme", whole_tenant=True).holds)

    assert dropped == dict.fromkeys(STAGED, 1)
    for kind, schema in STAGED.items():
        left = pq.read_table(batch / f"{kind}-00000-of-00001.parquet")
        assert left.num_rows == 1 and "acme" not in repr(left.to_pylist())
