"""The online evaluator is a real subprocess: its figures are parsed and judged, and every way it can fail (an
exit code, a timeout, no or partial JSON, a NaN) is an error the gate turns into a refusal."""

from __future__ import annotations

import json
import math
import time

import pytest

from liverl.config.trainer import GateConfig
from trainer.gate.online_eval import (
    OnlineEvalError,
    OnlineEvaluation,
    PairedFigures,
    PolicyFigures,
    evaluate_online,
    judge_online,
    parse_evaluation,
)

MONITORS = {"rate.broken_tool_calls": 0.1, "rate.clarifying": 0.05}


def _side(reward: float, se: float, monitors=MONITORS, n: int = 30) -> dict:
    return {"n": n, "reward_mean": reward, "reward_se": se, "monitors": dict(monitors),
            "monitors_se": {name: 0.01 for name in monitors}}


def _printing(text: str) -> list[str]:
    """A command that checks it got the two folders (exit 3 if not) and prints `text`."""
    script = ("import sys; sys.exit(3) if sys.argv[1:] != ['/c', '/b'] else None; "
              f"print('progress lines before the figures are ignored'); print({text!r})")
    return ["python", "-c", script, "{candidate}", "{champion}"]


def _run(text: str, timeout_s: float = 60.0):
    return evaluate_online(_printing(text), "/c", "/b", timeout_s)


def test_figures_of_a_real_command_with_placeholders_and_our_interpreter():
    printed = json.dumps({"candidate": _side(0.6, 0.05), "champion": _side(0.5, 0.05),
                          "paired": {"n": 30, "reward_change": 0.1, "reward_change_se": 0.02,
                                     "monitors_change": {k: 0.0 for k in MONITORS},
                                     "monitors_change_se": {k: 0.01 for k in MONITORS}}})
    evaluation = _run(printed)
    assert evaluation.candidate == PolicyFigures(30, 0.6, 0.05, MONITORS, {k: 0.01 for k in MONITORS})
    assert evaluation.paired.reward_change == 0.1 and evaluation.reward_change() == (0.1, 0.02)
    assert judge_online(evaluation, GateConfig()) == []
    figures = evaluation.figures()
    assert figures["online_reward_change"] == 0.1 and figures["online_tasks"] == 30
    assert figures["monitor.online.rate.clarifying"] == 0.0
    assert figures["monitor.online.rate.clarifying.candidate"] == 0.05


def test_no_command_means_no_online_evaluation():
    assert evaluate_online(None, "/c", "/b", 1.0) is None
    assert evaluate_online([], "/c", "/b", 1.0) is None


def test_a_failing_command_is_an_error_that_quotes_its_stderr():
    command = ["python", "-c", "import sys; print('the policy folder is broken', file=sys.stderr); sys.exit(2)"]
    with pytest.raises(OnlineEvalError, match="exited with code 2(.|\n)*the policy folder is broken"):
        evaluate_online(command, "/c", "/b", 60.0)
    with pytest.raises(OnlineEvalError, match="cannot start"):
        evaluate_online(["/nonexistent/evaluator"], "/c", "/b", 60.0)


def test_a_command_past_its_timeout_is_stopped_and_an_error():
    started = time.monotonic()
    with pytest.raises(OnlineEvalError, match="online_eval_timeout_s=1"):
        evaluate_online(["python", "-c", "import time; time.sleep(60)"], "/c", "/b", 1.0)
    assert time.monotonic() - started < 15  # stopped, not waited for


@pytest.mark.parametrize("text, message", [
    ("", "not a JSON object.*progress lines"),  # the figures never came
    ('{"candidate": {"n": 30, "reward_mean": 0.5', "not a JSON object"),  # cut short
    ("[1, 2]", "not an object"),
    (json.dumps({"candidate": _side(0.5, 0.1)}), "no 'champion'"),
    (json.dumps({"candidate": {"n": 30, "reward_mean": 0.5, "monitors": {}}, "champion": _side(0.5, 0.1)}),
     "candidate.reward_se must be a number"),
    (json.dumps({"candidate": _side(0.5, 0.1, {"rate.clarifying": 0.1}), "champion": _side(0.5, 0.1)}),
     "one side only"),
    (json.dumps({"candidate": _side(0.5, 0.1), "champion": _side(0.5, 0.1), "paired": {"n": 30}}),
     "paired.monitors_change"),
])
def test_no_or_partial_json_is_an_error(text, message):
    with pytest.raises(OnlineEvalError, match=message):
        _run(text)


