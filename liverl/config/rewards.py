"""The reward library's configuration: components by name and weight, versioned. Owned by rewards."""

from liverl.config.section import Section


class RewardsConfig(Section):
    version: str = "rewards-v1"
    """Stored on every trajectory; bump it when a component or its parameters change."""
