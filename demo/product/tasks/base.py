"""What every task environment offers the session runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from demo.product.grammar import ParsedCall


@dataclass(frozen=True)
class ToolOutput:
    """The environment's answer to one tool call; becomes a ToolResult event."""

    output: str
    is_error: bool = False
    chunk_ids: tuple[str, ...] = ()
    created: tuple[str, ...] = ()  # orchestrator: sub-agents this call created (grammar ids, "sub_1")
    assignments: tuple[tuple[str, str], ...] = ()  # orchestrator: (sub-agent, part) pairs to run now


@dataclass(frozen=True)
class OutcomeReport:
    """The verifiable result; `score` in [0, 1] is the served reward the demo plots."""

    success: bool
    score: float
    detail: str
    gold_chunk_ids: tuple[str, ...] = ()  # search: the chunks that should be retrieved
    answer_chunk_ids: tuple[str, ...] = ()  # search: the gold chunks that hold the answer (ground truth)
    metrics: dict[str, float] = field(default_factory=dict)


class Task:
    """A task environment: prompt() for the next policy call, step() to execute the parsed call."""

    family: str = ""
    agent_role: str = "single"
    tools: frozenset[str] = frozenset()
    max_calls: int = 1
    token_budget: int = 0

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.calls = 0
        self.broken_calls = 0
        self.finished = False

    @property
    def is_done(self) -> bool:
        return self.finished or self.calls >= self.max_calls

    def request_text(self) -> str:
        """What the user typed to start the session."""
        raise NotImplementedError

    def prompt(self) -> str:
        """The task state as the policy sees it: a short word sequence ending in ':'."""
        raise NotImplementedError

    def step(self, call: ParsedCall) -> ToolOutput:
        self.calls += 1
        if not call.valid:
            self.broken_calls += 1
            return self._on_broken(call)
        return self._execute(call)

    def _on_broken(self, call: ParsedCall) -> ToolOutput:
        return ToolOutput(output=f"error: {call.error}", is_error=True)

    def _execute(self, call: ParsedCall) -> ToolOutput:
        raise NotImplementedError

    def outcome(self) -> OutcomeReport:
        raise NotImplementedError
