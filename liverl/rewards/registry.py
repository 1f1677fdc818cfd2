"""Component groups by name, in labelling order, with their code versions."""

from __future__ import annotations

from collections.abc import Callable

from liverl.config.rewards import RewardsConfig
from liverl.rewards.components import Part, context1, parl, penalties, production
from liverl.rewards.view import AgentView

Labeler = Callable[[AgentView, RewardsConfig], Part]

GROUPS: dict[str, tuple[Labeler, str]] = {
    "production": (production.production, production.VERSION),
    "penalties": (penalties.penalties, penalties.VERSION),
    "parl": (parl.parl, parl.VERSION),
    "context1": (context1.context1, context1.VERSION),
}


def code_versions() -> dict[str, str]:
    """Group -> version of its code; a change of any means relabelled rows differ from old ones."""
    return {name: version for name, (_, version) in GROUPS.items()}
