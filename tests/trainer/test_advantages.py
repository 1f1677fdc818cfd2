"""Per-family running baselines; leave-one-out where a step holds a group; optional normalisation."""

from __future__ import annotations

import pytest

from liverl.config.trainer import AdvantageConfig
from trainer.step.advantages import Baselines, compute_advantages
from trainer.step.trajectory import Trajectory


def _t(family: str, task_id: str = "") -> Trajectory:
    return Trajectory("t", 0, family, task_id, "single", ("1",), (1, 2), (0, 1), (0.0, -1.0))


def test_first_batch_of_a_family_uses_the_others_mean_then_the_running_baseline():
    baselines = Baselines()
    config = AdvantageConfig(baseline_momentum=0.5, leave_one_out=False)
    assert compute_advantages([_t("coding"), _t("coding")], [1.0, 0.0], baselines, config) == [1.0, -1.0]
    assert baselines.means == {"coding": 0.5}
    assert compute_advantages([_t("coding")], [1.0], baselines, config) == [0.5]
    assert baselines.means == {"coding": 0.75}  # 0.5·0.5 + 0.5·1.0


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_a_first_seen_family_is_not_its_own_baseline(leave_one_out):
    """The batch mean with the trajectory's own reward in it shrank every advantage by 1 - 1/n (1/3 here) and
    correlated the baseline with the reward it is subtracted from; the others' mean does neither."""
    config = AdvantageConfig(leave_one_out=leave_one_out)
    advantages = compute_advantages([_t("new")] * 3, [1.0, 0.0, 0.0], Baselines({"old": 0.0}), config)
    assert advantages == pytest.approx([1.0, -0.5, -0.5])  # 1 - 0, 0 - 0.5, 0 - 0.5; not [2/3, -1/3, -1/3]


def test_a_first_seen_family_alone_in_its_batch_gets_no_advantage():
    baselines = Baselines()
    assert compute_advantages([_t("new"), _t("old")], [1.0, 0.3], baselines, AdvantageConfig()) == [0.0, 0.0]
    assert baselines.means == {"new": 1.0, "old": 0.3}  # its reward still starts the running baseline


def test_families_keep_separate_baselines():
    baselines = Baselines({"coding": 1.0, "search": 0.0})
    advantages = compute_advantages([_t("coding"), _t("search")], [1.0, 1.0], baselines, AdvantageConfig())
    assert advantages == [0.0, 1.0]


def test_leave_one_out_within_a_task_group():
    baselines = Baselines({"coding": 100.0})  # ignored for grouped trajectories
    group = [_t("coding", "task-1"), _t("coding", "task-1"), _t("coding", "task-1"), _t("coding", "other")]
    advantages = compute_advantages(group, [3.0, 0.0, 0.0, 100.0], baselines, AdvantageConfig())
    assert advantages == pytest.approx([3.0, -1.5, -1.5, 0.0])


def test_batch_normalisation_gives_unit_spread():
    config = AdvantageConfig(normalize="batch", leave_one_out=False)
    advantages = compute_advantages([_t("c"), _t("c")], [2.0, 0.0], Baselines(), config)
    assert advantages == pytest.approx([1.0, -1.0], abs=1e-5)


def test_batch_normalisation_centres_before_dividing():
    # Baseline 0 for family c: advantages [3, 1] (mean 2, std 1) -> [1, -1]; not [3, 1] / 1.
    config = AdvantageConfig(normalize="batch", leave_one_out=False)
    advantages = compute_advantages([_t("c"), _t("c")], [3.0, 1.0], Baselines({"c": 0.0}), config)
    assert advantages == pytest.approx([1.0, -1.0])


def test_batch_normalisation_of_equal_advantages_gives_zeros_not_a_blow_up():
    config = AdvantageConfig(normalize="batch", leave_one_out=False)
    # Advantages [0.5, 0.5]: std 0 used to divide by 1e-6 (5e5); equal advantages carry no signal.
    assert compute_advantages([_t("c"), _t("c")], [0.5, 0.5], Baselines({"c": 0.0}), config) == [0.0, 0.0]
    assert compute_advantages([_t("c")], [0.5], Baselines({"c": 0.0}), config) == [0.0]
