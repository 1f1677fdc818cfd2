"""Self-summarisation: the final reward reaches every policy token of the chain, summaries included."""

from __future__ import annotations

from liverl.rewards import token_rewards


def test_reward_on_every_policy_token_including_summaries():
    # (T,) = turn 1 (3 policy tokens) | tool output (2, observation) | summary (2 policy tokens) | turn 2 (1)
    loss_mask = [1, 1, 1, 0, 0, 1, 1, 1]
    assert token_rewards(0.5, loss_mask) == [0.5, 0.5, 0.5, 0.0, 0.0, 0.5, 0.5, 0.5]
