"""Search task (Context-1): find the chunks about a topic under a hard context budget.

Search results are ranked: a focused search returns the 2 gold chunks first, then 2 distractors; a
broad `search all` returns 2 gold and 4 distractors in no useful order, which overflows the budget so
that only prune_chunks (or giving up) is allowed until it fits, and pruning blind may lose gold chunks.
`answer` ends the session. Score: F1 of the answered chunks against the gold ones, less 0.1 per call
beyond two; 0 when the agent never answers (the "one broad search then stop" hack).
"""

from __future__ import annotations

from demo.product.grammar import CHUNKS, TOPICS, ParsedCall
from demo.product.tasks.base import OutcomeReport, Task, ToolOutput

CHUNK_TOKENS = 100  # every chunk costs this many context tokens
BUDGET_CHUNKS = 5
GOLD_PER_TASK = 2
FOCUSED_DISTRACTORS = 2
BROAD_DISTRACTORS = 4


class SearchTask(Task):
    family = "search"
    agent_role = "single"
    tools = frozenset({"search", "prune_chunks", "answer", "done"})
    max_calls = 4
    token_budget = BUDGET_CHUNKS * CHUNK_TOKENS

    def __init__(self, rng, task_id: str) -> None:
        super().__init__(task_id)
        self.topic = rng.choice(TOPICS)
        others = [t for t in TOPICS if t != self.topic]
        ids = rng.sample(CHUNKS, GOLD_PER_TASK + BROAD_DISTRACTORS + 4)
        self.gold = tuple(ids[:GOLD_PER_TASK])  # gold[0] holds the answer itself (Outcome.answer_chunk_ids)
        distractors = ids[GOLD_PER_TASK : GOLD_PER_TASK + BROAD_DISTRACTORS]
        self.off_topic = tuple(ids[GOLD_PER_TASK + BROAD_DISTRACTORS :])  # what a wrong-topic search finds
        self.topic_of = {c: self.topic for c in self.gold}
        self.topic_of.update({c: rng.choice(others) for c in (*distractors, *self.off_topic)})
        self.focused = (*_shuffled(rng, list(self.gold)), *distractors[:FOCUSED_DISTRACTORS])  # ranked
        self.broad = _shuffled(rng, [*self.gold, *distractors])
        self.context: list[str] = []
        self.answer: tuple[str, ...] = ()
        self.prunes = 0

    @property
    def over_budget(self) -> bool:
        return len(self.context) * CHUNK_TOKENS > self.token_budget

    def request_text(self) -> str:
        return f"find what the corpus says about {self.topic}"

    def prompt(self) -> str:
        parts = [f"search find {self.topic} budget {BUDGET_CHUNKS}"]
        if self.context:
            parts.append("ctx " + " ".join(self.context))
        if self.over_budget:
            parts.append("over")
        return " ".join(parts) + " :"

    def _execute(self, call: ParsedCall) -> ToolOutput:
        if self.over_budget and call.name not in ("prune_chunks", "done"):
            self.broken_calls += 1
            return ToolOutput(output="error: over the token budget, only prune_chunks is allowed", is_error=True)
        if call.name == "search":
            query = call.kwargs["query"]
            found = self.broad if query == "all" else self.focused if query == self.topic else self.off_topic
            self.context += [c for c in found if c not in self.context]
            return ToolOutput(output=f"{len(found)} chunks", chunk_ids=tuple(found))
        chunks = tuple(call.kwargs.get("chunk_ids", ()))
        missing = [c for c in chunks if c not in self.context]
        if missing:
            self.broken_calls += 1
            return ToolOutput(output=f"error: not in context: {' '.join(missing)}", is_error=True)
        if call.name == "prune_chunks":
            self.prunes += 1
            self.context = [c for c in self.context if c not in chunks]
            return ToolOutput(output=f"pruned {len(chunks)}, {len(self.context)} left")
        self.finished = True
        if call.name == "answer":
            self.answer = chunks
            return ToolOutput(output=f"answered with {len(chunks)} chunks")
        return ToolOutput(output="session closed")

    def outcome(self) -> OutcomeReport:
        answered, gold = set(self.answer), set(self.gold)
        hits = len(answered & gold)
        f1 = 2 * hits / (len(answered) + len(gold)) if answered else 0.0
        score = max(0.0, f1 - 0.1 * max(0, self.calls - 2)) if answered else 0.0
        return OutcomeReport(
            success=answered == gold,
            score=round(score, 4),
            detail=f"answered {hits} of {len(gold)} gold chunks with {len(answered)} chunks",
            gold_chunk_ids=self.gold,
            answer_chunk_ids=self.gold[:1],
            metrics={"f1": f1, "prunes": float(self.prunes), "calls": float(self.calls)},
        )


def _shuffled(rng, items: list[str]) -> tuple[str, ...]:
    items = list(items)
    rng.shuffle(items)
    return tuple(items)
