"""Refused events are erased with their user: `liverl forget --user` leaves their dead letters unreadable.

A refused event's dead letter carries its user as the keyed pseudonym, is sealed under its session's key and
that session is linked to the user like an accepted event's, so forgetting the user destroys the key; another
user's dead letters still open, and a forgotten user's later refused events leave nothing readable at all.
Read back through `liverl topics dead-letters`' own reader, on the real broker and key store.
"""

from __future__ import annotations

import base64
import json
import time

import httpx

from infra.commands.forget import forget
from liverl.privacy import key_store
from liverl.privacy.pseudonyms import Pseudonyms
from tests.infra.test_topics import topics
from tests.ingest.conftest import capture_config

ALICE, BOB = "alice-7731", "bob-4410"
MARKER_A, MARKER_B = "wombat-marker-5521", "numbat-marker-6632"
ACME = {"authorization": "Bearer acme-token"}
DAY_MS = 24 * 3600 * 1000


def erasable_config(base, tmp_path):
    """A capture config whose key store, audit log, tables and spool are the test's own."""
    config = capture_config(base, tmp_path / "spool")
    config.privacy.keys_dir = tmp_path / "keys"
    config.privacy.audit_log = tmp_path / "audit.jsonl"
    config.table.trajectories_uri = str(tmp_path / "trajectories")
    config.table.dead_letters_uri = str(tmp_path / "dead-letters")
    return config


def event(event_id: str, session: str, user: str, text: str, at_ms: int) -> dict:
    return {"eventId": event_id, "sessionId": session, "userId": user, "schemaVersion": 1, "eventTimeMs": at_ms,
            "userMessage": {"text": text}}


