import random

from demo.product.grammar import parse_tool_call
from demo.product.tasks import OrchestratorTask


class AlwaysSucceeds(random.Random):
    def random(self):
        return 0.0


def play(t, *texts, rng=None):
    rng = rng or AlwaysSucceeds(0)
    results = []
    for text in texts:
        result = t.step(parse_tool_call(text, t.tools))
        for sub, part in result.assignments:
            t.finish_part(sub, part, rng)
        results.append(result)
    return results


def task(parts):
    t = OrchestratorTask(random.Random(0), "t")
    t.n_parts, t.todo = parts, [f"part_{i}" for i in range(1, parts + 1)]
    return t


def test_parallel_assignment_finishes_in_one_stage():
    t = task(2)
    created, assigned = play(t, "create_subagent 2", "assign_task sub_1 part_1 sub_2 part_2")
    assert created.created == ("sub_1", "sub_2")
    assert assigned.assignments == (("sub_1", "part_1"), ("sub_2", "part_2"))
    assert t.is_done and t.stages == 1
    report = t.outcome()
    assert report.success and report.score == 1.0


def test_serial_collapse_and_idle_subagents_cost_reward():
    t = task(2)
    play(t, "create_subagent 1", "assign_task sub_1 part_1", "assign_task sub_1 part_2")
    assert t.outcome().score == 0.75
    t = task(3)
    play(t, "create_subagent 3", "done")
    assert t.outcome().score == 0.0 and t.outcome().metrics["idle_subagents"] == 3


def test_bad_assignments_and_broken_calls_are_errors():
    t = task(2)
    broken, _, wrong = play(t, "assign_task part_1", "create_subagent 1", "assign_task sub_2 part_1")
    assert broken.is_error and wrong.is_error and t.broken_calls == 2
    assert "sub_2 part_1" in wrong.output


def test_a_failed_part_returns_to_todo():
    class Fails(random.Random):
        def random(self):
            return 0.99

    t = task(2)
    play(t, "create_subagent 2", "assign_task sub_1 part_1 sub_2 part_2", rng=Fails(0))
    assert sorted(t.todo) == ["part_1", "part_2"] and not t.finished
