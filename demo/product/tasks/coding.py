"""Coding-edit task: one file holds a bug; an edit passes the check when it fixes that bug in that file.

Scores: a passing edit on the first call 1.0, on the second 0.5 (after a clarifying question, a broken
call or a failed edit), otherwise 0. Clarifying instead of editing and broken calls are the known hacks.
"""

from __future__ import annotations

from demo.product.grammar import BUGS, FILES, FIXES, ParsedCall
from demo.product.tasks.base import OutcomeReport, Task, ToolOutput


class CodingTask(Task):
    family = "coding"
    agent_role = "single"
    tools = frozenset({"edit", "ask_user", "done"})
    max_calls = 2

    def __init__(self, rng, task_id: str) -> None:
        super().__init__(task_id)
        self.files = rng.sample(FILES, 3)
        self.buggy_file = rng.choice(self.files)
        self.bug = rng.randrange(len(BUGS))
        self.note = ""  # what the agent sees of its previous call
        self.asked_at: int | None = None  # call index of the agent's first question to the user
        self.edits: list[tuple[int, bool]] = []  # (call index, passed)

    @property
    def right_edit(self) -> str:
        return f"edit {self.buggy_file} {FIXES[self.bug]}"

    @property
    def asked_user(self) -> bool:
        return self.asked_at is not None

    def confirmed(self, edit_index: int) -> bool:
        """Whether the agent had asked the user before the edit at this call index."""
        return self.asked_at is not None and self.asked_at < edit_index

    @property
    def passed_at(self) -> int | None:
        """1-based call number of the first passing edit."""
        return next((index + 1 for index, passed in self.edits if passed), None)

    def request_text(self) -> str:
        return f"the {BUGS[self.bug]} bug in {self.buggy_file} breaks the build, please fix it"

    def prompt(self) -> str:
        note = f" {self.note}" if self.note else ""
        return f"coding files {' '.join(self.files)} bug {BUGS[self.bug]} in {self.buggy_file}{note} :"

    def _on_broken(self, call: ParsedCall) -> ToolOutput:
        self.note = "error"
        return super()._on_broken(call)

    def _execute(self, call: ParsedCall) -> ToolOutput:
        if call.name == "ask_user":
            if self.asked_at is None:
                self.asked_at = self.calls - 1
            self.note = "asked"
            return ToolOutput(output=f"user: it is the {BUGS[self.bug]} bug in {self.buggy_file}")
        if call.name == "done":
            self.finished = True
            return ToolOutput(output="session closed")
        passed = call.kwargs["file"] == self.buggy_file and call.kwargs["fix"] == FIXES[self.bug]
        self.edits.append((self.calls - 1, passed))
        if passed:
            self.finished = True
            return ToolOutput(output="check passed")
        self.note = "failed"
        return ToolOutput(output="check failed: the build still breaks", is_error=True)

    def outcome(self) -> OutcomeReport:
        passed_at = self.passed_at
        score = {1: 1.0, 2: 0.5}.get(passed_at, 0.0)
        return OutcomeReport(
            success=passed_at is not None,
            score=score,
            detail="edit passed the check" if passed_at else "no edit passed the check",
            metrics={"edits": float(len(self.edits)), "asked_user": float(self.asked_user), "calls": float(self.calls)},
        )
