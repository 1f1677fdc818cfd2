"""Penalties against hand-computed cases from their definitions."""

from __future__ import annotations

import pytest

from liverl.rewards import label
from liverl.rewards.components.penalties import turn_penalty
from tests.liverl.rewards.session_builder import SessionBuilder


def labelled(builder, config):
    return label(builder.build(), "main", config)


def test_broken_calls_count_per_call_and_padding_does_not_dilute(config):
    s = SessionBuilder()
    s.act("edit", {"f": "a"}, valid=False)
    s.act("edit", {"f": "a"}, valid=False)
    got = labelled(s, config)
    assert got.components["broken_tool_calls"] == pytest.approx(-0.5)
    assert got.signals["broken_tool_calls"] == 2
    for i in range(20):
        s.act("read_file", {"f": str(i)})
    assert labelled(s, config).components["broken_tool_calls"] == pytest.approx(-0.5)
    for _ in range(5):
        s.act("edit", {}, valid=False)
    assert labelled(s, config).components["broken_tool_calls"] == -1.0  # capped


def test_clean_trajectory_has_every_penalty_at_zero(config):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    got = labelled(s, config).components
    for name in ("broken_tool_calls", "repeated_tool_calls", "clarifying_instead_of_acting", "give_up",
                 "turn_penalty", "prune_penalty"):
        assert got[name] == 0.0


@pytest.mark.parametrize(("calls", "repeats"), [
    ([("search", {"q": "a"}), ("search", {"q": "a"})], 1),
    ([("run_tests", {}), ("edit", {"f": "a"}), ("run_tests", {})], 0),  # the edit changed the world
    ([("read", {"f": "a"}), ("read", {"f": "b"}), ("read", {"f": "a"}), ("read", {"f": "b"})], 2),  # a loop
    ([("search", '{"q": "a", "k": 5}'), ("search", '{"k":5,"q":"a"}')], 1),  # same arguments, other spelling
])
def test_repeated_identical_calls_and_loops(config, calls, repeats):
    s = SessionBuilder()
    for name, arguments in calls:
        s.act(name, arguments)
    got = labelled(s, config)
    assert got.signals["repeated_tool_calls"] == repeats
    assert got.components["repeated_tool_calls"] == pytest.approx(-0.2 * repeats)


def test_asking_instead_of_acting_is_penalised_asking_then_acting_is_not(config):
    asks = SessionBuilder()
    asks.act("ask_user", {"question": "which file?"})
    assert labelled(asks, config).components["clarifying_instead_of_acting"] == -1.0
    asks.act("edit", {"f": "a"})
    assert labelled(asks, config).components["clarifying_instead_of_acting"] == 0.0


def test_a_last_reply_that_is_a_question_counts_as_clarifying(config):
    s = SessionBuilder()
    s.act("read_file", {"f": "a"})
    s.act("reply", {"text": "Do you want me to change a.py or b.py?"})
    assert labelled(s, config).components["clarifying_instead_of_acting"] == -1.0
    answered = SessionBuilder()
    answered.act("reply", {"text": "Done."})
    assert labelled(answered, config).components["clarifying_instead_of_acting"] == 0.0


def test_giving_up_by_tool_by_end_reason_or_by_failing_fast(config):
    tool = SessionBuilder()
    tool.act("give_up", {})
    assert labelled(tool, config).components["give_up"] == -1.0
    reason = SessionBuilder()
    reason.act("edit", {"f": "a"})
    reason.end("gave_up")
    assert labelled(reason, config).components["give_up"] == -1.0
    fast = SessionBuilder()
    fast.act("read_file", {"f": "a"})
    fast.outcome(success=False)
    assert labelled(fast, config).components["give_up"] == -1.0
    tried = SessionBuilder()
    for i in range(5):
        tried.act("edit", {"f": str(i)})
    tried.outcome(success=False)  # a real attempt that failed is not giving up
    assert labelled(tried, config).components["give_up"] == 0.0


@pytest.mark.parametrize(("turns", "penalty"), [(0, 0.0), (64, 0.0), (96, 0.25), (128, 0.5), (500, 0.5)])
def test_turn_penalty_is_zero_at_64_and_half_at_128(config, turns, penalty):
    assert turn_penalty(turns, config) == pytest.approx(penalty)


def test_turn_penalty_counts_model_calls_but_not_self_summaries(config):
    s = SessionBuilder()
    for _ in range(96):
        s.model_call()
    for _ in range(32):
        s.summary()
    got = labelled(s, config)
    assert got.signals["turns"] == 96
    assert got.components["turn_penalty"] == pytest.approx(-0.25)
    config.penalties.count_summaries_as_turns = True
    assert labelled(s, config).components["turn_penalty"] == pytest.approx(-0.5)


@pytest.mark.parametrize(("streaks", "penalty"), [([3], 0.0), ([5], 0.2), ([3, 3], 0.0), ([4, 5], 0.3), ([10], 0.5)])
def test_prune_penalty_past_a_streak_of_three_capped(config, streaks, penalty):
    s = SessionBuilder("search")
    for length in streaks:
        s.act("search", {"q": str(length)}, chunk_ids=[f"c{length}"])
        for i in range(length):
            s.act("prune_chunks", {"chunk_ids": [f"c{length}-{i}"]})
    assert labelled(s, config).components["prune_penalty"] == pytest.approx(-penalty)
