"""What the trainer must remember across a crash, saved atomically right after each DeepSpeed checkpoint.

One entry per tenant group (trainer/groups/tenant_groups.py; one group, `_shared`, without trainer.tenants.adapters): the
group's cursor (table version, index into that version's rows of the group, sorted by trajectory_id) and the
DeepSpeed checkpoint it belongs to are written together, so a restart resumes every group exactly where its saved
weights stopped: rows before the cursor are in the weights (no repeat), rows after are not (no gap).

Files written before the groups were one trainer (`trainer_state.json` without "format", `tenant_state.json`) load:
a tenant file as it is; a single-policy file as the shared group, resuming from its last registered version (the
same weights as its last checkpoint, with a new optimizer), or refused when that checkpoint was never registered.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer.io.row_stream import StreamPosition

STATE_FILE = "trainer_state.json"
STATE_FORMAT = 2  # 1: one policy's fields at the top level (no "format"); 2: a state per group
OLD_TENANT_STATE_FILE = "tenant_state.json"  # the per-tenant trainer's file before format 2 (same fields per group)
LAYOUT_ADAPTERS = "adapters"  # every group an adapter on one shared base (trainer.tenants.adapters named)
LAYOUT_ONE_POLICY = "one-policy"  # one group, full weights or an adapter of its own


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
class GroupState:
    parent_version: str | None  # the group's last registered version (None: a new adapter on the base)
    run_key: str  # with a checkpoint tag: the idempotency key of each version the group registers
    step: int = 0  # the group's optimizer steps
    table_version: int = -1  # the group stream's position (trainer/io/row_stream.py; -1: none yet)
    cursor: int = 0  # rows of table_version the group consumed (its rows sorted by trajectory_id, × passes)
    version_done: bool = True  # table_version fully consumed
    trajectories_trained: int = 0
    checkpoint_tag: str | None = None  # DeepSpeed tag the weights come from (None: the parent version's folder)
    baselines: dict[str, float] = field(default_factory=dict)
    pending: PendingPublish | None = None
    gate_refusals: int = 0  # the group's candidates refused in a row since its last promotion
    last_refusal: str = ""  # the reasons of the last refusal, for the "blocked" progress line

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(self.table_version, self.cursor, self.version_done)

    @position.setter
    def position(self, position: StreamPosition) -> None:
        self.table_version, self.cursor, self.version_done = position.table_version, position.cursor, position.done


@dataclass
class TrainerState:
    run_key: str  # unique per checkpoint_dir lineage; a new group's run_key derives from it
    base_version: str | None = None  # the full-weights version the groups' adapters apply to (None: not known yet)
    layout: str = LAYOUT_ONE_POLICY  # how the groups' checkpoints were built: a checkpoint loads into the same only
    groups: dict[str, GroupState] = field(default_factory=dict)
    trained_ids: list[tuple[str, int]] = field(default_factory=list)  # trajectory id -> table version trained from

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / (STATE_FILE + ".tmp")
        with staging.open("w") as handle:
            json.dump({"format": STATE_FORMAT, **asdict(self)}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, folder / STATE_FILE)  # atomic: a reader sees the old state or the new, never half

    @classmethod
    def load(cls, folder: Path, shared_group: str) -> "TrainerState | None":
        """The saved state, or None in a fresh checkpoint_dir; an older file is converted (module docstring).
        shared_group: the name a single-policy file's state takes (trainer/groups/tenant_groups.py SHARED_GROUP)."""
        folder = Path(folder)
        path = folder / STATE_FILE
        if path.exists():
            raw = json.loads(path.read_text())
            if "format" not in raw:
                if (folder / OLD_TENANT_STATE_FILE).exists():
                    raise ValueError(f"{folder} holds the states of both older trainers, {STATE_FILE} (one policy) "
                                     f"and {OLD_TENANT_STATE_FILE} (tenant adapters): move aside the one of the setup "
                                     "you no longer run (trainer.tenants.adapters), then start again")
                return _from_one_policy(raw, path, shared_group)
            if (written := raw.pop("format")) != STATE_FORMAT:
                raise ValueError(f"{path} has state format {written}, this trainer reads {STATE_FORMAT}: run the "
                                 "liverl version that wrote it, or move the file aside to start from the champion")
            return _from_groups(raw, LAYOUT_ONE_POLICY)
        old = folder / OLD_TENANT_STATE_FILE
        if old.exists():
            return _from_groups(json.loads(old.read_text()), LAYOUT_ADAPTERS)
        return None


def _from_groups(raw: dict, layout: str) -> TrainerState:
    groups = {}
    for name, group in raw.pop("groups").items():
        pending = group.pop("pending", None)
        group.setdefault("run_key", f"{raw['run_key']}-{name}")  # the per-tenant trainer's keys
        groups[name] = GroupState(**group, pending=PendingPublish(**pending) if pending else None)
    trained = [(tid, int(version)) for tid, version in raw.pop("trained_ids")]
    raw.setdefault("layout", layout)
    return TrainerState(**raw, groups=groups, trained_ids=trained)


def _from_one_policy(raw: dict, path: Path, shared_group: str) -> TrainerState:
    """A single-policy file (before format 2) as the shared group. Its DeepSpeed checkpoint sits outside the group's
    folder; its weights are the last registered version's, which the group resumes from (with a new optimizer)."""
    if raw.get("pending"):
        raise ValueError(
            f"{path} holds checkpoint {raw['pending']['checkpoint_tag']!r}, saved and not yet registered by an older "
            "liverl trainer: finish it with that version (`liverl train` once), then start this one")
    group = GroupState(
        parent_version=raw["parent_version"], run_key=raw["run_key"], step=raw.get("step", 0),
        table_version=raw.get("table_version", -1), cursor=raw.get("cursor", 0),
        version_done=raw.get("version_done", True), trajectories_trained=raw.get("trajectories_trained", 0),
        baselines=raw.get("baselines", {}), gate_refusals=raw.get("gate_refusals", 0),
        last_refusal=raw.get("last_refusal", ""),
    )
    trained = [(tid, int(version)) for tid, version in raw.get("trained_ids", [])]
    return TrainerState(run_key=raw["run_key"], groups={shared_group: group}, trained_ids=trained)
