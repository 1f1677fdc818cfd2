"""Trajectories built from imported traces (`liverl import`): no behaviour logprobs, never an importance ratio."""

from __future__ import annotations

from liverl.config.rewards import RewardsConfig
from liverl.rewards.session import SessionRecord
from pipelines.trajectories import build_rows
from tests.pipelines.producing import coding_session


def _imported(calls):
    for one in calls:
        one.origin = "import:swe-agent"
        del one.completion_logprobs[:]  # imported calls carry none
        one.policy_version = "import"
    return calls


def test_an_imported_session_becomes_a_row_marked_with_its_origin_and_zero_behaviour_logprobs():
    events, calls = coding_session("imp")
    rows, dead = build_rows(SessionRecord("imp", "demo", tuple(events), tuple(_imported(calls))), RewardsConfig(),
                            "b-imp", 0)
    assert dead == []
    (row,) = rows
    assert row.origin == "import:swe-agent" and row.imported
    assert set(row.behaviour_logprobs) == {0.0}
    assert sum(row.loss_mask) > 0  # the assistant's tokens stay trainable (supervised, reward-weighted)
    assert row.reward_components["outcome"] == 1.0


def test_a_served_call_without_logprobs_is_still_a_token_mismatch():
    events, calls = coding_session("bad")
    del calls[0].completion_logprobs[:]
    rows, dead = build_rows(SessionRecord("bad", "demo", tuple(events), tuple(calls)), RewardsConfig(), "b", 0)
    assert rows == [] and dead[0]["reason"] == "token_mismatch"
