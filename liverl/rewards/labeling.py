"""`label`: one trajectory's raw reward components, monitor signals and critical steps (pipelines call it).

Components written (all signed: credits in [0, 1], penalties in [-1, 0]; see each module for the exact
definitions and when a component is absent rather than 0):
- production (components/production.py): outcome, edit_kept, edit_reverted, dissatisfied_followup,
  feedback, latency
- penalties (components/penalties.py): broken_tool_calls, repeated_tool_calls,
  clarifying_instead_of_acting, give_up, turn_penalty, prune_penalty
- PARL (components/parl.py): parl.r_perf, parl.r_parallel, parl.r_finish
- Context-1 (components/context1.py): search.precision, search.recall, search.traj_recall,
  search.answer_found, search.budget_violation
- judge: the generative judge's mean rubric score in [0, 1]; absent when unjudged (signal judge.unjudged=1;
  sub-agent trajectories, frozen, are not judged and carry no judge signal).
- custom (custom.py): custom.<entry>.<name> from a team's own functions (rewards.custom), within their bounds;
  absent when the call failed (signals custom.failed, custom.<entry>.failed/timed_out/clipped).
Self-summarisation needs nothing here: summaries are model calls of the same chain, so the one reward
mixed from these components applies to their tokens too (token_credit.py).
"""

from __future__ import annotations

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components.parl import critical_steps
from liverl.rewards.custom import custom_part, reward_version
from liverl.rewards.judgement import Judgement
from liverl.rewards.registry import GROUPS
from liverl.rewards.session import RewardLabel, SessionRecord
from liverl.rewards.view import agent_view


def label(session: SessionRecord, agent_id: str, config: RewardsConfig,
          judgement: Judgement | None = None) -> RewardLabel:
    """Label the trajectory of `agent_id` ("main" for the top agent, else a sub-agent id) in `session`.

    Pure but for the team's own functions (rewards.custom: each call in a thread, under its timeout): the judge's
    verdict, when the judge is enabled, is fetched beforehand (judge.Judge.judge_many, or batch.label_batch for
    both steps) and passed in; without one the trajectory is labelled unjudged.
    """
    view = agent_view(session, agent_id)
    components: dict[str, float] = {}
    signals: dict[str, float] = {}
    for labeler, _version in GROUPS.values():
        part = labeler(view, config)
        components.update(part.components)
        signals.update(part.signals)
    custom = custom_part(view, config, where=f"tenant {session.tenant_id} session {session.session_id} agent {agent_id}")
    components.update(custom.components)
    signals.update(custom.signals)
    steps = critical_steps(view)
    signals["critical_steps"] = steps
    budget = config.parl.critical_steps_budget
    if budget > 0:
        signals["critical_steps_over_budget"] = float(steps > budget)
    if config.judge.enabled and not view.is_subagent:  # frozen sub-agents are never sent to the judge
        if judgement is not None and judgement.judged:
            components["judge"] = float(judgement.score)
            signals.update({"judge.unjudged": 0.0, "judge.rubrics": len(judgement.rubric_scores)})
        else:
            signals["judge.unjudged"] = 1.0
    return RewardLabel(
        components={k: float(v) + 0.0 for k, v in components.items()},  # + 0.0: no -0.0 in the table
        signals={k: float(v) for k, v in signals.items()},
        critical_steps=int(steps),
        config_version=reward_version(config),  # rewards.version, plus the custom functions' identity
    )
