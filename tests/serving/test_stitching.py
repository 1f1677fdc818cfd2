"""Sessions stitched without headers (serving.recording.stitching): the stitcher on its own, then through the real HTTP app,
its calls read back from Kafka."""

from __future__ import annotations

import json
import uuid

import openai
import pytest

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from liverl.v1 import session_event_pb2
from serving.recording.stitching import AMBIGUOUS, Stitcher, canonical, link_events, tool_links
from tests.serving.conftest import (
    ServerThread,
    module_topics,
    read_topic,
    recorded_calls,
    register_version,
    serving_config,
)

SYSTEM = {"role": "system", "content": "you fix files"}
ASK = {"role": "user", "content": "fix the null check"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "edit", "arguments": '{"file": "a.py", "line": 3}'}}
ASKED = {"role": "assistant", "content": None, "tool_calls": [CALL]}
ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stitcher(max_per_tenant=100, max_entries=1000, ttl_s=60.0) -> tuple[Stitcher, Clock]:
    clock = Clock()
    return Stitcher(max_per_tenant, max_entries, ttl_s, clock=clock), clock


def _call(stitcher: Stitcher, messages, reply, session: str, request: str, tenant="acme", user=""):
    """A finished call: looked up (its stitch, or None), then remembered under the session it got."""
    conversation = stitcher.conversation(tenant, user, messages)
    found = stitcher.find(conversation)
    stitcher.remember(conversation, reply, found.session_id if found else session, request)
    return found


# -- the stitcher ---------------------------------------------------------------------------------------------


def test_a_call_resending_the_conversation_and_reply_continues_its_session():
    stitcher, _ = _stitcher()
    assert _call(stitcher, [SYSTEM, ASK], ASKED, "s-1", "r-1") is None  # the first call: nothing to continue
    found = _call(stitcher, [SYSTEM, ASK, ASKED, ANSWER], {"role": "assistant", "content": "done"}, "s-2", "r-2")
    assert (found.session_id, found.request_id, found.prefix_messages) == ("s-1", "r-1", 3)
    assert [(link.call_id, link.name, link.output) for link in found.links] == [("call_1", "edit", "ok")]
    done, thanks = {"role": "assistant", "content": "done"}, {"role": "user", "content": "thanks"}
    third = _call(stitcher, [SYSTEM, ASK, ASKED, ANSWER, done, thanks], {"role": "assistant", "content": "np"},
                  "s-3", "r-3")
    assert (third.session_id, third.request_id, third.prefix_messages, third.links) == ("s-1", "r-2", 5, ())


def test_the_same_input_without_the_reply_is_no_continuation():
    stitcher, _ = _stitcher()
    _call(stitcher, [ASK], {"role": "assistant", "content": "hi"}, "s-1", "r-1")
    assert _call(stitcher, [ASK], {"role": "assistant", "content": "hi"}, "s-2", "r-2") is None  # a retry, not a turn


def test_the_canonical_form_ignores_key_order_parts_and_empty_content():
    reordered = {"content": "", "tool_calls": [{"function": {"arguments": '{"line":3,"file":"a.py"}', "name": "edit"},
                                              "type": "function", "id": "call_1"}], "role": "assistant"}
    assert canonical(reordered) == canonical(ASKED)  # None and "" alike; arguments compared as JSON
    assert canonical({"role": "user", "content": "x"}) != canonical({"role": "system", "content": "x"})
    assert canonical({**ANSWER, "tool_call_id": "call_2"}) != canonical(ANSWER)
    stitcher, _ = _stitcher()
    _call(stitcher, [ASK], ASKED, "s-1", "r-1")
    assert _call(stitcher, [dict(reversed(ASK.items())), reordered, ANSWER], ASKED, "s-2", "r-2").session_id == "s-1"


def test_the_longest_remembered_prefix_wins():
    stitcher, _ = _stitcher()
    first = {"role": "assistant", "content": "one"}
    _call(stitcher, [ASK], first, "s-short", "r-1")
    # a call that named its own session (a header) and continued the conversation: remembered under its session
    conversation = stitcher.conversation("acme", "", [ASK, first, {"role": "user", "content": "more"}])
    stitcher.remember(conversation, {"role": "assistant", "content": "two"}, "s-long", "r-2")
    found = _call(stitcher, [ASK, first, {"role": "user", "content": "more"}, {"role": "assistant", "content": "two"},
                             {"role": "user", "content": "go"}], first, "s-3", "r-3")
    assert (found.session_id, found.prefix_messages) == ("s-long", 4)


