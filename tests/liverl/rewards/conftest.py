"""Fixtures of the reward library's tests: the default rewards config (tests override fields on a copy)."""

from __future__ import annotations

import pytest

from liverl.config.rewards import RewardsConfig


@pytest.fixture
def config() -> RewardsConfig:
    return RewardsConfig()
