"""Erase a data subject from every file the distiller keeps under its state uri (`liverl forget`).

Each batch's staging folder (pipelines/state.py) holds one Parquet output per kind of job.STAGED, and every
kind names the sessions it holds in its own way:

    trajectories   the batch's rows: tenant_id, session_id, task_id in clear (token ids sealed or in clear)
    dead_letters   tenant_id and session_id as the distiller could tell them (a record's key when its body did
                   not read), and the payload: the record's value (a SessionEvent or ModelCall) or a JSON summary
    pending        raw Kafka records of sessions not ready yet: NO id column. A record in clear names its session
                   in its key ("<tenant>/<session>", or the session id alone) and in its value; a sealed one is
                   keyed "<tenant>/<subject>" and opens only with the subject's key (destroyed by then), so only
                   its subject id (key and header) says whose it is: see holds_subject
    closed         (tenant_id, session_id) of sessions already emitted (late records of them are dead letters)
    trace_sources  sampled sessions' events and model calls (sealed or in clear) with tenant_id and session_id

Shards of a write that a crash interrupted keep the same rows (`beam-temp-<kind>-<hex>/<uid>.<kind>.parquet`)
and are erased the same way. Plans (`plans/<seq>.json`) hold offsets, clocks and folder names, never a session.

A file that holds an erased session is rewritten without it, in its own schema and under its own name (a new
file moved over the old one): the last committed batch's pending and closed files are the distiller's carried
state, which the next batch reads by name (`<kind>-*.parquet`), and the counts the driver takes come from the
files' footers, so both stay right. What a batch already committed is in the Delta tables (erased by
liverl/privacy/erase_table.py); the counts in its commit metadata stay as committed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pyarrow as pa

from liverl.contracts import names
from liverl.io import records as kafka_records
from liverl.v1.model_call_pb2 import ModelCall
from liverl.v1.session_event_pb2 import SessionEvent
from pipelines.job import STAGED
from pipelines.records import RawRecord

Holds = Callable[[str, str], bool]  # (tenant_id, an id as the row stores it) -> the row is the subject's
ERASING = ".erasing"  # suffix of a file being rewritten; one left by a crash is deleted on the next erasure


def erase_staged_sessions(state_uri: str, holds: Holds, holds_subject: Holds | None = None) -> dict[str, int]:
    """Rewrite every staged file under state_uri without the rows for which holds(tenant_id, session_id) is true;
    returns the rows dropped per kind of job.STAGED, every kind named (0 when none): one per trajectory,
    dead letter, pending Kafka record, closed session and trace source (a sampled session).

    holds_subject(tenant_id, subject_id): true for the subject's session pseudonyms ("s-<hex>", the ids a
    Subject's `sessions` hold). A sealed Kafka record names its session by that alone (key "<tenant>/<subject>"),
    so without it a user's or session's sealed pending records stay until the next batch drops them (their key
    is destroyed, so they never open); a whole tenant's go either way (holds is true for any session of it)."""
    import pyarrow.fs as pafs

    unknown = sorted(set(STAGED) - set(IDENTITIES))
    if unknown:
        raise RuntimeError(f"staged kinds {unknown} have no entry in pipelines/erase_staged.IDENTITIES: add how "
                           "their rows name a session, or `liverl forget` would leave their files behind")
    if "://" not in state_uri:
        state_uri = os.path.abspath(state_uri)  # as pipelines.state.StateStore resolves it
    fs, root = pafs.FileSystem.from_uri(state_uri.rstrip("/"))
    dropped = dict.fromkeys(STAGED, 0)
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File:
            continue
        if info.base_name.endswith(ERASING):
            fs.delete_file(info.path)  # an interrupted rewrite; the file it was replacing is erased below
            continue
        kind = staged_kind(info.path)
        if kind is not None:
            dropped[kind] += _rewrite_without(fs, info.path, kind, holds, holds_subject)
    return dropped


def staged_kind(path: str) -> str | None:
    """The kind of a staged file from its name: `<kind>-SSSSS-of-NNNNN.parquet` as staged, or
    `beam-temp-<kind>-<hex>/<uid>.<kind>.parquet` as a write left it mid-way; None for anything else."""
    folder, _, name = path.rstrip("/").rpartition("/")
    if not name.endswith(".parquet"):
        return None
    for kind in STAGED:
        if name.startswith(f"{kind}-") or (name.endswith(f".{kind}.parquet")
                                           and folder.rpartition("/")[2].startswith(f"beam-temp-{kind}-")):
            return kind
    return None


