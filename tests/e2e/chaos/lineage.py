"""Check the registry after the chaos: every trained version names table versions that exist, once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from liverl.io import lineage as codec
from liverl.io.registry import ModelRegistry
from liverl.io.table_history import TableHistory

CHECKPOINT_TAG = "liverl.trainer.checkpoint"  # "<run key>/<DeepSpeed tag>": the trainer's idempotency key


@dataclass
class LineageCheck:
    versions: list[str] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)  # versions with a parent (not the base policy)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"registered versions {len(self.versions)} ({len(self.trained)} trained) | lineage problems {len(self.problems)}"


def check_lineage(tracking_uri: str, model_name: str, table_uri: str) -> LineageCheck:
    commits = {commit.version: commit for commit in TableHistory(table_uri).commits_after(-1)}
    versions = ModelRegistry(tracking_uri, model_name).versions()
    check = LineageCheck(versions=[mv.version for mv in versions])
    known = set(check.versions)
    for mv in versions:
        lineage = codec.decode(mv.tags)
        if lineage.parent_version is None:
            continue  # the base policy: trained on nothing here
        check.trained.append(mv.version)
        if lineage.parent_version not in known:
            check.problems.append(f"v{mv.version}: parent v{lineage.parent_version} is not registered")
        if not lineage.table_versions:
            check.problems.append(f"v{mv.version}: no table versions in its lineage tags")
        for table_version in lineage.table_versions:
            commit = commits.get(table_version)
            if commit is None or commit.batch_id is None:
                check.problems.append(f"v{mv.version}: table version {table_version} is not a committed batch "
                                      f"(table has {sorted(commits)})")
    keys = Counter(mv.tags.get(CHECKPOINT_TAG) for mv in versions if mv.tags.get(CHECKPOINT_TAG))
    check.problems += [f"checkpoint {key} registered {n} times" for key, n in keys.items() if n > 1]
    return check
