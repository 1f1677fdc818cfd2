"""Rewards mixed at the trainer's step by liverl.rewards, and the drift input of the gate."""

from __future__ import annotations

from liverl.config.rewards import RewardsConfig
from trainer.rewarding import mixed_rewards, serving_drift
from trainer.trajectory import Trajectory


def test_parl_weights_follow_the_trainer_step():
    parl = Trajectory("t", 0, "orchestrator", "", "orchestrator", ("1",), (1, 2, 3), (0, 1, 1), (0.0, -1.0, -1.0),
                      reward_components={"parl.r_perf": 1.0, "parl.r_parallel": 1.0, "parl.r_finish": 1.0})
    early, late = mixed_rewards([parl], 0, RewardsConfig())[0], mixed_rewards([parl], 10**7, RewardsConfig())[0]
    assert early > late == 1.0  # lambda1, lambda2 annealed to 0: only r_perf is left


def _rows(version: str, n: int, clarifying: int) -> list[dict]:
    return [{"policy_versions": [version], "signals": {"clarifying": float(i < clarifying), "turns": 2.0,
             "tool_calls": 2.0}, "reward_components": {"outcome": 1.0}, "critical_steps": 1} for i in range(n)]


def test_drift_compares_the_newest_served_version_with_the_one_before():
    config = RewardsConfig()
    report = serving_drift(_rows("2", 30, 0) + _rows("3", 30, 15), config, min_trajectories=20)
    assert not report["ok"] and report["compared"] == ["3", "2"]
    assert any(flag["figure"] == "rate.clarifying" for flag in report["flags"])
    assert serving_drift(_rows("2", 30, 0) + _rows("3", 30, 0), config, min_trajectories=20)["ok"]


def test_drift_ignores_versions_with_too_little_traffic():
    report = serving_drift(_rows("2", 30, 0) + _rows("3", 5, 5), RewardsConfig(), min_trajectories=20)
    assert report["ok"] and "nothing to compare" in report["notes"][0]
