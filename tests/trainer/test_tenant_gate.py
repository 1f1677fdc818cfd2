"""The gate per tenant, against the real MLflow registry: a tenant's candidate is judged on its own tenant's
held-out sessions, and its promotion moves that tenant's alias alone (never another tenant's, nor the shared
`champion`), compare-and-set under a promotion lease of the tenant's own."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import torch

from liverl.config.rewards import MonitorsConfig
from liverl.config.trainer import GateConfig, LossConfig
from liverl.contracts import names
from liverl.io.lease import RegistryLease
from tests.trainer.conftest import TrajectoryFactory, commit_batch, trainer_config
from trainer.step.trajectory import holdout_key
from trainer.gate.promotion import GateReport
from trainer.groups.tenant_adapters import tenant_policies
from trainer.groups.tenant_groups import group_evidence
from trainer.io.base_policy import register_base
from trainer.io.policy_io import weights_digest
from trainer.io.publish import PROMOTION_LEASE, CheckpointPublisher, CheckpointToPublish
from trainer.io.registry import TAG_CHECKPOINT, Registry
from trainer.io.state import PendingPublish
from trainer.step.adapters import AdapterBase
from trainer.step.advantages import Baselines
from trainer.step.builder import StepPlan
from trainer.step.training_step import run_step
from trainer.step.trajectory import from_row, is_held_out

pytestmark = pytest.mark.slow  # real MLflow (and DeepSpeed for the judged candidate)

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


class Judged(CheckpointPublisher):
    """A tenant's publisher whose evaluation is replaced by a verdict (the real one is judged below); `during` runs
    inside it, as another trainer would act meanwhile. Promotion, its lease and its aliases are the real ones."""

    def __init__(self, registry: Registry, tenant: str | None, decision: str = "pass", during=None,
                 gate: GateConfig | None = None):
        super().__init__(registry, gate or GateConfig(), LossConfig(), MonitorsConfig(), 64, "rewards-v1",
                         download_dir=Path("/nonexistent"), say=lambda _: None, tenant=tenant)
        self.decision, self.during = decision, during
        self.judged_against: list[str | None] = []

    def report(self, version, champion, checkpoint) -> GateReport:
        self.judged_against.append(champion)
        if self.during is not None:
            self.during(len(self.judged_against))
        return GateReport(self.decision, [] if self.decision == "pass" else ["kl 1.0 exceeds 0.5"], {"kl": 0.01})


@pytest.fixture
def model(stack, tiny_policy_dir):
    """v1 the shared champion; v2 and v4 tenant a's candidates; v3 tenant b's champion."""
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"policy-{uuid.uuid4().hex[:8]}"
    registry = Registry(config.mlflow)
    for i, tags in enumerate([{names.TAG_GATE_DECISION: "pass"}, {TAG_CHECKPOINT: "run-a/step-1"},
                              {names.TAG_TENANT: "b"}, {TAG_CHECKPOINT: "run-a/step-2"}], start=1):
        assert registry.register(tiny_policy_dir, tags, f"v{i}") == str(i)
    registry.set_alias(names.ALIAS_CHAMPION, "1")
    registry.set_alias(names.tenant_champion_alias("b"), "3")
    return config


def _aliases(registry: Registry) -> dict[str, str]:
    return registry.aliases()


def test_promoting_tenant_a_moves_only_its_alias(model):
    registry = Registry(model.mlflow)
    publisher = Judged(registry, tenant="a")
    assert publisher.judge("2", checkpoint=None).promoted
    assert _aliases(registry) == {"champion": "1", "champion-b": "3", "champion-a": "2"}
    assert publisher.judged_against == ["1"]  # no champion-a yet: judged against the shared policy serving a
    report = json.loads(registry.tags("2")[names.TAG_GATE_REPORT])
    assert report["champion"] == "1" and report["alias_champion"] is None

    assert publisher.judge("4", checkpoint=None).promoted  # a's next one: judged against a's own champion
    assert publisher.judged_against == ["1", "2"]
    assert _aliases(registry) == {"champion": "1", "champion-b": "3", "champion-a": "4"}


def test_a_refused_tenant_candidate_moves_nothing(model):
    registry = Registry(model.mlflow)
    result = Judged(registry, tenant="a", decision="fail").judge("2", checkpoint=None)
    assert result.decision == "fail" and result.champion is None  # a has no champion of its own
    assert _aliases(registry) == {"champion": "1", "champion-b": "3"}
    assert registry.tags("2")[names.TAG_GATE_DECISION] == "fail"


def test_a_tenant_candidate_refused_unjudged_names_the_champion_serving_the_tenant(model):
    registry, lines = Registry(model.mlflow), []
    publisher = Judged(registry, tenant="a")
    publisher.say = lines.append
    result = publisher.refuse("2", "superseded by v4 before its turn")
    assert result.decision == "fail" and not result.judged and registry.tags("2")[names.TAG_GATE_DECISION] == "fail"
    assert lines == ["gate v2 (tenant a): not judged (superseded by v4 before its turn) -> champion stays v1"]


def test_the_shared_policy_s_promotion_never_moves_a_tenant_alias(model):
    registry = Registry(model.mlflow)
    assert Judged(registry, tenant=None).judge("2", checkpoint=None).promoted
    assert _aliases(registry) == {"champion": "2", "champion-b": "3"}


def test_another_tenant_holding_its_promotion_lease_does_not_block_tenant_a(model):
    registry = Registry(model.mlflow)
    held = [RegistryLease(registry, name, owner="trainer-other", ttl_s=60.0)
            for name in (PROMOTION_LEASE, f"{PROMOTION_LEASE}-b")]
    assert all(lease.try_acquire() for lease in held)
    try:
        assert Judged(registry, tenant="a", gate=GateConfig(promotion_lease_wait_s=0.0)).judge("2", None).promoted
        blocked = Judged(registry, tenant="b", gate=GateConfig(promotion_lease_wait_s=0.0)).judge("4", None)
    finally:
        for lease in held:
            lease.release()
    assert blocked.decision == "fail" and "promotion lease" in blocked.reasons[0]  # b's own lease is b's
    assert _aliases(registry) == {"champion": "1", "champion-b": "3", "champion-a": "2"}


def test_a_tenant_candidate_whose_alias_moved_while_judged_is_judged_again(model):
    registry = Registry(model.mlflow)

    def another_trainer_promotes(call: int) -> None:
        if call == 1:
            registry.set_alias(names.tenant_champion_alias("a"), "4")

    publisher = Judged(registry, tenant="a", during=another_trainer_promotes)
    assert publisher.judge("2", checkpoint=None).promoted
    assert publisher.judged_against == ["1", "4"]
    assert _aliases(registry) == {"champion": "1", "champion-b": "3", "champion-a": "2"}


def _rows(factory: TrajectoryFactory, tenant: str, n: int, text: str) -> list[dict]:
    rows = []
    for i in range(n):
        row = factory.row(f"{tenant}-{i:03d}", text, 1.0 if i % 2 == 0 else 0.0)
        rows.append(row | {"tenant_id": tenant, "session_id": f"s-{tenant}-{i:03d}"})
    return rows


def test_a_tenant_candidate_is_judged_on_its_own_tenant_s_held_out_sessions_only(stack, tmp_path):
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path)
    config.trainer.gate.holdout_fraction = 0.5
    config.trainer.lora.enabled = True
    config.trainer.tenants.adapters = ["a", "b"]
    config.trainer.deepspeed.zero_stage = 0
    config.trainer.deepspeed.gradient_accumulation_steps = 1
    base = register_base(config, llama, say=lambda *_: None)
    rows_a = _rows(factory, "a", 24, "fix the file : edit file done")
    rows_b = _rows(factory, "b", 24, "fix the file : ask ask ask")
    commit_batch(config.table.trajectories_uri, rows_a + rows_b, "batch-0", 0)
    held_a = sorted(r["trajectory_id"] for r in rows_a if is_held_out(holdout_key(r), 0.5))
    assert held_a and any(is_held_out(holdout_key(r), 0.5) for r in rows_b)

    evidence = group_evidence(rows_a + rows_b, "a", 1, Baselines({}), config)
    assert sorted(t.trajectory_id for t in evidence.holdout) == held_a  # a's sessions, none of b's
    assert {row["tenant_id"] for row in evidence.rows} == {"a"}

    torch.manual_seed(0)
    policies = tenant_policies(AdapterBase(base, weights_digest(llama), llama), {"a": None, "b": None},
                               config.trainer)
    trained = [from_row(r, 0) for r in rows_a if r["trajectory_id"] not in held_a][:4]
    run_step(policies.activate("a"), StepPlan(trained, [1.0] * 4, [0] * 4), 0, Baselines({}), config)
    folder = policies.export("a", tmp_path / "exports" / "a-step-1", llama)
    pending = PendingPublish("step-1", [0], {"events": {"0": [0, 10]}}, 4, ["rewards-v1"], {})
    registry = Registry(config.mlflow)
    publisher = CheckpointPublisher(registry, config.trainer.gate, config.trainer.loss, config.rewards.monitors,
                          config.trainer.max_seq_len, config.rewards.version, tmp_path / "downloads",
                          say=lambda *_: None, tenant="a")
    result = publisher.publish(CheckpointToPublish(pending, "run-t", base, 1, folder, evidence))

    tags = registry.tags(result.version)
    report = json.loads(tags[names.TAG_GATE_REPORT])
    assert report["figures"]["holdout_trajectories"] == len(held_a)  # judged on a's held-out sessions
    assert report["champion"] == base  # a had no adapter yet: against the shared policy
    assert tags[names.TAG_TENANT] == "a" and tags[names.TAG_BASE_VERSION] == base
    assert tags[names.TAG_WEIGHTS_KIND] == names.WEIGHTS_ADAPTER and tags[names.TAG_TABLE_VERSIONS] == "[0]"
    aliases = registry.aliases()
    assert aliases["candidate-a"] == result.version and aliases["candidate"] == base
    assert aliases["champion"] == base and "champion-b" not in aliases
    assert aliases.get("champion-a") == (result.version if result.promoted else None)
