"""Simulated users: they judge what the agent did, some right away (a follow-up), most later (feedback).

Edits that passed the check are mostly kept, failed ones mostly reverted (careful users also revert edits nobody
confirmed with them); users whose problem was not solved, or who were asked a question instead of getting an edit,
sometimes follow up dissatisfied.
Search and orchestrator users give a thumbs up or down, more often up the better the outcome.
The chat tasks' users (react_to_reply) have the same habits, judging the one reply that produced the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from demo.product.tasks import CodingTask, OutcomeReport, Task

UNSOLVED_FOLLOW_UP = "that does not work, the tests still fail"


@dataclass(frozen=True)
class UserModel:
    keep_right_edit: float = 0.9
    """Chance that an edit which passed the check is kept."""
    keep_wrong_edit: float = 0.15
    """Chance that an edit which failed the check is kept anyway."""
    dissatisfied_if_unsolved: float = 0.6
    dissatisfied_if_solved: float = 0.05
    dissatisfied_if_asked: float = 0.2
    """Added to the dissatisfaction chance when the agent asked a question instead of editing."""
    revert_unconfirmed: float = 0.0
    """Chance that an edit the agent made before asking the user anything is reverted whatever it did (a careful
    team reviews every change nobody confirmed with them)."""
    rating_chance: float = 0.5
    """Chance that a search or orchestrator user bothers to give a thumbs up or down."""


@dataclass(frozen=True)
class FeedbackItem:
    kind: str  # a FeedbackKind name without its prefix: "EDIT_KEPT", "DISSATISFIED_FOLLOWUP", ...
    value: float
    target_call_id: str = ""
    comment: str = ""


@dataclass(frozen=True)
class Reaction:
    follow_up: str | None  # a follow-up message within the session (UserMessage follow_up=True)
    feedback: tuple[FeedbackItem, ...]  # sent after the session ended, with a delay


class SimulatedUser:
    def __init__(self, model: UserModel = UserModel()) -> None:
        self.model = model

    def react(self, task: Task, report: OutcomeReport, call_ids: list[str], rng) -> Reaction:
        """call_ids[i]: the recorded call id of the task's i-th tool call (feedback targets the last edit)."""
        if isinstance(task, CodingTask):
            return self._react_to_coding(task, report, call_ids, rng)
        return self._rating(report, "", rng)

    def react_to_reply(self, family: str, report: OutcomeReport, answer_call_id: str, rng) -> Reaction:
        """A chat task's user (demo.product.tasks.chat): feedback targets the call that produced the answer."""
        m = self.model
        if family == "coding":
            kept = rng.random() < (m.keep_right_edit if report.success else m.keep_wrong_edit)
            items = [FeedbackItem("EDIT_KEPT" if kept else "EDIT_REVERTED", 1.0 if kept else 0.0, answer_call_id)]
            unhappy = m.dissatisfied_if_solved if report.success else m.dissatisfied_if_unsolved
            if rng.random() < unhappy and not report.success:
                items.append(FeedbackItem("DISSATISFIED_FOLLOWUP", 0.0, answer_call_id, UNSOLVED_FOLLOW_UP))
                return Reaction(UNSOLVED_FOLLOW_UP, tuple(items))
            return Reaction(None, tuple(items))
        return self._rating(report, answer_call_id, rng)

    def _rating(self, report: OutcomeReport, target_call_id: str, rng) -> Reaction:
        """Search and orchestrator users: some rate, thumbs up the more often the better the outcome."""
        if rng.random() >= self.model.rating_chance:
            return Reaction(None, ())
        happy = rng.random() < report.score
        return Reaction(None, (FeedbackItem("THUMBS_UP" if happy else "THUMBS_DOWN", 1.0 if happy else 0.0,
                                            target_call_id),))

    def _react_to_coding(self, task: CodingTask, report: OutcomeReport, call_ids: list[str], rng) -> Reaction:
        m = self.model
        items: list[FeedbackItem] = []
        if task.edits:
            index, passed = task.edits[-1]
            kept = rng.random() < (m.keep_right_edit if passed else m.keep_wrong_edit)
            if m.revert_unconfirmed and not task.confirmed(index):  # only such users draw: others' streams stay
                kept = kept and rng.random() >= m.revert_unconfirmed
            items.append(FeedbackItem("EDIT_KEPT" if kept else "EDIT_REVERTED", 1.0 if kept else 0.0, call_ids[index]))
        unhappy = (m.dissatisfied_if_solved if report.success else m.dissatisfied_if_unsolved) + (
            m.dissatisfied_if_asked if task.asked_user else 0.0
        )
        if rng.random() >= unhappy:
            return Reaction(None, tuple(items))
        text = "it is still broken, that does not work" if not report.success else "why did you ask, it was clear"
        target = items[0].target_call_id if items else ""
        items.append(FeedbackItem("DISSATISFIED_FOLLOWUP", 0.0, target, text))
        return Reaction(text, tuple(items))
