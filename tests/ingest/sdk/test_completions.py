"""Serving's replies link straight into the SDK: ids read from any shape, one-call sessions made trainable."""

from __future__ import annotations

import time

import pytest

from ingest.sdk import CaptureClient, FeedbackKind
from ingest.sdk.completions import completion_ref, fixed_event_id, request_id_of
from tests.ingest.conftest import events_of, read_topic


class Reply:  # the shape of the `openai` client's reply: fields, unknown ones in model_extra
    def __init__(self, body: dict):
        self.id, self.created = body["id"], body.get("created")
        self.model_extra = {"liverl": body["liverl"]} if "liverl" in body else {}


class GrpcResponse:
    request_id = "req-7"


def test_ids_are_read_from_every_shape_a_product_holds():
    one_call = {"id": "chatcmpl-1", "created": 1_700_000_000,
                "liverl": {"request_id": "chatcmpl-1", "session_id": "chatcmpl-1"}}
    named = {"id": "chatcmpl-2", "liverl": {"request_id": "chatcmpl-2", "session_id": "s-9"}}
    assert completion_ref(one_call) == completion_ref(Reply(one_call))
    assert completion_ref(one_call).one_call and completion_ref(one_call).created_ms == 1_700_000_000_000
    assert (completion_ref(named).session_id, completion_ref(named).one_call) == ("s-9", False)
    assert completion_ref("cmpl-3").session_id == "cmpl-3"
    assert request_id_of(GrpcResponse()) == "req-7" and request_id_of("r-1") == "r-1"
    assert request_id_of(Reply(named)) == "chatcmpl-2" == request_id_of({"id": "chatcmpl-2"})
    with pytest.raises(ValueError, match="request_id=reply"):
        completion_ref({"object": "list"})
    assert fixed_event_id("chatcmpl-1", "start") == fixed_event_id("chatcmpl-1", "start") != fixed_event_id(
        "chatcmpl-2", "start")


def test_feedback_on_a_one_call_reply_stores_its_start_feedback_and_end_once(capture, tmp_path):
    config = capture.config
    created = int(time.time()) - 5
    reply = {"id": "chatcmpl-abc", "created": created,
             "liverl": {"request_id": "chatcmpl-abc", "session_id": "chatcmpl-abc"}}
    client = CaptureClient(capture.grpc_address, "acme-token", tmp_path / "sdk")
    try:
        client.feedback(reply, FeedbackKind.THUMBS_UP)
        client.feedback("chatcmpl-abc", FeedbackKind.RATING, value=0.5)  # the bare id: the same session
        named = client.link_completion({"id": "chatcmpl-x", "liverl": {"request_id": "chatcmpl-x",
                                                                       "session_id": "s-named"}}, task_family="qa")
        call = named.tool_call("search", "{}", request_id=Reply({"id": "chatcmpl-x"}))
        named.end()
        assert client.link_completion("chatcmpl-x") is not named  # another session: the bare id is its own
        assert client.flush(timeout_s=30), client.stats()
        stats = client.stats()
    finally:
        client.close()
    assert stats["rejected"] == 0, stats
    events = events_of(read_topic(config, config.kafka.session_events_topic, want=8))
    mine = [e for e in events if e.session_id == "chatcmpl-abc"]
    assert [e.WhichOneof("body") for e in mine] == ["session_start", "feedback", "session_end", "feedback"]
    assert mine[0].event_id == fixed_event_id("chatcmpl-abc", "start") and mine[0].event_time_ms == created * 1000
    assert all(e.tenant_id == "acme" for e in mine)  # the token's tenant
    linked = [e for e in events if e.session_id == "s-named"]
    assert [e.WhichOneof("body") for e in linked] == ["session_start", "tool_call", "session_end"]
    assert linked[0].session_start.task_family == "qa"
    assert linked[1].tool_call.request_id == "chatcmpl-x" and linked[1].tool_call.call_id == call
