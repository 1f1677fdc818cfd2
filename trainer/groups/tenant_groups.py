"""Tenant groups, the trainer's unit: each tenant named in trainer.tenants.adapters is a group of its own, every other
tenant is in the shared group (the only group when none is named); a group's rows train its policy only, and each
step draws every active group's rows.

    group_of(tenant_id, TenantsConfig) -> group
    group_streams(follower, positions, TrainerConfig) -> {group: RowStream of that group's rows}
    build_tenant_steps(streams, ...) -> {group: StepPlan}    each within trainer.tenants.tokens_per_step
    group_evidence(rows, group, ...) -> GateEvidence          the gate's held-out sessions of the group alone

Each group reads the table through a stream of its own (its own cursor), so a large tenant's backlog waits in the
table, not in memory, while every other group with new rows gets its share of each step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from liverl.config import LiverlConfig
from liverl.config.trainer import TenantsConfig, TrainerConfig
from liverl.contracts import names
from liverl.io.table_history import TableHistory
from liverl.privacy.row_sealing import RowOpener
from trainer.gate.holdout import GateEvidence, gate_evidence
from trainer.io.row_stream import RowStream, StreamPosition
from trainer.io.served_lineage import ServedLineage
from trainer.step.advantages import Baselines
from trainer.step.builder import StepPlan, build_step

SHARED_GROUP = "_shared"  # the tenants without an adapter of their own ('_' never appears in a tenant's group name)


def groups(config: TenantsConfig) -> list[str]:
    """Every group: the named tenants, then the shared one."""
    return [*config.adapters, SHARED_GROUP]


def group_of(tenant_id: str | None, config: TenantsConfig) -> str:
    """The group a row of tenant_id trains: the tenant's own, or the shared one."""
    return tenant_id if tenant_id in config.adapters else SHARED_GROUP


def in_group(group: str, config: TenantsConfig) -> Callable[[dict], bool]:
    """The stream filter of a group: its rows by their tenant_id."""
    return lambda row: group_of(row.get("tenant_id"), config) == group


def tenant_of(group: str) -> str | None:
    """The tenant a group's versions are registered for (None: the shared policy)."""
    return None if group == SHARED_GROUP else group


def champion_alias(group: str) -> str:
    """The alias the group's gate moves and serving follows: `champion-<tenant>`, or `champion` (shared)."""
    return names.ALIAS_CHAMPION if group == SHARED_GROUP else names.tenant_champion_alias(group)


def candidate_alias(group: str) -> str:
    """The alias of the group's newest registered candidate: `candidate-<tenant>`, or `candidate` (shared)."""
    return names.ALIAS_CANDIDATE if group == SHARED_GROUP else names.tenant_candidate_alias(group)


def group_streams(follower: TableHistory, positions: Mapping[str, StreamPosition], config: TrainerConfig
                  ) -> dict[str, RowStream]:
    """A stream per group over the same table, each from its own position (a fresh group: the table's start)."""
    start = StreamPosition(-1, 0, True)
    return {group: RowStream(follower, positions.get(group, start), config.passes_per_trajectory,
                             keep=in_group(group, config.tenants))
            for group in groups(config.tenants)}


def build_tenant_steps(
    streams: Mapping[str, RowStream], trained: dict[str, int], served: Mapping[str, ServedLineage | str],
    now_ms: int, config: TrainerConfig, say: Callable[[str], None] = print, world: int = 1,
    opener: RowOpener | None = None,
) -> dict[str, StepPlan]:
    """The next step of every group that has new rows, each group's at most tenants.tokens_per_step tokens (and
    one trajectory at least) when tenants have adapters, else a full step; a group's plan may be empty yet have
    consumed rows (skipped ones)."""
    share = config.tenants.tokens_per_step if config.tenants.adapters else None
    plans = {}
    for group in sorted(streams):
        plan = build_step(streams[group], trained, served[group], now_ms, config, say, world,
                          max_tokens=share, opener=opener)
        if plan.consumed:
            plans[group] = plan
    return plans


def group_evidence(rows: list[dict], group: str, step: int, baselines: Baselines, config: LiverlConfig,
                   opener: RowOpener | None = None) -> GateEvidence:
    """The gate's evidence for a group's candidate: the held-out sessions, rewards and drift report of the group's
    own rows (a tenant's candidate is judged on its tenant's traffic alone); baselines: the group's."""
    keep = in_group(group, config.trainer.tenants)
    return gate_evidence([row for row in rows if keep(row)], step, baselines, config, opener)