def post(config, events: list[dict]) -> dict:
    from ingest.service import CaptureServer

    server = CaptureServer(config).start()
    try:
        answer = httpx.post(f"http://{server.http_address}/v1/capture", json={"events": events}, headers=ACME,
                            timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()
    finally:
        server.stop()


def dead_letters(config) -> list[dict]:
    """Every dead letter as `liverl topics dead-letters` prints it, its payload decoded to text."""
    lines = topics(config, "dead-letters")
    for line in lines:
        payload = line["value"].get("payload_b64")
        line["payload"] = base64.b64decode(payload).decode("utf-8", "replace") if payload else ""
    return lines


def readable(lines: list[dict], text: str) -> list[dict]:
    return [line for line in lines if text in json.dumps(line, ensure_ascii=False)]


def test_forgetting_a_user_leaves_their_refused_events_unreadable_and_others_open(fresh_topics, tmp_path):
    config = erasable_config(fresh_topics, tmp_path)
    now_ms = int(time.time() * 1000)
    skewed = now_ms + DAY_MS  # far past ingest.max_future_skew_s
    reply = post(config, [
        event("a-1", "conv-alice", ALICE, f"{MARKER_A} skewed", skewed),
        {**event("a-2", "conv-alice-2", ALICE, f"{MARKER_A} mistyped", now_ms), "eventTimeMs": "soon"},  # no parse
        event("a-3", "", ALICE, f"{MARKER_A} without a session", now_ms),  # session_id is required
        event("b-1", "conv-bob", BOB, f"{MARKER_B} skewed", skewed),
    ])
    reasons = {r["index"]: r["reason"] for r in reply["rejected"]}
    assert len(reasons) == 4 and reasons[0] == reasons[3] == "clock_skew" and reasons[1] != "clock_skew", reply

    before = dead_letters(config)
    alice = Pseudonyms(key_store(config)).user("acme", ALICE)
    assert len(before) == 4 and not readable(before, ALICE)  # the raw user id never reaches Kafka
    assert len(readable(before, MARKER_A)) == 3 and len(readable(before, alice)) == 3  # the pseudonym instead
    assert all(line["headers"].get("liverl-sealed") for line in before)  # sealed under their sessions' keys

    forget(config, "acme", user=ALICE)

    after = dead_letters(config)
    assert len(after) == 4
    assert not readable(after, MARKER_A) and not readable(after, ALICE) and not readable(after, alice)
    assert sum("erased" in line["value"] for line in after) == 3
    (bob,) = readable(after, MARKER_B)  # another user's refused event still opens
    assert bob["value"]["reason"] == "clock_skew" and bob["value"]["session_id"] == "conv-bob"

    # After the erasure, the forgotten user's refused events are dropped like the valid ones: nothing is kept
    reply = post(config, [event("a-4", "conv-alice-3", ALICE, f"{MARKER_A} again", skewed),
                          {**event("a-5", "conv-alice-3", ALICE, f"{MARKER_A} again", now_ms), "eventTimeMs": "x"}])
    assert reply["droppedOptOut"] == 2 and not reply["rejected"], reply
    assert not readable(dead_letters(config), MARKER_A)


def test_a_refused_session_start_over_otlp_dead_letters_its_model_calls_under_the_session(fresh_topics, tmp_path,
                                                                                         tiny_policy_dir):
    from ingest.service import CaptureServer
    from tests.ingest.test_otlp_endpoint import _attribute, _chat, _request

    config = erasable_config(fresh_topics, tmp_path)
    config.ingest.otlp_tokenizer_dir = tiny_policy_dir
    server = CaptureServer(config).start()
    try:
        span = _chat("01" * 8, time.time() + 2 * DAY_MS / 1000, "hello", conversation="conv-otlp-alice")  # skewed
        span["attributes"].append(_attribute("user.id", ALICE))
        answer = httpx.post(f"http://{server.http_address}/v1/traces", json=_request(span), headers=ACME)
        assert answer.status_code == 200 and answer.json()["partialSuccess"]["rejectedSpans"] != "0", answer.text
    finally:
        server.stop()
    before = dead_letters(config)
    session = {"acme/conv-otlp-alice", f"acme/{Pseudonyms(key_store(config)).session('acme', 'conv-otlp-alice')}"}
    assert before and all(line["key"] in session for line in before), before  # the model calls' too
    forget(config, "acme", user=ALICE)
    assert all("erased" in line["value"] for line in dead_letters(config))


def test_a_refused_events_oversized_or_unprintable_user_id_is_neither_hashed_nor_kept(fresh_topics, tmp_path):
    """A user id refused for its form never reaches a dead letter (it names nobody that can be linked or erased)
    and no id refused for its form keys one; the letter keeps the event's content, redacted and sealed."""
    config = erasable_config(fresh_topics, tmp_path)
    now_ms = int(time.time() * 1000)
    huge, unprintable = "u" * 5000, "dave\nforged-line"
    reply = post(config, [event("h-1", "conv-huge", huge, f"{MARKER_A} huge user", now_ms),
                          event("h-2", "s" * 5000, ALICE, f"{MARKER_A} huge session", now_ms),
                          event("h-3", "conv-nl", unprintable, f"{MARKER_A} unprintable user", now_ms)])
    assert len(reply["rejected"]) == 3, reply
    lines = dead_letters(config)
    assert len(lines) == 3
    text = json.dumps(lines, ensure_ascii=False)
    assert huge not in text and "forged-line" not in text
    assert all(len(line["key"] or "") < 100 for line in lines)


def test_ids_refused_for_their_form_are_never_hashed_into_the_caches(tmp_path):
    """A client could otherwise fill the pseudonym and link caches with ids of any length before validation."""
    from ingest.subjects import CaptureSubjects
    from liverl.privacy.keystore import FileKeyStore
    from liverl.v1.session_event_pb2 import SessionEvent

    store = FileKeyStore(tmp_path / "keys")
    pseudonyms = Pseudonyms(store)
    subjects = CaptureSubjects(store, pseudonyms)
    for bad in ("u" * 5000, "dave\nforged"):
        assert not subjects.forgotten_user("acme", bad, frozenset({"u-anything"}))
        _, user, session = subjects.of_refused("acme", None, SessionEvent(user_id=bad, session_id=bad))
        assert user == "" and session == ""
        item, user, session = subjects.of_refused("acme", {"userId": bad, "sessionId": bad}, None)
        assert user == "" and session == "" and "userId" not in item
    assert not any(len(value) > 256 for keyed in pseudonyms._tenants.values() for _, value in keyed.made)
