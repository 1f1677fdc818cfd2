"""Committed trajectories as MLflow traces, so a person can open a session in MLflow's trace view.

Two halves, so only COMMITTED trajectories are traced, and each once:

    in the Beam graph   ready sessions -> `trace_sources` (the sampled sessions' events and model calls)
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

import pyarrow as pa

from liverl.config import LiverlConfig
from liverl.io.traces import TraceStore
from liverl.io.tracking import Tracking
from liverl.rewards.session import SessionRecord

STAGED_NAME = "trace_sources"
# One sampled session, as the graph saw it (events already redacted by ingest; model calls as served).
TRACE_SOURCE_SCHEMA = pa.schema([
    pa.field("tenant_id", pa.string()),
    pa.field("session_id", pa.string()),
    pa.field("events", pa.list_(pa.binary())),  # SessionEvent protobufs, in the session's order
    pa.field("model_calls", pa.list_(pa.binary())),  # ModelCall protobufs, in request order
])


def sampled(tenant_id: str, session_id: str, rate: float) -> bool:
    """Whether the session is traced: the same answer in every run and on every worker."""
    if rate <= 0.0:
        return False
    digest = hashlib.sha256(json.dumps(["trace", tenant_id, session_id]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def trace_sources(session: SessionRecord, sample_rate: float) -> Iterator[dict]:
    """beam.FlatMap body: the session as a staged row when it is sampled (its trajectories may still fail)."""
    if sampled(session.tenant_id, session.session_id, sample_rate):
        yield {"tenant_id": session.tenant_id, "session_id": session.session_id,
               "events": [e.SerializeToString() for e in session.events],
               "model_calls": [c.SerializeToString() for c in session.model_calls]}


def read_trace_sources(batch_uri: str) -> dict[tuple[str, str], SessionRecord]:
    """(tenant, session) -> SessionRecord, from a batch's staged trace sources ({} when it staged none)."""
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
            sessions[(row["tenant_id"], row["session_id"])] = SessionRecord(
                row["session_id"], row["tenant_id"], tuple(SessionEvent.FromString(b) for b in row["events"]),
                tuple(ModelCall.FromString(b) for b in row["model_calls"]))
    return sessions


def log_batch_traces(config: LiverlConfig, batch_uri: str | None, rows: list[dict], table_version: int | None,
                     tracking: Tracking) -> int:
    """Write the traces of the batch's committed, sampled trajectories that are not there yet; returns how
    many of them are there now. `rows`: the batch's committed rows; `batch_uri`: its staging folder."""
    settings = config.pipelines
    if settings.trace_sample_rate <= 0 or settings.max_traces_per_batch <= 0 or not batch_uri or not rows:
        return 0
    sources = read_trace_sources(batch_uri)
    chosen = sorted((r for r in rows if (r["tenant_id"], r["session_id"]) in sources),
                    key=lambda r: r["trajectory_id"])[:settings.max_traces_per_batch]
    if not chosen:
        return 0
    from liverl.redaction import Redactor
    from pipelines.trace_spans import build_trace

    store = TraceStore(tracking)
    experiment_id = tracking.experiment_id(config.mlflow.audit_experiment)
    decode = token_decoder(settings.trace_tokenizer)
    redactors: dict[str, Redactor] = {}
    for row in chosen:
        tenant = row["tenant_id"]
        redactor = redactors.setdefault(tenant, Redactor(config.ingest.redaction, tenant=tenant))
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