def test_a_silent_command_is_an_error():
    with pytest.raises(OnlineEvalError, match="printed nothing"):
        evaluate_online(["python", "-c", "pass"], "/c", "/b", 60.0)


def test_a_nan_figure_is_an_error():
    printed = json.dumps({"candidate": _side(math.nan, 0.1), "champion": _side(0.5, 0.1)})  # json writes NaN
    assert "NaN" in printed
    with pytest.raises(OnlineEvalError, match="candidate.reward_mean is nan"):
        _run(printed)
    with pytest.raises(OnlineEvalError, match="not finite"):
        parse_evaluation(json.dumps({"candidate": _side(0.5, 0.1, {"rate.clarifying": math.inf}),
                                     "champion": _side(0.5, 0.1, {"rate.clarifying": 0.0})}))


def _paired(change: float, se: float, monitors_change: dict | None = None) -> OnlineEvaluation:
    changes = monitors_change or {name: 0.0 for name in MONITORS}
    side = PolicyFigures(30, 0.5, 0.1, dict(MONITORS), {})
    return OnlineEvaluation(side, side, PairedFigures(30, change, se, changes, {name: 0.01 for name in changes}))


def test_the_reward_is_judged_at_its_lower_confidence_bound():
    config = GateConfig(max_online_reward_drop=0.05, confidence_z=2.0)
    assert judge_online(_paired(-0.02, 0.01), config) == []  # -0.02 - 2·0.01 = -0.04 >= -0.05
    assert judge_online(_paired(-0.02, 0.01), config.model_copy(update={"confidence_z": 4.0}))  # -0.06
    [reason] = judge_online(_paired(-0.04, 0.01), config)  # -0.06
    assert "online reward -0.0400" in reason and "0.05" in reason
    assert judge_online(_paired(math.nan, 0.01), config)  # a NaN never passes


def test_without_pairs_the_sides_are_independent():
    evaluation = OnlineEvaluation(PolicyFigures(30, 0.5, 0.03, {}, {}), PolicyFigures(30, 0.6, 0.04, {}, {}))
    change, se = evaluation.reward_change()
    assert change == pytest.approx(-0.1) and se == pytest.approx(0.05)  # hypot(0.03, 0.04)
    assert judge_online(evaluation, GateConfig(max_online_reward_drop=0.2)) == []  # -0.1 - 0.1 = -0.2
    assert judge_online(evaluation, GateConfig(max_online_reward_drop=0.19))


def test_a_monitor_counts_only_when_its_rise_is_shown_past_the_tolerance():
    config = GateConfig(max_online_monitor_increase=0.05, confidence_z=2.0)
    assert judge_online(_paired(0.0, 0.01, {"rate.clarifying": 0.04}), config) == []  # not shown past 0.05
    [reason] = judge_online(_paired(0.0, 0.01, {"rate.clarifying": 0.2}), config)  # 0.2 ± 0.01, outcome flat
    assert "rate.clarifying" in reason and "candidate's own outputs" in reason
    assert judge_online(_paired(0.0, 0.01, {"rate.clarifying": -0.5}), config) == []  # fewer questions: fine
    assert judge_online(_paired(0.1, 0.01, {"rate.clarifying": 0.2}), config) == []  # rose with the outcome


def test_too_few_tasks_are_refused():
    side = PolicyFigures(1, 0.5, 0.0, {}, {})
    [reason] = judge_online(OnlineEvaluation(side, side), GateConfig())
    assert "too few tasks" in reason
