"""Rewards mixed at the trainer's step by liverl.rewards, and the drift input of the gate."""

from __future__ import annotations

from liverl.config.rewards import RewardsConfig
from liverl.config.trainer import GateConfig
from trainer.step.rewarding import mixed_rewards, serving_drift
from trainer.step.trajectory import Trajectory


def test_parl_weights_follow_the_trainer_step():
    parl = Trajectory("t", 0, "orchestrator", "", "orchestrator", ("1",), (1, 2, 3), (0, 1, 1), (0.0, -1.0, -1.0),
                      reward_components={"parl.r_perf": 1.0, "parl.r_parallel": 1.0, "parl.r_finish": 1.0})
    early, late = mixed_rewards([parl], 0, RewardsConfig())[0], mixed_rewards([parl], 10**7, RewardsConfig())[0]
    assert early > late == 1.0  # lambda1, lambda2 annealed to 0: only r_perf is left


def _rows(version: str, n: int, clarifying: int, gave_up: int = 0, outcome: float = 1.0) -> list[dict]:
    return [{"policy_versions": [version], "signals": {"clarifying": float(i < clarifying), "turns": 2.0,
             "tool_calls": 2.0, "gave_up": float(i < gave_up)}, "reward_components": {"outcome": outcome},
             "critical_steps": 1} for i in range(n)]


GATE = GateConfig(drift_min_trajectories=20)


def test_drift_compares_the_newest_served_version_with_the_one_before():
    config = RewardsConfig()
    report = serving_drift(_rows("2", 30, 0) + _rows("3", 30, 15), config, GATE)
    assert not report["ok"] and report["compared"] == ["3", "2"]
    assert [flag["figure"] for flag in report["flags"]] == ["rate.clarifying"]
    assert report["p_values"]["rate.clarifying"] < 1e-4
    assert serving_drift(_rows("2", 30, 0) + _rows("3", 30, 0), config, GATE)["ok"]


def test_drift_ignores_versions_with_too_little_traffic():
    report = serving_drift(_rows("2", 30, 0) + _rows("3", 5, 5), RewardsConfig(), GATE)
    assert report["ok"] and "nothing to compare" in report["notes"][0]


def test_a_move_of_the_size_chance_gives_forty_sessions_is_reported_not_flagged():
    """Give-up 2 of 40 sessions, then 6 of 40: past the 0.05 threshold as a point figure, well within chance."""
    report = serving_drift(_rows("2", 40, 0, gave_up=2) + _rows("3", 40, 0, gave_up=6), RewardsConfig(), GATE)
    assert report["ok"] and report["flags"] == []
    assert [flag["figure"] for flag in report["point_flags"]] == ["rate.give_up"]
    assert report["p_values"]["rate.give_up"] > 0.05


def test_a_shown_move_is_not_flagged_when_the_verified_outcome_rose_with_it():
    before = _rows("2", 30, 0, outcome=0.0)
    after = _rows("3", 30, 15, outcome=1.0)  # asking more, and solving every task
    after[0]["reward_components"] = {"outcome": 0.0}  # an outcome with an error bar
    report = serving_drift(before + after, RewardsConfig(), GATE)
    assert report["ok"] and report["flags"] == []
    assert report["p_values"]["rate.clarifying"] < 1e-4


def test_too_few_sessions_for_a_minimum_is_still_flagged():
    rewards = RewardsConfig()
    rewards.monitors.min_trajectories = 50
    report = serving_drift(_rows("2", 30, 0) + _rows("3", 30, 0), rewards, GATE)
    assert not report["ok"] and [flag["figure"] for flag in report["flags"]] == ["n"]
