"""The gate's evidence: held-out sessions of the consumed table, their rewards and advantages, the drift report.

Held out by session (tenant, session id), not by trajectory: an orchestrator's and its sub-agents'
trajectories share their prompts, so training on one of them would leak the others into training.
The split is a hash, the same in every run, so no version of any run was trained on a held-out session.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from liverl.config import LiverlConfig
from liverl.privacy.row_sealing import RowOpener
from liverl.privacy.sealing import Forgotten
from trainer.gate.sequential import Accumulator
from trainer.step.advantages import Baselines, compute_advantages
from trainer.step.rewarding import mixed_rewards, serving_drift
from trainer.gate.served import ServedSession, served_sessions
from trainer.step.trajectory import Trajectory, from_row, holdout_key, is_held_out


@dataclass(frozen=True)
class GateEvidence:
    """Produced by gate_evidence from the table snapshot a candidate was trained up to; consumed by the gate.

    holdout, rows, rewards and advantages are aligned: entry i of each is about the same trajectory.
    """

    holdout: tuple[Trajectory, ...]
    rows: tuple[dict, ...]  # the held-out table rows (signals for the hacking monitors)
    rewards: tuple[float, ...]  # the reward library's mixed reward of each, at the candidate's step
    advantages: tuple[float, ...]  # against a copy of the training baselines
    drift: dict | None  # serving_drift's report; None when it could not be made (the gate then fails)
    # The candidate's running sequential reward test (trainer/gate/sequential.py), updated in place by each look;
    # None: a first look (the gate starts one). Set by the gate worker for a deferred candidate's later looks.
    sequential: Accumulator | None = None
    # The snapshot's finished sessions each served by one version, for the live canary (trainer/gate/canary.py);
    # () when it is off (trainer.gate.canary_alias unset).
    served: tuple[ServedSession, ...] = ()


def held_out_rows(rows: Sequence[dict], fraction: float, limit: int, max_seq_len: int,
                  opener: RowOpener | None = None) -> list[tuple[Trajectory, dict]]:
    """The most recent `limit` held-out trajectories with something to score, oldest first (opener: opens sealed
    rows; those of forgotten subjects are left out)."""
    kept = []
    for row in rows:
        if not is_held_out(holdout_key(row), fraction):
            continue
        try:
            trajectory = from_row(row, -1, opener)
        except (Forgotten, ValueError, KeyError, TypeError):
            continue  # the trainer already reported it when it streamed past
        if trajectory.imported:
            continue  # no behaviour logprobs: the gate's importance weights against them would mean nothing
        if trajectory.trainable_within(max_seq_len):
            kept.append((trajectory, row))
    kept.sort(key=lambda pair: (pair[0].first_served_ms or 0, pair[0].trajectory_id))  # None: unknown
    return kept[-limit:] if limit else kept


def gate_evidence(rows: Sequence[dict], step: int, baselines: Baselines, config: LiverlConfig,
                  opener: RowOpener | None = None) -> GateEvidence:
    """rows: the table snapshot the candidate was trained up to. The baselines are copied: judging must not
    move what training uses. opener: opens the held-out rows' sealed token ids."""
    tc = config.trainer
    drift = serving_drift(rows, config.rewards, tc.gate)
    pairs = held_out_rows(rows, tc.gate.holdout_fraction, tc.gate.max_holdout, tc.max_seq_len, opener)
    holdout = [trajectory for trajectory, _ in pairs]
    rewards = mixed_rewards(holdout, step, config.rewards) if holdout else []
    advantages = compute_advantages(holdout, rewards, copy.deepcopy(baselines), tc.advantages) if holdout else []
    served = ()
    if tc.gate.canary_alias:
        served = served_sessions(rows, step, config.rewards)
    return GateEvidence(
        holdout=tuple(holdout), rows=tuple(row for _, row in pairs), rewards=tuple(rewards),
        advantages=tuple(advantages), drift=drift, served=served,
    )
