"""Synthetic demonstrations: scripted agents play the product's own tasks, good and bad behaviour mixed.

The base policy is fitted to these so that its tool calls parse, and it inherits the hacks the seeds
warn about in proportion (clarifying instead of editing, broken calls, one broad search then stop,
spawning sub-agents that do nothing, serial collapse). RL has to unlearn them: the base policy's served
reward is mediocre on purpose.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial

from demo.product.grammar import FIXES, parse_tool_call
from demo.product.tasks import CodingTask, OrchestratorTask, SearchTask, make_task

# Behaviour mixtures per family: mode -> weight. A session picks one mode at its start.
CODING_MODES = {"good": 0.3, "ask": 0.4, "broken": 0.3}
SEARCH_MODES = {"good": 0.25, "broad_stop": 0.3, "broad_prune": 0.15, "answer_all": 0.15, "broken": 0.15}
ORCHESTRATOR_MODES = {"good": 0.15, "idle_spawn": 0.4, "serial": 0.2, "broken": 0.25}
RECOVERY = 0.4
"""After a clarifying question, a broken call or a failed edit, the chance that the next call is right."""


@dataclass(frozen=True)
class Demonstration:
    prompt: str
    completion: str  # a tool call, without <eos> (the fit appends it)


def make_demonstrations(n_sessions_per_family: int, seed: int, answered_right: float = RECOVERY,
                        answer_top: float = 0.0) -> list[Demonstration]:
    """Demonstrations of every family (and of the frozen sub-agents), shuffled. answered_right: the chance that a
    coding agent which asked the user edits right next (by default as after any other miss, RECOVERY). answer_top:
    the chance that a search agent answering from ranked results cites the top chunk alone (by default never)."""
    rng = random.Random(seed)
    demos: list[Demonstration] = []
    for family in ("coding", "search", "orchestrator"):
        for index in range(n_sessions_per_family):
            demos += _play(make_task(family, rng, f"demo-{family}-{index}"), rng, answered_right, answer_top)
    rng.shuffle(demos)
    return demos


def _play(task, rng, answered_right: float = RECOVERY, answer_top: float = 0.0) -> list[Demonstration]:
    agent = {CodingTask: partial(_coding_agent, answered_right=answered_right),
             SearchTask: partial(_search_agent, answer_top=answer_top),
             OrchestratorTask: _orchestrator_agent}[type(task)]
    modes = {CodingTask: CODING_MODES, SearchTask: SEARCH_MODES, OrchestratorTask: ORCHESTRATOR_MODES}[type(task)]
    mode = rng.choices(list(modes), weights=list(modes.values()))[0]
    demos = []
    while not task.is_done:
        prompt = task.prompt()
        text = agent(task, mode, rng)
        demos.append(Demonstration(prompt, text))
        result = task.step(parse_tool_call(text, task.tools))
        for sub, part in result.assignments:
            demos.append(Demonstration(f"subagent do {part} :", "done"))
            task.finish_part(sub, part, rng)
    return demos


def _coding_agent(task: CodingTask, mode: str, rng, answered_right: float) -> str:
    right = task.right_edit
    # One draw whatever the threshold, so that the default demonstrations stay the same stream.
    if task.calls > 0 and rng.random() < (answered_right if task.note == "asked" else RECOVERY):
        return right
    if mode == "good":
        return right
    if mode == "ask":
        return "ask_user"
    return rng.choice([f"edit {FIXES[task.bug]}", f"edit {task.buggy_file}", f"{task.buggy_file} {FIXES[task.bug]}"])


def _search_agent(task: SearchTask, mode: str, rng, answer_top: float = 0.0) -> str:
    if not task.context:  # first call
        if mode in ("broad_stop", "broad_prune"):
            return "search all"
        if mode == "broken" and task.calls == 0:
            return rng.choice(["search", "answer", "prune_chunks"])
        return f"search {task.topic}"
    if mode == "broad_stop":
        return "done"
    if task.over_budget:  # results of a broad search are unranked: pruning the tail is a guess
        return f"prune_chunks {' '.join(task.context[-4:])}"
    # Drawn only when asked for, so that the default demonstrations stay the same stream.
    if answer_top and mode != "broad_prune" and rng.random() < answer_top:
        return f"answer {task.context[0]}"  # a focused search ranks the gold chunks first: a short answer
    if mode == "answer_all":
        return f"answer {' '.join(task.context[:4])}"
    return f"answer {' '.join(task.context[:2])}"  # ranked results: the top two


def _orchestrator_agent(task: OrchestratorTask, mode: str, rng) -> str:
    if mode == "broken" and task.calls == 0:
        return rng.choice(["create_subagent", "assign_task part_1", "assign_task sub_1"])
    if not task.agents:
        count = {"idle_spawn": 3, "serial": 1}.get(mode, task.n_parts)
        return f"create_subagent {count}"
    if mode == "idle_spawn":
        return "done"
    if mode == "serial":
        return f"assign_task {task.agents[0]} {task.todo[0]}"
    pairs = zip(task.agents, list(task.todo))
    return "assign_task " + " ".join(f"{sub} {part}" for sub, part in pairs)
