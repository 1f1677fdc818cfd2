"""The generative judge against a real HTTP server on 127.0.0.1 speaking the OpenAI chat API.

The server is a test double of a remote LLM judge (tests/judge_double.py): the judge's model is
outside what liverl integrates, while the client, HTTP, timeouts and failure handling here are real.
"""

from __future__ import annotations

import pytest

from liverl.rewards.batch import label_batch
from liverl.rewards.judge import Judge
from liverl.rewards.judge_prompt import parse_score, render_transcript
from tests.judge_double import JudgeDouble, Reply
from tests.liverl.rewards.session_builder import SessionBuilder


def rubric_of(body: dict) -> str:
    return body["messages"][1]["content"].split("\n", 1)[0]


def by_rubric(scores: dict[str, Reply], default: Reply = Reply("5")):
    """Answer per rubric: the first key found in the rubric line wins."""
    def answer(body):
        line = rubric_of(body)
        return next((reply for word, reply in scores.items() if word in line), default)
    return answer


def session(text: str = "fix the bug", asks: bool = False):
    s = SessionBuilder()
    s.user_message(text)
    s.act("ask_user" if asks else "edit", {"f": "a.py"})
    s.outcome(success=not asks)
    return s.build()


@pytest.fixture
def judge_config(config):
    config.judge.enabled = True
    config.judge.timeout_s = 5.0
    return config


def test_rubrics_are_averaged_and_land_beside_the_outcome(judge_config):
    answer = by_rubric({"accomplish": Reply("10"), "stall": Reply("4"), "well-formed": Reply("Score: 7/10")})
    with JudgeDouble(answer) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            labels = label_batch([(session(), "main")], judge_config, judge)
        assert len(server.requests) == 3  # one per rubric
    assert labels[0].components["judge"] == pytest.approx((1.0 + 0.4 + 0.7) / 3)
    assert labels[0].components["outcome"] == 1.0
    assert labels[0].signals["judge.unjudged"] == 0.0


def test_cached_by_content_and_deduplicated_within_a_batch(judge_config):
    with JudgeDouble(by_rubric({})) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            first = judge.judge_many([(session(), "main"), (session(), "main"), (session("other task"), "main")])
            assert len(server.requests) == 6  # two distinct transcripts x 3 rubrics
            again = judge.judge(session(), "main")
            assert len(server.requests) == 6
    assert [j.score for j in first] == [0.5, 0.5, 0.5]
    assert again.score == 0.5 and again.cached_rubrics == 3
    assert judge.stats["cache_hits"] >= 3


def test_sends_the_api_key_and_the_model(judge_config):
    judge_config.judge.api_key = "judge-secret"
    judge_config.judge.model = "rubric-judge-1"
    with JudgeDouble(by_rubric({})) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            judge.judge(session(), "main")
        seen = server.requests[0]
    assert {k.lower(): v for k, v in seen.headers.items()}["authorization"] == "Bearer judge-secret"
    assert seen.body["model"] == "rubric-judge-1"


def test_timeouts_leave_the_trajectory_unjudged(judge_config):
    judge_config.judge.timeout_s = 0.2
    judge_config.judge.max_retries = 0
    with JudgeDouble(by_rubric({}, default=Reply("9", delay_s=1.0))) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            [labelled] = label_batch([(session(), "main")], judge_config, judge)
            verdict = judge.judge(session(), "main")
    assert "judge" not in labelled.components
    assert labelled.signals["judge.unjudged"] == 1.0
    assert verdict.score is None and "Timeout" in verdict.reason


def test_an_unreachable_endpoint_leaves_it_unjudged(judge_config):
    with JudgeDouble(by_rubric({})) as server:
        base_url = server.base_url  # nothing listens there once the server is closed
    judge_config.judge.base_url = base_url
    with Judge(judge_config.judge) as judge:
        verdict = judge.judge(session(), "main")
    assert verdict.score is None and "APIConnectionError" in verdict.reason
    assert judge.stats["unjudged"] == 1


