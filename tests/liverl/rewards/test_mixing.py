"""mix: weights by family, PARL lambdas annealed, Context-1's clamp at the trainer's step, Toggle gating."""

from __future__ import annotations

import math

import pytest

from liverl.rewards import mix, mix_terms
from liverl.rewards.mixing import f_beta


def test_weighted_sum_of_plain_components(config):
    components = {"outcome": 1.0, "broken_tool_calls": -0.5, "latency": -0.5, "not_a_weighted_name": 9.0}
    assert mix(components, "coding", 0, config) == pytest.approx(1.0 - 0.5 - 0.05)


def test_family_weights_override_the_defaults(config):
    config.family_weights = {"search": {"outcome": 0.0}, "coding": {"judge": 2.0}}
    assert mix({"outcome": 1.0}, "search", 0, config) == 0.0
    assert mix({"outcome": 1.0, "judge": 0.5}, "coding", 0, config) == pytest.approx(2.0)


def test_parl_lambdas_anneal_to_zero(config):
    components = {"parl.r_perf": 1.0, "parl.r_parallel": 0.75, "parl.r_finish": 0.5, "outcome": 1.0}
    assert mix(components, "orchestrator", 0, config) == pytest.approx(0.3 * 0.75 + 0.3 * 0.5 + 1.0)
    assert mix(components, "orchestrator", 500, config) == pytest.approx(0.15 * 1.25 + 1.0)
    assert mix(components, "orchestrator", 1000, config) == pytest.approx(1.0)  # outcome not counted twice


def test_parl_schedule_shape_and_end_are_configurable(config):
    config.parl.lambda1.shape = "cosine"
    config.parl.lambda1.end_step = 100
    components = {"parl.r_perf": 0.0, "parl.r_parallel": 1.0, "parl.r_finish": 0.0}
    assert mix(components, "orchestrator", 50, config) == pytest.approx(0.15)
    assert mix(components, "orchestrator", 25, config) == pytest.approx(0.3 * (1 - 0.5 * (1 - math.cos(math.pi / 4))))


def test_f_beta_hand_computed():
    assert f_beta(1.0, 0.75, 4.0) == pytest.approx(17 * 0.75 / (16 + 0.75))
    assert f_beta(0.0, 0.0, 2.0) == 0.0
    assert f_beta(0.5, 0.5, 2.0) == pytest.approx(0.5)


def test_context1_formula_with_beta_from_4_to_2(config):
    components = {"search.precision": 1.0, "search.recall": 0.75, "search.traj_recall": 0.75,
                  "search.answer_found": 1.0, "prune_penalty": -0.2, "turn_penalty": 0.0}
    f4 = 17 * 0.75 / 16.75
    assert mix(components, "search", 0, config) == pytest.approx(0.7 * f4 + 0.3 * 0.75 + 1.0 - 0.2)
    f2 = 5 * 0.75 / 4.75
    assert mix(components, "search", 1000, config) == pytest.approx(0.7 * f2 + 0.3 * 0.75 + 1.0 - 0.2)
    assert set(mix_terms(components, "search", 0, config)) == {"context1"}  # penalties consumed, not re-weighted


def test_context1_clamp_floor_and_empty_retrieval(config):
    weak = {"search.precision": 0.1, "search.recall": 0.1, "search.traj_recall": 0.1,
            "prune_penalty": -0.5, "turn_penalty": -0.5}
    assert mix(weak, "search", 0, config) == pytest.approx(config.context1.epsilon)
    empty = {"search.precision": 0.0, "search.recall": 0.0, "search.traj_recall": 0.0, "search.answer_found": 0.0,
             "prune_penalty": -0.5}
    assert mix(empty, "search", 0, config) == 0.0  # nothing retrieved: no floor above zero


def test_toggle_removes_credit_over_budget_in_budgeted_blocks(config):
    config.toggle.enabled = True
    config.toggle.period_steps = 10
    config.toggle.budget_tokens = {"coding": 100}
    components = {"outcome": 1.0, "broken_tool_calls": -0.25}
    assert mix(components, "coding", 5, config, num_policy_tokens=500) == pytest.approx(0.75)  # free block
    assert mix(components, "coding", 15, config, num_policy_tokens=500) == 0.0  # budgeted, over budget
    assert mix(components, "coding", 15, config, num_policy_tokens=50) == pytest.approx(0.75)
    assert mix({"broken_tool_calls": -0.25}, "coding", 15, config, num_policy_tokens=500) == pytest.approx(-0.25)
    with pytest.raises(ValueError, match="num_policy_tokens"):
        mix(components, "coding", 15, config)


def test_non_finite_components_are_refused(config):
    with pytest.raises(ValueError, match="finite"):
        mix({"outcome": float("nan")}, "coding", 0, config)


def test_map_columns_read_from_the_table_mix_like_dicts(config):
    pairs = [("outcome", 1.0), ("broken_tool_calls", -0.25)]
    assert mix(pairs, "coding", 0, config) == mix(dict(pairs), "coding", 0, config) == pytest.approx(0.75)
