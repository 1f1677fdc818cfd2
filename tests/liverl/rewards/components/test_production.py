"""Production signals against hand-computed cases from their definitions."""

from __future__ import annotations

import pytest

from liverl.rewards import label
from liverl.v1 import session_event_pb2 as ev
from tests.liverl.rewards.session_builder import SessionBuilder


def components(builder, config, agent_id="main"):
    return label(builder.build(), agent_id, config).components


@pytest.mark.parametrize(("success", "score", "expected"), [(True, 0.0, 1.0), (False, 0.0, 0.0), (True, 0.7, 0.7)])
def test_outcome_is_the_score_or_success(config, success, score, expected):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    s.outcome(success=success, score=score)
    assert components(s, config)["outcome"] == pytest.approx(expected)


def test_no_outcome_event_means_no_outcome_component(config):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    assert "outcome" not in components(s, config)


def test_kept_and_reverted_edits_share_the_edits(config):
    s = SessionBuilder()
    first = s.act("edit", {"f": "a"})
    second = s.act("write_file", {"f": "b"})
    s.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id=first)
    s.feedback(ev.FEEDBACK_KIND_EDIT_REVERTED, target_call_id=second)
    got = components(s, config)
    assert got["edit_kept"] == pytest.approx(0.5)
    assert got["edit_reverted"] == pytest.approx(-0.5)


def test_a_revert_beats_a_keep_of_the_same_edit_and_other_agents_edits_are_ignored(config):
    s = SessionBuilder()
    edit = s.act("edit", {"f": "a"})
    s.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id=edit)
    s.feedback(ev.FEEDBACK_KIND_EDIT_REVERTED, target_call_id=edit)
    s.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id="call-of-someone-else")
    got = components(s, config)
    assert got["edit_kept"] == 0.0
    assert got["edit_reverted"] == -1.0


def test_a_keep_sooner_than_the_configured_age_does_not_count(config):
    config.production.edit_kept_min_age_s = 60.0
    s = SessionBuilder()
    early = s.act("edit", {"f": "a"})
    late = s.act("edit", {"f": "b"})
    s.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id=early, after_ms=1_000)
    s.feedback(ev.FEEDBACK_KIND_EDIT_KEPT, target_call_id=late, after_ms=120_000)
    assert components(s, config)["edit_kept"] == pytest.approx(0.5)  # 1 kept of 2 edits


@pytest.mark.parametrize(("text", "expected"), [("it still fails with an error", -1.0), ("thanks! also add docs", 0.0)])
def test_dissatisfied_followup_by_text(config, text, expected):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    s.user_message(text, follow_up=True)
    assert components(s, config)["dissatisfied_followup"] == expected


def test_dissatisfied_followup_by_feedback_and_absent_without_followups(config):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    assert "dissatisfied_followup" not in components(s, config)
    s.feedback(ev.FEEDBACK_KIND_DISSATISFIED_FOLLOWUP)
    assert components(s, config)["dissatisfied_followup"] == -1.0


def test_explicit_feedback_is_the_mean_of_thumbs_and_ratings(config):
    s = SessionBuilder()
    s.act("edit", {"f": "a"})
    s.feedback(ev.FEEDBACK_KIND_THUMBS_UP)
    s.feedback(ev.FEEDBACK_KIND_RATING, value=0.25)  # 2 * 0.25 - 1 = -0.5
    assert components(s, config)["feedback"] == pytest.approx(0.25)


def test_latency_is_linear_between_target_and_limit(config):
    s = SessionBuilder()
    s.model_call(latency_ms=16_000)  # (16000 - 2000) / (30000 - 2000) = 0.5
    assert components(s, config)["latency"] == pytest.approx(-0.5)
    s.model_call(latency_ms=100_000)  # mean 58000: past the limit
    assert components(s, config)["latency"] == -1.0


def test_a_subagents_outcome_is_its_own_tasks(config):
    s = SessionBuilder("orchestrator", role="orchestrator")
    s.subagent_created("sub-1")
    s.task_assigned("sub-1", "t1", stage=0)
    s.task_assigned("sub-1", "t2", stage=1)
    s.act("search", {"q": "x"}, agent_id="sub-1")
    s.subagent_finished("sub-1", "t1", success=True, steps=2)
    s.subagent_finished("sub-1", "t2", success=False, steps=2)
    s.outcome(success=True)
    got = components(s, config, agent_id="sub-1")
    assert got["outcome"] == pytest.approx(0.5)
    assert not any(name.startswith("parl.") for name in got)
