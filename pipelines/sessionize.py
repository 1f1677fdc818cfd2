"""Sessionize: decide, per session, whether it is ready to distill, still pending, or receiving late events.

A session is READY once its end event is `reward_horizon` old (delayed feedback such as "edit kept an
hour later" has had time to arrive) or once it has been idle for `idle_timeout`. Until then its raw
records are PENDING: they go to the batch's pending-state file, committed with the batch, and are
re-read by the next batch, so a session spanning batches is emitted exactly once. Once emitted (or
dead-lettered), a session is CLOSED; records arriving for a closed session are LATE: counted and sent
to the dead-letter table with reason "late_event" (payload = the raw record, so a correction pass can
replay them). The horizon is the knob that trades freshness for complete rewards.

Everything here is per session KEY (tenant id, session id): grouping, de-duplication (event ids are unique
per tenant, not globally), the closed set and late events, so tenants sharing a session id stay apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import apache_beam as beam

from liverl.rewards.session import SessionRecord
from pipelines import dead_letters
from pipelines.parse import EVENT, Parsed, opener, parse_record
from pipelines.records import RawRecord

READY = "ready"
PENDING = "pending"
CLOSED = "closed"
DEAD = "dead"


@dataclass(frozen=True)
class Timing:
    """The batch's clock and the readiness rules, fixed in the batch plan so a re-run decides the same."""

    as_of_ms: int
    reward_horizon_ms: int
    idle_timeout_ms: int
    late_event_retention_ms: int


SessionKey = tuple[str, str]  # (tenant id, session id): a session's identity (docs/architecture.md, contract 1)


@dataclass
class Decision:
    key: SessionKey
    status: str  # READY | PENDING | CLOSED (nothing new, or only late records) | DEAD
    session: SessionRecord | None = None
    pending: list[RawRecord] = field(default_factory=list)
    dead: list[dict] = field(default_factory=list)
    closed_at_ms: int | None = None  # keep the session in the closed set, closed at this time
    duplicates: int = 0
    late_events: int = 0


def dedupe(parsed: list[Parsed]) -> tuple[list[Parsed], list[Parsed], int]:
    """(events, model calls, duplicates dropped): the first copy in log order wins, per kind and event id.

    `parsed` is one session's records, so one tenant's: another tenant's equal event id is never a duplicate.
    """
    seen: set[tuple[str, str]] = set()
    events, calls, duplicates = [], [], 0
    for item in sorted(parsed, key=lambda p: (p.record.topic, p.record.partition, p.record.offset)):
        identity = (item.kind, item.event_id)
        if identity in seen:
            duplicates += 1
            continue
        seen.add(identity)
        (events if item.kind == EVENT else calls).append(item)
    return events, calls, duplicates


def decide(key: SessionKey, parsed: list[Parsed], closed_at: list[int], timing: Timing) -> Decision:
    tenant_id, session_id = key
    strays = [item for item in parsed if item.session_key != key]
    if strays:  # the grouping guarantees one key per group; anything else is a bug, never a silent merge
        raise ValueError(f"session {key} was grouped with records of {sorted({i.session_key for i in strays})}")
    events, calls, duplicates = dedupe(parsed)
    if closed_at:
        closed = max(closed_at)
        late = [dead_letters.record_dead_letter(
                    dead_letters.LATE_EVENT, f"{item.kind} {item.event_id} arrived after its session was emitted",
                    item.record, tenant_id, session_id) for item in events + calls]
        keep = closed if timing.as_of_ms - closed <= timing.late_event_retention_ms else None
        return Decision(key, CLOSED, dead=late, closed_at_ms=keep, duplicates=duplicates, late_events=len(late))
    if not _ready(events, calls, timing):
        return Decision(key, PENDING, pending=[item.record for item in events + calls], duplicates=duplicates)
    record = SessionRecord(
        session_id=session_id,
        tenant_id=tenant_id,
        events=tuple(item.message for item in sorted(
            events, key=lambda p: (p.message.event_time_ms, p.message.sequence, p.record.offset))),
        model_calls=tuple(item.message for item in sorted(
            calls, key=lambda p: (p.message.request_time_ms, p.record.offset))),
    )
    problem = _unbuildable(record)
    if problem:
        reason, message = problem
        letter = dead_letters.session_dead_letter(reason, message, tenant_id, session_id, summarize(record))
        return Decision(key, DEAD, dead=[letter], closed_at_ms=timing.as_of_ms, duplicates=duplicates)
    return Decision(key, READY, session=record, closed_at_ms=timing.as_of_ms, duplicates=duplicates)


