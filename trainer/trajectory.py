"""The trainer's view of one trajectory-table row (liverl.contracts.table_schema.TRAJECTORY_SCHEMA)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION


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
    # Where each segment begins (0 first); () is one segment. A segment is its own sequence: its completions
    # were sampled conditioned on its tokens only (the context was rewritten where the next one starts).
    segment_starts: tuple[int, ...] = ()

    def segments(self, max_seq_len: int | None = None) -> list[tuple[int, int]]:
        """[start, end) of each non-empty segment, each cut to its first max_seq_len tokens (the context)."""
        starts = self.segment_starts or (0,)
        ends = (*starts[1:], len(self.token_ids))
        return [(start, min(end, start + max_seq_len) if max_seq_len else end)
                for start, end in zip(starts, ends) if end > start]

    def trainable_within(self, max_seq_len: int | None = None) -> int:
        # A segment's first token has no prefix to be predicted from, so it never carries a loss.
        return sum(sum(self.loss_mask[start + 1:end]) for start, end in self.segments(max_seq_len))

    @property
    def trainable_tokens(self) -> int:
        return self.trainable_within()


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
    segment_starts = _segment_starts(row, len(tokens))
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
        segment_starts=segment_starts,
    )


def _segment_starts(row: dict, length: int) -> tuple[int, ...]:
    """Rows written before the column existed (null or empty) are one segment."""
    starts = list(row.get("segment_starts") or ())
    if not starts:
        return ()
    if starts[0] != 0 or any(b < a for a, b in zip(starts, starts[1:])) or starts[-1] > length:
        raise ValueError(
            f"trajectory {row['trajectory_id']}: segment_starts {starts} must begin at 0 and rise within its "
            f"{length} tokens"
        )
    # A call with no tokens leaves an empty segment (a repeated start, or one at the end): nothing to score.
    return tuple(sorted({start for start in starts if start < length}))


def is_held_out(trajectory_id: str, fraction: float) -> bool:
    """Deterministic split: the same trajectory is held out in every run, on every machine."""
    if fraction <= 0.0:
        return False
    bucket = int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") / 2**64
    return bucket < fraction
