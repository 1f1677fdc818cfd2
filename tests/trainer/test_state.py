"""trainer/io/state.py: the state file holds a state per tenant group; files written before the groups were one trainer
load (a single-policy file as the shared group) or are refused with what to do."""

from __future__ import annotations

import json

import pytest

from trainer.io.state import STATE_FILE, GroupState, PendingPublish, TrainerState

SHARED = "_shared"


def _pending(tag: str) -> PendingPublish:
    return PendingPublish(checkpoint_tag=tag, table_versions=[0, 1], kafka_offsets={"events": {"0": [0, 5]}},
                          trajectories=5, reward_config_versions=["r1"], metrics={"loss": 0.5})


def test_a_state_round_trips_with_every_group(tmp_path):
    state = TrainerState(run_key="run", base_version="1", layout="adapters", trained_ids=[("a", 0), ("b", 1)])
    state.groups["acme"] = GroupState(parent_version=None, run_key="run-acme", step=3, table_version=1, cursor=2,
                                      version_done=False, checkpoint_tag="step-3", pending=_pending("step-3"))
    state.groups[SHARED] = GroupState(parent_version="4", run_key="run-_shared", gate_refusals=2, last_refusal="kl")
    state.save(tmp_path)
    again = TrainerState.load(tmp_path, SHARED)
    assert again == state and again.groups["acme"].position.cursor == 2
    assert json.loads((tmp_path / STATE_FILE).read_text())["format"] == 2
    assert TrainerState.load(tmp_path / "fresh", SHARED) is None


def test_a_single_policy_file_loads_as_the_shared_group_from_its_last_registered_version(tmp_path):
    old = {"run_key": "r1", "parent_version": "7", "step": 12, "table_version": 3, "cursor": 4, "version_done": False,
           "trajectories_trained": 40, "checkpoint_tag": "step-12", "baselines": {"coding": 0.25},
           "trained_ids": [["t1", 2], ["t2", 3]], "pending": None, "gate_refusals": 1, "last_refusal": "kl"}
    (tmp_path / STATE_FILE).write_text(json.dumps(old))
    state = TrainerState.load(tmp_path, SHARED)
    shared = state.groups[SHARED]
    assert list(state.groups) == [SHARED] and state.trained_ids == [("t1", 2), ("t2", 3)]
    assert (shared.parent_version, shared.run_key, shared.step, shared.cursor, shared.trajectories_trained) == \
        ("7", "r1", 12, 4, 40)  # the same idempotency keys: nothing registered twice
    assert shared.checkpoint_tag is None  # its checkpoint lies outside the group's folder: v7 holds its weights
    assert (shared.baselines, shared.gate_refusals, shared.last_refusal) == ({"coding": 0.25}, 1, "kl")


def test_a_single_policy_file_with_an_unregistered_checkpoint_is_refused(tmp_path):
    old = {"run_key": "r1", "parent_version": "7", "checkpoint_tag": "step-12", "trained_ids": [],
           "pending": json.loads(json.dumps(_pending("step-12").__dict__))}
    (tmp_path / STATE_FILE).write_text(json.dumps(old))
    with pytest.raises(ValueError, match="saved and not yet registered by an older liverl trainer: finish it"):
        TrainerState.load(tmp_path, SHARED)


def test_a_per_tenant_file_loads_as_it_was_and_a_newer_format_is_refused(tmp_path):
    old = {"run_key": "r2", "base_version": "1", "trained_ids": [["t1", 0]], "groups": {
        "acme": {"parent_version": None, "step": 2, "checkpoint_tag": "step-2", "pending": _pending("step-2").__dict__},
        SHARED: {"parent_version": "3", "step": 1}}}
    (tmp_path / "tenant_state.json").write_text(json.dumps(old))
    state = TrainerState.load(tmp_path, SHARED)
    assert state.layout == "adapters" and state.base_version == "1"
    assert state.groups["acme"].run_key == "r2-acme" and state.groups["acme"].pending == _pending("step-2")
    assert state.groups[SHARED].run_key == "r2-_shared" and state.groups[SHARED].parent_version == "3"

    (tmp_path / STATE_FILE).write_text(json.dumps({"format": 3, "run_key": "r3", "groups": {}, "trained_ids": []}))
    with pytest.raises(ValueError, match="state format 3"):
        TrainerState.load(tmp_path, SHARED)


def test_both_older_files_are_refused_rather_than_one_of_them_forgotten(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"run_key": "r1", "parent_version": "7", "trained_ids": []}))
    (tmp_path / "tenant_state.json").write_text(json.dumps({"run_key": "r2", "base_version": "1", "groups": {},
                                                             "trained_ids": []}))
    with pytest.raises(ValueError, match="move aside the one of the setup you no longer run"):
        TrainerState.load(tmp_path, SHARED)
