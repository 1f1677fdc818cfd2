"""Orchestrator task: split a request with several facts to find into sub-questions for frozen helpers.

The request asks for PARTS facts of the shipped corpus in one sentence. The policy (role orchestrator) writes
the sub-questions, one a line; each goes to a frozen copy of the base policy (role subagent) together with the
retriever's top SUBAGENT_DOCS documents for that sub-question, and the helper answers it. Success: between 2
and PARTS + 1 sub-questions, and every fact asked for appears in some helper's answer; the score is the share
of facts found (0 with too few or too many sub-questions: one question that restates the request, or a flood).
The key's templates are its facts' kinds: one fact of a held-out kind (search.HELDOUT_KINDS) holds it out.
"""

from __future__ import annotations

import re

from demo.product.policy import ROLE_ORCHESTRATOR, ROLE_SUBAGENT
from demo.product.tasks.base import OutcomeReport
from demo.product.tasks.chat.base import ChatTask, ChatTaskRequest, user_chat
from demo.product.tasks.chat.corpus import documents_by_id, kind_of, mentions, search
from demo.product.tasks.chat.search import HELDOUT_KINDS, documents_block

MAX_TOKENS = 64
SUBAGENT_TOKENS = 24
SUBAGENT_DOCS = 1
MIN_QUESTIONS = 2
BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.):]|question\s*\d*[.:])\s*", re.IGNORECASE)


def split_request(clauses: list[str]) -> str:
    wanted = ", ".join(clauses[:-1]) + " and " + clauses[-1]
    return (f"You lead a team of helpers. Split this request into {len(clauses)} separate questions, one per line, "
            f"so that each helper answers one of them.\nRequest: find out {wanted}.\nWrite only the questions.")


# The worked turn, about things the corpus does not hold.
EXAMPLE = (split_request(["who painted the Lorvan mural", "in which year did the Tessa mill open"]),
           "Who painted the Lorvan mural?\nIn which year did the Tessa mill open?")

HELPER_INSTRUCTION = "Answer in a few words, using the documents."
HELPER_EXAMPLE = ("Documents:\n[D901] The Velo river is 80 kilometres long.\n[D902] The Arna river flows into the Velo.\n\n"
                  f"Question: How long is the Velo river?\n{HELPER_INSTRUCTION}", "80 kilometres")


def orchestrator_key(doc_ids: list[str]) -> str:
    return "orchestrator/" + "+".join(sorted(doc_ids))


def sub_questions(text: str) -> list[str]:
    """The policy's sub-questions: non-empty lines without their bullets or numbers."""
    lines = (BULLET.sub("", line).strip() for line in text.splitlines())
    return [line for line in lines if len(line) > 3]


def as_clause(question: str) -> str:
    return question.rstrip("?").strip()[0].lower() + question.rstrip("?").strip()[1:]


class ChatOrchestratorTask(ChatTask):
    family = "orchestrator"
    agent_role = ROLE_ORCHESTRATOR
    HELDOUT_TEMPLATES = HELDOUT_KINDS

    @classmethod
    def templates_of(cls, key: str) -> tuple[str, ...]:
        return tuple(kind_of(documents_by_id()[doc_id]) for doc_id in key.split("/")[1].split("+"))

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(task_id, key)
        self.facts = [documents_by_id()[doc_id] for doc_id in key.split("/")[1].split("+")]
        self.questions: list[str] = []
        self.answers: list[str] = []

    @property
    def parts(self) -> int:
        return len(self.facts)

    def request_text(self) -> str:
        return split_request([as_clause(doc.question) for doc in self.facts])

    def requests(self) -> list[ChatTaskRequest]:
        if self.done:
            return []
        if not self.transcript:
            return [ChatTaskRequest(user_chat(self.request_text(), EXAMPLE), MAX_TOKENS, self.agent_role)]
        return [ChatTaskRequest(user_chat(self.helper_text(question), HELPER_EXAMPLE), SUBAGENT_TOKENS, ROLE_SUBAGENT)
                for question in self.questions]

    @staticmethod
    def helper_text(question: str) -> str:
        docs = search(question, SUBAGENT_DOCS)
        return f"Documents:\n{documents_block(docs)}\n\nQuestion: {question}\n{HELPER_INSTRUCTION}"

    def respond(self, texts: list[str]) -> None:
        if not self.transcript:
            (plan,) = texts
            self.transcript.append((self.agent_role, plan))
            self.questions = sub_questions(plan)
            self.done = not self.well_sized  # a bad split ends the task: no helper runs
            return
        self.answers = list(texts)
        self.transcript += [(ROLE_SUBAGENT, text) for text in texts]
        self.done = True

    @property
    def well_sized(self) -> bool:
        return MIN_QUESTIONS <= len(self.questions) <= self.parts + 1

    def outcome(self) -> OutcomeReport:
        found = [any(mentions(answer, doc.answer) for answer in self.answers) for doc in self.facts]
        share = sum(found) / self.parts if self.well_sized else 0.0
        return OutcomeReport(
            success=self.well_sized and all(found),
            score=round(share, 4),
            detail=f"{len(self.questions)} sub-questions for {self.parts} facts; {sum(found)} found",
            metrics={"sub_questions": float(len(self.questions)), "facts_found": float(sum(found)),
                     "well_sized": float(self.well_sized)},
        )
