"""Every component group is registered with a version, and label writes only known component names."""

from __future__ import annotations

from liverl.rewards.registry import GROUPS, code_versions


def test_every_group_is_versioned():
    assert set(code_versions()) == {"production", "penalties", "parl", "context1"}
    assert all(version for version in code_versions().values())
    assert all(callable(labeler) for labeler, _ in GROUPS.values())
