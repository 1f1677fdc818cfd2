"""MLflow traces as every stage writes and finds them: finished traces built from recorded data, written once.

A trace here is built offline (`TraceRecord`: spans with the times the data recorded, tags, metadata,
assessments) and written through the tracing client of one server, never MLflow's process-global tracer:

    spans -> assessments -> trace info (tags)      the tags come last: a trace with them is complete

Its id is deterministic (`trace_id_for(key)`), so a re-run finds it and writes nothing (`TraceStore.write`
finishes a trace a crash left half-written, without duplicating its assessments).

The tags make traces searchable (mlflow.search_traces / the UI's search box), e.g. "coding sessions that
version 7 served with an outcome reward below 0.2":

    traces_filter(task_family="coding", policy_version="7") + " AND feedback.`reward.outcome` < 0.2"

and a registry version carries `training_traces_tag(table_versions)`: the expression that finds the traces
of the table versions it was trained on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from liverl.io.tracking import Tracking

# Trace tags (strings; MLflow compares tags with =, LIKE and RLIKE only).
TAG_TENANT = "liverl.tenant_id"
TAG_SESSION = "liverl.session_id"
TAG_TRAJECTORY = "liverl.trajectory_id"
TAG_AGENT_ROLE = "liverl.agent_role"
TAG_TASK_FAMILY = "liverl.task_family"
TAG_BATCH = "liverl.batch_id"
TAG_TABLE_VERSION = "liverl.table_version"  # the trajectory-table version that committed the trajectory
TAG_POLICY_VERSIONS = "liverl.policy_versions"  # "3,4": every version that served a call, oldest first
POLICY_VERSION_TAG_PREFIX = "liverl.policy_version."  # one tag per serving version: exact search by version
TAG_COMPLETE = "liverl.trace_complete"  # written last: spans and assessments are all there

# Registry version tag: the search expression of the traces of the data the version was trained on.
TAG_TRAINING_TRACES = "liverl.training_traces"

MAX_TAG_VALUE_CHARS = 5000  # MLflow's limit on a model-version tag value


@dataclass(frozen=True)
class SpanRecord:
    """One span; `key` and `parent` name spans within the trace (ids are derived from them)."""

    key: str
    name: str
    start_ms: int
    end_ms: int
    span_type: str = "UNKNOWN"  # mlflow.entities.SpanType: AGENT, CHAIN, LLM, TOOL, ...
    parent: str | None = None  # None: the root span
    inputs: Any = None
    outputs: Any = None
    attributes: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None  # the span failed (a broken tool call, a tool error)


@dataclass(frozen=True)
class AssessmentRecord:
    """A Feedback assessment: from code (a reward component) or a human (feedback the product recorded)."""

    name: str
    value: float | bool | str
    source_type: str = "CODE"  # "CODE" | "HUMAN" | "LLM_JUDGE"
    source_id: str = "liverl"
    rationale: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    time_ms: int | None = None
    span: str | None = None  # key of the span it judges; None: the whole trace


@dataclass(frozen=True)
class TraceRecord:
    key: str  # deterministic and unique on the server (with the experiment): the trace id derives from it
    name: str
    spans: list[SpanRecord]  # the root first
    tags: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # e.g. mlflow.trace.session, mlflow.trace.user
    assessments: list[AssessmentRecord] = field(default_factory=list)
    request_preview: str = ""
    response_preview: str = ""


def trace_id_for(experiment_id: str, key: str) -> str:
    """MLflow's "tr-<32 hex>" id of the trace `key` in the experiment (the OpenTelemetry trace id, in hex)."""
    return "tr-" + hashlib.sha256(json.dumps([experiment_id, key]).encode()).hexdigest()[:32]


