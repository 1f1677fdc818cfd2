"""Chroma Context-1 for search sessions: what was retrieved against the gold chunks, and the token budget.

The final retrieved set is built in order: a valid search call adds its ToolResult.chunk_ids, a prune
call removes the ids listed under tools.prune_ids_key in its arguments (a chunk retrieved again after
being pruned is back). The trajectory set is everything any search ever returned: pruning cannot game
trajectory recall.

Components (for a main agent whose Outcome lists gold_chunk_ids; otherwise the signal search.no_gold):
- search.precision = |final & gold| / |final|   (0 when nothing was retrieved)
- search.recall = |final & gold| / |gold|
- search.traj_recall = |ever & gold| / |gold|   (Context-1's r_traj)
- search.answer_found = 1 when the final set holds one of Outcome.answer_chunk_ids, else 0; absent when
  the outcome names no answer chunk (r_fa then counts 0).
- search.budget_violation: -min(1, per_budget_violation * calls) over non-prune tool calls made past the
  hard cutoff (token_budget * hard_cutoff_fraction), where the context size at a call is the prompt plus
  completion tokens of the ModelCall that produced it (ToolCall.request_id). Present whenever the session
  has a token budget, gold or not.
F_beta and the clamp are applied at mix time (liverl/rewards/mixing.py), since beta anneals with the
trainer's step.
"""

from __future__ import annotations

import json

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components import Part
from liverl.rewards.view import AgentView

VERSION = "context1-1"


def applies(view: AgentView, config: RewardsConfig) -> bool:
    if view.is_subagent:
        return False
    has_gold = view.outcome is not None and len(view.outcome.gold_chunk_ids) > 0
    return has_gold or view.task_family in config.context1.families


def pruned_ids(arguments_json: str, key: str) -> list[str]:
    try:
        arguments = json.loads(arguments_json or "{}")
    except ValueError:
        return []
    ids = arguments.get(key, []) if isinstance(arguments, dict) else arguments
    return [str(i) for i in ids] if isinstance(ids, list) else []


def retrieved_sets(view: AgentView, config: RewardsConfig) -> tuple[set[str], set[str]]:
    """(final, ever): the chunks in context at the end, and every chunk any search returned."""
    search, prune = set(config.tools.search), set(config.tools.prune)
    final: set[str] = set()
    ever: set[str] = set()
    for use in view.tool_uses:
        if use.call.name in search and use.call.valid and use.result is not None and not use.result.is_error:
            final.update(use.result.chunk_ids)
            ever.update(use.result.chunk_ids)
        elif use.call.name in prune and use.call.valid:
            final.difference_update(pruned_ids(use.call.arguments_json, config.tools.prune_ids_key))
    return final, ever


def budget_violations(view: AgentView, config: RewardsConfig) -> int:
    if view.token_budget <= 0:
        return 0
    cutoff = view.token_budget * config.context1.hard_cutoff_fraction
    context_at = {c.request_id: len(c.prompt_token_ids) + len(c.completion_token_ids) for c in view.model_calls}
    prune = set(config.tools.prune)
    return sum(1 for u in view.tool_uses
               if u.call.name not in prune and context_at.get(u.call.request_id, 0) > cutoff)


def context1(view: AgentView, config: RewardsConfig) -> Part:
    part = Part()
    if not applies(view, config):
        return part
    final, ever = retrieved_sets(view, config)
    violations = budget_violations(view, config)
    part.signals.update(retrieved_chunks=len(ever), final_chunks=len(final), budget_violations=violations)
    if view.token_budget > 0:
        part.components["search.budget_violation"] = -min(1.0, config.context1.per_budget_violation * violations)
    gold = set(view.outcome.gold_chunk_ids) if view.outcome is not None else set()
    if not gold:
        part.signals["search.no_gold"] = 1.0
        return part
    hits = final & gold
    part.components["search.precision"] = len(hits) / len(final) if final else 0.0
    part.components["search.recall"] = len(hits) / len(gold)
    part.components["search.traj_recall"] = len(ever & gold) / len(gold)
    answers = set(view.outcome.answer_chunk_ids)
    if answers:
        part.components["search.answer_found"] = 1.0 if final & answers else 0.0
    return part
