"""Serving's version folders: each download of a registry version gets a fresh folder under the versions folder,
so the rollout can delete a retired version's folder (download_folder finds it) while another download of the same
version serves."""

from __future__ import annotations

import time
from pathlib import Path

from liverl.io.registry import ModelRegistry


def download_version(registry: ModelRegistry, version: str, versions_dir: Path) -> tuple[Path, str]:
    """Download a version's policy folder into a fresh folder: (the folder, the URI it came from). Blocking."""
    found = registry.existing(version)
    folder = registry.download(version, Path(versions_dir) / f"v{version}-{int(time.time() * 1000)}")
    return folder, found.policy_uri


def download_folder(versions_dir: Path, path: Path) -> Path | None:
    """The download folder (a child of versions_dir) holding path, or None for a folder of the user's."""
    try:
        relative = Path(path).resolve().relative_to(Path(versions_dir).resolve())
    except ValueError:
        return None
    return Path(versions_dir).resolve() / relative.parts[0] if relative.parts else None
