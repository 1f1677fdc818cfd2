"""What the per-tenant trainer must remember across a crash: each tenant group's table position, parent version,
DeepSpeed checkpoint and pending publish, saved atomically right after each group's checkpoint (as trainer/state.py
does for the single policy, one entry per group)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.row_stream import Position
from trainer.state import PendingPublish

TENANT_STATE_FILE = "tenant_state.json"


@dataclass
class GroupState:
    parent_version: str | None  # the group's last registered version (None: a new adapter on the base)
    step: int = 0  # the group's optimizer steps
    table_version: int = -1  # the group stream's position (trainer/row_stream.py)
    cursor: int = 0
    version_done: bool = True
    checkpoint_tag: str | None = None  # the group engine's DeepSpeed tag its adapter comes from
    baselines: dict[str, float] = field(default_factory=dict)
    pending: PendingPublish | None = None
    gate_refusals: int = 0  # the group's candidates refused in a row since its last promotion
    last_refusal: str = ""

    @property
    def position(self) -> Position:
        return Position(self.table_version, self.cursor, self.version_done)


@dataclass
class TenantState:
    run_key: str  # part of every registered version's idempotency key, with the group and the checkpoint tag
    base_version: str  # the shared full-weights version every group's adapter applies to
    groups: dict[str, GroupState] = field(default_factory=dict)
    trained_ids: list[tuple[str, int]] = field(default_factory=list)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / (TENANT_STATE_FILE + ".tmp")
        with staging.open("w") as handle:
            json.dump(asdict(self), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, folder / TENANT_STATE_FILE)  # atomic: the old state or the new, never half

    @classmethod
    def load(cls, folder: Path) -> "TenantState | None":
        path = folder / TENANT_STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        groups = {}
        for name, group in raw.pop("groups").items():
            pending = group.pop("pending", None)
            groups[name] = GroupState(**group, pending=PendingPublish(**pending) if pending else None)
        trained = [(tid, int(version)) for tid, version in raw.pop("trained_ids")]
        return cls(**raw, groups=groups, trained_ids=trained)
