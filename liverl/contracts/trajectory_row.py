"""The typed trajectory row: what the pipelines write and the trainer reads, one per table row.

Produced by the pipelines (`TrajectoryRow(...)`, then `rows_to_table`), consumed by the trainer
(`TrajectoryRow.from_arrow(row)` on each row of a committed table version). Its fields are exactly
the columns of `TRAJECTORY_SCHEMA`, checked by a test, so the two sides can never drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields

import pyarrow as pa

from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION, TRAJECTORY_SCHEMA


class SchemaVersionError(ValueError):
    """A row written by a newer liverl than this reader knows how to read."""


@dataclass(frozen=True)
class TrajectoryRow:
    trajectory_id: str  # deterministic: the same (tenant, session, agent) always gives the same id
    session_id: str
    tenant_id: str
    agent_role: str  # "single" | "orchestrator" | "subagent"
    agent_id: str
    batch_id: str  # the idempotency id of the committing batch
    event_date: str  # partition column, "YYYY-MM-DD" (UTC)
    token_ids: list[int]  # (T,) the full chain; [] while sealed (sealed_token_ids holds them)
    loss_mask: list[int]  # (T,) 1 only on policy-sampled tokens
    behaviour_logprobs: list[float]  # (T,) 0 where the mask is 0
    task_family: str | None = None
    task_id: str | None = None
    parent_agent_id: str | None = None
    policy_versions: list[str] = field(default_factory=list)  # distinct versions, oldest first
    span_starts: list[int] = field(default_factory=list)  # span i covers [span_starts[i], span_ends[i])
    span_ends: list[int] = field(default_factory=list)
    span_policy_versions: list[str] = field(default_factory=list)
    reward_components: dict[str, float] = field(default_factory=dict)  # raw, unmixed
    reward_config_version: str | None = None
    signals: dict[str, float] = field(default_factory=dict)  # monitor counts: broken calls, turns, ...
    critical_steps: int | None = None
    num_turns: int | None = None
    num_model_calls: int | None = None
    session_start_ms: int | None = None
    session_end_ms: int | None = None
    first_served_ms: int | None = None  # earliest model call; None when unknown (never 0)
    distilled_at_ms: int | None = None
    schema_version: int = TABLE_SCHEMA_VERSION
    segment_starts: list[int] = field(default_factory=list)  # 0 first; [] is one segment
    # One entry per span (a model call): its sampling parameters; empty when unknown (version-1 rows).
    span_temperature: list[float] = field(default_factory=list)  # 0: greedy
    span_top_p: list[float] = field(default_factory=list)  # 1: no nucleus truncation
    span_top_k: list[int] = field(default_factory=list)  # 0 or -1: no top-k truncation
    origin: str = ""  # "" served by liverl; "import:<format>": off-policy, no behaviour logprobs
    # Token ids sealed under the data subject's key (liverl.privacy.row_sealing); None: token_ids in clear.
    subject_id: str | None = None  # "s-<hex>": the keyed pseudonym of the session, not personal data
    sealed_token_ids: bytes | None = None

    @property
    def imported(self) -> bool:
        return self.origin.startswith("import:")

    @property
    def sealed(self) -> bool:
        return bool(self.sealed_token_ids)

    def validate(self) -> "TrajectoryRow":
        """Raise ValueError naming the row when its columns disagree (a sealed row must be opened first, so
        its token count is checked too); return self."""
        if self.sealed:
            raise ValueError(
                f"trajectory {self.trajectory_id}: its token ids are sealed under subject {self.subject_id}'s key; "
                "open the row first (liverl.privacy.row_sealing.RowOpener, with the key store that sealed it)"
            )
        n = len(self.token_ids)
        if not (n == len(self.loss_mask) == len(self.behaviour_logprobs)):
            raise ValueError(
                f"trajectory {self.trajectory_id}: token_ids ({n}), loss_mask ({len(self.loss_mask)}) and "
                f"behaviour_logprobs ({len(self.behaviour_logprobs)}) must have one entry per token"
            )
        spans = len(self.span_starts)
        per_span = {"span_ends": self.span_ends, "span_policy_versions": self.span_policy_versions,
                    "span_temperature": self.span_temperature, "span_top_p": self.span_top_p,
                    "span_top_k": self.span_top_k}
        uneven = {name: len(values) for name, values in per_span.items() if values and len(values) != spans}
        if uneven:
            raise ValueError(f"trajectory {self.trajectory_id}: {spans} span_starts but {uneven}")
        if not all(math.isfinite(value) for value in self.reward_components.values()):
            raise ValueError(f"trajectory {self.trajectory_id}: non-finite reward components {self.reward_components}")
        return self

    def to_arrow(self) -> dict:
        """The row as pyarrow's from_pylist takes it (maps as lists of pairs)."""
        row = asdict(self)
        for name in ("reward_components", "signals"):
            row[name] = list(row[name].items())
        return row

    @classmethod
    def from_arrow(cls, row: Mapping) -> "TrajectoryRow":
        """A row as pyarrow's to_pylist gives it. Refuses newer schema versions; tolerates missing additive columns."""
        version = row.get("schema_version") or TABLE_SCHEMA_VERSION
        if version > TABLE_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"trajectory {row.get('trajectory_id')}: table schema version {version} is newer than this "
                f"reader's {TABLE_SCHEMA_VERSION}; upgrade liverl to read it"
            )
        values = {}
        for column in fields(cls):
            value = row.get(column.name)
            if value is None:
                continue  # an absent or null column keeps the field's default
            if column.name in ("reward_components", "signals"):
                value = dict(value)
            values[column.name] = value
        return cls(**values)


def rows_to_table(rows: Iterable[TrajectoryRow]) -> pa.Table:
    """Rows as an Arrow table of exactly TRAJECTORY_SCHEMA (what the pipelines commit)."""
    return pa.Table.from_pylist([row.to_arrow() for row in rows], schema=TRAJECTORY_SCHEMA)


def table_to_rows(table: pa.Table) -> list[TrajectoryRow]:
    return [TrajectoryRow.from_arrow(row) for row in table.to_pylist()]
