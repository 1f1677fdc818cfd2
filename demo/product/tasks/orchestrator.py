"""Orchestrator task (PARL): split a job into parts, create sub-agents and assign them the parts.

Sub-agents are frozen workers run by the session runner; each finishes its part with a scripted
success rate. The session ends when every part is done. Score: the share of parts done, times 0.75
when the work ran in more than one stage (serial collapse), less 0.1 per sub-agent that never worked
(spawning sub-agents that do nothing) and 0.5 per broken call.
"""

from __future__ import annotations

from demo.product.grammar import MAX_SUBAGENTS, PARTS, SUBAGENTS, ParsedCall
from demo.product.tasks.base import OutcomeReport, Task, ToolOutput

SUBAGENT_SUCCESS = 0.95


class OrchestratorTask(Task):
    family = "orchestrator"
    agent_role = "orchestrator"
    tools = frozenset({"create_subagent", "assign_task", "done"})
    max_calls = 4

    def __init__(self, rng, task_id: str) -> None:
        super().__init__(task_id)
        self.n_parts = rng.choice((2, 3))
        self.todo = list(PARTS[: self.n_parts])
        self.agents: list[str] = []
        self.worked: set[str] = set()
        self.done_parts: set[str] = set()
        self.stages = 0

    def request_text(self) -> str:
        return f"run the job in {self.n_parts} parts"

    def prompt(self) -> str:
        agents = " ".join(self.agents) or "none"
        return f"orchestrate parts {self.n_parts} agents {agents} todo {' '.join(self.todo) or 'none'} :"

    def _execute(self, call: ParsedCall) -> ToolOutput:
        if call.name == "done":
            self.finished = True
            return ToolOutput(output="session closed")
        if call.name == "create_subagent":
            count = call.kwargs["count"]
            if len(self.agents) + count > MAX_SUBAGENTS:
                self.broken_calls += 1
                return ToolOutput(output=f"error: at most {MAX_SUBAGENTS} sub-agents", is_error=True)
            created = SUBAGENTS[len(self.agents) : len(self.agents) + count]
            self.agents += created
            return ToolOutput(output=f"created {' '.join(created)}", created=tuple(created))
        pairs = tuple(tuple(pair) for pair in call.kwargs["assignments"])
        wrong = [f"{s} {p}" for s, p in pairs if s not in self.agents or p not in self.todo]
        if wrong:
            self.broken_calls += 1
            return ToolOutput(output=f"error: cannot assign {', '.join(wrong)}", is_error=True)
        self.stages += 1
        for _, part in pairs:
            self.todo.remove(part)
        return ToolOutput(output=f"assigned {len(pairs)} parts in stage {self.stages}", assignments=pairs)

    def finish_part(self, subagent: str, part: str, rng) -> tuple[bool, int]:
        """Run a frozen sub-agent's part (scripted): returns (success, extra steps it took)."""
        success = rng.random() < SUBAGENT_SUCCESS
        self.worked.add(subagent)
        if success:
            self.done_parts.add(part)
        else:
            self.todo.append(part)
        if not self.todo:
            self.finished = True
        return success, rng.randint(0, 2)

    def outcome(self) -> OutcomeReport:
        share = len(self.done_parts) / self.n_parts
        idle = len(set(self.agents) - self.worked)
        score = share * (0.75 if self.stages > 1 else 1.0) - 0.1 * idle - 0.5 * self.broken_calls
        return OutcomeReport(
            success=share == 1.0,
            score=round(min(1.0, max(0.0, score)), 4),
            detail=f"{len(self.done_parts)} of {self.n_parts} parts done in {self.stages} stage(s)",
            metrics={"stages": float(self.stages), "idle_subagents": float(idle), "calls": float(self.calls)},
        )
