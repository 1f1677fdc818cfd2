"""The trainer end to end on the real stack: table -> DeepSpeed steps -> registered versions with lineage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from liverl.contracts import names
from tests.trainer.conftest import commit_batch, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.registry import TAG_METRICS, Registry
from trainer.loop import Trainer

LINEAGE_TAGS = (
    names.TAG_TABLE_VERSIONS, names.TAG_KAFKA_OFFSETS, names.TAG_REWARD_CONFIG_VERSION, names.TAG_PARENT_VERSION,
    names.TAG_CODE_VERSION, names.TAG_TRAJECTORIES, names.TAG_TRAINER_STEP, TAG_METRICS,
)

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow


def test_train_once_registers_versions_with_lineage_and_gate(stack, tiny_policy_dir, trajectories, tmp_path):
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    # A few held-out sessions cannot show a reward change to the sequential test (trainer/gate/sequential.py), which
    # would defer every candidate: a drop of the whole reward range turns it off; this is about lineage and verdicts.
    config.trainer.gate.max_reward_drop = 2.0
    with pytest.raises(RuntimeError, match="liverl train --init-from"):
        Trainer(config, say=lambda *_: None).start()  # no base policy yet: say what to do
    base = register_base(config, tiny_policy_dir, say=lambda *_: None)
    lines: list[str] = []
    assert register_base(config, tiny_policy_dir, say=lines.append) == base  # idempotent
    assert "already version" in lines[0]
    uri = config.table.trajectories_uri
    commit_batch(uri, trajectories.batch("a", 12), "batch-a", 0, {"events": {"0": [0, 12]}})
    commit_batch(uri, trajectories.batch("b", 12), "batch-b", 1, {"events": {"0": [12, 24], "1": [0, 3]}})

    lines = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    registered = trainer.run(follow=False)
    print("\n".join(lines))

    registry = Registry(config.mlflow)
    versions = sorted((mv for mv in registry.versions() if mv.version != base), key=lambda mv: int(mv.version))
    assert registered == len(versions) >= 2
    assert any(line.startswith("step 1 | loss") and "| tok/s" in line and "| KL" in line for line in lines)
    trained_on: set[int] = set()
    judged = 0
    parent = base
    for mv in versions:
        tags = mv.tags
        assert all(tags.get(key) for key in LINEAGE_TAGS if key != names.TAG_PARENT_VERSION), tags
        assert tags[names.TAG_PARENT_VERSION] == parent  # each version grows from the previous one
        assert tags[names.TAG_GATE_DECISION] in ("pass", "fail")
        report = json.loads(tags[names.TAG_GATE_REPORT])
        # Judged, or refused unjudged when a newer candidate arrived first: the gate judges on a thread, so which
        # candidates wait long enough to be superseded is the machine's timing (trainer/gate/worker.py).
        assert report["figures"] or any(reason.startswith("superseded by v") for reason in report["reasons"]), report
        judged += bool(report["figures"])
        trained_on.update(json.loads(tags[names.TAG_TABLE_VERSIONS]))
        parent = mv.version
    assert judged >= 1 and trained_on == {0, 1}
    offsets = [json.loads(mv.tags[names.TAG_KAFKA_OFFSETS]) for mv in versions]
    assert {"0": [0, 24], "1": [0, 3]} == _union(offsets)["events"]
    assert registry.alias_version(names.ALIAS_CANDIDATE) == versions[-1].version
    assert {"loss", "reward", "kl", "tokens_per_s"} <= json.loads(versions[0].tags[TAG_METRICS]).keys()
    run = registry.client.get_run(versions[0].run_id)  # the step metrics are in MLflow too
    assert {"loss", "reward", "kl", "staleness_mean"} <= run.data.metrics.keys()
    trained = trainer.state.groups[SHARED_GROUP].trajectories_trained
    assert sum(int(mv.tags[names.TAG_TRAJECTORIES]) for mv in versions) == trained
    _registered_with_their_weight_probe(registry, [mv.version for mv in versions], tmp_path / "downloaded")

    # Nothing new: a second one-shot run trains nothing and registers nothing.
    again = Trainer(config, say=lambda *_: None)
    again.start()
    assert again.run(follow=False) == 0


def _registered_with_their_weight_probe(registry: Registry, versions: list[str], cache: Path) -> None:
    """Each registered folder carries the probe its export measured, and its weights reproduce it (serving's check)."""
    from liverl.config.serving import ServingConfig
    from liverl.contracts.weight_probe import read_probe
    from trainer.io.policy_io import load_policy
    from trainer.io.weight_probe import measure_weight_probe

    for version in versions:
        folder = registry.download(version, cache)
        recorded, reloaded = read_probe(folder), measure_weight_probe(load_policy(folder))
        assert recorded.sequences == reloaded.sequences
        worst = max(abs(a - b) for ra, rb in zip(recorded.logprobs, reloaded.logprobs) for a, b in zip(ra, rb))
        assert worst <= ServingConfig().weight_probe_tolerance_float32, (version, worst)


def _union(offset_maps: list[dict]) -> dict:
    from liverl.io.lineage import merge_offsets

    return merge_offsets(offset_maps)
