"""demo/product/memory_recorder.py: sessions recorded in memory become the SessionRecord the pipelines rebuild,
and the rewards library labels it as it labels captured traffic."""

import random

from demo.product.feedback import DelayedFeedback
from demo.product.memory_recorder import MemoryRecorder, RecordingPolicy, to_session_event
from demo.product.policy import Completion
from demo.product.session import run_session
from demo.product.tasks import CodingTask
from demo.product.user import SimulatedUser
from liverl.config import load_config
from liverl.rewards import SessionRecord, label, mix


class Scripted:
    def __init__(self, texts):
        self.texts = list(texts)

    def generate(self, prompt_text, session_id, agent_role="single", agent_id="main"):
        return Completion(self.texts.pop(0), (5, 3), (-0.1, -0.1), "2", f"r-{len(self.texts)}", (7, 8, 9))


def coding_session(texts_of):
    task = CodingTask(random.Random(0), "t")
    recorder, policy, feedback = MemoryRecorder(), RecordingPolicy(Scripted(texts_of(task))), DelayedFeedback()
    stats = run_session(task, policy, recorder, random.Random(1), user=SimulatedUser(), feedback=feedback,
                        feedback_delay_s=0.0, user_id="u")
    feedback.close()
    return recorder, policy, stats


def mixed_reward(recorder, policy, stats, config) -> float:
    events = tuple(to_session_event(e, i) for i, e in enumerate(recorder.of_session(stats.session_id)))
    record = SessionRecord(stats.session_id, "demo", events, tuple(policy.model_calls[stats.session_id]))
    return mix(label(record, "main", config).components, stats.family, 0, config)


def test_recorded_events_become_the_protobuf_events_the_pipelines_rebuild():
    recorder, policy, stats = coding_session(lambda t: ["edit fix_null", t.right_edit])
    events = [to_session_event(e, i) for i, e in enumerate(recorder.of_session(stats.session_id))]
    assert events[0].session_start.task_family == "coding" and events[0].user_id == "u"
    calls = [e.tool_call for e in events if e.WhichOneof("body") == "tool_call"]
    assert [c.valid for c in calls] == [False, True] and calls[0].error
    assert [e.WhichOneof("body") for e in events][-1] in ("feedback", "session_end")
    (model_call,) = policy.model_calls[stats.session_id][:1]
    assert model_call.policy_version == "2" and list(model_call.completion_token_ids) == [5, 3]


def test_the_library_prefers_a_right_edit_to_a_clarifying_question():
    config = load_config(environ={}).rewards
    good = coding_session(lambda t: [t.right_edit])
    hack = coding_session(lambda t: ["ask_user", "ask_user"])
    assert mixed_reward(*good, config) > mixed_reward(*hack, config)
