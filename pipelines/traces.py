"""Committed trajectories as MLflow traces, so a person can open a session in MLflow's trace view.

Two halves, so only COMMITTED trajectories are traced, and each once:

    in the Beam graph   ready sessions -> `TraceSources` (the sampled sessions' events and model calls, sealed
                        under the session's subject key like the table's token ids: they hold its text)
                        -> staged as `trace_sources-*.parquet` next to the batch's other outputs
    after the commit    the audit (pipelines/audit.py) reads them back with the batch's committed rows and
                        writes one trace per trajectory (pipelines/trace_spans.py), in mlflow.audit_experiment

Sampling is a hash of (tenant, session) against pipelines.trace_sample_rate, so a re-run picks the same
sessions; pipelines.max_traces_per_batch caps a batch. A trace's id derives from the table and trajectory, so
a re-run (after a crash anywhere) finds the trace and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import apache_beam as beam
import pyarrow as pa

from liverl.config import LiverlConfig
from liverl.io.traces import TraceStore
from liverl.io.tracking import Tracking
from liverl.privacy.sealing import Forgotten
from liverl.rewards.session import SessionRecord

STAGED_NAME = "trace_sources"
# One sampled session, as the graph saw it (events already redacted by ingest; model calls as served).
TRACE_SOURCE_SCHEMA = pa.schema([
    pa.field("tenant_id", pa.string()),
    pa.field("session_id", pa.string()),
    pa.field("events", pa.list_(pa.binary())),  # SessionEvent protobufs, in the session's order
    pa.field("model_calls", pa.list_(pa.binary())),  # ModelCall protobufs, in request order
    pa.field("subject_id", pa.string()),  # the subject whose key sealed both lists; "" or null: in clear
])
SEALED_EVENTS, SEALED_CALLS = b"liverl/trace_source/events", b"liverl/trace_source/model_calls"


def sampled(tenant_id: str, session_id: str, rate: float) -> bool:
    """Whether the session is traced: the same answer in every run and on every worker."""
    if rate <= 0.0:
        return False
    digest = hashlib.sha256(json.dumps(["trace", tenant_id, session_id]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def trace_sources(session: SessionRecord, sample_rate: float) -> Iterator[dict]:
    """The session as a staged row, in clear, when it is sampled (its trajectories may still fail)."""
    if sampled(session.tenant_id, session.session_id, sample_rate):
        yield {"tenant_id": session.tenant_id, "session_id": session.session_id,
               "events": [e.SerializeToString() for e in session.events],
               "model_calls": [c.SerializeToString() for c in session.model_calls], "subject_id": ""}


class TraceSources(beam.DoFn):
    """Sampled sessions as staged rows, sealed under their subject's key when keys_dir is given (the key store is
    made on the worker: keys never travel with the pipeline). A subject forgotten meanwhile is not staged."""

    def __init__(self, sample_rate: float, keys_dir: str | None = None):
        self._sample_rate, self._keys_dir, self._sealer = sample_rate, keys_dir, None

    def setup(self):
        if self._keys_dir is not None:
            from pathlib import Path

            from liverl.privacy.keystore import FileKeyStore
            from liverl.privacy.row_sealing import RowSealer

            self._sealer = RowSealer(FileKeyStore(Path(self._keys_dir)))

    def process(self, session: SessionRecord):
        from liverl.privacy.keystore import SubjectForgotten

        for row in trace_sources(session, self._sample_rate):
            if self._sealer is None:
                yield row
                continue
            tenant, session_id = row["tenant_id"], row["session_id"]
            try:
                subject, events = self._sealer.seal_blobs(tenant, session_id, SEALED_EVENTS, row["events"])
                _, calls = self._sealer.seal_blobs(tenant, session_id, SEALED_CALLS, row["model_calls"])
            except SubjectForgotten:
                continue
            yield row | {"events": events, "model_calls": calls, "subject_id": subject}


def read_trace_sources(batch_uri: str, opener=None) -> dict[tuple[str, str], SessionRecord]:
    """(tenant, session) -> SessionRecord, from a batch's staged trace sources ({} when it staged none). opener (a
    liverl.privacy.row_sealing.RowOpener) opens sealed ones; a sealed session is left out without one, or when its
    subject was forgotten."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from liverl.v1.model_call_pb2 import ModelCall
    from liverl.v1.session_event_pb2 import SessionEvent

    fs, root = pafs.FileSystem.from_uri(batch_uri)
    infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    sessions = {}
    for info in sorted(infos, key=lambda i: i.path):
        if not (info.base_name.startswith(STAGED_NAME + "-") and info.base_name.endswith(".parquet")):
            continue
        for row in pq.read_table(info.path, filesystem=fs, schema=TRACE_SOURCE_SCHEMA).to_pylist():
            events, calls = row["events"], row["model_calls"]
            if row.get("subject_id"):
                if opener is None:
                    continue
                try:
                    events = opener.open_blobs(row["tenant_id"], row["subject_id"], SEALED_EVENTS, events)
                    calls = opener.open_blobs(row["tenant_id"], row["subject_id"], SEALED_CALLS, calls)
                except Forgotten:
                    continue  # erased since it was staged: never traced
            sessions[(row["tenant_id"], row["session_id"])] = SessionRecord(
                row["session_id"], row["tenant_id"], tuple(SessionEvent.FromString(b) for b in events),
                tuple(ModelCall.FromString(b) for b in calls))
    return sessions


def log_batch_traces(config: LiverlConfig, batch_uri: str | None, rows: list[dict], table_version: int | None,
                     tracking: Tracking) -> int:
    """Write the traces of the batch's committed, sampled trajectories that are not there yet; returns how
    many of them are there now. `rows`: the batch's committed rows; `batch_uri`: its staging folder."""
    settings = config.pipelines
    if settings.trace_sample_rate <= 0 or settings.max_traces_per_batch <= 0 or not batch_uri or not rows:
        return 0
    from liverl.privacy import row_opener_for

    sources = read_trace_sources(batch_uri, row_opener_for(config))
    chosen = sorted((r for r in rows if (r["tenant_id"], r["session_id"]) in sources),
                    key=lambda r: r["trajectory_id"])[:settings.max_traces_per_batch]
    if not chosen:
        return 0
    from liverl.privacy import key_store, tenant_redactor
    from liverl.privacy.pseudonyms import Pseudonyms
    from liverl.redaction import Redactor
    from pipelines.trace_spans import build_trace

    store = TraceStore(tracking)
    experiment_id = tracking.experiment_id(config.mlflow.audit_experiment)
    decode = token_decoder(settings.trace_tokenizer)
    redactors: dict[str, Redactor] = {}
    pseudonyms = Pseudonyms(key_store(config), config.privacy.key_cache_size)  # read only if an id needs one
    for row in chosen:
        tenant = row["tenant_id"]
        if tenant not in redactors:
            redactors[tenant] = tenant_redactor(config, tenant, pseudonyms)
        redactor = redactors[tenant]
        trace = build_trace(trace_key(config, row), sources[(tenant, row["session_id"])], row, table_version,
                            redactor.redact_text, decode)
        store.write(experiment_id, trace)
    return len(chosen)


def trace_key(config: LiverlConfig, row: dict) -> str:
    """Unique per table and trajectory (one server may hold several deployments' or tests' traces)."""
    return f"{config.table.trajectories_uri.rstrip('/')}#{row['trajectory_id']}"


def token_decoder(tokenizer_path: str | None):
    """ids -> text with the policy's tokenizer, or None when none is configured."""
    if not tokenizer_path:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)
