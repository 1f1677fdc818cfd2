"""Each tenant's adapters as the registry holds them: its champion and candidate, and every version registered for
it with its lineage (what `liverl tenants` prints).

    tenant_histories(registry) -> {tenant: TenantHistory}    tenants with a version or an alias of their own

A tenant's version names its base (the shared full-weights version its adapter applies to), the table versions its
tenant's rows came from and those commits' Kafka offset ranges. The pipelines commit every tenant's sessions
together, so the ranges are the commits' own: they hold the tenant's records, and other tenants' records as well.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from liverl.contracts import names
from liverl.io.lineage import KafkaOffsets, decode
from liverl.io.registry import ModelRegistry, ModelVersion

_TENANT_ALIAS = re.compile(rf"(?:{names.ALIAS_CHAMPION}|{names.ALIAS_CANDIDATE})-({names.TENANT_NAME.pattern})")


@dataclass(frozen=True)
class TenantVersion:
    """One registered adapter version of a tenant, with its lineage and the gate's decision."""

    version: str
    decision: str  # "pass" | "fail" | "defer" (too little evidence) | "" (not judged yet)
    parent_version: str | None
    base_version: str
    table_versions: tuple[int, ...]
    kafka_offsets: KafkaOffsets
    trajectories: int
    step: int

    def line(self) -> str:
        return (f"v{self.version} {self.decision or 'pending'} | parent v{self.parent_version or '-'} | base "
                f"v{self.base_version or '-'} | table {list(self.table_versions)} | trajectories {self.trajectories} "
                f"| step {self.step} | kafka {_offsets(self.kafka_offsets)}")


@dataclass(frozen=True)
class TenantHistory:
    tenant: str
    champion: str | None  # the version `champion-<tenant>` names (None: the tenant is served the shared policy)
    candidate: str | None
    versions: list[TenantVersion] = field(default_factory=list)  # oldest first

    def lines(self, shared_champion: str | None) -> list[str]:
        serves = f"champion v{self.champion}" if self.champion else f"no champion (served the shared v{shared_champion})"
        head = f"tenant {self.tenant} | {serves} | candidate v{self.candidate or '-'} | {len(self.versions)} versions"
        return [head, *(f"  {version.line()}" for version in self.versions)]


def tenant_histories(registry: ModelRegistry) -> dict[str, TenantHistory]:
    """Every tenant with a version tagged for it or an alias of its own, by name."""
    versions = registry.versions()
    aliases = registry.aliases()
    tenants = {mv.tags[names.TAG_TENANT] for mv in versions if mv.tags.get(names.TAG_TENANT)}
    tenants |= {match.group(1) for alias in aliases if (match := _TENANT_ALIAS.fullmatch(alias))}
    return {tenant: TenantHistory(
        tenant=tenant, champion=aliases.get(names.tenant_champion_alias(tenant)),
        candidate=aliases.get(names.tenant_candidate_alias(tenant)),
        versions=[_tenant_version(mv) for mv in versions if mv.tags.get(names.TAG_TENANT) == tenant],
    ) for tenant in sorted(tenants)}


def _tenant_version(mv: ModelVersion) -> TenantVersion:
    lineage = decode(mv.tags)
    return TenantVersion(
        version=mv.version, decision=mv.tags.get(names.TAG_GATE_DECISION, ""), parent_version=lineage.parent_version,
        base_version=mv.tags.get(names.TAG_BASE_VERSION, ""), table_versions=lineage.table_versions,
        kafka_offsets=lineage.kafka_offsets, trajectories=lineage.trajectories, step=lineage.step,
    )


def _offsets(offsets: KafkaOffsets) -> str:
    return " ".join(f"{topic}[{','.join(f'{p}:{a}-{b}' for p, (a, b) in sorted(parts.items()))}]"
                    for topic, parts in sorted(offsets.items())) or "-"
