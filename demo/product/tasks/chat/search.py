"""Search task: answer a question from retrieved documents of the shipped corpus, citing the document's id.

The product runs the retrieval (the question against corpus.json, top DOCS_SHOWN, shown in a shuffled order so
the answer is not always first) and the policy answers in one call of at most MAX_TOKENS tokens. Success: the
reply contains the answer and cites the right id (and no other); the score gives half for each. The task's template
is its fact's kind (corpus.kind_of); two kinds are held out whole (HELDOUT_KINDS), with the orchestrator too.
"""

from __future__ import annotations

import random
import re

from demo.product.tasks.base import OutcomeReport
from demo.product.tasks.chat.base import DEV, FINAL, ChatTask, ChatTaskRequest, user_chat
from demo.product.tasks.chat.corpus import Document, documents_by_id, kind_of, load_corpus, mentions, search

DOCS_SHOWN = 2
MAX_TOKENS = 32
# Fact kinds held out whole (questions of a form training never asked), shared by search and the orchestrator.
HELDOUT_KINDS = {"festival": DEV, "company": FINAL}
CITATION = re.compile(r"\bD\d{3}\b")
INSTRUCTION = "Answer in a few words and cite the id of the document you used in brackets."
# The worked turn: made-up documents whose ids (D9xx) are not in the corpus.
EXAMPLE = (
    "Documents:\n[D901] The Velo river is 80 kilometres long.\n[D902] The Arna river flows into the Velo.\n\n"
    f"Question: How long is the Velo river?\n{INSTRUCTION}",
    "80 kilometres [D901]",
)


def search_keys() -> list[str]:
    return [f"search/{doc.id}" for doc in load_corpus()]


def shown_documents(question: str, gold: Document, k: int, rng: random.Random) -> list[Document]:
    """The retriever's top k for the question, with the gold document in them, in a shuffled order."""
    found = [doc for doc in search(question, k) if doc.id != gold.id][: k - 1] + [gold]
    rng.shuffle(found)
    return found


def documents_block(docs: list[Document]) -> str:
    return "\n".join(f"[{doc.id}] {doc.text}" for doc in docs)


class ChatSearchTask(ChatTask):
    family = "search"
    HELDOUT_TEMPLATES = HELDOUT_KINDS

    @classmethod
    def templates_of(cls, key: str) -> tuple[str, ...]:
        return (kind_of(documents_by_id()[key.split("/")[1]]),)

    def __init__(self, task_id: str, key: str) -> None:
        super().__init__(task_id, key)
        self.gold = documents_by_id()[key.split("/")[1]]
        self.shown = shown_documents(self.gold.question, self.gold, DOCS_SHOWN, random.Random(key))
        self.reply = ""

    def request_text(self) -> str:
        return f"Documents:\n{documents_block(self.shown)}\n\nQuestion: {self.gold.question}\n{INSTRUCTION}"

    def requests(self) -> list[ChatTaskRequest]:
        return [] if self.done else [ChatTaskRequest(user_chat(self.request_text(), EXAMPLE), MAX_TOKENS, self.agent_role)]

    def respond(self, texts: list[str]) -> None:
        (self.reply,) = texts
        self.transcript.append((self.agent_role, self.reply))
        self.done = True

    def outcome(self) -> OutcomeReport:
        cited = set(CITATION.findall(self.reply))
        right_citation = cited == {self.gold.id}
        answered = mentions(self.reply, self.gold.answer)
        return OutcomeReport(
            success=right_citation and answered,
            score=0.5 * right_citation + 0.5 * answered,
            detail=f"cited {sorted(cited) or 'nothing'} (gold {self.gold.id}); answer {'found' if answered else 'missing'}",
            gold_chunk_ids=(self.gold.id,),
            answer_chunk_ids=(self.gold.id,),
            metrics={"cited": float(len(cited)), "answered": float(answered), "right_citation": float(right_citation)},
        )
