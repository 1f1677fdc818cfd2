"""`liverl train --init-from DIR`: register a HF policy folder as the base version (candidate + champion)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from liverl.config import LiverlConfig
from liverl.contracts import names
from liverl.contracts.weight_probe import has_probe
from trainer.io.lineage import code_version
from trainer.io.policy_io import load_full_weights, weights_digest
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
    with _with_weight_probe(folder) as probed:
        version = registry.register(probed, tags, run_name=f"base policy {folder.name}")
    registry.set_tag(version, names.TAG_GATE_REPORT, json.dumps({"decision": "pass", "reasons": ["base policy"]}))
    sign_pass(registry, version, registry.tags(version)[TAG_FILES_DIGEST], config.trainer.signing_key_file)
    registry.set_alias(names.ALIAS_CANDIDATE, version)
    registry.set_alias(names.ALIAS_CHAMPION, version)
    registry.set_tag(version, names.TAG_GATE_DECISION, "pass")
    say(f"base policy {folder} registered as version {version} of {registry.name} (candidate, champion)")
    return version


@contextmanager
def _with_weight_probe(folder: Path) -> Iterator[Path]:
    """The folder to register: folder itself when it holds a weight probe (liverl/contracts/weight_probe.py), else a
    staging folder of links to its files plus the probe measured on its weights. With it, serving checks the base
    like every trained version: its own engines and each server of an upstream fleet must give the logprobs these
    weights give, before the base takes traffic. The user's folder is never written to."""
    if has_probe(folder):
        yield folder
        return
    from trainer.io.weight_probe import measure_weight_probe

    model = load_full_weights(folder)  # as the trainer loads it: float32
    probe = measure_weight_probe(model)
    del model
    with tempfile.TemporaryDirectory(prefix="liverl-base-") as staging:
        staged = Path(staging) / folder.name
        staged.mkdir()
        for path in sorted(folder.rglob("*")):  # real folders, linked files: digests and uploads read the files
            target = staged / path.relative_to(folder)
            if path.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(path.resolve())
        probe.write(staged)
        yield staged
