"""Production signals (Cursor's real-time RL): what the user and the world did with the agent's work.

Components (absent when their evidence is absent):
- outcome: the task's verifiable result (tests passed...), outcome_score in [0, 1]. For a sub-agent: the
  share of its own tasks that finished successfully.
- edit_kept / edit_reverted: share of the agent's edits with an EDIT_KEPT (+) or EDIT_REVERTED (-)
  verdict, over max(edits, verdicts). Per targeted edit the revert wins; a keep that came sooner than
  production.edit_kept_min_age_s after the edit does not count. Feedback aimed at another agent's call is
  ignored. Present once any edit verdict arrived.
- dissatisfied_followup: -1 when a follow-up user message matches production.dissatisfied_patterns or a
  DISSATISFIED_FOLLOWUP feedback arrived, else 0; present when there was a follow-up or such feedback.
- feedback: mean of explicit feedback, thumbs up +1, thumbs down -1, rating v in [0, 1] -> 2v - 1.
- latency: 0 at or under latency_target_ms of mean model-call latency, -1 at latency_limit_ms, linear.
"""

from __future__ import annotations

import re
from functools import lru_cache
from statistics import fmean

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components import Part
from liverl.rewards.components.outcome import outcome_score
from liverl.rewards.view import AgentView
from liverl.v1 import session_event_pb2 as ev

VERSION = "production-1"

_EXPLICIT = {
    ev.FEEDBACK_KIND_THUMBS_UP: lambda value: 1.0,
    ev.FEEDBACK_KIND_THUMBS_DOWN: lambda value: -1.0,
    ev.FEEDBACK_KIND_RATING: lambda value: 2.0 * min(1.0, max(0.0, value)) - 1.0,
}


def production(view: AgentView, config: RewardsConfig) -> Part:
    part = Part()
    _outcome(view, part)
    _edits(view, config, part)
    _dissatisfied(view, config, part)
    _explicit_feedback(view, part)
    _latency(view, config, part)
    return part


def _outcome(view: AgentView, part: Part) -> None:
    if view.is_subagent:
        if view.own_tasks_finished:
            part.components["outcome"] = fmean(1.0 if t.success else 0.0 for t in view.own_tasks_finished)
    elif view.outcome is not None:
        part.components["outcome"] = outcome_score(view.outcome)


def _edits(view: AgentView, config: RewardsConfig, part: Part) -> None:
    edit_tools = set(config.tools.edit)
    edited_at = {u.call.call_id: u.time_ms for u in view.tool_uses if u.call.name in edit_tools and u.call.valid}
    min_age_ms = config.production.edit_kept_min_age_s * 1000.0
    verdicts: dict[str, str] = {}  # targeted edit -> "kept" | "reverted"
    untargeted = {"kept": 0, "reverted": 0}
    for timed in view.feedback:
        kind, target = timed.feedback.kind, timed.feedback.target_call_id
        if kind == ev.FEEDBACK_KIND_EDIT_KEPT:
            verdict = "kept"
        elif kind == ev.FEEDBACK_KIND_EDIT_REVERTED:
            verdict = "reverted"
        else:
            continue
        if not target:
            untargeted[verdict] += 1
        elif target in edited_at:
            if verdict == "kept" and timed.time_ms - edited_at[target] < min_age_ms:
                continue  # too early to say the edit lasted
            if verdicts.get(target) != "reverted":
                verdicts[target] = verdict
    kept = untargeted["kept"] + sum(v == "kept" for v in verdicts.values())
    reverted = untargeted["reverted"] + sum(v == "reverted" for v in verdicts.values())
    part.signals.update(edits=len(edited_at), edits_kept=kept, edits_reverted=reverted)
    if kept + reverted:
        denominator = max(len(edited_at), kept + reverted)
        part.components["edit_kept"] = kept / denominator
        part.components["edit_reverted"] = -reverted / denominator


@lru_cache(maxsize=16)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE) if patterns else None


def _dissatisfied(view: AgentView, config: RewardsConfig, part: Part) -> None:
    pattern = _compiled(tuple(config.production.dissatisfied_patterns))
    followups = [m for m in view.user_messages if m.follow_up]
    by_text = sum(1 for m in followups if pattern is not None and pattern.search(m.text))
    by_feedback = sum(1 for f in view.feedback if f.feedback.kind == ev.FEEDBACK_KIND_DISSATISFIED_FOLLOWUP)
    part.signals.update(followups=len(followups), dissatisfied_followups=by_text + by_feedback)
    if followups or by_feedback:
        part.components["dissatisfied_followup"] = -1.0 if by_text + by_feedback else 0.0


def _explicit_feedback(view: AgentView, part: Part) -> None:
    values = [_EXPLICIT[f.feedback.kind](f.feedback.value) for f in view.feedback if f.feedback.kind in _EXPLICIT]
    part.signals["explicit_feedback"] = len(values)
    if values:
        part.components["feedback"] = fmean(values)


def _latency(view: AgentView, config: RewardsConfig, part: Part) -> None:
    latencies = [c.finish_time_ms - c.request_time_ms for c in view.model_calls
                 if c.request_time_ms > 0 and c.finish_time_ms >= c.request_time_ms]
    if not latencies:
        return
    mean_ms = fmean(latencies)
    target, limit = config.production.latency_target_ms, config.production.latency_limit_ms
    over = (mean_ms - target) / max(limit - target, 1e-9)
    part.signals["latency_ms_mean"] = mean_ms
    part.components["latency"] = -min(1.0, max(0.0, over))
