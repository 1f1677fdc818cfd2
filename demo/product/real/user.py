"""Simulated users of the real-model product: they turn a task's verified outcome into production feedback.

The same habits as the toy product's users (demo/product/user.py, UserModel): a function whose tests passed is
mostly kept, a failing one mostly reverted, an unsolved request sometimes gets a dissatisfied follow-up; search
and orchestrator users sometimes rate the answer, thumbs up the more often the better the outcome.
"""

from __future__ import annotations

from demo.product.tasks.base import OutcomeReport
from demo.product.user import FeedbackItem, Reaction, UserModel

UNSOLVED_FOLLOW_UP = "that does not work, the tests still fail"


def react(family: str, report: OutcomeReport, answer_call_id: str, rng, model: UserModel = UserModel()) -> Reaction:
    """The user's reaction to a finished task; feedback targets the call that produced the answer."""
    if family == "coding":
        kept = rng.random() < (model.keep_right_edit if report.success else model.keep_wrong_edit)
        items = [FeedbackItem("EDIT_KEPT" if kept else "EDIT_REVERTED", 1.0 if kept else 0.0, answer_call_id)]
        unhappy = model.dissatisfied_if_solved if report.success else model.dissatisfied_if_unsolved
        if rng.random() < unhappy and not report.success:
            items.append(FeedbackItem("DISSATISFIED_FOLLOWUP", 0.0, answer_call_id, UNSOLVED_FOLLOW_UP))
            return Reaction(UNSOLVED_FOLLOW_UP, tuple(items))
        return Reaction(None, tuple(items))
    if rng.random() >= model.rating_chance:
        return Reaction(None, ())
    happy = rng.random() < report.score
    return Reaction(None, (FeedbackItem("THUMBS_UP" if happy else "THUMBS_DOWN", 1.0 if happy else 0.0,
                                        answer_call_id),))