class TraceStore:
    """Traces on one MLflow server, through its tracing client (no process-global tracer or tracking URI)."""

    def __init__(self, tracking: Tracking):
        from mlflow.tracing.client import TracingClient

        self.tracking = tracking
        self.client = TracingClient(tracking.tracking_uri)

    def is_complete(self, trace_id: str) -> bool:
        info = self.tracking.lookup(f"reading trace {trace_id}", lambda: self.client.get_trace_info(trace_id))
        return info is not None and info.tags.get(TAG_COMPLETE) == "true"

    def write(self, experiment_id: str, trace: TraceRecord) -> tuple[str, bool]:
        """(trace id, whether it was written now); a complete trace already there is left as it is.

        Three calls per trace: is it complete, its spans, and its info with every assessment. The assessments ride
        on the info (MLflow merges them by id), each with an id derived from the trace and its name and span, so
        a repeated write after a crash merges the same rows instead of adding copies."""
        trace_id = trace_id_for(experiment_id, trace.key)
        if self.is_complete(trace_id):
            return trace_id, False
        spans = [_mlflow_span(trace_id, span) for span in trace.spans]
        self.tracking.answer(f"logging the spans of trace {trace_id}",
                             lambda: self.client.log_spans(experiment_id, spans))  # an upsert: safe to repeat
        info = _trace_info(experiment_id, trace_id, trace)
        info.assessments = [_feedback(trace_id, record) for record in trace.assessments]
        self.tracking.answer(f"finishing trace {trace_id}", lambda: self.client.start_trace(info))
        return trace_id, True

    def delete(self, experiment_id: str, trace_ids: list[str]) -> int:
        """Delete these traces of the experiment (spans, tags and assessments with them); returns how many."""
        deleted = 0
        for start in range(0, len(trace_ids), 100):
            chunk = trace_ids[start:start + 100]
            deleted += self.tracking.answer(f"deleting {len(chunk)} traces",
                                            lambda: self.client.delete_traces(experiment_id, trace_ids=chunk)) or 0
        return deleted

    def search(self, experiment_id: str, filter_string: str, max_results: int = 1000,
               include_spans: bool = False) -> list:
        """Every trace of the experiment matching filter_string (MLflow's search syntax), all pages."""
        found, token = [], None
        while True:
            page = self.tracking.answer(
                f"searching traces for {filter_string!r}",
                lambda: self.client.search_traces(locations=[experiment_id], filter_string=filter_string,
                                                  max_results=min(max_results, 500), page_token=token,
                                                  include_spans=include_spans))
            found.extend(page)
            token = page.token
            if not token or len(found) >= max_results:
                return found[:max_results]


# ---- search expressions ------------------------------------------------------------------------------

def policy_version_tag(version: str) -> str:
    return POLICY_VERSION_TAG_PREFIX + str(version)


def traces_filter(task_family: str | None = None, policy_version: str | None = None, tenant: str | None = None,
                  batch_id: str | None = None) -> str:
    """An MLflow trace search expression over liverl's tags; add feedback clauses for rewards, e.g.
    traces_filter(task_family="coding", policy_version="7") + " AND feedback.`reward.outcome` < 0.2"."""
    clauses = [f"tags.`{TAG_COMPLETE}` = 'true'"]
    for tag, value in ((TAG_TASK_FAMILY, task_family), (TAG_TENANT, tenant), (TAG_BATCH, batch_id)):
        if value is not None:
            clauses.append(f"tags.`{tag}` = {_quoted(value)}")
    if policy_version is not None:
        clauses.append(f"tags.`{policy_version_tag(policy_version)}` = 'true'")
    return " AND ".join(clauses)


def table_versions_filter(table_versions: Iterable[int]) -> str:
    """The expression finding the traces of trajectories committed in exactly these table versions."""
    versions = sorted({int(v) for v in table_versions})
    if not versions:
        return f"tags.`{TAG_TABLE_VERSION}` = 'none'"  # a base policy: trained on no table version
    return f"tags.`{TAG_TABLE_VERSION}` RLIKE '^({integers_regex(versions)})$'"


def training_traces_tag(table_versions: Iterable[int]) -> dict[str, str]:
    """The registry version tag linking a version to its training data's traces (add to its lineage tags).

    Exact for any realistic lineage (a training window is a few contiguous runs of table versions); a list
    too scattered for one tag value falls back to its covering range, a superset, rather than failing a
    registration over an audit link."""
    versions = sorted({int(v) for v in table_versions})
    expression = table_versions_filter(versions)
    if len(expression) > MAX_TAG_VALUE_CHARS:
        expression = table_versions_filter(range(versions[0], versions[-1] + 1))
    return {TAG_TRAINING_TRACES: expression}


def integers_regex(values: Iterable[int]) -> str:
    """An alternation matching exactly these non-negative integers (runs collapse into digit ranges), no anchors."""
    values = sorted({int(v) for v in values})
    if any(v < 0 for v in values):
        raise ValueError(f"table versions are non-negative, got {values[0]}")
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return "|".join(part for low, high in runs for part in _range_regex(low, high))


