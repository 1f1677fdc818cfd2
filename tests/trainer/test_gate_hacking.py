"""Hacking monitors judge hacking, not movement: a proxy that rises with the verified outcome passes, one that rises
while the outcome stays or falls is refused, monitors of pure noise refuse a healthy candidate at most about
monitor_alpha of the time (Holm over the family), and a monitor without a standard error is refused, never read as 0."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from liverl.config.trainer import GateConfig
from trainer.gate.online_eval import OnlineEvaluation, PairedFigures, PolicyFigures, judge_online

SUBAGENTS = "rate.subagents_over_one"  # a proxy the reward asks to raise (parallelism)


def _evaluation(outcome: tuple[float, float], monitors: dict[str, tuple[float, float | None]],
                n: int = 60) -> OnlineEvaluation:
    """Paired figures over n tasks: the outcome's (change, SE) and each monitor's (change, SE or None: missing)."""
    side = PolicyFigures(n, 0.5, 0.05, {name: 0.3 for name in monitors}, {})
    paired = PairedFigures(n, outcome[0], outcome[1], {name: move for name, (move, _) in monitors.items()},
                           {name: se for name, (_, se) in monitors.items() if se is not None})
    return OnlineEvaluation(side, side, paired)


def test_a_proxy_that_rises_with_the_outcome_passes():
    # Sub-agents per task up 0.3 ± 0.03 (far past the 0.1 tolerance), the verified outcome up 0.12 ± 0.03.
    assert judge_online(_evaluation((0.12, 0.03), {SUBAGENTS: (0.3, 0.03)}), GateConfig()) == []


@pytest.mark.parametrize("outcome", [(0.0, 0.03), (-0.03, 0.03), (0.04, 0.03)])  # stays, falls, not shown to rise
def test_a_proxy_that_rises_while_the_outcome_does_not_is_refused(outcome):
    [reason] = judge_online(_evaluation(outcome, {SUBAGENTS: (0.3, 0.03)}), GateConfig(max_online_reward_drop=1.0))
    # "did not rise" would be false for +0.04 ± 2·0.03: it rose, by less than its error; it was not shown to.
    assert SUBAGENTS in reason and "the verified outcome was not shown to rise with it" in reason


def test_a_monitor_without_a_standard_error_is_refused_not_read_as_zero():
    evaluation = _evaluation((0.12, 0.03), {"rate.clarifying": (0.02, None), "rate.give_up": (0.0, 0.01)})
    [reason] = judge_online(evaluation, GateConfig())
    assert "rate.clarifying" in reason and "standard error" in reason
    unpaired = OnlineEvaluation(PolicyFigures(30, 0.6, 0.05, {"rate.clarifying": 0.1}, {}),
                                PolicyFigures(30, 0.5, 0.05, {"rate.clarifying": 0.1}, {"rate.clarifying": 0.02}))
    assert any("rate.clarifying" in r and "standard error" in r for r in judge_online(unpaired, GateConfig()))


def _noise_trial(rng: random.Random, k: int, tasks: int) -> OnlineEvaluation:
    """A healthy candidate: outcome and k monitors whose per-task candidate-minus-champion differences are noise."""
    def change(sd: float) -> tuple[float, float]:
        diffs = [rng.gauss(0.0, sd) for _ in range(tasks)]
        return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(tasks)

    return _evaluation(change(0.3), {f"rate.noise_{i}": change(0.2) for i in range(k)}, n=tasks)


TRIALS, MONITORS, TASKS, ALPHA = 2000, 8, 100, 0.05


def test_monitors_of_pure_noise_refuse_a_healthy_candidate_about_alpha_of_the_time():
    rng = random.Random(7)
    config = GateConfig(max_online_monitor_increase=0.0, max_online_reward_drop=1.0)  # tolerance 0: the hardest case
    refused = sum(bool(judge_online(_noise_trial(rng, MONITORS, TASKS), config)) for _ in range(TRIALS))
    print(f"false refusals {refused}/{TRIALS} with {MONITORS} noise monitors (alpha {ALPHA})")
    assert refused / TRIALS <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)


def test_without_the_correction_the_same_noise_refuses_far_more_often():
    from trainer.step.hacking import MonitorMove, judge_hacking

    rng = random.Random(7)
    corrected = uncorrected = 0
    for _ in range(TRIALS):
        evaluation = _noise_trial(rng, MONITORS, TASKS)
        outcome, outcome_se = evaluation.reward_change()
        moves = [MonitorMove(name, move, se, "up", 0.0, outcome, outcome_se)
                 for name, (move, se) in evaluation.monitor_changes().items()]
        corrected += bool(judge_hacking(moves, ALPHA, "holm", 2.0).reasons)
        uncorrected += bool(judge_hacking(moves, ALPHA * MONITORS, "bonferroni", 2.0).reasons)  # each at ALPHA
    print(f"false refusals: Holm {corrected}/{TRIALS}, uncorrected {uncorrected}/{TRIALS}")
    assert ALPHA / 3 <= corrected / TRIALS <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / TRIALS)  # near alpha
    assert uncorrected / TRIALS > 4 * ALPHA  # 1 - (1 - alpha)^k: about a third
