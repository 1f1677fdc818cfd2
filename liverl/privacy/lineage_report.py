"""Which registered versions were trained on an erased subject's data, from their lineage tags.

The trainer tags each version with the table versions it was trained on (liverl.io.lineage); the table's
history maps each committed batch to its table version. A version trained on a table version that committed
one of the subject's rows learnt from the subject, and so did every version trained on from it. Erasing the rows cannot untrain it, so the report names
it, and on request tags it (names.TAG_ERASURE_EXCLUDED) so the gate never promotes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from liverl.contracts import names
from liverl.io.lineage import decode
from liverl.io.registry import ModelRegistry
from liverl.io.table_history import TableHistory


def table_versions_of(trajectories_uri: str | None, batch_ids: Iterable[str]) -> set[int]:
    """The table versions that committed these batches (the log keeps them after the rows are erased)."""
    wanted = set(batch_ids)
    if not wanted or not trajectories_uri:
        return set()
    return {commit.version for commit in TableHistory(trajectories_uri).commits_after(-1)
            if commit.batch_id in wanted}


def trained_on(registry: ModelRegistry, table_versions: set[int]) -> list[str]:
    """The registered versions whose lineage names one of these table versions, and the versions trained on
    from one of them (their parent chain: they inherit what it learnt), oldest first."""
    if not table_versions:
        return []
    affected: list[str] = []
    for mv in registry.versions():  # oldest first: a parent is decided before its children
        lineage = decode(mv.tags)
        if table_versions & set(lineage.table_versions) or lineage.parent_version in affected:
            affected.append(mv.version)
    return affected


def exclude(registry: ModelRegistry, versions: list[str], erasure_id: str) -> None:
    for version in versions:
        registry.set_tag(version, names.TAG_ERASURE_EXCLUDED, erasure_id)
