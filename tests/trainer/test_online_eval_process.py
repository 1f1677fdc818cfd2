"""The persistent online evaluator is a real process that answers one JSON line per candidate: it starts once,
and every way it can fail (death, silence past the timeout, a broken answer, a flood without a line end) refuses
the candidate and stops it, so the next candidate gets a fresh one."""

from __future__ import annotations

import json
import time

import pytest

from liverl.config.trainer import GateConfig
from trainer.gate.online_eval import OnlineEvalError
from trainer.gate.online_eval_process import PerCandidateEvaluator, PersistentEvaluator, online_evaluator

SIDE = {"n": 30, "reward_mean": 0.5, "reward_se": 0.05, "monitors": {"rate.clarifying": 0.1}}


def _server(body: str) -> list[str]:
    """An evaluator that runs `body` (statements; `request`, `count` and `side` in scope) per request line."""
    script = "\n".join([
        "import json, os, sys, time",
        'side = {"n": 30, "reward_mean": 0.5, "reward_se": 0.05, "monitors": {"rate.clarifying": 0.1}}',
        "count = 0",
        "for line in sys.stdin:",
        "    count += 1",
        "    request = json.loads(line)",
        '    print(f"request {count} in pid {os.getpid()}", file=sys.stderr, flush=True)',
        *("    " + statement for statement in body.split("\n")),
    ])
    return ["python", "-c", script]


ECHO = ('print(json.dumps({"id": request.get("id"), '
        '"candidate": dict(side, reward_mean=float(len(request["candidate"]))), "champion": side}), flush=True)')


def _answer(reward: float, request_id: str = 'request.get("id")') -> str:
    """A statement printing an answer whose candidate reward is `reward`, tagged with `request_id` (an expression)."""
    return (f'print(json.dumps({{"id": {request_id}, "candidate": dict(side, reward_mean={reward}), '
            f'"champion": side}}), flush=True)')


def test_a_stale_extra_answer_is_discarded_and_counted_not_read_as_the_next_candidates():
    # Request 1 is answered twice (a retried answer): its extra line, 0.7, is on stdout when request 2 (0.1) is sent.
    evaluator = PersistentEvaluator(_server(f"if count == 1: {_answer(0.7)}\nif count == 1: {_answer(0.7)}\n"
                                            f"if count == 2: {_answer(0.1)}"), timeout_s=30.0)
    try:
        first = evaluator.evaluate("/v2", "/champion")
        second = evaluator.evaluate("/v3", "/champion")
    finally:
        evaluator.close()
    assert first.candidate.reward_mean == 0.7
    assert second.candidate.reward_mean == 0.1  # v3's own answer, not v2's extra line
    assert evaluator.discarded == 1


def test_an_answer_to_another_request_is_discarded_and_the_missing_one_times_out_as_a_failure():
    evaluator = PersistentEvaluator(_server(_answer(0.9, '"not-your-request"')), timeout_s=2.0)
    with pytest.raises(OnlineEvalError, match="online_eval_timeout_s=2 s(.|\n)*1 answer.*did not match"):
        evaluator.evaluate("/c", "/b")
    assert evaluator.discarded == 1 and evaluator._process is None


def test_one_process_answers_every_candidate_in_order():
    evaluator = PersistentEvaluator(_server(ECHO), timeout_s=30.0)
    try:
        first = evaluator.evaluate("/c", "/champion")
        second = evaluator.evaluate("/cand", "/champion")
    finally:
        evaluator.close()
    assert (first.candidate.reward_mean, second.candidate.reward_mean) == (2.0, 5.0)  # the folders it was sent
    assert first.champion.reward_mean == 0.5
    assert evaluator.started == 1


def test_a_dead_evaluator_refuses_the_candidate_and_the_next_one_starts_afresh():
    evaluator = PersistentEvaluator(_server('print("about to die", file=sys.stderr, flush=True); sys.exit(4)'),
                                    timeout_s=30.0)
    with pytest.raises(OnlineEvalError, match="exited with code 4 before answering(.|\n)*about to die"):
        evaluator.evaluate("/c", "/b")
    with pytest.raises(OnlineEvalError, match="exited with code 4"):
        evaluator.evaluate("/c", "/b")
    assert evaluator.started == 2


def test_silence_past_the_timeout_is_stopped_and_refused():
    evaluator = PersistentEvaluator(_server("time.sleep(60)"), timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(OnlineEvalError, match="online_eval_timeout_s=1 s(.|\n)*request 1"):
        evaluator.evaluate("/c", "/b")
    assert time.monotonic() - started < 15
    assert evaluator._process is None  # stopped, not left running


@pytest.mark.parametrize("body, message", [
    ('print("{not json", flush=True)', "not a JSON object"),
    ('print(json.dumps({"id": request["id"], "error": "ValueError: no such folder"}), flush=True)', "no such folder"),
    ('print(json.dumps({"id": request["id"], "candidate": {"n": 30}, "champion": {}}), flush=True)',
     "reward_mean must be a number"),
    ('sys.stdout.write("x" * (17 * 2**20)); sys.stdout.flush(); time.sleep(60)', "without a line end"),
])
def test_a_broken_answer_is_refused(body, message):
    evaluator = PersistentEvaluator(_server(body), timeout_s=60.0)
    try:
        with pytest.raises(OnlineEvalError, match=message):
            evaluator.evaluate("/c", "/b")
    finally:
        evaluator.close()


def test_an_evaluator_that_cannot_start_is_refused():
    with pytest.raises(OnlineEvalError, match="cannot start"):
        PersistentEvaluator(["/nonexistent/evaluator"], timeout_s=5.0).evaluate("/c", "/b")


def test_closing_ends_the_process_through_its_stdin():
    evaluator = PersistentEvaluator(_server(ECHO), timeout_s=30.0)
    evaluator.evaluate("/c", "/b")
    process = evaluator._process
    evaluator.close()
    assert process.returncode == 0  # it read stdin's end and exited by itself
    evaluator.close()  # twice is harmless


def test_the_config_picks_the_evaluator():
    assert online_evaluator(GateConfig()) is None
    assert isinstance(online_evaluator(GateConfig(online_eval_command=["x", "{candidate}", "{champion}"])),
                      PerCandidateEvaluator)
    assert isinstance(online_evaluator(GateConfig(online_eval_command=["x"], online_eval_mode="persistent")),
                      PersistentEvaluator)
    with pytest.raises(ValueError, match="remove {candidate} and {champion}"):
        GateConfig(online_eval_command=["x", "{candidate}"], online_eval_mode="persistent")
    assert json.loads(json.dumps(SIDE)) == SIDE
