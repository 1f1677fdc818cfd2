"""`liverl topics`: records decoded from the contracts as JSON lines, filtered by tenant and session."""

from __future__ import annotations

import argparse
import contextlib
import io
import json

import pytest

from liverl.contracts import names


def event(event_id: str, tenant: str, session: str, text: str):
    from liverl.v1 import session_event_pb2

    return session_event_pb2.SessionEvent(event_id=event_id, tenant_id=tenant, session_id=session, schema_version=1,
                                          event_time_ms=1767225600000, user_message={"text": text})


@pytest.fixture
def published(fresh_topics):
    """Five events (one undecodable), a model call and a dead letter on the test's own topics."""
    from kafka import KafkaProducer

    from liverl.v1 import model_call_pb2

    kafka = fresh_topics.kafka
    producer = KafkaProducer(**kafka.client_kwargs(), acks="all")
    events = [event("e1", "acme", "s1", "first"), event("e2", "acme", "s1", "second"),
              event("e3", "globex", "s1", "other tenant"), event("e4", "acme", "s2", "other session")]
    for message in events:
        producer.send(kafka.session_events_topic, key=f"{message.tenant_id}/{message.session_id}".encode(),
                      value=message.SerializeToString(), headers=[(names.HEADER_TENANT, message.tenant_id.encode())])
    producer.send(kafka.session_events_topic, key=b"acme/s1", value=b"\xff\xffnot protobuf",
                  headers=[(names.HEADER_TENANT, b"acme")])
    call = model_call_pb2.ModelCall(event_id="c1", tenant_id="acme", session_id="s1", prompt_token_ids=[1, 2],
                                    completion_token_ids=[3], origin="import:otlp")
    producer.send(kafka.model_calls_topic, key=b"acme/s1", value=call.SerializeToString())
    producer.send(kafka.dead_letters_topic, key=b"acme/s1", value=json.dumps(
        {"reason": "invalid_schema", "tenant_id": "acme", "session_id": "s1", "payload_b64": ""}).encode())
    producer.flush()
    producer.close()
    return fresh_topics


def topics(config, *argv: str) -> list[dict]:
    from infra.commands import topics as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert command.run(config, parser.parse_args(list(argv))) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_events_are_printed_as_json_lines_with_their_place(published):
    lines = topics(published, "events")
    assert len(lines) == 5
    first = next(line for line in lines if line["value"].get("event_id") == "e1")
    assert first["topic"] == published.kafka.session_events_topic and first["key"] == "acme/s1"
    assert first["headers"] == {names.HEADER_TENANT: "acme"} and isinstance(first["offset"], int)
    assert first["value"]["user_message"] == {"text": "first"}
    broken = [line for line in lines if "undecodable" in line["value"]]
    assert len(broken) == 1 and broken[0]["value"]["value_b64"]


def test_tenant_and_session_filters(published):
    lines = topics(published, "events", "--tenant", "acme", "--session", "s1")
    assert sorted(line["value"].get("event_id", "undecodable") for line in lines) == ["e1", "e2", "undecodable"]
    assert {line["value"]["event_id"] for line in topics(published, "events", "--tenant", "globex")} == {"e3"}
    assert {line["value"]["event_id"] for line in topics(published, "events", "--session", "s2")} == {"e4"}


def test_aliases_decode_each_topics_contract(published):
    [call] = topics(published, "calls", "--tenant", "acme")
    assert call["value"]["origin"] == "import:otlp"
    # token ids are the user's exact text: counted, never printed
    assert call["value"]["prompt_token_ids"] == "[NOT SHOWN: 2 token ids, the user's exact text]"
    assert call["value"]["completion_token_ids"] == "[NOT SHOWN: 1 token ids, the user's exact text]"
    [dead] = topics(published, "dead-letters")
    assert dead["value"]["reason"] == "invalid_schema"
    assert topics(published, published.kafka.model_calls_topic, "--tenant", "globex") == []


def test_start_positions_and_max(published):
    everything = topics(published, "events", "--from-beginning")
    by_partition: dict[int, list[int]] = {}
    for line in everything:
        by_partition.setdefault(line["partition"], []).append(line["offset"])
    tail = topics(published, "events", "--tail", "1")
    assert sorted((line["partition"], line["offset"]) for line in tail) == sorted(
        (partition, max(offsets)) for partition, offsets in by_partition.items())
    late = topics(published, "events", "--from-offset", "1")
    assert len(late) == len(everything) - len(by_partition)
    assert len(topics(published, "events", "--max", "2")) == 2


def test_unknown_topic_says_what_to_use(published):
    with pytest.raises(ValueError, match="does not exist"):
        topics(published, "no-such-topic")


def test_a_session_stored_under_its_pseudonym_is_found_by_the_id_the_product_knows(fresh_topics):
    from kafka import KafkaProducer

    from liverl.contracts.keys import session_key
    from liverl.privacy import tenant_redactor

    pseudonym = tenant_redactor(fresh_topics, "acme").redact_id("conv-dave@example.com")  # under acme's key
    assert pseudonym.startswith("redacted-email-")
    kafka = fresh_topics.kafka
    producer = KafkaProducer(**kafka.client_kwargs(), acks="all")
    producer.send(kafka.session_events_topic, key=session_key("acme", pseudonym),
                  value=event("p1", "acme", pseudonym, "hi").SerializeToString())
    producer.flush()
    producer.close()
    for asked in ("conv-dave@example.com", pseudonym):
        [line] = topics(fresh_topics, "events", "--session", asked)
        assert line["value"]["event_id"] == "p1" and "dave@example.com" not in json.dumps(line)
