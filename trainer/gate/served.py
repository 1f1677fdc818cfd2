"""The finished sessions of a table snapshot that one version served, with their rewards: the live canary's
evidence (trainer/gate/canary.py), gathered with the held-out evidence (trainer/gate/holdout.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainer.step.trajectory import holdout_key

if TYPE_CHECKING:
    from liverl.config.rewards import RewardsConfig


@dataclass(frozen=True)
class ServedSession:
    """One finished session of the table that a single version served (gate_evidence makes them; the canary reads)."""

    key: str  # tenant/session id (holdout_key)
    version: str  # the one version that served every call of it
    ended_ms: int
    reward: float  # mean mixed reward of its trajectories at the round's trainer step (not clipped)


def served_sessions(rows: Sequence[dict], step: int, rewards: RewardsConfig) -> tuple[ServedSession, ...]:
    """The sessions among `rows` served by one version, with a known end and a label; imported rows are not served."""
    from liverl.rewards import mix

    by_session: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("session_id") and not str(row.get("origin") or "").startswith("import:"):
            by_session.setdefault(holdout_key(row), []).append(row)
    sessions = []
    for key, group in by_session.items():
        versions = {version for row in group for version in row.get("policy_versions") or ()}
        ends = [row.get("session_end_ms") for row in group]
        if len(versions) != 1 or any(end is None for end in ends):
            continue
        try:
            rewards_of = [mix(_components(row), row.get("task_family") or "", step, rewards,
                              num_policy_tokens=sum(row.get("loss_mask") or ())) for row in group]
        except (ValueError, KeyError, TypeError):
            continue  # a row the trainer cannot mix is reported where it streams past; it never breaks the gate
        sessions.append(ServedSession(key, versions.pop(), max(ends), float(np.mean(rewards_of))))
    return tuple(sessions)


def _components(row: dict) -> dict[str, float]:
    components = row.get("reward_components") or {}
    return dict(components.items() if isinstance(components, dict) else components)  # pyarrow maps: pairs
