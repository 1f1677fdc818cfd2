"""The registry as serving sees it: which version an alias points at, its files, rollback tags.

liverl.io.registry with serving's two habits: each download gets a folder of its own (the swapper
deletes old ones), and a rolled-back version is tagged with why. Blocking calls (HTTP to MLflow); the
server runs them on worker threads. `alias_version` is None only when the alias does not exist; an
unreachable registry raises `RegistryUnavailable` (the watcher logs it and keeps serving).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from liverl.contracts import names
from liverl.io.registry import ModelRegistry, RegistryUnavailable, policy_source

__all__ = ["Registry", "RegistryUnavailable"]


class Registry(ModelRegistry):
    def __init__(self, tracking_uri: str, model_name: str):
        super().__init__(tracking_uri, model_name)
        self.model_name = model_name

    def download(self, version: str, versions_dir: Path) -> tuple[Path, str]:
        """Download a version's policy folder into a fresh folder; returns (folder, source uri)."""
        found = self._existing(version)
        dst = Path(versions_dir) / f"v{version}-{int(time.time() * 1000)}"
        folder = super().download(version, dst)
        return folder, policy_source(found.run_id) if found.run_id else found.source

    def tag_rollback(self, version: str, reason: str, detail: dict) -> None:
        """Mark a version serving rolled back (or refused), with why, on the registry version itself."""
        value = json.dumps({"reason": reason, "at_ms": int(time.time() * 1000), **detail})
        self.set_tag(version, names.TAG_SERVING_ROLLBACK, value)
