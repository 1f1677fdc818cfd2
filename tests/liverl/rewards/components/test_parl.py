"""PARL components and critical steps against hand-computed cases."""

from __future__ import annotations

import pytest

from liverl.rewards import label
from tests.liverl.rewards.session_builder import SessionBuilder


def orchestrator(main_calls: int = 0) -> SessionBuilder:
    s = SessionBuilder("orchestrator", role="orchestrator")
    for _ in range(main_calls):
        s.model_call()
    return s


def test_two_stage_graph(config):
    # stage 0: a (3 steps), b (5), c (2) in parallel; stage 1: a again (4 steps, fails). Orchestrator: 4 calls.
    s = orchestrator(main_calls=4)
    for sub in "abc":
        s.subagent_created(sub)
    for sub, task in [("a", "t1"), ("b", "t2"), ("c", "t3")]:
        s.task_assigned(sub, task, stage=0)
    s.subagent_finished("a", "t1", success=True, steps=3)
    s.subagent_finished("b", "t2", success=True, steps=5)
    s.subagent_finished("c", "t3", success=True, steps=2)
    s.task_assigned("a", "t4", stage=1)
    s.subagent_finished("a", "t4", success=False, steps=4)
    s.outcome(success=True)
    got = label(s.build(), "main", config)
    assert got.critical_steps == 4 + 5 + 4
    assert got.components["parl.r_perf"] == 1.0
    assert got.components["parl.r_parallel"] == pytest.approx(3 / 4)  # parallel_target 4
    assert got.components["parl.r_finish"] == pytest.approx(3 / 4)
    assert got.signals["subtasks_failed"] == 1


def test_no_subagents_earns_no_parallel_or_finish_credit(config):
    s = orchestrator(main_calls=6)
    s.outcome(success=True)
    got = label(s.build(), "main", config)
    assert got.components["parl.r_parallel"] == 0.0
    assert got.components["parl.r_finish"] == 0.0
    assert got.critical_steps == 6  # a serial agent: every call is on the critical path


def test_all_subagents_failing(config):
    s = orchestrator(main_calls=2)
    for sub in "ab":
        s.subagent_created(sub)
        s.task_assigned(sub, f"t-{sub}", stage=0)
        s.subagent_finished(sub, f"t-{sub}", success=False, steps=3)
    s.outcome(success=False)
    got = label(s.build(), "main", config)
    assert got.components["parl.r_finish"] == 0.0
    assert got.components["parl.r_parallel"] == pytest.approx(2 / 4)
    assert got.components["parl.r_perf"] == 0.0
    assert got.critical_steps == 2 + 3


def test_idle_subagents_are_not_instantiated(config):
    s = orchestrator(main_calls=1)
    for sub in "abcd":
        s.subagent_created(sub)  # never given work
    s.subagent_created("e")
    s.task_assigned("e", "t", stage=0)
    s.subagent_finished("e", "t", success=False, steps=0)  # given work, did nothing
    got = label(s.build(), "main", config)
    assert got.components["parl.r_parallel"] == 0.0
    assert got.signals["idle_subagents"] == 5


def test_subagent_model_calls_count_as_work_when_steps_are_not_reported(config):
    s = orchestrator(main_calls=1)
    s.task_assigned("a", "t", stage=0)
    s.model_call(agent_id="a")
    got = label(s.build(), "main", config)
    assert got.components["parl.r_parallel"] == pytest.approx(1 / 4)
    assert got.signals["unfinished_subtasks"] == 1


def test_without_model_calls_each_stage_costs_one_main_step(config):
    s = orchestrator(main_calls=0)
    s.task_assigned("a", "t1", stage=0)
    s.subagent_finished("a", "t1", success=True, steps=2)
    s.task_assigned("a", "t2", stage=1)
    s.subagent_finished("a", "t2", success=True, steps=7)
    assert label(s.build(), "main", config).critical_steps == (1 + 2) + (1 + 7)


def test_coding_sessions_without_subagents_get_no_parl_components(config):
    s = SessionBuilder("coding")
    s.act("edit", {"f": "a"})
    assert not any(name.startswith("parl.") for name in label(s.build(), "main", config).components)


def test_serial_tasks_of_one_subagent_in_a_stage_add_up(config):
    # Stage 0: a runs t1 (2 steps) then t2 (3 steps): S_sub,a = 5; b runs t3 (4 steps): S_sub,b = 4.
    # Critical steps = S_main 2 + max(5, 4) = 7 (taking the max per task would give 2 + 4 = 6).
    s = orchestrator(main_calls=2)
    for sub, task, steps in [("a", "t1", 2), ("a", "t2", 3), ("b", "t3", 4)]:
        s.task_assigned(sub, task, stage=0)
        s.subagent_finished(sub, task, success=True, steps=steps)
    assert label(s.build(), "main", config).critical_steps == 2 + 5


def test_an_unfinished_subagent_counts_the_steps_it_took(config):
    # Stage 0: a finished t1 in 2 steps; c never finished t2 but made 6 model calls. Orchestrator: 1 call.
    # S_sub,c = 6 (its calls; none reported by a finished task) > S_sub,a = 2: 1 + 6 = 7 (it used to count 0).
    s = orchestrator(main_calls=1)
    s.task_assigned("a", "t1", stage=0)
    s.subagent_finished("a", "t1", success=True, steps=2)
    s.task_assigned("c", "t2", stage=0)
    for _ in range(6):
        s.model_call(agent_id="c")
    got = label(s.build(), "main", config)
    assert got.critical_steps == 1 + 6 and got.signals["unfinished_subtasks"] == 1


def test_an_unfinished_task_gets_only_the_calls_its_finished_tasks_do_not_account_for(config):
    # d: t1 finished in 3 steps (stage 0), t2 unfinished (stage 1), 5 model calls in all: t2 took 5 - 3 = 2.
    s = orchestrator(main_calls=2)
    s.task_assigned("d", "t1", stage=0)
    s.subagent_finished("d", "t1", success=True, steps=3)
    s.task_assigned("d", "t2", stage=1)
    for _ in range(5):
        s.model_call(agent_id="d")
    assert label(s.build(), "main", config).critical_steps == 2 + 3 + 2
