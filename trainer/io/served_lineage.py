"""The champion timeline: the versions that served production in turn. Staleness is counted on it.

A row served by version v is stale by the number of versions promoted to champion after v, not by the
candidates registered since: candidates the gate refused never served, so a champion that stays put
while the trainer keeps registering leaves its fresh traffic fresh (otherwise every new row would be
dropped, no candidate made, and the trainer stuck for good).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace

from liverl.contracts import names
from trainer.io.registry import Registry
from trainer.step.trajectory import Trajectory


@dataclass(frozen=True)
class ServedLineage:
    """Produced from the registry (promoted_versions); consumed by the step builder's staleness check."""

    promoted: tuple[int, ...]  # versions that became champion, ascending (the base policy first)

    @classmethod
    def of(cls, served: "ServedLineage | str") -> "ServedLineage":
        """A version string stands for a single chain in which every version up to it served in turn."""
        if isinstance(served, ServedLineage):
            return served
        return cls(tuple(range(1, int(served) + 1)))

    @property
    def current(self) -> str:
        """The newest served version's place on the timeline (as assess's current version)."""
        return str(len(self.promoted))

    def position(self, version: str) -> str:
        """Promoted versions up to and including `version`; non-numeric versions stay as they are (unknown)."""
        if not version.isdigit():
            return version
        return str(bisect.bisect_right(self.promoted, int(version)))

    def on_timeline(self, trajectory: Trajectory) -> Trajectory:
        """The trajectory with each serving version replaced by its place on the champion timeline, so that
        `current - place` is the number of promotions since it was served."""
        return replace(trajectory, policy_versions=tuple(self.position(v) for v in trajectory.policy_versions))

    def lag(self, version: str) -> int:
        return len(self.promoted) - int(self.position(version))


def promoted_versions(registry: Registry, tenant: str | None = None) -> ServedLineage:
    """The champion timeline of the shared policy (tenant None): every shared version the gate passed (the base
    policy included) and whatever `champion` is now. A tenant's (trainer.tenants): what served that tenant in turn,
    the shared champions until its own adapter was first promoted, then its own champions."""
    versions = registry.versions()
    aliases = registry.aliases()
    shared = _promoted(versions, None, aliases.get(names.ALIAS_CHAMPION))
    if tenant is None:
        return ServedLineage(tuple(sorted(shared)))
    own = _promoted(versions, tenant, aliases.get(names.tenant_champion_alias(tenant)))
    first_own = min(own, default=None)
    before = {v for v in shared if first_own is None or v < first_own}
    return ServedLineage(tuple(sorted(own | before)))


def _promoted(versions, tenant: str | None, champion: str | None) -> set[int]:
    """The versions of one tenant (None: the shared policy's, which carry no tenant tag) that the gate passed, and
    the alias's champion."""
    promoted = {int(mv.version) for mv in versions
                if mv.tags.get(names.TAG_TENANT) == tenant and mv.tags.get(names.TAG_GATE_DECISION) == "pass"}
    if champion is not None:
        promoted.add(int(champion))
    return promoted