def test_one_failing_rubric_still_judges_on_the_others_but_not_below_the_minimum(judge_config):
    judge_config.judge.max_retries = 0
    answer = by_rubric({"accomplish": Reply(status=500), "stall": Reply("8"), "well-formed": Reply("6")})
    with JudgeDouble(answer) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            verdict = judge.judge(session(), "main")
        assert verdict.score == pytest.approx(0.7) and "task_completion" in verdict.reason
        judge_config.judge.min_rubrics = 3
        with Judge(judge_config.judge) as judge:
            assert judge.judge(session(), "main").score is None


def test_a_retry_recovers_from_one_failure(judge_config):
    judge_config.judge.max_retries = 1
    calls = []

    def flaky(body):
        calls.append(1)
        return Reply(status=503) if len(calls) == 1 else Reply("6")

    judge_config.judge.rubrics = {"only": "Is it good?"}
    judge_config.judge.min_rubrics = 1
    with JudgeDouble(flaky) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            assert judge.judge(session(), "main").score == pytest.approx(0.6)


def test_a_client_error_is_not_retried_and_an_unparsable_reply_at_temperature_0_is_asked_once(judge_config):
    """A 4xx says the request is wrong (asking again changes nothing); at temperature 0 the judge answers the
    same question the same way, so a reply with no score is not worth a second request either."""
    judge_config.judge.max_retries = 3
    judge_config.judge.rubrics = {"only": "Is it good?"}
    judge_config.judge.min_rubrics = 1
    for reply, reason in ((Reply(status=400), "BadRequestError"), (Reply("I cannot judge this."), "no score")):
        with JudgeDouble(lambda body, reply=reply: reply) as server:
            judge_config.judge.base_url = server.base_url
            with Judge(judge_config.judge) as judge:
                verdict = judge.judge(session(), "main")
            assert len(server.requests) == 1, reason
        assert verdict.score is None and reason in verdict.reason


def test_an_unparsable_reply_is_asked_again_when_the_judge_samples(judge_config):
    judge_config.judge.max_retries = 1
    judge_config.judge.temperature = 0.7
    judge_config.judge.rubrics = {"only": "Is it good?"}
    judge_config.judge.min_rubrics = 1
    replies = iter([Reply("hmm"), Reply("7")])
    with JudgeDouble(lambda body: next(replies)) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            assert judge.judge(session(), "main").score == pytest.approx(0.7)
        assert len(server.requests) == 2


def test_unparseable_replies_do_not_count():
    assert parse_score("8") == 0.8 and parse_score("score: 12") == 1.0 and parse_score("-3") == 0.0
    with pytest.raises(ValueError, match="no score"):
        parse_score("I cannot judge this.")


def test_transcript_shows_what_the_agent_did_and_keeps_the_end(config):
    text = render_transcript(session(asks=True), "main", max_chars=10_000)
    assert "[user] fix the bug" in text and "ask_user" in text and "[outcome] success=False" in text
    short = render_transcript(session(asks=True), "main", max_chars=40)
    assert short.startswith("...") and short.endswith("success=False")


def test_judge_disabled_means_no_requests_and_no_unjudged_signal(config):
    with JudgeDouble(by_rubric({})) as server:
        config.judge.base_url = server.base_url
        with Judge(config.judge) as judge:
            [labelled] = label_batch([(session(), "main")], config, judge)
        assert server.requests == []
    assert "judge.unjudged" not in labelled.signals


def test_extra_headers_reach_the_endpoint(judge_config):
    judge_config.judge.headers = {"x-liverl-agent-role": "subagent"}
    with JudgeDouble(by_rubric({})) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            judge.judge(session(), "main")
        assert server.requests[0].headers["x-liverl-agent-role"] == "subagent"


def test_a_batch_past_its_deadline_leaves_the_rest_unjudged(judge_config):
    judge_config.judge.batch_timeout_s = 0.2
    with JudgeDouble(by_rubric({}, default=Reply("9", delay_s=1.0))) as server:
        judge_config.judge.base_url = server.base_url
        with Judge(judge_config.judge) as judge:
            verdict = judge.judge(session(), "main")
    assert verdict.score is None and "batch timeout" in verdict.reason
