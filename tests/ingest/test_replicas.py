"""Two capture replicas behind a round-robin client, on the real broker: a session's events arrive at
either replica in any order and each is stored once, in the order it was accepted, in one partition."""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator

import grpc
import httpx
import pytest
from google.protobuf import json_format

from ingest.sdk.sender import _frame
from liverl.v1 import capture_pb2, session_event_pb2
from tests.conftest import stored_key
from tests.ingest.conftest import capture_config, events_of, read_topic

AUTH = (("authorization", "Bearer acme-token"),)
KINDS = ["user_message", "tool_call", "tool_result", "summary", "outcome"]


def replica_configs(base, tmp_path, count: int, **ingest) -> list:
    configs = [capture_config(base, tmp_path / f"replica-{i}", replica_token="peer-secret", **ingest)
               for i in range(count)]
    addresses = [f"{c.ingest.host}:{c.ingest.grpc_port}" for c in configs]
    for config in configs:
        config.ingest.replicas = addresses
    return configs


@pytest.fixture
def replicas(fresh_topics, tmp_path) -> Iterator[list]:
    from ingest.service import CaptureServer

    servers = [CaptureServer(config) for config in replica_configs(fresh_topics, tmp_path, 2)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def session_events(session_id: str, length: int, rng: random.Random) -> list[session_event_pb2.SessionEvent]:
    """One session as the SDK numbers it (start 0, ..., end last), then shuffled: start last, end first."""
    now_ms = int(time.time() * 1000)
    events = []
    for sequence in range(length):
        event = session_event_pb2.SessionEvent(event_id=uuid.uuid4().hex, session_id=session_id, schema_version=1,
                                               event_time_ms=now_ms + sequence, sequence=sequence, user_id="u1")
        if sequence == 0:
            event.session_start.task_family = "coding"
        elif sequence == length - 1:
            event.session_end.reason = "completed"
        else:
            kind = KINDS[sequence % len(KINDS)]
            getattr(event, kind).SetInParent()
            if kind == "user_message":
                event.user_message.text = f"step {sequence}"
        events.append(event)
    start, end, middle = events[0], events[-1], events[1:-1]
    rng.shuffle(middle)
    return [end, *middle, start]


class RoundRobin:
    """Sends one event per request, to each endpoint in turn: both replicas, over gRPC and HTTP."""

    def __init__(self, servers):
        self.endpoints = []
        for server in servers:
            call = grpc.insecure_channel(server.grpc_address).unary_unary(
                "/liverl.v1.CaptureService/Capture", request_serializer=None,
                response_deserializer=capture_pb2.CaptureResponse.FromString)
            self.endpoints.append(("grpc", call))
        self.http = httpx.Client(headers={"authorization": "Bearer acme-token"}, timeout=30)
        for server in servers:
            self.endpoints.append(("http", f"http://{server.http_address}/v1/capture"))
        self.turn = 0

    def send(self, event, endpoint: int | None = None) -> tuple[int, list[str]]:
        """(accepted, rejection reasons) of one event."""
        api, target = self.endpoints[self.turn % len(self.endpoints) if endpoint is None else endpoint]
        self.turn += 1
        if api == "grpc":
            answer = target(_frame(event.SerializeToString()), metadata=AUTH, timeout=30)
            return answer.accepted, [r.reason for r in answer.rejected]
        answer = self.http.post(target, json={"events": [json_format.MessageToDict(event)]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        return body["accepted"], [r["reason"] for r in body["rejected"]]


def owned_by_both(ring, count: int) -> list[str]:
    """Session ids s0, s1, ... of which each replica owns at least one: ownership hashes the replicas'
    addresses, which hold the ports this run picked, so a fixed list could land on one replica alone."""
    session_ids = [f"s{i}" for i in range(count)]
    spare = count
    while len({ring.owner_of("acme", session_id) for session_id in session_ids}) < len(ring.replicas):
        session_ids[-1] = f"s{spare}"
        spare += 1
    return session_ids


def test_round_robin_replicas_store_each_event_once_in_acceptance_order(replicas):
    config = replicas[0].config
    rng = random.Random(7)
    client = RoundRobin(replicas)
    sent: dict[str, list[str]] = defaultdict(list)  # session -> event ids in the order they were accepted
    by_session = {session_id: session_events(session_id, 7, rng) for session_id in owned_by_both(replicas[0].ring, 8)}
    turns = [session_id for session_id, events in by_session.items() for _ in events]
    rng.shuffle(turns)  # sessions interleave too; within one session the order is session_events'
    order = {session_id: iter(events) for session_id, events in by_session.items()}
    for session_id in turns:
        event = next(order[session_id])
        assert client.send(event) == (1, []), f"{session_id} seq {event.sequence} refused"
        sent[session_id].append(event.event_id)
    # a retry to the other replica, after a lost answer: acknowledged again, stored once
    resent = [by_session["s0"][0], by_session["s1"][2], by_session["s2"][-1]]
    for endpoint, event in enumerate(resent):
        assert client.send(event, endpoint=endpoint % 2) == (1, [])
        assert client.send(event, endpoint=1 - endpoint % 2) == (1, [])

    total = sum(len(ids) for ids in sent.values())
    records = read_topic(config, config.kafka.session_events_topic, want=total)
    assert len(records) == total  # none rejected, none stored twice
    assert len({(r.key.split(b"/")[0], e.event_id) for r, e in zip(records, events_of(records))}) == total
    stored: dict[str, list[str]] = defaultdict(list)
    partitions = defaultdict(set)
    for record, event in sorted(zip(records, events_of(records)), key=lambda pair: (pair[0].partition, pair[0].offset)):
        assert record.key == stored_key(config, "acme", event.session_id)
        stored[event.session_id].append(event.event_id)
        partitions[event.session_id].add(record.partition)
    assert all(len(p) == 1 for p in partitions.values())  # one session, one partition
    assert stored == sent  # per session, in the order the replicas accepted them
    forwarded = [server.metrics.registry.get_sample_value("liverl_ingest_events_forwarded_total",
                                                          {"owner": other.ring.own_address}) or 0
                 for server, other in (replicas, replicas[::-1])]
    assert all(count > 0 for count in forwarded), forwarded  # each replica owns some sessions


def test_session_rules_hold_across_replicas(replicas):
    rng = random.Random(11)
    client = RoundRobin(replicas)
    events = sorted(session_events("closed", 4, rng), key=lambda e: e.sequence)
    for index, event in enumerate(events):
        assert client.send(event, endpoint=index % 2) == (1, [])
    after_end = session_event_pb2.SessionEvent(event_id="late-call", session_id="closed", schema_version=1,
                                               event_time_ms=int(time.time() * 1000), sequence=9)
    after_end.tool_call.name = "edit"
    feedback = session_event_pb2.SessionEvent(event_id="late-feedback", session_id="closed", schema_version=1,
                                              event_time_ms=int(time.time() * 1000), sequence=10)
    feedback.feedback.kind = session_event_pb2.FEEDBACK_KIND_THUMBS_UP  # an unspecified kind is refused
    feedback.feedback.value = 1.0
    never_started = session_event_pb2.SessionEvent(event_id="orphan", session_id="orphan", schema_version=1,
                                                   event_time_ms=int(time.time() * 1000))
    never_started.user_message.text = "hi"
    for endpoint in (0, 1):
        assert client.send(after_end, endpoint=endpoint) == (0, ["closed_session"])
        assert client.send(never_started, endpoint=endpoint) == (0, ["unknown_session"])
    assert client.send(feedback, endpoint=0) == (1, [])


def test_events_of_an_unreachable_owner_are_answered_resend(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    configs = replica_configs(fresh_topics, tmp_path, 2, replica_forward_timeout_s=2.0)
    alive = CaptureServer(configs[0]).start()  # the other replica never starts
    try:
        rng = random.Random(3)
        client = RoundRobin([alive])
        for i in range(20):
            session_id = f"s{i}"
            start = session_events(session_id, 2, rng)[-1]
            accepted, reasons = client.send(start, endpoint=0)
            if alive.ring.owner_of("acme", session_id) == alive.ring.own_address:
                assert (accepted, reasons) == (1, [])
            else:
                assert (accepted, reasons) == (0, ["deadline_exceeded"])  # not stored: the SDK resends it
    finally:
        alive.stop()


def test_several_replicas_need_their_shared_secret(fresh_topics, tmp_path):
    from ingest.service import CaptureServer

    config = replica_configs(fresh_topics, tmp_path, 2)[0]
    config.ingest.replica_token = ""
    with pytest.raises(ValueError, match="ingest.replica_token"):
        CaptureServer(config)
