"""The trainer with LoRA on the real stack: adapter versions registered with their base and lineage, judged by the
gate against an adapter champion, and a restart that goes on training the same adapter from its checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from liverl.contracts import adapter as adapter_format
from liverl.contracts import names
from tests.trainer.conftest import TrajectoryFactory, commit_batch, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.policy_io import download_policy, load_policy, weights_digest
from trainer.io.registry import TAG_CHECKPOINT, Registry
from trainer.loop import Trainer

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("lora-loop") / "base", ["edit", "search", "ask", "fix", "file", "done"],
                        arch="llama")


def _lenient_gate(config) -> None:
    """A gate that promotes what healthy training produces, so that the next candidate meets an adapter champion."""
    gate = config.trainer.gate
    gate.background = False
    gate.max_kl, gate.max_nll_increase, gate.max_reward_drop = 10.0, 10.0, 10.0
    gate.min_effective_fraction, gate.confidence_z = 0.01, 0.0


def test_lora_versions_carry_their_base_and_training_resumes_on_the_adapter(stack, llama_dir, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    config.trainer.lora.enabled = True
    config.trainer.learning_rate = 1e-2
    _lenient_gate(config)
    base = register_base(config, llama_dir, say=lambda *_: None)
    rows = TrajectoryFactory(llama_dir)
    uri = config.table.trajectories_uri
    commit_batch(uri, rows.batch("a", 12), "batch-a", 0)

    lines: list[str] = []
    first = Trainer(config, say=lines.append)
    first.start()
    assert first.run(follow=False) >= 2
    print("\n".join(lines))
    assert any(line.startswith("trainer ready") and "lora r16 on base v1" in line for line in lines)

    registry = Registry(config.mlflow)
    versions = [mv for mv in registry.versions() if mv.version != base]
    parent = base
    for mv in versions:
        tags = mv.tags
        assert tags[names.TAG_WEIGHTS_KIND] == names.WEIGHTS_ADAPTER and tags[names.TAG_BASE_VERSION] == base
        assert tags[names.TAG_PARENT_VERSION] == parent and json.loads(tags[names.TAG_TABLE_VERSIONS]) == [0]
        assert json.loads(tags[names.TAG_KAFKA_OFFSETS]) and tags[names.TAG_GATE_DECISION] in ("pass", "fail")
        parent = mv.version
    assert registry.tags(base)[names.TAG_WEIGHTS_KIND] == names.WEIGHTS_FULL
    judged_against = [json.loads(mv.tags[names.TAG_GATE_REPORT])["champion"] for mv in versions]
    assert any(champion != base for champion in judged_against), "no candidate met an adapter champion"

    # What serving and the gate download: the adapter alone, its manifest naming the base, loadable on it.
    last = versions[-1].version
    folder = download_policy(registry, last, tmp_path / "elsewhere")
    assert adapter_format.is_adapter_folder(folder) and not (folder / "model.safetensors").exists()
    manifest = adapter_format.read_manifest(folder)
    assert (manifest.base_version, manifest.base_digest) == (base, weights_digest(llama_dir))
    with torch.no_grad():
        load_policy(folder)(input_ids=torch.tensor([[5, 6, 7]]))
    frozen = {name for name, p in first.policies.activate(SHARED_GROUP).module.named_parameters()
              if not p.requires_grad}
    checkpoints = config.trainer.checkpoint_dir / "deepspeed" / SHARED_GROUP
    for states in checkpoints.glob("step-*/mp_rank_00_model_states.pt"):
        module = torch.load(states, map_location="cpu", weights_only=False)["module"]
        assert any("lora_" in name for name in module) and not frozen & module.keys()  # the base is not saved again

    # A restart: the parent is the last adapter version, the checkpoint holds only the adapter; training goes on.
    commit_batch(uri, rows.batch("b", 12), "batch-b", 1)
    lines = []
    second = Trainer(config, say=lines.append)
    second.start()
    print("\n".join(lines))
    exported = load_file(folder / adapter_format.ADAPTER_WEIGHTS_FILE)
    resumed = {name.replace(".default", ""): p.detach() for name, p in second.policies.adapter.named_parameters()
               if p.requires_grad}
    assert resumed.keys() == exported.keys()
    for name, tensor in exported.items():
        assert torch.equal(resumed[name], tensor), f"{name} differs after the restart"
    assert second.run(follow=False) >= 1
    later = [mv for mv in registry.versions() if int(mv.version) > int(last)]
    assert later and later[0].tags[names.TAG_PARENT_VERSION] == last
    assert all(mv.tags[names.TAG_BASE_VERSION] == base for mv in later)
    assert all(mv.tags.get(TAG_CHECKPOINT) for mv in later)
