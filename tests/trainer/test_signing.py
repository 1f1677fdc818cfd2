"""Signed weights, the trainer's side: a version the gate passes carries a signature of its files and verdict,
made before the alias moves (so no champion is ever unsigned, even across a crash); a refused one has none."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from liverl.contracts import names
from liverl.io.signing import SignatureMismatch, SignedStatement, folder_digest, verify
from trainer.gate.promotion import GateReport
from trainer.io.publish import CheckpointPublisher
from trainer.io.registry import TAG_CHECKPOINT, Registry
from trainer.io.signing import TAG_FILES_DIGEST, ensure_signing_key


class Verdict(CheckpointPublisher):
    """The real promotion (lease, compare-and-set, signature) behind a given verdict (judging is test_gate.py's)."""

    def __init__(self, registry, key, decision):
        super().__init__(registry, GateConfig(), LossConfig(), MonitorsConfig(), 64, "rewards-v1",
                         download_dir=Path("/nonexistent"), say=lambda _: None, signing_key_file=key)
        self.decision = decision

    def report(self, version, champion, checkpoint) -> GateReport:
        return GateReport(self.decision, [] if self.decision == "pass" else ["kl too high"], {})


@pytest.fixture
def model(stack, tiny_policy_dir, tmp_path):
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"signed-{uuid.uuid4().hex[:8]}"
    registry = Registry(config.mlflow)
    registry.register(tiny_policy_dir, {names.TAG_GATE_DECISION: "pass"}, "base")
    for step in (1, 2):
        registry.register(tiny_policy_dir, {TAG_CHECKPOINT: f"run/step-{step}"}, f"step-{step}")
    registry.set_alias(names.ALIAS_CHAMPION, "1")
    return registry, ensure_signing_key(tmp_path / "keys" / "signing.pem")


def _statement(registry, version, folder) -> tuple[SignedStatement, str | None]:
    tags = registry.tags(version)
    return (SignedStatement(registry.name, version, folder_digest(folder), tags.get(names.TAG_GATE_DECISION, "")),
            tags.get(names.TAG_SIGNATURE))


def test_a_promoted_version_is_signed_over_its_registered_files(model, tiny_policy_dir, tmp_path):
    registry, key = model
    assert Verdict(registry, key, "pass").judge("2", checkpoint=None).promoted
    assert registry.tags("2")[TAG_FILES_DIGEST] == folder_digest(tiny_policy_dir)
    downloaded = registry.download("2", tmp_path / "download")
    verify(*_statement(registry, "2", downloaded), key.with_name("verify.pem"))


def test_a_refused_version_is_not_signed_and_does_not_verify(model, tiny_policy_dir):
    registry, key = model
    assert not Verdict(registry, key, "fail").judge("3", checkpoint=None).promoted
    assert names.TAG_SIGNATURE not in registry.tags("3")
    registry.set_alias(names.ALIAS_CHAMPION, "3")  # somebody with registry access moves the alias by hand
    with pytest.raises(SignatureMismatch):
        verify(*_statement(registry, "3", tiny_policy_dir), key.with_name("verify.pem"))
