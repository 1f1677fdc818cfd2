"""Label many trajectories at once, with the judge's verdicts fetched in one batch (the pipelines' DoFn)."""

from __future__ import annotations

from collections.abc import Sequence

from liverl.config.rewards import RewardsConfig
from liverl.rewards.judge import Judge
from liverl.rewards.judgement import Judgement
from liverl.rewards.labeling import label
from liverl.rewards.session import RewardLabel, SessionRecord
from liverl.rewards.view import agent_view


def label_batch(items: Sequence[tuple[SessionRecord, str]], config: RewardsConfig,
                judge: Judge | None = None) -> list[RewardLabel]:
    """label() for each (session, agent_id); with the judge enabled and given, one judge_many for all.

    Sub-agent trajectories are frozen (never trained), so they are not sent to the judge.
    """
    judgements: list[Judgement | None] = [None] * len(items)
    if config.judge.enabled and judge is not None:
        wanted = [i for i, (session, agent_id) in enumerate(items) if not agent_view(session, agent_id).is_subagent]
        for i, verdict in zip(wanted, judge.judge_many([items[i] for i in wanted])):
            judgements[i] = verdict
    return [label(session, agent_id, config, judgement) for (session, agent_id), judgement in zip(items, judgements)]
