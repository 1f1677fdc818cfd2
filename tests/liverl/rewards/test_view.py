"""Who owns which event: tool calls by agent id, session-level events by the main agent."""

from __future__ import annotations

from liverl.rewards.view import agent_view
from tests.liverl.rewards.session_builder import SessionBuilder


def orchestrated():
    s = SessionBuilder("orchestrator", role="orchestrator")
    s.act("plan", {})
    s.subagent_created("sub-1")
    s.task_assigned("sub-1", "t1", stage=0)
    s.act("search", {"q": "a"}, agent_id="sub-1")
    s.act("search", {"q": "a"}, agent_id="sub-1")
    s.subagent_finished("sub-1", "t1", success=True, steps=2)
    s.user_message("thanks", follow_up=True)
    s.outcome(success=True)
    return s.build()


def test_main_agent_sees_its_own_calls_and_the_session_events():
    view = agent_view(orchestrated(), "main")
    assert not view.is_subagent
    assert view.tool_names == ["plan"]
    assert view.outcome is not None and len(view.user_messages) == 1
    assert [t.task_id for t in view.tasks_assigned] == ["t1"]
    assert view.subagent_model_calls == {"sub-1": 2}


def test_a_subagent_sees_its_calls_and_its_tasks_only():
    view = agent_view(orchestrated(), "sub-1")
    assert view.is_subagent
    assert view.tool_names == ["search", "search"]
    assert view.outcome is None and view.user_messages == ()
    assert view.tasks_assigned == () and [t.task_id for t in view.own_tasks_finished] == ["t1"]


def test_an_empty_agent_id_reads_as_main():
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    record = s.build()
    for event in record.events:
        event.agent_id = ""
    assert agent_view(record, "").tool_names == ["edit"]
    assert agent_view(record, "main").tool_names == ["edit"]