def test_tenants_and_users_never_stitch_to_each_other():
    stitcher, _ = _stitcher()
    _call(stitcher, [ASK], ASKED, "s-acme", "r-1", tenant="acme", user="u-1")
    assert _call(stitcher, [ASK, ASKED, ANSWER], ASKED, "s-globex", "r-2", tenant="globex", user="u-1") is None
    assert _call(stitcher, [ASK, ASKED, ANSWER], ASKED, "s-other", "r-3", tenant="acme", user="u-2") is None
    assert _call(stitcher, [ASK, ASKED, ANSWER], ASKED, "s-4", "r-4", tenant="acme", user="u-1").session_id == "s-acme"
    assert stitcher.entries.tenant_size("acme") == 3 and stitcher.entries.tenant_size("globex") == 1


def test_a_conversation_left_by_two_sessions_is_ambiguous_and_continues_neither():
    stitcher, _ = _stitcher()
    hello = {"role": "assistant", "content": "hello"}  # two users said the same, the policy answered the same
    _call(stitcher, [ASK], hello, "s-1", "r-1")
    _call(stitcher, [ASK], hello, "s-2", "r-2")
    assert _call(stitcher, [ASK, hello, {"role": "user", "content": "my secret"}], hello, "s-3", "r-3") is None
    assert any(kept.session_id == AMBIGUOUS for kept in stitcher.entries._all.values())
    _call(stitcher, [SYSTEM], hello, "s-4", "r-4")
    _call(stitcher, [SYSTEM], hello, "s-4", "r-5")  # the same session again (a retry): not ambiguous
    assert _call(stitcher, [SYSTEM, hello], hello, "s-5", "r-6").session_id == "s-4"


def test_entries_expire_after_the_ttl():
    stitcher, clock = _stitcher(ttl_s=60.0)
    _call(stitcher, [ASK], ASKED, "s-1", "r-1")
    clock.now += 59
    assert _call(stitcher, [ASK, ASKED, ANSWER], ASKED, "s-2", "r-2").session_id == "s-1"
    clock.now += 61  # the agent was idle longer than the TTL: a new session
    assert _call(stitcher, [ASK, ASKED, ANSWER, ASKED, ANSWER], ASKED, "s-3", "r-3") is None


def test_memory_is_bounded_per_tenant_and_over_all_tenants():
    stitcher, _ = _stitcher(max_per_tenant=10, max_entries=25)
    for n in range(100):  # one tenant sending many conversations keeps only its 10 most recent
        _call(stitcher, [{"role": "user", "content": f"ask {n}"}], ASKED, f"s-{n}", f"r-{n}")
    assert stitcher.entries.tenant_size("acme") == 10
    assert _call(stitcher, [{"role": "user", "content": "ask 0"}, ASKED, ANSWER], ASKED, "x", "x") is None  # evicted
    for n in range(100):  # many tenants: 25 entries in all
        _call(stitcher, [ASK], ASKED, "s", "r", tenant=f"t-{n}")
    assert len(stitcher.entries) == 25


def test_tool_links_answer_only_the_remembered_replys_calls_once_each():
    other = {**ANSWER, "tool_call_id": "call_9", "content": "from nowhere"}
    messages = [ASK, ASKED, ANSWER, other, {**ANSWER, "content": "again"}, {"role": "assistant", "content": "done"},
                {**ANSWER, "content": "after a later reply"}]
    links = list(tool_links(messages, 2))
    assert [(link.call_id, link.name, link.arguments, link.output) for link in links] == [
        ("call_1", "edit", '{"file": "a.py", "line": 3}', "ok")]
    assert list(tool_links(messages, 0)) == []


