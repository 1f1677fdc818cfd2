"""The trainer's view of one trajectory-table row (liverl.table_schema.TRAJECTORY_SCHEMA)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from liverl.table_schema import TABLE_SCHEMA_VERSION


@dataclass(frozen=True)
class Trajectory:
    """Produced by TableFollower from a committed row; consumed by the step builder and the gate."""

    trajectory_id: str
    table_version: int
    task_family: str
    task_id: str
    agent_role: str
    policy_versions: tuple[str, ...]
    token_ids: tuple[int, ...]  # (T,)
    loss_mask: tuple[int, ...]  # (T,) 1 on tokens the trained policy sampled
    behaviour_logprobs: tuple[float, ...]  # (T,)
    reward_components: dict[str, float] = field(default_factory=dict)
    reward_config_version: str = ""
    signals: dict[str, float] = field(default_factory=dict)
    first_served_ms: int = 0

    @property
    def trainable_tokens(self) -> int:
        # Token 0 has no prefix to be predicted from, so it never carries a loss.
        return sum(self.loss_mask[1:])


def from_row(row: dict, table_version: int) -> Trajectory:
    """A row as pyarrow's to_pylist gives it; raises ValueError when its token columns disagree."""
    if (row.get("schema_version") or TABLE_SCHEMA_VERSION) > TABLE_SCHEMA_VERSION:
        raise ValueError(
            f"trajectory {row['trajectory_id']}: table schema version {row['schema_version']} is newer than this "
            f"trainer's {TABLE_SCHEMA_VERSION}; upgrade liverl to train on it"
        )
    tokens, mask, logprobs = row["token_ids"], row["loss_mask"], row["behaviour_logprobs"]
    if not (len(tokens) == len(mask) == len(logprobs)):
        raise ValueError(
            f"trajectory {row['trajectory_id']}: token_ids ({len(tokens)}), loss_mask ({len(mask)}) and "
            f"behaviour_logprobs ({len(logprobs)}) must have one entry per token"
        )
    components = dict(row.get("reward_components") or ())
    if not all(math.isfinite(value) for value in components.values()):
        raise ValueError(f"trajectory {row['trajectory_id']}: non-finite reward components {components}")
    return Trajectory(
        trajectory_id=row["trajectory_id"],
        table_version=table_version,
        task_family=row.get("task_family") or "",
        task_id=row.get("task_id") or "",
        agent_role=row["agent_role"],
        policy_versions=tuple(row.get("policy_versions") or ()),
        token_ids=tuple(tokens),
        loss_mask=tuple(mask),
        behaviour_logprobs=tuple(logprobs),
        reward_components=components,
        reward_config_version=row.get("reward_config_version") or "",
        signals=dict(row.get("signals") or ()),
        first_served_ms=row.get("first_served_ms") or 0,
    )


def is_held_out(trajectory_id: str, fraction: float) -> bool:
    """Deterministic split: the same trajectory is held out in every run, on every machine."""
    if fraction <= 0.0:
        return False
    bucket = int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") / 2**64
    return bucket < fraction