def _rewrite_without(fs, path: str, kind: str, holds: Holds, holds_subject: Holds | None) -> int:
    """Rewrite one file without the subject's rows (in the schema it was written in); the rows dropped."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, filesystem=fs)
    doomed = [any(holds(tenant or "", session or "") for tenant, session in whose.sessions)
              or (holds_subject is not None and any(holds_subject(tenant or "", subject)
                                                    for tenant, subject in whose.subjects))
              for whose in IDENTITIES[kind](table)]
    if not any(doomed):
        return 0
    temporary = path + ERASING
    pq.write_table(table.filter(pa.array([not d for d in doomed], pa.bool_())), temporary, filesystem=fs)
    fs.move(temporary, path)
    return doomed.count(True)


class Names(NamedTuple):
    """Whom one staged row belongs to, in every form it names them."""

    sessions: list[tuple[str | None, str | None]]  # (tenant, session id as stored)
    subjects: list[tuple[str | None, str]]  # (tenant, subject id): a sealed record's key names only that


def _by_columns(table: pa.Table) -> Iterator[Names]:
    """Trajectories, closed sessions, trace sources: the row's own tenant_id and session_id (and the subject
    whose key sealed it, for sealed trajectories and trace sources)."""
    tenants, sessions = table.column("tenant_id").to_pylist(), table.column("session_id").to_pylist()
    subjects = (table.column("subject_id").to_pylist() if "subject_id" in table.column_names
                else [None] * table.num_rows)
    for tenant, session, subject in zip(tenants, sessions, subjects):
        yield Names([(tenant, session)], [(tenant, subject)] if subject else [])


def _dead_letters(table: pa.Table) -> Iterator[Names]:
    """The letter's tenant and session, a session id that is a whole record key, and a payload that is a record's
    value in clear (a letter of a record whose topic was not planned names no session in its columns)."""
    for row in table.select(["tenant_id", "session_id", "source_offset", "payload"]).to_pylist():
        tenant, session = row["tenant_id"], row["session_id"]
        keyed = _from_key(session, tenant)
        found = Names([(tenant, session), *keyed], keyed)
        if row["source_offset"] is not None:  # a record-level letter: the payload is the record's value
            found.sessions.extend((t, s) for t, s in _from_value(row["payload"], None) if tenant in (None, t))
        yield found


def _pending(table: pa.Table) -> Iterator[Names]:
    """A pending Kafka record's session from its key and tenant header; a sealed record is keyed by its tenant and
    subject ("<tenant>/<subject>", liverl.privacy.sealing) and names its subject in a header, a record in clear
    names its session in its value (the distiller groups records by the value's own ids) and its key."""
    for row in table.to_pylist():
        record = RawRecord.from_row(row)
        tenant = _text(record.header(names.HEADER_TENANT))
        key = _text(record.key)
        keyed = _from_key(key, tenant)
        found = Names([(tenant, key), *keyed], list(keyed))
        sealed_by = _text(record.header(names.HEADER_SEALED))
        if sealed_by is not None:
            found.subjects.append((tenant or (keyed[0][0] if keyed else None), sealed_by))
        else:
            found.sessions.extend(_from_value(record.value, record.header(kafka_records.KIND_HEADER)))
        yield found


def _from_key(key: str | None, tenant: str | None) -> list[tuple[str, str]]:
    """(tenant, session or subject id) of a record key "<tenant>/<...>" (liverl.contracts.keys; tenant ids hold
    no "/"), when the key has that shape and agrees with the tenant header (if any)."""
    if not key or "/" not in key:
        return []
    key_tenant, _, rest = key.partition("/")
    return [(key_tenant, rest)] if tenant in (None, key_tenant) else []


_MESSAGE_TYPES = {kafka_records.SESSION_EVENT: (SessionEvent,), kafka_records.MODEL_CALL: (ModelCall,)}  # by kind


def _from_value(value: bytes | None, kind: bytes | None) -> list[tuple[str, str]]:
    """(tenant_id, session_id) of a record value in clear, parsed as its kind header says (both kinds when it
    names none: the topics are the distiller's config, not known here); nothing when it does not parse."""
    from google.protobuf.message import DecodeError

    found = []
    for message_type in _MESSAGE_TYPES.get(kind or b"", (SessionEvent, ModelCall)):
        try:
            message = message_type.FromString(value or b"")
        except (DecodeError, ValueError):
            continue
        if message.tenant_id and message.session_id:
            found.append((message.tenant_id, message.session_id))
    return found


def _text(value: bytes | None) -> str | None:
    try:
        return value.decode() if value else None
    except UnicodeDecodeError:
        return None


# How each staged kind names its sessions; every kind of job.STAGED needs one (erase_staged_sessions refuses to
# run without it rather than leave a kind behind).
IDENTITIES: dict[str, Callable[[pa.Table], Iterator[Names]]] = {
    "trajectories": _by_columns, "dead_letters": _dead_letters, "pending": _pending, "closed": _by_columns,
    "trace_sources": _by_columns}
