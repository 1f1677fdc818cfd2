import random
from collections import Counter

import pytest

from demo.product.grammar import parse_tool_call
from demo.product.tasks import CodingTask, SearchTask
from demo.product.tasks.base import OutcomeReport
from demo.product.user import UNSOLVED_FOLLOW_UP, SimulatedUser, UserModel


def coding(seed, texts):
    t = CodingTask(random.Random(seed), "t")
    for text in texts(t):
        t.step(parse_tool_call(text, t.tools))
    return t


def reactions(texts, n=400):
    user = SimulatedUser()
    out = []
    for seed in range(n):
        t = coding(seed, texts)
        out.append(user.react(t, t.outcome(), [f"call-{i}" for i in range(t.calls)], random.Random(seed)))
    return out


def test_right_edits_are_mostly_kept_and_target_the_edit():
    kinds = Counter()
    for reaction in reactions(lambda t: [t.right_edit]):
        first = reaction.feedback[0]
        assert first.target_call_id == "call-0"
        kinds[first.kind] += 1
        assert reaction.follow_up is None or any(f.kind == "DISSATISFIED_FOLLOWUP" for f in reaction.feedback)
    assert kinds["EDIT_KEPT"] > 0.8 * sum(kinds.values())


def test_wrong_edits_are_mostly_reverted_and_often_followed_up():
    def wrong(t):
        other = next(f for f in t.files if f != t.buggy_file)
        return [t.right_edit.replace(t.buggy_file, other), "ask_user"]

    rs = reactions(wrong)
    reverted = sum(r.feedback[0].kind == "EDIT_REVERTED" for r in rs)
    followed = sum(r.follow_up is not None for r in rs)
    assert reverted > 0.7 * len(rs)
    assert 0.5 * len(rs) < followed < len(rs)


def test_no_edit_means_no_edit_feedback():
    for reaction in reactions(lambda t: ["ask_user", "ask_user"], n=50):
        assert all(f.kind == "DISSATISFIED_FOLLOWUP" for f in reaction.feedback)


def test_search_users_rate_by_outcome():
    user = SimulatedUser(UserModel(rating_chance=1.0))
    t = SearchTask(random.Random(0), "t")
    t.step(parse_tool_call(f"search {t.topic}", t.tools))
    t.step(parse_tool_call("answer " + " ".join(t.context[:2]), t.tools))
    assert t.outcome().score == 1.0
    reaction = user.react(t, t.outcome(), [], random.Random(0))
    assert [f.kind for f in reaction.feedback] == ["THUMBS_UP"]


def test_careful_users_revert_half_the_edits_nobody_confirmed_and_keep_confirmed_ones():
    careful = SimulatedUser(UserModel(revert_unconfirmed=0.5))

    def kept_share(texts):
        kept = 0
        for seed in range(400):
            t = coding(seed, texts)
            reaction = careful.react(t, t.outcome(), [f"call-{i}" for i in range(t.calls)], random.Random(seed))
            kept += reaction.feedback[0].kind == "EDIT_KEPT"
        return kept / 400

    assert 0.35 < kept_share(lambda t: [t.right_edit]) < 0.55  # 0.9 x 0.5
    assert kept_share(lambda t: ["ask_user", t.right_edit]) > 0.8


def test_an_edit_is_confirmed_only_when_the_question_came_before_it():
    def wrong(t):
        return t.right_edit.replace(t.buggy_file, next(f for f in t.files if f != t.buggy_file))

    asked_first = coding(0, lambda t: ["ask_user", t.right_edit])
    asked_after = coding(0, lambda t: [wrong(t), "ask_user"])
    assert asked_first.asked_user and asked_first.confirmed(asked_first.edits[-1][0])
    assert asked_after.asked_user and not asked_after.confirmed(asked_after.edits[-1][0])


# The chat tasks' users (react_to_reply): the same habits, judging the reply that produced the answer.
PASSED = OutcomeReport(success=True, score=1.0, detail="unit tests: passed")
FAILED = OutcomeReport(success=False, score=0.0, detail="unit tests: AssertionError")


def react(family: str, report: OutcomeReport, call_id: str, rng):
    return SimulatedUser().react_to_reply(family, report, call_id, rng)


def _kinds(family: str, report: OutcomeReport, n: int = 400) -> list[str]:
    rng = random.Random(0)
    return [item.kind for _ in range(n) for item in react(family, report, "call-1", rng).feedback]


def test_chat_coding_users_keep_passing_functions_and_revert_failing_ones():
    kept_when_passed = _kinds("coding", PASSED).count("EDIT_KEPT") / 400
    kept_when_failed = _kinds("coding", FAILED).count("EDIT_KEPT") / 400
    assert kept_when_passed > 0.8 and kept_when_failed < 0.25
    reaction = next(r for r in (react("coding", FAILED, "call-1", random.Random(s)) for s in range(50)) if r.follow_up)
    assert reaction.follow_up == UNSOLVED_FOLLOW_UP
    assert all(item.target_call_id == "call-1" for item in reaction.feedback)
    assert not any(react("coding", PASSED, "c", random.Random(s)).follow_up for s in range(200))


@pytest.mark.parametrize("family", ["search", "orchestrator"])
def test_chat_rating_users_thumb_up_by_outcome(family):
    up_good = _kinds(family, PASSED).count("THUMBS_UP")
    down_good = _kinds(family, PASSED).count("THUMBS_DOWN")
    up_bad = _kinds(family, FAILED).count("THUMBS_UP")
    assert down_good == 0 and up_bad == 0 and 120 < up_good < 280  # about half the users rate at all
