"""The staged trace sources (the sampled sessions' events and model calls, kept for the audit's MLflow traces)
are sealed under the session's subject key like the table's token ids: no staged file holds a session's calls in
clear, the audit opens them exactly, and once the subject is forgotten they never open again."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.row_sealing import RowOpener
from liverl.rewards.session import SessionRecord
from pipelines.traces import STAGED_NAME, TRACE_SOURCE_SCHEMA, TraceSources, read_trace_sources
from tests.pipelines.producing import coding_session


def _stage(batch, keys_dir, *records: SessionRecord) -> bytes:
    """The records through the TraceSources step, written as a staged file (uncompressed, so bytes can be read)."""
    step = TraceSources(1.0, None if keys_dir is None else str(keys_dir))
    step.setup()
    rows = [row for record in records for row in step.process(record)]
    batch.mkdir(parents=True, exist_ok=True)
    path = batch / f"{STAGED_NAME}-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=TRACE_SOURCE_SCHEMA), path, compression="none")
    return path.read_bytes()


def _record(session_id: str) -> SessionRecord:
    events, calls = coding_session(session_id)
    return SessionRecord(session_id, "demo", tuple(events), tuple(calls))


def test_staged_sources_are_sealed_open_exactly_and_not_after_forget(tmp_path):
    keys = tmp_path / "keys"
    store = FileKeyStore(keys)
    kept, gone = _record("kept"), _record("gone")
    store.forget("demo", [Pseudonyms(store).session("demo", "gone")])
    call_bytes = kept.model_calls[0].SerializeToString()

    clear = _stage(tmp_path / "clear", None, kept)
    assert call_bytes in clear  # what the audit staged before: the call, prompt and completion ids, as served
    sealed = _stage(tmp_path / "sealed", keys, kept, gone)
    assert call_bytes not in sealed and b"kept" in sealed  # ids sealed; tenant and session stay to find it by

    opener = RowOpener(FileKeyStore(keys))
    opened = read_trace_sources(str(tmp_path / "sealed"), opener)
    assert list(opened) == [("demo", "kept")], "a forgotten subject's session is never staged"
    assert opened[("demo", "kept")].model_calls == kept.model_calls
    assert opened[("demo", "kept")].events == kept.events
    assert read_trace_sources(str(tmp_path / "sealed")) == {}, "no opener: a sealed session is left out"

    store.forget("demo", [Pseudonyms(store).session("demo", "kept")])
    assert read_trace_sources(str(tmp_path / "sealed"), RowOpener(FileKeyStore(keys))) == {}
