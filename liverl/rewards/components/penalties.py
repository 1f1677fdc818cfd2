"""Penalties from hacks the seeds observed. Always present on a trajectory (0 when clean), all in [-1, 0].

- broken_tool_calls: -min(broken_cap, per_broken_call * invalid calls). Broken calls are negatives,
  never discarded (Composer: discarding them was hacked). A count, not a share, so padding the
  trajectory with valid calls does not dilute it.
- repeated_tool_calls: -min(repeated_cap, per_repeated_call * repeats), where a repeat is a call with
  the same tool and the same (JSON-normalised) arguments as an earlier one with no edit in between:
  nothing changed, so it is a loop. Rerunning the tests after an edit is not a repeat.
- clarifying_instead_of_acting: -clarify_penalty when the agent asked the user (a clarify tool, or a
  last reply tool message ending in '?') and never acted (no valid edit, search, act tool or task
  assignment). Asking and then acting is fine.
- give_up: -give_up_penalty when the agent gave up early: a give-up tool, a SessionEnd reason in
  give_up_end_reasons, or a failed outcome after at most give_up_max_turns turns.
- turn_penalty (Context-1): 0 up to turn_penalty_start turns, linear to -turn_penalty_max at
  turn_penalty_end, capped. Turns are model calls of the agent, self-summaries excluded by default.
- prune_penalty (Context-1): per run of consecutive prune calls, each past the first prune_free_streak
  costs per_extra_prune; the total is capped at prune_cap.
"""

from __future__ import annotations

import json
from functools import lru_cache

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components import Part
from liverl.rewards.components.outcome import failed
from liverl.rewards.view import AgentView, ToolUse

VERSION = "penalties-1"


def penalties(view: AgentView, config: RewardsConfig) -> Part:
    part = Part()
    _broken(view, config, part)
    _repeated(view, config, part)
    _clarifying(view, config, part)
    _give_up(view, config, part)
    _turns(view, config, part)
    _prunes(view, config, part)
    return part


def _broken(view: AgentView, config: RewardsConfig, part: Part) -> None:
    p = config.penalties
    broken = sum(1 for u in view.tool_uses if not u.call.valid
                 or (p.count_tool_errors_as_broken and u.result is not None and u.result.is_error))
    tool_errors = sum(1 for u in view.tool_uses if u.result is not None and u.result.is_error)
    part.signals.update(tool_calls=len(view.tool_uses), broken_tool_calls=broken, tool_errors=tool_errors)
    part.components["broken_tool_calls"] = -min(p.broken_cap, p.per_broken_call * broken)


@lru_cache(maxsize=8192)  # argument strings recur across a session's calls and across sessions
def normalised_arguments(arguments_json: str) -> str:
    """Key order and spacing do not make a call different."""
    try:
        return json.dumps(json.loads(arguments_json), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments_json.strip()


def _repeated(view: AgentView, config: RewardsConfig, part: Part) -> None:
    edit_tools = set(config.tools.edit)
    seen: set[tuple[str, str]] = set()
    repeats = 0
    for use in view.tool_uses:
        key = (use.call.name, normalised_arguments(use.call.arguments_json))
        if key in seen:
            repeats += 1
        if use.call.name in edit_tools and use.call.valid:
            seen = set()  # the world changed: earlier calls may now answer differently
        seen.add(key)
    p = config.penalties
    part.signals["repeated_tool_calls"] = repeats
    part.components["repeated_tool_calls"] = -min(p.repeated_cap, p.per_repeated_call * repeats)


def reply_text(use: ToolUse, text_keys: list[str]) -> str:
    try:
        arguments = json.loads(use.call.arguments_json or "{}")
    except ValueError:
        return use.call.arguments_json
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, dict):
        for key in text_keys:
            if isinstance(arguments.get(key), str):
                return arguments[key]
    return ""


def acted(view: AgentView, config: RewardsConfig) -> bool:
    tools = config.tools
    acting = set(tools.edit) | set(tools.search) | set(tools.act)
    return bool(view.tasks_assigned) or any(u.call.valid and u.call.name in acting for u in view.tool_uses)


def _clarifying(view: AgentView, config: RewardsConfig, part: Part) -> None:
    tools = config.tools
    clarify_calls = sum(1 for u in view.tool_uses if u.call.name in set(tools.clarify))
    replies = [u for u in view.tool_uses if u.call.name in set(tools.reply)]
    ends_with_question = bool(replies) and reply_text(replies[-1], tools.reply_text_keys).rstrip().endswith("?")
    asked = clarify_calls > 0 or ends_with_question
    clarifying = asked and not acted(view, config)
    part.signals.update(clarify_calls=clarify_calls, clarifying=float(clarifying))
    part.components["clarifying_instead_of_acting"] = -config.penalties.clarify_penalty if clarifying else 0.0


def _give_up(view: AgentView, config: RewardsConfig, part: Part) -> None:
    p = config.penalties
    turns = view.turns(p.count_summaries_as_turns)
    task_failed = failed(view.outcome) or (view.is_subagent and any(not t.success for t in view.own_tasks_finished))
    gave_up = (
        any(u.call.name in set(config.tools.give_up) for u in view.tool_uses)
        or view.end_reason in set(p.give_up_end_reasons)
        or (task_failed and turns <= p.give_up_max_turns)
    )
    part.signals["gave_up"] = float(gave_up)
    part.components["give_up"] = -p.give_up_penalty if gave_up else 0.0


def turn_penalty(turns: int, config: RewardsConfig) -> float:
    """Context-1's p_turn (positive): 0 at turn_penalty_start, turn_penalty_max at turn_penalty_end."""
    p = config.penalties
    span = max(p.turn_penalty_end - p.turn_penalty_start, 1)
    return p.turn_penalty_max * min(1.0, max(0.0, (turns - p.turn_penalty_start) / span))


def _turns(view: AgentView, config: RewardsConfig, part: Part) -> None:
    turns = view.turns(config.penalties.count_summaries_as_turns)
    part.signals.update(turns=turns, model_calls=len(view.model_calls), summaries=len(view.summary_request_ids),
                        policy_tokens=sum(len(c.completion_token_ids) for c in view.model_calls))
    part.components["turn_penalty"] = -turn_penalty(turns, config)


def prune_streaks(view: AgentView, config: RewardsConfig) -> list[int]:
    """Lengths of the runs of consecutive prune calls, in order."""
    prune_tools = set(config.tools.prune)
    streaks, current = [], 0
    for use in view.tool_uses:
        if use.call.name in prune_tools:
            current += 1
        elif current:
            streaks.append(current)
            current = 0
    if current:
        streaks.append(current)
    return streaks


def _prunes(view: AgentView, config: RewardsConfig, part: Part) -> None:
    p = config.penalties
    streaks = prune_streaks(view, config)
    extra = sum(max(0, length - p.prune_free_streak) for length in streaks)
    part.signals.update(prune_calls=sum(streaks), max_prune_streak=max(streaks, default=0), extra_prune_calls=extra)
    part.components["prune_penalty"] = -min(p.prune_cap, p.per_extra_prune * extra)
