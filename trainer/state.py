"""What the trainer must remember across a crash, saved atomically right after each DeepSpeed checkpoint.

The cursor (table version, index into that version's rows sorted by trajectory_id) and the DeepSpeed
checkpoint it belongs to are written together, so a restart resumes exactly where the saved weights
stopped: rows before the cursor are in the weights (no repeat), rows after are not (no gap).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "trainer_state.json"


@dataclass
class PendingPublish:
    """A checkpoint saved but maybe not yet registered: a restart finishes its registration."""

    checkpoint_tag: str
    table_versions: list[int]
    kafka_offsets: dict[str, dict[str, list[int]]]  # {topic: {partition: [first, end_exclusive]}}
    trajectories: int
    reward_config_versions: list[str]
    metrics: dict[str, float]


@dataclass
class TrainerState:
    run_key: str  # unique per checkpoint_dir lineage; part of every registered version's idempotency key
    parent_version: str  # the registry version the current weights descend from (last registered)
    step: int = 0
    table_version: int = -1  # the version the cursor is in (-1: none yet)
    cursor: int = 0  # rows of table_version already consumed (sorted by trajectory_id, × passes)
    version_done: bool = True  # table_version fully consumed
    trajectories_trained: int = 0
    checkpoint_tag: str | None = None  # DeepSpeed tag the weights come from (None: the parent version's folder)
    baselines: dict[str, float] = field(default_factory=dict)
    trained_ids: list[str] = field(default_factory=list)
    pending: PendingPublish | None = None
    gate_refusals: int = 0  # candidates the gate refused in a row since the last promotion
    last_refusal: str = ""  # the reasons of the last refusal, for the "blocked" progress line

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / (STATE_FILE + ".tmp")
        with staging.open("w") as handle:
            json.dump(asdict(self), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, folder / STATE_FILE)  # atomic: a reader sees the old state or the new, never half

    @classmethod
    def load(cls, folder: Path) -> "TrainerState | None":
        path = folder / STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        pending = raw.pop("pending", None)
        return cls(**raw, pending=PendingPublish(**pending) if pending else None)
