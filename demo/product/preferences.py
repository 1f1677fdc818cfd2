"""What each demo tenant's users want, on top of the product's own verifiable outcome (`liverl demo --tenants N`).

    brisk    short answers: a passing edit at once, no questions; an orchestrated job done in one parallel stage;
             a search answered with the one best chunk
    careful  thoroughness: the agent confirms with the user (ask_user) before it edits; its users revert half the
             edits nobody confirmed with them
    frugal   low cost: one sub-agent does every part of an orchestrated job, one part after another; a search
             scored as the product scores it

A preference rescales the task's outcome score, which the product reports as its Outcome event and as the
session's served reward; the pipelines label it as the `outcome` component (PARL's r_perf for the orchestrator),
so the trainer learns a tenant's preference from its rows like any other outcome (on search too:
configs/demo-tenants.toml weighs it there, where the reward library's default is Context-1's). brisk and careful
want opposite things on the same coding prompts, brisk and frugal on the same orchestrator prompts: one shared
policy cannot please all three, an adapter per tenant can. brisk and frugal also disagree on the same search
prompts: brisk's users want the one best chunk, frugal's the product's own score (the answer's F1 against both gold
chunks), so the shared policy's search rows are not brisk's alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from demo.product.tasks import CodingTask, OrchestratorTask, OutcomeReport, SearchTask, Task
from demo.product.user import UserModel

UNWANTED = 0.25  # the share of the product's score a tenant grants work done the way its users did not want


@dataclass(frozen=True)
class TenantProfile:
    name: str  # the tenant id its sessions are recorded as (a valid tenant name: liverl/contracts/names.py)
    wants: str  # one line for the summary
    families: tuple[str, ...]  # the task families its users bring
    user_model: UserModel  # how its users react (feedback, dissatisfied follow-ups)
    score: Callable[[Task, OutcomeReport], float]

    def judge(self, task: Task, report: OutcomeReport) -> OutcomeReport:
        """The product's report with this tenant's score. A solved task keeps a score above 0: a score of exactly 0
        reads as unset, and a successful outcome as 1.0 (liverl/rewards/components/outcome.py)."""
        score = min(1.0, max(0.0, self.score(task, report)))
        if report.success:
            score = max(score, 0.01)
        return dataclasses.replace(report, score=round(score, 4), detail=f"{report.detail}; {self.name}: {score:.2f}")


def _parts_share(task: OrchestratorTask) -> float:
    return len(task.done_parts) / task.n_parts


def _brisk(task: Task, report: OutcomeReport) -> float:
    if isinstance(task, CodingTask):
        if task.passed_at is None:
            return 0.0
        if task.asked_user:
            return UNWANTED  # they knew the answer and wanted no question
        return 1.0 if task.passed_at == 1 else 0.5
    if isinstance(task, OrchestratorTask):  # everything at once: a serial job is slow
        idle = len(set(task.agents) - task.worked)
        stage = 1.0 if task.stages <= 1 else UNWANTED
        return _parts_share(task) * stage - 0.1 * idle - 0.5 * task.broken_calls
    if isinstance(task, SearchTask):  # the one chunk that answers it, not every source
        if not task.answer:
            return 0.0
        extra_calls = 0.1 * max(0, task.calls - 2)  # as the product's own score
        if len(task.answer) == 1 and task.answer[0] in task.gold:
            return 1.0 - extra_calls
        return report.score * UNWANTED
    return report.score


def _careful(task: Task, report: OutcomeReport) -> float:
    if isinstance(task, CodingTask):
        if task.passed_at is None:
            return 0.0
        return 1.0 if task.asked_user else UNWANTED  # an edit nobody confirmed is one they must review
    return report.score


def _frugal(task: Task, report: OutcomeReport) -> float:
    if isinstance(task, OrchestratorTask):  # every sub-agent costs: one that does the parts in turn is what they pay for
        one_agent = 1.0 if len(task.agents) == 1 else UNWANTED
        return _parts_share(task) * one_agent - 0.5 * task.broken_calls
    return report.score


PROFILES: tuple[TenantProfile, ...] = (
    TenantProfile("brisk", "short answers: edit at once, fan a job out in one stage, cite one chunk",
                  ("coding", "orchestrator", "search"),
                  UserModel(dissatisfied_if_asked=0.6), _brisk),
    TenantProfile("careful", "thoroughness: confirm with the user before editing", ("coding",),
                  UserModel(dissatisfied_if_asked=0.0, revert_unconfirmed=0.5), _careful),
    TenantProfile("frugal", "low cost: one sub-agent does every part in turn", ("orchestrator", "search"),
                  UserModel(), _frugal),
)


def tenant_profiles(count: int) -> tuple[TenantProfile, ...]:
    """The first `count` profiles; ValueError past the ones defined."""
    if not 1 <= count <= len(PROFILES):
        raise ValueError(f"the demo defines {len(PROFILES)} tenants ({', '.join(p.name for p in PROFILES)}): "
                         f"choose --tenants from 1 to {len(PROFILES)}, got {count}")
    return PROFILES[:count]
