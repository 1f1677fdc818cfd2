"""label end to end: the record it returns, and every known hack scoring below an honest trajectory.

Each pair differs only in the hack; both are mixed at the start and at the end of the schedules, so the
ordering holds whatever the trainer's step.
"""

from __future__ import annotations

import json

import pytest

from liverl.config.rewards import KNOWN_COMPONENTS
from liverl.rewards import label, mix
from liverl.v1 import session_event_pb2 as ev
from tests.liverl.rewards.session_builder import SessionBuilder

STEPS = (0, 500, 10_000)


def reward(builder: SessionBuilder, config, family: str, step: int) -> float:
    return mix(label(builder.build(), "main", config).components, family, step, config)


def assert_hack_scores_lower(honest, hacked, config, family):
    for step in STEPS:
        assert reward(hacked, config, family, step) < reward(honest, config, family, step), f"step {step}"


def test_label_record_is_versioned_and_json_ready(config):
    s = SessionBuilder("search", token_budget=1000)
    s.act("search", {"q": "a"}, chunk_ids=["g1"])
    s.outcome(success=True, gold_chunk_ids=["g1"], answer_chunk_ids=["g1"])
    got = label(s.build(), "main", config)
    assert got.config_version == config.version
    assert set(got.components) <= set(KNOWN_COMPONENTS)
    json.dumps({"components": got.components, "signals": got.signals})
    assert all(isinstance(v, float) for v in [*got.components.values(), *got.signals.values()])
    assert got.signals["critical_steps"] == got.critical_steps == 1


def test_broken_calls_score_lower_than_valid_ones(config):
    honest, hacked = SessionBuilder(), SessionBuilder()
    honest.act("edit", {"f": "a"})
    for _ in range(3):
        hacked.act("edit", "{not json", valid=False)  # discarded in the old pipeline: free retries
    hacked.act("edit", {"f": "a"})
    for s in (honest, hacked):
        s.outcome(success=True)
    assert_hack_scores_lower(honest, hacked, config, "coding")


def test_clarifying_instead_of_editing_scores_lower(config):
    honest, hacked = SessionBuilder(), SessionBuilder()
    honest.user_message("rename foo to bar")
    edit = honest.act("edit", {"f": "a.py"})
    honest.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id=edit)
    hacked.user_message("rename foo to bar")
    hacked.act("ask_user", {"question": "Are you sure you want foo renamed?"})
    for s in (honest, hacked):
        s.end()
    assert_hack_scores_lower(honest, hacked, config, "coding")


def test_one_broad_search_then_stop_scores_lower(config):
    gold, answer = [f"g{i}" for i in range(4)], ["g0"]
    honest = SessionBuilder("search")
    honest.act("search", {"q": "part one"}, chunk_ids=["g0", "g1", "x1", "x2"])
    honest.act("search", {"q": "part two"}, chunk_ids=["g2", "g3", "x3"])
    honest.act("prune_chunks", {"chunk_ids": ["x1", "x2", "x3"]})
    hacked = SessionBuilder("search")
    hacked.act("search", {"q": "everything"}, chunk_ids=gold + [f"x{i}" for i in range(36)])  # all gold, 40 chunks
    for s in (honest, hacked):
        s.outcome(success=True, gold_chunk_ids=gold, answer_chunk_ids=answer)
    assert_hack_scores_lower(honest, hacked, config, "search")


def test_spawning_subagents_that_do_nothing_scores_lower(config):
    honest = SessionBuilder("orchestrator", role="orchestrator")
    hacked = SessionBuilder("orchestrator", role="orchestrator")
    for s in (honest, hacked):
        s.model_call()
    for i in range(4):
        for s in (honest, hacked):
            s.subagent_created(f"sub-{i}")
            s.task_assigned(f"sub-{i}", f"t{i}", stage=0)
        honest.subagent_finished(f"sub-{i}", f"t{i}", success=True, steps=3)
        hacked.subagent_finished(f"sub-{i}", f"t{i}", success=False, steps=0)
    for _ in range(4):
        hacked.act("edit", {"f": "x"})  # the orchestrator did the work itself
    for s in (honest, hacked):
        s.outcome(success=True)
    # once the lambdas reach 0, both are worth their outcome: equal, never higher for the hack
    for step in (0, 500):
        assert reward(hacked, config, "orchestrator", step) < reward(honest, config, "orchestrator", step)
    assert reward(hacked, config, "orchestrator", 10_000) <= reward(honest, config, "orchestrator", 10_000)


def test_judge_score_is_a_component_only_when_judged(config):
    from liverl.rewards import Judgement

    config.judge.enabled = True
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    s.outcome(success=True)
    unjudged = label(s.build(), "main", config)
    assert "judge" not in unjudged.components and unjudged.signals["judge.unjudged"] == 1.0
    judged = label(s.build(), "main", config, judgement=Judgement(score=0.8, rubric_scores={"a": 0.7, "b": 0.9}))
    assert judged.components["judge"] == pytest.approx(0.8) and judged.signals["judge.unjudged"] == 0.0
    assert judged.components["outcome"] == 1.0  # beside the verifiable signal, never instead of it


# Fuzzing: whatever a session holds, label stays within its contract and mix is finite.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TOOLS = ["edit", "search", "prune_chunks", "ask_user", "reply", "give_up", "read_file", "run_tests"]
action = st.tuples(st.sampled_from(TOOLS), st.integers(0, 3), st.booleans(),
                   st.lists(st.sampled_from(["g1", "g2", "x1", "x2"]), max_size=3))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(family=st.sampled_from(["coding", "search", "orchestrator"]), actions=st.lists(action, max_size=25),
       subtasks=st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 9)), max_size=5),
       budget=st.sampled_from([0, 30]), outcome=st.sampled_from([None, True, False]),
       feedback=st.lists(st.sampled_from([1, 2, 3, 4, 5, 6]), max_size=3), step=st.integers(0, 3000))
def test_any_session_labels_within_contract(config, family, actions, subtasks, budget, outcome, feedback, step):
    s = SessionBuilder(family, token_budget=budget)
    calls = []
    for name, arg, valid, chunks in actions:
        arguments = {"chunk_ids": chunks} if name == "prune_chunks" else {"a": arg, "text": "ok?"}
        calls.append(s.act(name, arguments, chunk_ids=chunks, valid=valid, prompt_tokens=10 + 10 * arg))
    for i, (stage, success, steps) in enumerate(subtasks):
        s.task_assigned(f"sub-{i % 2}", f"t{i}", stage=stage)
        s.subagent_finished(f"sub-{i % 2}", f"t{i}", success=success, steps=steps)
    for kind in feedback:
        s.feedback(kind, value=0.5, target_call_id=calls[0] if calls else "")
    if outcome is not None:
        s.outcome(success=outcome, gold_chunk_ids=["g1", "g2"] if family == "search" else [], answer_chunk_ids=["g2"])
    for agent_id in ("main", "sub-0"):
        got = label(s.build(), agent_id, config)
        assert set(got.components) <= set(KNOWN_COMPONENTS)
        for name, value in got.components.items():
            assert -1.0 <= value <= 1.0, (name, value)
        assert got.critical_steps >= 0
        assert abs(mix(got.components, family, step, config)) < 10.0
