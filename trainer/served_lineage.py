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
from trainer.registry import Registry
from trainer.trajectory import Trajectory


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


def promoted_versions(registry: Registry) -> ServedLineage:
    """Every version the gate passed (the base policy included) and whatever champion is now."""
    promoted = {int(mv.version) for mv in registry.versions() if mv.tags.get(names.TAG_GATE_DECISION) == "pass"}
    champion = registry.alias_version(names.ALIAS_CHAMPION)
    if champion is not None:
        promoted.add(int(champion))
    return ServedLineage(tuple(sorted(promoted)))
