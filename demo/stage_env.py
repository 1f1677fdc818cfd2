"""Hand a LiverlConfig to child processes exactly: as LIVERL_SECTION__FIELD environment variables."""

from __future__ import annotations

import json

from liverl.config import LiverlConfig


def config_environment(config: LiverlConfig) -> dict[str, str]:
    """Every field of every shared section, JSON-encoded, so each stage sees the demo's effective config.

    Only LiverlConfig's own sections: a stage's config has no [demo] section and would refuse one.
    """
    env: dict[str, str] = {}
    shared = set(LiverlConfig.model_fields)
    for section, values in config.model_dump(mode="json", include=shared).items():
        for field, value in values.items():
            if value is not None:
                env[f"LIVERL_{section.upper()}__{field.upper()}"] = json.dumps(value)
    return env