def _ready(events: list[Parsed], calls: list[Parsed], timing: Timing) -> bool:
    ends = [_time(item) for item in events if item.message.WhichOneof("body") == "session_end"]
    if ends and timing.as_of_ms >= max(ends) + timing.reward_horizon_ms:
        return True
    last_activity = max(_time(item) for item in events + calls)
    return timing.as_of_ms >= last_activity + timing.idle_timeout_ms


def _time(item: Parsed) -> int:
    """The producer's clock for the record, or the broker's when the producer left it unset."""
    message = item.message
    if item.kind == EVENT:
        stamp = message.event_time_ms
    else:
        stamp = message.finish_time_ms or message.request_time_ms
    return stamp or item.record.timestamp_ms


def _unbuildable(record: SessionRecord) -> tuple[str, str] | None:
    if record.start() is None:
        return dead_letters.MISSING_SESSION_START, "no session_start event: the session's task is unknown"
    if not record.model_calls:
        return dead_letters.NO_MODEL_CALLS, "no ModelCall recorded for this session: nothing to train on"
    return None


def summarize(record: SessionRecord) -> dict:
    """What a dead-letter row keeps of a session: enough to find it again, not the whole transcript."""
    return {"session_id": record.session_id, "tenant_id": record.tenant_id,
            "events": [f"{e.event_id}:{e.WhichOneof('body')}" for e in record.events],
            "model_calls": [f"{c.event_id}:{c.request_id}:{c.agent_id}" for c in record.model_calls]}


class DecideSession(beam.DoFn):
    """((tenant_id, session_id), {"records": [record tuples], "closed": [ms]}) -> READY SessionRecord; tagged
    PENDING raw-record rows, CLOSED closed-session rows and DEAD dead-letter rows."""

    def __init__(self, timing: Timing, events_topic: str, calls_topic: str, keys_dir: str | None = None):
        self._timing = timing
        self._topics = (events_topic, calls_topic)
        self._keys_dir = keys_dir
        self._opener = None
        self.counters = {name: beam.metrics.Metrics.counter("distill", name)
                         for name in ("sessions_ready", "sessions_pending", "sessions_dead", "duplicates",
                                      "late_events")}

    def process(self, element):
        key, grouped = element
        if self._opener is None:
            self._opener = opener(self._keys_dir)
        parsed = [parse_record(RawRecord(*fields), *self._topics, self._opener) for fields in grouped["records"]]
        parsed = [item for item in parsed if item is not None]  # None: erased since it was read
        decision = decide(tuple(key), parsed, list(grouped["closed"]), self._timing)
        self.counters["duplicates"].inc(decision.duplicates)
        self.counters["late_events"].inc(decision.late_events)
        if decision.status == READY:
            self.counters["sessions_ready"].inc()
            yield decision.session
        elif decision.status == PENDING:
            self.counters["sessions_pending"].inc()
        elif decision.status == DEAD:
            self.counters["sessions_dead"].inc()
        for record in decision.pending:
            yield beam.pvalue.TaggedOutput(PENDING, record.to_row())
        for letter in decision.dead:
            yield beam.pvalue.TaggedOutput(DEAD, letter)
        if decision.closed_at_ms is not None:
            tenant_id, session_id = decision.key
            yield beam.pvalue.TaggedOutput(CLOSED, {"tenant_id": tenant_id, "session_id": session_id,
                                                    "closed_at_ms": decision.closed_at_ms})