def test_link_events_record_the_call_and_its_result_as_the_sdk_does():
    stitcher, _ = _stitcher()
    _call(stitcher, [ASK], ASKED, "s-1", "r-1")
    found = stitcher.find(stitcher.conversation("acme", "", [ASK, ASKED, ANSWER]))
    call, result = link_events(found, "acme", "s-1", 0, "", 1234)
    assert call.tool_call.call_id == result.tool_result.call_id == "call_1"
    assert (call.tool_call.request_id, call.tool_call.name, call.tool_call.valid) == ("r-1", "edit", True)
    assert result.tool_result.output == "ok" and call.session_id == result.session_id == "s-1"
    assert (call.sequence, result.sequence, call.event_time_ms, call.agent_id) == (0, 1, 1234, "main")
    again, _ = link_events(found, "acme", "s-1", 0, "", 9999)
    assert again.event_id == call.event_id != result.event_id  # a retried call's events dedupe downstream


def _quoted(*calls: dict) -> dict:
    """A reply's tool calls sent back as assistant text, as smolagents does (str() of the calls' dicts)."""
    return {"role": "assistant", "content": "Calling tools:\n" + str([{"id": c["id"], "type": "function", "function": {
        "name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}} for c in calls])}


def _served_call(name="edit", arguments='{"file": "a.py"}') -> dict:
    """A tool call as serving.http.chat.parse_tool_calls makes it: its id is one serving handed out."""
    from serving.http.chat import parse_tool_calls

    (call,) = parse_tool_calls(json.dumps({"name": name, "arguments": json.loads(arguments)}),
                               [{"type": "function", "function": {"name": name}}])
    return call


def test_a_tool_call_quoted_back_as_text_continues_its_session_and_links_its_result():
    stitcher, _ = _stitcher()
    call = _served_call()
    _call(stitcher, [SYSTEM, ASK], {"role": "assistant", "content": None, "tool_calls": [call]}, "s-1", "r-1")
    observation = {"role": "user", "content": "Observation:\nfixed"}
    found = _call(stitcher, [SYSTEM, ASK, _quoted(call), observation], {"role": "assistant", "content": "done"},
                  "s-2", "r-2")
    assert (found.session_id, found.request_id, found.prefix_messages) == ("s-1", "r-1", 3)
    assert [(link.call_id, link.name, link.arguments, link.output) for link in found.links] == [
        (call["id"], "edit", '{"file":"a.py"}', "Observation:\nfixed")]
    call_event, result_event = link_events(found, "acme", "s-1", 0, "", 1)
    assert call_event.tool_call.request_id == "r-1" and result_event.tool_result.call_id == call["id"]


def test_a_quoted_call_continues_its_session_for_its_tenant_and_user_only_whatever_precedes_it():
    stitcher, _ = _stitcher()
    call = _served_call()
    _call(stitcher, [SYSTEM, ASK], {"role": "assistant", "content": None, "tool_calls": [call]}, "s-1", "r-1")
    final_answer = {"role": "system", "content": "an agent got stuck: answer its task"}  # smolagents' last call
    found = _call(stitcher, [final_answer, ASK, _quoted(call), {"role": "user", "content": "Observation:\nok"}],
                  {"role": "assistant", "content": "x"}, "s-2", "r-2")
    assert (found.session_id, found.request_id) == ("s-1", "r-1")
    assert _call(stitcher, [SYSTEM, ASK, _quoted(call)], {"role": "assistant", "content": "x"}, "s-3", "r-3",
                 tenant="globex") is None  # not for another tenant
    assert _call(stitcher, [SYSTEM, ASK, _quoted(call)], {"role": "assistant", "content": "x"}, "s-4", "r-4",
                 user="mallory") is None  # nor for another end user
    made_up = {**call, "id": "call_" + "0" * 24}
    assert _call(stitcher, [SYSTEM, ASK, _quoted(made_up)], {"role": "assistant", "content": "x"}, "s-5", "r-5") \
        is None  # an id serving never handed out continues nothing
    quoted_by_user = {"role": "user", "content": _quoted(call)["content"]}
    assert _call(stitcher, [SYSTEM, ASK, quoted_by_user], {"role": "assistant", "content": "x"}, "s-6", "r-6") \
        is None  # only an assistant message (the agent's own turn) quotes its call


def test_several_quoted_calls_are_linked_without_a_guessed_result():
    stitcher, _ = _stitcher()
    first, second = _served_call("edit"), _served_call("run", '{"cmd": "pytest"}')
    _call(stitcher, [ASK], {"role": "assistant", "content": None, "tool_calls": [first, second]}, "s-1", "r-1")
    found = _call(stitcher, [ASK, _quoted(first, second), {"role": "user", "content": "Observation:\nboth"}],
                  {"role": "assistant", "content": "done"}, "s-2", "r-2")
    assert found.session_id == "s-1" and [link.output for link in found.links] == [None, None]
    events = link_events(found, "acme", "s-1", 0, "", 1)
    assert [e.WhichOneof("body") for e in events] == ["tool_call", "tool_call"]


def test_tool_calls_kept_for_quoting_never_evict_the_conversations_they_belong_to():
    stitcher, _ = _stitcher(max_per_tenant=4)
    asks = [{"role": "user", "content": f"fix bug {i}"} for i in range(4)]
    replies = [{"role": "assistant", "content": None, "tool_calls": [_served_call()]} for _ in asks]
    for i, (ask, reply) in enumerate(zip(asks, replies)):
        _call(stitcher, [ask], reply, f"s-{i}", f"r-{i}")
    for i, (ask, reply) in enumerate(zip(asks, replies)):  # each conversation, resent, is still found
        found = stitcher.find(stitcher.conversation("acme", "", [ask, reply, ANSWER]))
        assert found is not None and found.session_id == f"s-{i}"
    assert stitcher.entries.tenant_size("acme") == stitcher.quoted.tenant_size("acme") == 4


def test_the_quoted_form_ids_match_what_serving_hands_out():
    from serving.recording.stitching import TOOL_CALL_ID

    assert TOOL_CALL_ID.fullmatch(_served_call()["id"])


def test_stitching_is_off_when_configured_so():
    assert Stitcher.from_config(ServingConfig(stitch_sessions=False)) is None
    stitcher = Stitcher.from_config(ServingConfig(stitch_max_per_tenant=7, stitch_ttl_s=5.0))
    assert (stitcher.entries.max_per_tenant, stitcher.entries.ttl_s) == (7, 5.0)


# -- through the real HTTP app, read back from Kafka ---------------------------------------------------------

KEYS = {"acme-key": {"tenant": "acme"}, "globex-key": {"tenant": "globex"}}


def _server(stack, tiny_policy_dir, tmp_path_factory, **serving):
    config = module_topics(stack, f"stitch-{tmp_path_factory.mktemp('n').name}")
    tmp = tmp_path_factory.mktemp("stitch")
    config = serving_config(config, tmp, f"stitch-{tmp.name}", api_keys=KEYS, **serving)
    register_version(config, tiny_policy_dir, (names.ALIAS_CHAMPION,))
    return ServerThread(config)


@pytest.fixture(scope="module")
def stitching_server(stack, tiny_policy_dir, tmp_path_factory):
    with _server(stack, tiny_policy_dir, tmp_path_factory) as server:
        yield server


def _client(server, key="acme-key", headers=None) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.http_base + "/v1", api_key=key, max_retries=0, default_headers=headers)


def _turn(client: openai.OpenAI, messages: list[dict], **options):
    """One chat call, and the conversation as the framework sends it next (the reply appended)."""
    reply = client.chat.completions.create(model="", messages=messages, max_tokens=3, **options)
    sent_back = reply.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
    return reply, [*messages, sent_back]


def _session(reply) -> str:
    return reply.model_extra["liverl"]["session_id"]


def _distilled(session_id: str, events, calls) -> list:
    """The trajectory rows the distiller builds of a session's recorded events and calls (no dead letter)."""
    from liverl.config.rewards import RewardsConfig
    from liverl.rewards.session import SessionRecord
    from pipelines.trajectories import build_rows

    ordered = tuple(sorted(calls, key=lambda call: call.request_time_ms))
    # what the SDK's capture.feedback(reply) or link_completion(reply) adds to a session serving named
    start = session_event_pb2.SessionEvent(event_id="start", session_id=session_id, tenant_id="acme",
                                           session_start=session_event_pb2.SessionStart(task_family="coding"))
    rows, dead = build_rows(SessionRecord(session_id, "acme", (start, *events), ordered), RewardsConfig(), "b", 0)
    assert not dead, dead
    return rows


def test_three_calls_resending_the_conversation_are_one_recorded_session(stitching_server):
    client = _client(stitching_server)
    first, conversation = _turn(client, [SYSTEM, {"role": "user", "content": "fix the file"}])
    # the next turn's user text as parts, as smolagents and the Agents SDK send it: the same conversation
    second, conversation = _turn(client, [*conversation, {"role": "user", "content": [
        {"type": "text", "text": "and "}, {"type": "text", "text": "test it"}]}])
    third, _ = _turn(client, [*conversation, {"role": "user", "content": "thanks"}])
    sessions = {_session(first), _session(second), _session(third)}
    assert sessions == {first.id}  # the first call's own id names the session all three continue
    calls = recorded_calls(stitching_server, {first.id, second.id, third.id})
    assert {call.session_id for call in calls.values()} == {first.id} and len(calls) == 3
    (row,) = _distilled(first.id, (), calls.values())  # the distiller's one trajectory of the three calls
    assert row.num_model_calls == 3 and len(row.span_starts) == 3


def test_a_responses_conversation_resent_whole_is_one_session(stitching_server):
    client = _client(stitching_server)
    first = client.responses.create(model="", input="search the docs", max_output_tokens=3, store=False)
    resent = [{"role": "user", "content": "search the docs"},
              *[item.model_dump(exclude_none=True) for item in first.output],
              {"role": "user", "content": "and fix"}]
    second = client.responses.create(model="", input=resent, max_output_tokens=3, store=False)
    assert _session(second) == _session(first) == first.id
    # a chat call continuing the same conversation joins it too: the same canonical messages
    chat, _ = _turn(client, [{"role": "user", "content": "search the docs"},
                             {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "go"}])
    assert _session(chat) == first.id


def test_tool_results_are_recorded_linked_to_the_call_that_asked(stitching_server, monkeypatch):
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    tool_call = {"id": call_id, "type": "function", "function": {"name": "edit", "arguments": '{"file": "a.py"}'}}
    # the tiny policy writes no JSON tool calls: its replies are read as this one (the server runs in-process)
    monkeypatch.setattr("serving.http.completions.parse_tool_calls", lambda text, tools: [dict(tool_call)] if tools
                        else [])
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    client = _client(stitching_server)
    first, conversation = _turn(client, [{"role": "user", "content": "fix a.py"}], tools=tools)
    assert first.choices[0].message.tool_calls[0].id == call_id
    second, _ = _turn(client, [*conversation, {"role": "tool", "tool_call_id": call_id, "content": "edited"},
                               {"role": "tool", "tool_call_id": "call_unknown", "content": "not linked"}], tools=tools)
    assert _session(second) == first.id
    events = _events_of(stitching_server, call_id, "call_unknown")
    assert sorted(e.WhichOneof("body") for e in events) == ["tool_call", "tool_result"]
    (asked,) = [e.tool_call for e in events if e.WhichOneof("body") == "tool_call"]
    (answered,) = [e.tool_result for e in events if e.WhichOneof("body") == "tool_result"]
    assert (asked.request_id, asked.name, json.loads(asked.arguments_json)) == (first.id, "edit", {"file": "a.py"})
    assert (answered.call_id, answered.output) == (call_id, "edited")
    assert {(e.tenant_id, e.session_id) for e in events} == {("acme", first.id)}
    calls = recorded_calls(stitching_server, {first.id, second.id})
    (row,) = _distilled(first.id, events, calls.values())  # the tool call's request is the session's: no dead letter
    assert row.num_model_calls == 2


def test_a_streamed_reply_is_remembered_as_the_client_assembled_it(stitching_server):
    client = _client(stitching_server)
    ask = [{"role": "user", "content": "stream a fix"}]
    chunks = list(client.chat.completions.create(model="", messages=ask, max_tokens=3, stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    then, _ = _turn(client, [*ask, {"role": "assistant", "content": text}, {"role": "user", "content": "go on"}])
    assert _session(then) == chunks[0].id


def _events_of(server, call_id: str, *others: str) -> list[session_event_pb2.SessionEvent]:
    """The recorded SessionEvents of a tool call (its ToolCall and ToolResult, waited for) and of `others`."""
    config = server.server.config
    server.server.recorder.flush(30)
    records = read_topic(config, config.kafka.session_events_topic, expect=100_000,
                         until=lambda got: sum(call_id.encode() in r.value for r in got) >= 2)
    events = (session_event_pb2.SessionEvent.FromString(r.value) for r in records)
    return [e for e in events if getattr(e, e.WhichOneof("body")).call_id in (call_id, *others)]


def test_function_call_outputs_continuing_a_previous_response_are_linked(stitching_server, monkeypatch):
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    tool_call = {"id": call_id, "type": "function", "function": {"name": "edit", "arguments": "{}"}}
    monkeypatch.setattr("serving.http.completions.parse_tool_calls", lambda text, tools: [dict(tool_call)] if tools
                        else [])
    client = _client(stitching_server)
    tools = [{"type": "function", "name": "edit", "parameters": {"type": "object"}}]
    first = client.responses.create(model="", input="edit a.py", tools=tools, max_output_tokens=3)
    assert first.output[0].call_id == call_id
    streamed = list(client.responses.create(model="", previous_response_id=first.id, tools=tools, stream=True,
                                            max_output_tokens=3, input=[{"type": "function_call_output",
                                                                         "call_id": call_id, "output": "edited"}]))
    done = streamed[-1].response
    assert done.model_extra["liverl"]["session_id"] == first.id
    events = _events_of(stitching_server, call_id)
    assert sorted(e.WhichOneof("body") for e in events) == ["tool_call", "tool_result"]
    assert {e.tool_call.request_id for e in events if e.WhichOneof("body") == "tool_call"} == {first.id}
    assert {e.session_id for e in events} == {first.id}


def test_another_tenant_sending_the_same_conversation_gets_a_session_of_its_own(stitching_server):
    first, conversation = _turn(_client(stitching_server), [{"role": "user", "content": "ask edit"}])
    theirs, _ = _turn(_client(stitching_server, "globex-key"), [*conversation, {"role": "user", "content": "more"}])
    assert _session(theirs) == theirs.id != first.id


def test_an_explicit_session_header_wins_and_is_continued(stitching_server):
    first, conversation = _turn(_client(stitching_server), [{"role": "user", "content": "ask search"}])
    named, conversation = _turn(_client(stitching_server, headers={names.META_SESSION_ID: "s-named"}),
                                [*conversation, {"role": "user", "content": "more"}])
    assert _session(named) == "s-named"  # never re-assigned to the first call's session
    after, _ = _turn(_client(stitching_server), [*conversation, {"role": "user", "content": "again"}])
    assert _session(after) == "s-named"  # the header-less call continues the conversation it resends


def test_a_conversation_idle_past_the_ttl_starts_a_new_session(stitching_server):
    stitcher = stitching_server.server.completions.stitcher
    first, conversation = _turn(_client(stitching_server), [{"role": "user", "content": "ask done"}])
    real = stitcher.entries.clock
    stitcher.entries.clock = lambda: real() + stitcher.entries.ttl_s + 1
    try:
        late, _ = _turn(_client(stitching_server), [*conversation, {"role": "user", "content": "more"}])
    finally:
        stitcher.entries.clock = real
    assert _session(late) == late.id != first.id


def test_turned_off_each_call_is_a_session_of_its_own(stack, tiny_policy_dir, tmp_path_factory):
    with _server(stack, tiny_policy_dir, tmp_path_factory, stitch_sessions=False) as server:
        assert server.server.completions.stitcher is None
        first, conversation = _turn(_client(server), [{"role": "user", "content": "fix"}])
        second, conversation = _turn(_client(server), [*conversation, {"role": "user", "content": "more"}])
        third, _ = _turn(_client(server), [*conversation, {"role": "user", "content": "again"}])
        assert [_session(r) for r in (first, second, third)] == [first.id, second.id, third.id]
        calls = recorded_calls(server, {first.id, second.id, third.id})
        assert {calls[r.id].session_id for r in (first, second, third)} == {first.id, second.id, third.id}