def _range_regex(low: int, high: int) -> list[str]:
    """Patterns that together match the decimal integers in [low, high] (no leading zeros)."""
    if low > high:
        return []
    if len(str(low)) < len(str(high)):  # split at each power of ten: every part has one digit count
        boundary = 10 ** len(str(low))
        return _range_regex(low, boundary - 1) + _range_regex(boundary, high)
    low_s, high_s = str(low), str(high)
    if low_s == high_s:
        return [low_s]
    common = 0
    while low_s[common] == high_s[common]:
        common += 1
    prefix, rest = low_s[:common], len(low_s) - common - 1  # digits after the first differing one
    low_head, high_head = int(low_s[common]), int(high_s[common])
    if low_s[common + 1:] == "0" * rest and high_s[common + 1:] == "9" * rest:
        return [prefix + _digits(low_head, high_head) + "[0-9]" * rest]
    parts = _range_regex(low, int(prefix + str(low_head) + "9" * rest))  # low .. end of low's head
    if high_head - low_head > 1:
        parts.append(prefix + _digits(low_head + 1, high_head - 1) + "[0-9]" * rest)
    return parts + _range_regex(int(prefix + str(high_head) + "0" * rest), high)


def _digits(low: int, high: int) -> str:
    return str(low) if low == high else f"[{low}-{high}]"


def _quoted(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


# ---- MLflow entities ---------------------------------------------------------------------------------

def _span_id(trace_id: str, key: str) -> str:
    """The span's 16-hex id, derived from the trace id and the span's key."""
    return hashlib.sha256(json.dumps([trace_id, key]).encode()).hexdigest()[:16]


def _mlflow_span(trace_id: str, span: SpanRecord):
    from mlflow.entities import Span
    from mlflow.tracing.constant import SpanAttributeKey
    from mlflow.tracing.utils import build_otel_context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import Status, StatusCode

    otel_trace_id = int(trace_id.removeprefix("tr-"), 16)
    # MLflow stores every span attribute JSON-encoded
    attributes = {SpanAttributeKey.REQUEST_ID: json.dumps(trace_id), SpanAttributeKey.SPAN_TYPE: json.dumps(span.span_type)}
    if span.inputs is not None:
        attributes[SpanAttributeKey.INPUTS] = json.dumps(span.inputs, default=str)
    if span.outputs is not None:
        attributes[SpanAttributeKey.OUTPUTS] = json.dumps(span.outputs, default=str)
    attributes |= {key: json.dumps(value, default=str) for key, value in span.attributes.items()}
    status = Status(StatusCode.ERROR, span.error) if span.error else Status(StatusCode.OK)
    parent = build_otel_context(otel_trace_id, int(_span_id(trace_id, span.parent), 16)) if span.parent else None
    return Span(ReadableSpan(
        name=span.name, context=build_otel_context(otel_trace_id, int(_span_id(trace_id, span.key), 16)),
        parent=parent, start_time=span.start_ms * 1_000_000, end_time=max(span.end_ms, span.start_ms) * 1_000_000,
        attributes=attributes, status=status, resource=Resource.get_empty()))


def assessment_id_for(trace_id: str, name: str, span_id: str | None) -> str:
    """MLflow's "a-<32 hex>" id of an assessment, the same in every write of the trace."""
    return "a-" + hashlib.sha256(json.dumps([trace_id, name, span_id]).encode()).hexdigest()[:32]


def _feedback(trace_id: str, record):
    from mlflow.entities import AssessmentSource, Feedback

    span_id = _span_id(trace_id, record.span) if record.span else None
    feedback = Feedback(name=record.name, value=record.value, rationale=record.rationale, trace_id=trace_id,
                        source=AssessmentSource(source_type=record.source_type, source_id=record.source_id),
                        metadata=dict(record.metadata) or None, span_id=span_id,
                        **({"create_time_ms": record.time_ms} if record.time_ms else {}))
    feedback.assessment_id = assessment_id_for(trace_id, record.name, span_id)
    return feedback


def _trace_info(experiment_id: str, trace_id: str, trace: TraceRecord):
    from mlflow.entities import TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.constant import TraceTagKey

    root = trace.spans[0]
    return TraceInfo(trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment_id),
                     request_time=root.start_ms, execution_duration=max(root.end_ms - root.start_ms, 0),
                     state=TraceState.OK, request_preview=trace.request_preview[:1000],
                     response_preview=trace.response_preview[:1000], client_request_id=trace.key,
                     trace_metadata=dict(trace.metadata),
                     tags={TraceTagKey.TRACE_NAME: trace.name, **trace.tags, TAG_COMPLETE: "true"})
