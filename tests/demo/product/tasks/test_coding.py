import random

from demo.product.grammar import parse_tool_call
from demo.product.tasks import CodingTask


def task(seed=0):
    return CodingTask(random.Random(seed), "t")


def test_the_right_edit_passes_the_check_at_once():
    t = task()
    assert t.buggy_file in t.prompt() and t.prompt().endswith(":")
    result = t.step(parse_tool_call(t.right_edit, t.tools))
    assert result.output == "check passed" and t.is_done
    report = t.outcome()
    assert report.success and report.score == 1.0


def test_clarifying_first_halves_the_reward():
    t = task(1)
    t.step(parse_tool_call("ask_user", t.tools))
    assert not t.is_done and t.prompt().endswith("asked :")
    t.step(parse_tool_call(t.right_edit, t.tools))
    assert t.outcome().score == 0.5 and t.asked_user


def test_broken_call_counts_and_a_wrong_edit_fails():
    t = task(2)
    result = t.step(parse_tool_call("edit fix_null", t.tools))
    assert result.is_error and t.broken_calls == 1 and "error" in t.prompt()
    wrong_file = next(f for f in t.files if f != t.buggy_file)
    result = t.step(parse_tool_call(t.right_edit.replace(t.buggy_file, wrong_file), t.tools))
    assert result.is_error and t.is_done
    report = t.outcome()
    assert not report.success and report.score == 0.0 and t.edits == [(1, False)]
