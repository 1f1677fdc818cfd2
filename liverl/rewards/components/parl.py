"""Kimi K2.5 PARL for orchestrator sessions, and critical steps for every trajectory.

Components (for a main agent whose family is in parl.families or that spawned/assigned sub-agents):
- parl.r_perf: the task outcome (outcome_score); absent without an Outcome event.
- parl.r_parallel: min(1, instantiated / parallel_target), against serial collapse. A sub-agent counts as
  instantiated when it was assigned a task AND did some work (a SubAgentFinished with steps > 0, or model
  calls under its id): created-but-idle sub-agents earn nothing. No sub-agents: 0.
- parl.r_finish: assigned sub-tasks that finished successfully / sub-tasks assigned, against spurious
  parallelism (spawning for show). No sub-tasks: 0 (there is nothing to credit).
The table stores these raw; `mix` applies r = lambda1(step)*r_parallel + lambda2(step)*r_finish + r_perf.

Critical steps = sum over stages t of ( S_main(t) + max_i S_sub,i(t) ), the parallel graph's longest path:
- stage t = TaskAssigned.stage; S_sub,i(t) = the SUM of the steps of the tasks sub-agent i was given in stage t
  (one sub-agent runs its tasks one after another), where a task's steps are its SubAgentFinished.steps;
- an unfinished task still cost steps: the sub-agent's model calls that its finished tasks do not account for
  (model calls - reported steps, at least 0) go to its last unfinished task (the one still running when the
  session ended); the count of such tasks is the signal unfinished_subtasks;
- S_main(t) = the orchestrator's model calls in stage t. Every main call is one serial step of some stage
  (stages without sub-agents have max_i = 0), so sum_t S_main(t) is the orchestrator's model-call count and
  no timestamp mapping of calls to stages is needed. Without recorded model calls, 1 per stage.
A lone agent's critical steps are its model calls; a sub-agent's, its own.
"""

from __future__ import annotations

from collections import defaultdict

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components import Part
from liverl.rewards.components.outcome import outcome_score
from liverl.rewards.view import AgentView

VERSION = "parl-2"  # 2: serial tasks of a sub-agent in a stage sum; unfinished tasks count their calls


def applies(view: AgentView, config: RewardsConfig) -> bool:
    if view.is_subagent:
        return False
    return view.task_family in config.parl.families or bool(view.subagents_created or view.tasks_assigned)


def parl(view: AgentView, config: RewardsConfig) -> Part:
    part = Part()
    steps_by_task = _finished_steps(view)
    assigned = {(t.subagent_id, t.task_id) for t in view.tasks_assigned}
    used = {subagent for subagent, _ in assigned}
    worked = {s for s in used if view.subagent_model_calls.get(s, 0) > 0
              or any(steps > 0 for (sub, _), steps in steps_by_task.items() if sub == s)}
    succeeded = {(f.subagent_id, f.task_id) for f in view.subagents_finished if f.success} & assigned
    finished = set(steps_by_task) & assigned
    created = {c.subagent_id for c in view.subagents_created}
    part.signals.update(
        subagents_created=len(created | used), subagents_instantiated=len(worked), idle_subagents=len(created - worked),
        subtasks_assigned=len(assigned), subtasks_succeeded=len(succeeded),
        subtasks_failed=len(finished - succeeded), unfinished_subtasks=len(assigned - finished),
        stages=len({t.stage for t in view.tasks_assigned}),
    )
    if not applies(view, config):
        return part
    if view.outcome is not None:
        part.components["parl.r_perf"] = outcome_score(view.outcome)
    part.components["parl.r_parallel"] = min(1.0, len(worked) / max(config.parl.parallel_target, 1))
    part.components["parl.r_finish"] = len(succeeded) / len(assigned) if assigned else 0.0
    return part


def _finished_steps(view: AgentView) -> dict[tuple[str, str], int]:
    steps: dict[tuple[str, str], int] = {}
    for f in view.subagents_finished:
        steps[(f.subagent_id, f.task_id)] = max(steps.get((f.subagent_id, f.task_id), 0), f.steps)
    return steps


def critical_steps(view: AgentView) -> int:
    main_steps = view.turns(count_summaries=True)
    if view.is_subagent or not view.tasks_assigned:
        return main_steps
    steps = _task_steps(view)
    serial: dict[tuple[int, str], int] = defaultdict(int)  # (stage, sub-agent) -> S_sub,i(t)
    for task in view.tasks_assigned:
        serial[(task.stage, task.subagent_id)] += steps[(task.subagent_id, task.task_id)]
    longest: dict[int, int] = defaultdict(int)  # stage -> max_i S_sub,i(t)
    for (stage, _), total in serial.items():
        longest[stage] = max(longest[stage], total)
    if main_steps == 0:
        main_steps = len(longest)  # S_main(t) defaults to 1 per stage
    return main_steps + sum(longest.values())


def _task_steps(view: AgentView) -> dict[tuple[str, str], int]:
    """Steps of every assigned (sub-agent, task): reported when finished; for a sub-agent's last unfinished task,
    its model calls beyond what its finished tasks reported; other unfinished tasks 0."""
    finished = _finished_steps(view)
    assigned = list(dict.fromkeys((t.subagent_id, t.task_id) for t in view.tasks_assigned))  # in order
    steps = {key: finished.get(key, 0) for key in assigned}
    last_unfinished = {sub: (sub, task) for sub, task in assigned if (sub, task) not in finished}
    for sub, key in last_unfinished.items():
        reported = sum(n for (s, task), n in finished.items() if s == sub and (s, task) in steps)
        steps[key] = max(view.subagent_model_calls.get(sub, 0) - reported, 0)
    return steps
