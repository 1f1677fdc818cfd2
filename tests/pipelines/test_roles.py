"""Role inference: a sub-agent is never trained as the main agent, whatever headers its calls lack."""

from __future__ import annotations

from liverl.config.rewards import RewardsConfig
from liverl.rewards.session import SessionRecord
from liverl.v1 import session_event_pb2 as se
from liverl.v1.common_pb2 import AgentRole
from pipelines import dead_letters
from pipelines.roles import ORCHESTRATOR, SINGLE, SUBAGENT, UNKNOWN, infer_roles, spawn_graph
from pipelines.trajectories import build_rows
from tests.pipelines.producing import call, coding_session, event, orchestrator_session

NONE = AgentRole.AGENT_ROLE_UNSPECIFIED


def _session(events, calls) -> SessionRecord:
    return SessionRecord(events[0].session_id, "demo", tuple(events), tuple(calls))


def _headerless(messages):
    """The same messages as a product that sends no role header records them."""
    for message in messages:
        message.agent_role = NONE
    return messages


def test_a_headerless_subagent_is_found_through_the_spawn_graph_and_stays_frozen():
    events, calls = (_headerless(part) for part in orchestrator_session("o"))
    session = _session(events, calls)
    assert infer_roles(session, ["main", "sub-1"]) == {"main": ORCHESTRATOR, "sub-1": SUBAGENT}
    rows, dead = build_rows(session, RewardsConfig(), "b", 0)
    by_agent = {row.agent_id: row for row in rows}
    assert dead == [] and set(by_agent) == {"main", "sub-1"}
    assert by_agent["sub-1"].agent_role == SUBAGENT and set(by_agent["sub-1"].loss_mask) == {0}
    assert by_agent["sub-1"].parent_agent_id == "main" and by_agent["sub-1"].signals["spawn_stage"] == 1.0
    assert by_agent["main"].agent_role == ORCHESTRATOR and 1 in by_agent["main"].loss_mask


def test_the_spawn_graph_beats_a_trainable_header_and_task_assignment_alone_names_a_subagent():
    events, calls = orchestrator_session("o")
    events = [e for e in events if e.WhichOneof("body") != "subagent_created"]  # only TaskAssigned names sub-1
    calls[1].agent_role = AgentRole.AGENT_ROLE_ORCHESTRATOR  # a sub-agent that claims to orchestrate
    for e in events:
        if e.agent_id == "sub-1":
            e.agent_role = AgentRole.AGENT_ROLE_ORCHESTRATOR
    session = _session(events, calls)
    assert spawn_graph(session)["sub-1"].parent == "main"
    assert infer_roles(session, ["main", "sub-1"])["sub-1"] == SUBAGENT


def test_a_lone_headerless_main_agent_is_single():
    events, calls = (_headerless(part) for part in coding_session("c"))
    assert infer_roles(_session(events, calls), ["main"]) == {"main": SINGLE}


def test_an_unknown_headerless_agent_is_a_dead_letter_and_never_trained():
    events, calls = (_headerless(part) for part in coding_session("u"))
    stray = call("u", 7, "u-x1", [40], [41, 42], agent_id="helper", role=NONE)
    session = _session(events, [*calls, stray])
    assert infer_roles(session, ["main", "helper"])["helper"] is UNKNOWN
    rows, dead = build_rows(session, RewardsConfig(), "b", 0)
    assert [row.agent_id for row in rows] == ["main"]  # the session's known agent is still emitted
    (letter,) = dead
    assert letter["reason"] == dead_letters.UNKNOWN_AGENT_ROLE and "helper" in letter["message"]
    assert letter["tenant_id"] == "demo" and letter["session_id"] == "u"


def test_an_explicit_subagent_header_is_enough_without_spawn_events():
    events, calls = coding_session("h")
    extra = call("h", 7, "h-x1", [40], [41], agent_id="worker", role=AgentRole.AGENT_ROLE_SUBAGENT)
    assert infer_roles(_session(events, [*calls, extra]), ["main", "worker"]) == {"main": SINGLE, "worker": SUBAGENT}
    created = event("h", 1, subagent_created=se.SubAgentCreated(subagent_id="worker"))
    assert spawn_graph(_session([*events, created], calls))["worker"].stage is None
