import json
import random

from demo.product.feedback import DelayedFeedback
from demo.product.memory_recorder import MemoryRecorder
from demo.product.policy import Completion
from demo.product.session import feedback_kind, run_session
from demo.product.tasks import CodingTask, OrchestratorTask, SearchTask
from demo.product.user import SimulatedUser, UserModel
from liverl.v1 import session_event_pb2


class ScriptedPolicy:
    """Answers with a function of the prompt, and remembers who called it (role, agent id, session)."""

    def __init__(self, answer, version="3"):
        self.answer, self.version, self.calls = answer, version, []

    def generate(self, prompt_text, session_id, agent_role="single", agent_id="main"):
        self.calls.append((prompt_text, session_id, agent_role, agent_id))
        return Completion(self.answer(prompt_text), (1,), (-0.5,), self.version, f"req-{len(self.calls)}")


def run(task, policy, recorder, user=SimulatedUser(), delay=0.0):
    feedback = DelayedFeedback()
    stats = run_session(task, policy, recorder, random.Random(0), user=user, feedback=feedback,
                        feedback_delay_s=delay, user_id="u1")
    feedback.close()
    return stats


def kinds(recorder, session_id):
    return [e.kind for e in recorder.of_session(session_id)]


def test_coding_session_records_calls_outcome_and_delayed_feedback():
    task = CodingTask(random.Random(0), "t1")
    policy = ScriptedPolicy(lambda prompt: task.right_edit if "error" in prompt else "edit fix_null")
    recorder = MemoryRecorder()
    stats = run(task, policy, recorder)
    assert stats.calls == 2 and stats.broken_calls == 1 and stats.reward == 0.5
    assert stats.served_version == "3" and stats.policy_versions == ("3", "3")
    events = recorder.of_session(stats.session_id)
    assert kinds(recorder, stats.session_id)[:6] == [
        "session_start", "user_message", "tool_call", "tool_result", "tool_call", "tool_result"]
    broken, edit = [e for e in events if e.kind == "tool_call"]
    assert not broken.fields["valid"] and "takes 2 argument" in broken.fields["error"]
    assert broken.fields["request_id"] == "req-1" and edit.fields["valid"]
    assert next(e for e in events if e.kind == "outcome").fields["score"] == 0.5
    end = kinds(recorder, stats.session_id).index("session_end")
    feedback = [e for e in events[end:] if e.kind == "feedback"]
    assert feedback and feedback[0].fields["target_call_id"] == edit.fields["call_id"]
    assert feedback[0].fields["kind"] in (feedback_kind("EDIT_KEPT"), feedback_kind("EDIT_REVERTED"))
    assert {c[1] for c in policy.calls} == {stats.session_id}


def test_search_session_records_budget_and_chunks():
    task = SearchTask(random.Random(1), "t2")
    policy = ScriptedPolicy(lambda p: "answer " + " ".join(task.context[:2]) if "ctx" in p else f"search {task.topic}")
    recorder = MemoryRecorder()
    stats = run(task, policy, recorder, user=SimulatedUser(UserModel(rating_chance=0.0)))
    events = recorder.of_session(stats.session_id)
    assert events[0].fields["token_budget"] == task.token_budget > 0
    results = [e for e in events if e.kind == "tool_result"]
    assert results[0].fields["chunk_ids"] == task.focused
    outcome = next(e for e in events if e.kind == "outcome").fields
    assert set(outcome["gold_chunk_ids"]) == set(task.gold) and outcome["answer_chunk_ids"] == task.gold[:1]
    assert stats.reward == 1.0
    answer = [e for e in events if e.kind == "tool_call"][-1]
    assert json.loads(answer.fields["arguments_json"]) == {"chunk_ids": list(task.context[:2])}


def test_orchestrator_session_runs_frozen_subagents_through_the_policy():
    task = OrchestratorTask(random.Random(2), "t3")
    n = task.n_parts

    def answer(prompt):
        if prompt.startswith("subagent"):
            return "done"
        if "agents none" in prompt:
            return f"create_subagent {n}"
        return "assign_task " + " ".join(f"sub_{i} part_{i}" for i in range(1, n + 1))

    policy = ScriptedPolicy(answer)
    recorder = MemoryRecorder()
    stats = run(task, policy, recorder)
    assert recorder.of_session(stats.session_id)[0].agent_role == "orchestrator"
    roles = [(role, agent) for _, _, role, agent in policy.calls]
    assert roles[:2] == [("orchestrator", "main")] * 2
    assert roles[2:] == [("subagent", f"sub-{i}") for i in range(1, n + 1)]
    assert stats.calls == 2 and stats.subagent_calls == n
    events = recorder.of_session(stats.session_id)
    created = [e.fields["subagent_id"] for e in events if e.kind == "subagent_created"]
    assigned = [e.fields for e in events if e.kind == "task_assigned"]
    finished = [e.fields for e in events if e.kind == "subagent_finished"]
    assert created == [f"sub-{i}" for i in range(1, n + 1)]
    assert {a["stage"] for a in assigned} == {1} and len(finished) == n
    assert all(f["steps"] >= 1 for f in finished)
    worker_calls = [e for e in events if e.kind == "tool_call" and e.agent_id.startswith("sub-")]
    assert len(worker_calls) == n and {e.agent_role for e in worker_calls} == {"subagent"}


def test_feedback_kinds_are_the_sdks_with_protobuf_values():
    assert int(feedback_kind("EDIT_KEPT")) == session_event_pb2.FEEDBACK_KIND_EDIT_KEPT
    assert int(feedback_kind("DISSATISFIED_FOLLOWUP")) == session_event_pb2.FEEDBACK_KIND_DISSATISFIED_FOLLOWUP
