"""Serving's version folders on a real MLflow server: each download a fresh folder, with the URI it came from;
the download folder a path lies in; and one registry client for every stage (no serving subclass of its own)."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from liverl.io.registry import ModelRegistry
from serving.swap.downloads import download_folder, download_version

ROOT = Path(__file__).resolve().parents[2]


def test_each_download_gets_a_fresh_folder_and_names_its_source(stack, tmp_path):
    registry = ModelRegistry(stack.mlflow.tracking_uri, f"downloads-{uuid.uuid4().hex[:8]}")
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text('{"model_type": "gpt2"}')
    version = registry.register_folder(policy, {}, "serving-downloads", "downloads")
    versions_dir = tmp_path / "versions"

    first, source = download_version(registry, version, versions_dir)
    second, _ = download_version(registry, version, versions_dir)

    assert (first / "config.json").read_text() == '{"model_type": "gpt2"}'
    assert download_folder(versions_dir, first) != download_folder(versions_dir, second)
    assert download_folder(versions_dir, first / "config.json") == download_folder(versions_dir, first)
    assert download_folder(versions_dir, policy) is None  # a folder of the user's is never deleted
    assert source == f"runs:/{registry.existing(version).run_id}/policy"
    with pytest.raises(LookupError, match="liverl status"):
        download_version(registry, "99", versions_dir)


def test_one_registry_client_class():
    """What every stage needs from the registry lives in liverl/io/registry.py; a stage adds what is its own
    (trainer/io/registry.py), and no two classes share the name Registry."""
    named = [str(path.relative_to(ROOT)) for path in sorted(ROOT.glob("*/**/*.py"))
             if path.relative_to(ROOT).parts[0] in ("liverl", "ingest", "serving", "pipelines", "trainer")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.ClassDef) and node.name == "Registry"]
    assert len(named) <= 1, f"classes named Registry: {named}"
