"""`liverl train --init-from DIR`: the base version is registered with the weight probe of its own weights (so
serving checks its engines, and an upstream fleet's servers, against the base too), and DIR is never written to."""

from __future__ import annotations

import dataclasses
import shutil

from liverl.contracts.weight_probe import PROBE_FILE, has_probe, read_probe
from liverl.io.signing import folder_digest
from tests.trainer.conftest import trainer_config
from trainer.io.base_policy import register_base
from trainer.io.policy_io import load_full_weights
from trainer.io.registry import Registry
from trainer.io.signing import TAG_FILES_DIGEST
from trainer.io.weight_probe import measure_weight_probe


def test_the_base_is_registered_with_the_probe_of_its_weights_and_its_folder_is_left_alone(
        stack, tiny_policy_dir, tmp_path):
    config = trainer_config(stack, tmp_path / "a")
    before = {p.name: p.read_bytes() for p in tiny_policy_dir.iterdir()}
    version = register_base(config, tiny_policy_dir, say=lambda *_: None)
    assert {p.name: p.read_bytes() for p in tiny_policy_dir.iterdir()} == before and not has_probe(tiny_policy_dir)

    registry = Registry(config.mlflow)
    folder = registry.download(version, tmp_path / "downloaded")
    probe = read_probe(folder)
    expected = measure_weight_probe(load_full_weights(tiny_policy_dir))
    assert probe.sequences == expected.sequences and probe.dtype == "float32"
    assert max(abs(a - b) for row, other in zip(probe.logprobs, expected.logprobs)
               for a, b in zip(row, other)) < 1e-5
    assert {p.name for p in folder.iterdir()} == {*before, PROBE_FILE}  # the weights themselves, not links
    assert all(not p.is_symlink() for p in folder.iterdir())
    assert registry.tags(version)[TAG_FILES_DIGEST] == folder_digest(folder)  # the signature covers the probe


def test_a_folder_with_a_probe_of_its_own_is_registered_as_it_is(stack, tiny_policy_dir, tmp_path):
    own = tmp_path / "own"
    shutil.copytree(tiny_policy_dir, own)
    measured = measure_weight_probe(load_full_weights(own))
    marked = dataclasses.replace(measured, logprobs=tuple(tuple(x - 0.25 for x in row) for row in measured.logprobs))
    marked.write(own)  # not these weights' probe: proves the file travelled unmeasured
    config = trainer_config(stack, tmp_path / "b")
    version = register_base(config, own, say=lambda *_: None)
    assert read_probe(Registry(config.mlflow).download(version, tmp_path / "downloaded")) == read_probe(own)
