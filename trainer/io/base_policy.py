"""`liverl train --init-from DIR`: register a HF policy folder as the base version (candidate + champion)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from liverl.config import LiverlConfig
from liverl.contracts import names
from trainer.io.lineage import code_version
from trainer.io.policy_io import weights_digest
from trainer.io.pretrained import check_policy_shape
from trainer.io.registry import TAG_BASE_DIGEST, Registry
from trainer.io.signing import TAG_FILES_DIGEST, sign_pass

REQUIRED_FILES = ("config.json", "tokenizer.json")


def register_base(config: LiverlConfig, folder: Path, say: Callable[[str], None] = print,
                  provenance: dict[str, str] | None = None) -> str:
    """Idempotent: the same weights registered again return the existing version and leave champion alone.

    `provenance`: extra lineage tags saying where the weights came from (trainer.io.pretrained's package tags)."""
    folder = Path(folder)
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    weights = sorted(folder.glob("*.safetensors"))
    if missing or not weights:
        raise ValueError(
            f"{folder} is not a policy folder (missing {missing or ['*.safetensors']}); "
            "pass a Hugging Face folder with config.json, model.safetensors and tokenizer files"
        )
    check_policy_shape(config, folder, say)  # a model the loop cannot carry to serving is refused now, not there
    digest = weights_digest(folder)
    registry = Registry(config.mlflow)
    version = registry.find_by_tag(TAG_BASE_DIGEST, digest)
    if version is not None:
        for alias in (names.ALIAS_CANDIDATE, names.ALIAS_CHAMPION):
            if registry.alias_version(alias) is None:
                registry.set_alias(alias, version)
        say(f"base policy {folder} is already version {version} of {registry.name}; nothing to do")
        return version
    tags = {
        TAG_BASE_DIGEST: digest,
        names.TAG_WEIGHTS_KIND: names.WEIGHTS_FULL,
        names.TAG_PARENT_VERSION: "",
        names.TAG_TABLE_VERSIONS: "[]",
        names.TAG_KAFKA_OFFSETS: "{}",
        names.TAG_REWARD_CONFIG_VERSION: config.rewards.version,
        names.TAG_CODE_VERSION: code_version(),
        names.TAG_TRAJECTORIES: "0",
        names.TAG_TRAINER_STEP: "0",
        **(provenance or {}),
    }
    version = registry.register(folder, tags, run_name=f"base policy {folder.name}")
    registry.set_tag(version, names.TAG_GATE_REPORT, json.dumps({"decision": "pass", "reasons": ["base policy"]}))
    sign_pass(registry, version, registry.tags(version)[TAG_FILES_DIGEST], config.trainer.signing_key_file)
    registry.set_alias(names.ALIAS_CANDIDATE, version)
    registry.set_alias(names.ALIAS_CHAMPION, version)
    registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
    say(f"base policy {folder} registered as version {version} of {registry.name} (candidate, champion)")
    return version

