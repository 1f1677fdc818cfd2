"""A policy per tenant on one shared base: a step on tenant A's rows, through the trainer's own step and real
DeepSpeed engines, changes A's adapter and leaves B's adapter weights and optimizer state bit-identical."""

from __future__ import annotations

import copy

import pytest
import torch

from liverl.config import load_config
from tests.trainer.conftest import TrajectoryFactory
from trainer.gate.scoring import score_tokens
from trainer.groups.tenant_adapters import tenant_policies
from trainer.io.policy_io import load_policy, weights_digest
from trainer.step.adapters import AdapterBase
from trainer.step.advantages import Baselines
from trainer.step.builder import StepPlan
from trainer.step.training_step import run_step
from trainer.step.trajectory import from_row

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from demo.policy.tiny_policy import build_policy

    return build_policy(tmp_path_factory.mktemp("tenants") / "base", WORDS, arch="llama")


@pytest.fixture(scope="module")
def llama_rows(llama_dir):
    return TrajectoryFactory(llama_dir)


def _config(stage: int = 1):
    return load_config(environ={}, overrides=[
        "--trainer.lora.enabled", "true", "--trainer.learning_rate", "1e-2",
        "--trainer.deepspeed.zero_stage", str(stage), "--trainer.deepspeed.gradient_accumulation_steps", "1",
        "--trainer.tenants.adapters", '["a", "b"]',
    ])


def _plan(factory: TrajectoryFactory, prefix: str, n: int) -> StepPlan:
    trajectories = [from_row(row, 0) for row in factory.batch(prefix, n)]
    return StepPlan(trajectories=trajectories, weights=[1.0] * n, lags=[0] * n)


def _optimizer_state(engine) -> dict:
    """Every tensor of the engine's optimizer state (ZeRO's flat fp32 partitions included), copied."""
    return _copied(engine.optimizer.state_dict())


def _copied(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copied(item) for item in value]
    return copy.deepcopy(value)


def _assert_identical(before, after, where: str = "state"):
    if isinstance(before, torch.Tensor):
        assert torch.equal(before, after), where
    elif isinstance(before, dict):
        assert before.keys() == after.keys(), where
        for key in before:
            _assert_identical(before[key], after[key], f"{where}.{key}")
    elif isinstance(before, (list, tuple)):
        assert len(before) == len(after), where
        before, after = list(before), list(after)
        for i, (x, y) in enumerate(zip(before, after)):
            _assert_identical(x, y, f"{where}[{i}]")
    elif hasattr(before, "__dict__"):  # e.g. ZeRO's loss scaler: compared by its fields
        _assert_identical(vars(before), vars(after), where)
    else:
        assert before == after, where


def _snapshot(policies, group):
    return {name: p.detach().clone() for name, p in policies.adapter_parameters(group).items()}


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_a_step_on_tenant_a_leaves_tenant_b_bit_identical(llama_dir, llama_rows, stage):
    config = _config(stage)
    torch.manual_seed(0)
    base = AdapterBase("1", weights_digest(llama_dir), llama_dir)
    policies = tenant_policies(base, {"a": None, "b": None}, config.trainer)
    assert policies.groups == ["a", "b"]
    # B first, so that B has optimizer state (AdamW moments) that a leak would move.
    run_step(policies.activate("b"), _plan(llama_rows, "b", 4), 0, Baselines({}), config)
    b_weights, b_optimizer = _snapshot(policies, "b"), _optimizer_state(policies.engines["b"])
    a_weights, a_optimizer = _snapshot(policies, "a"), _optimizer_state(policies.engines["a"])
    assert b_weights and len(b_weights) == len(a_weights)

    result = run_step(policies.activate("a"), _plan(llama_rows, "a", 4), 1, Baselines({}), config)

    assert result.metrics["trajectories"] == 4.0
    _assert_identical(b_weights, _snapshot(policies, "b"), "b's adapter")
    _assert_identical(b_optimizer, _optimizer_state(policies.engines["b"]), "b's optimizer")
    assert all(p.grad is None for p in policies.adapter_parameters("b").values())  # no gradient reached B
    changed = [name for name, p in _snapshot(policies, "a").items() if not torch.equal(p, a_weights[name])]
    # A's first step moves every lora_B (lora_A gets no gradient while lora_B is still zero)
    assert changed and sorted(changed) == sorted(name for name in a_weights if ".lora_B." in name)
    with pytest.raises(AssertionError):
        _assert_identical(a_optimizer, _optimizer_state(policies.engines["a"]))


def test_each_tenant_exports_its_own_adapter_on_the_shared_base(llama_dir, llama_rows, tmp_path):
    config = _config(0)
    torch.manual_seed(0)
    base = AdapterBase("1", weights_digest(llama_dir), llama_dir)
    policies = tenant_policies(base, {"a": None, "b": None}, config.trainer)
    for group in ("a", "b"):
        run_step(policies.activate(group), _plan(llama_rows, group, 4), 0, Baselines({}), config)
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    mask = torch.ones_like(ids)
    logp = {}
    for group in ("a", "b"):
        policies.activate(group)
        expected = score_tokens(policies.model, ids, mask).logp
        folder = policies.export(group, tmp_path / group, llama_dir)
        assert sorted(p.name for p in folder.iterdir() if "adapter" in p.name) == [
            "adapter_config.json", "adapter_model.safetensors", "liverl_adapter.json"]
        alone = load_policy(folder, base_folder=llama_dir)  # the folder alone, on the base: the tenant's policy
        logp[group] = score_tokens(alone, ids, mask).logp
        assert torch.allclose(logp[group], expected, atol=1e-5)

    # Each starts from the exported adapter again (a restart), and trains on.
    again = tenant_policies(base, {"a": tmp_path / "a", "b": tmp_path / "b"}, config.trainer)
    for group in ("a", "b"):
        again.activate(group)
        assert torch.allclose(score_tokens(again.model, ids, mask).logp, logp[group], atol=1e-5)
    assert not torch.allclose(logp["a"], logp["b"])  # two tenants, two policies


def test_zero_3_and_a_full_weights_parent_are_refused(llama_dir):
    base = AdapterBase("1", weights_digest(llama_dir), llama_dir)
    with pytest.raises(ValueError, match="zero_stage to 0, 1 or 2"):
        tenant_policies(base, {"a": None}, _config(3).trainer)
    with pytest.raises(ValueError, match="holds full weights"):
        tenant_policies(base, {"a": llama_dir}, _config(0).trainer)


def test_a_rewind_brings_a_group_back_to_its_parent_with_a_new_optimizer_and_leaves_the_others(llama_dir, llama_rows,
                                                                                             tmp_path):
    config = _config(1)
    torch.manual_seed(0)
    base = AdapterBase("1", weights_digest(llama_dir), llama_dir)
    policies = tenant_policies(base, {"a": None, "b": None}, config.trainer)
    for step, group in enumerate(("a", "b")):
        run_step(policies.activate(group), _plan(llama_rows, group, 4), step, Baselines({}), config)
    policies.activate("a")
    champion = policies.export("a", tmp_path / "champion", llama_dir)
    champion_weights = _snapshot(policies, "a")
    for step in range(2):  # a drifts on after its champion
        run_step(policies.activate("a"), _plan(llama_rows, f"drift{step}", 4), 2 + step, Baselines({}), config)
    assert not all(torch.equal(p, champion_weights[n]) for n, p in _snapshot(policies, "a").items())
    b_weights, b_optimizer = _snapshot(policies, "b"), _optimizer_state(policies.engines["b"])
    old_engine = policies.engines["a"]
    lr, warmup = config.trainer.learning_rate, config.trainer.warmup_steps
    assert old_engine.get_lr()[0] == pytest.approx(lr * 4 / (warmup + 1))  # a took 3 steps of its warm-up

    policies.rewind("a", champion, config.trainer)

    _assert_identical(champion_weights, _snapshot(policies, "a"), "a's adapter")
    assert _moments(old_engine) and not _moments(policies.engines["a"])  # a new optimizer: no AdamW moments yet
    assert policies.engines["a"].get_lr()[0] == pytest.approx(lr / (warmup + 1))  # and it warms up again
    assert policies.engines["b"].get_lr()[0] == pytest.approx(lr * 2 / (warmup + 1))  # b's schedule goes on
    _assert_identical(b_weights, _snapshot(policies, "b"), "b's adapter")
    _assert_identical(b_optimizer, _optimizer_state(policies.engines["b"]), "b's optimizer")
    run_step(policies.activate("a"), _plan(llama_rows, "again", 4), 4, Baselines({}), config)  # and it trains on
    assert not all(torch.equal(p, champion_weights[n]) for n, p in _snapshot(policies, "a").items())

    policies.rewind("a", None, config.trainer)  # no champion of its own: a new adapter, the base's policy
    assert all(not p.any() for n, p in _snapshot(policies, "a").items() if ".lora_B." in n)
    _assert_identical(b_weights, _snapshot(policies, "b"), "b's adapter")
    with pytest.raises(ValueError, match="does not fit"):
        policies.rewind("b", _foreign_adapter(llama_dir, tmp_path), config.trainer)
    _assert_identical(b_weights, _snapshot(policies, "b"), "b's adapter after a refused rewind")


def _moments(engine) -> dict:
    """The AdamW state under DeepSpeed's wrapper (ZeRO's optimizer wraps the torch one)."""
    optimizer = engine.optimizer
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer.state


def _foreign_adapter(llama_dir, tmp_path):
    """An adapter folder of another rank: its weights cannot be loaded into the groups' adapters."""
    other = _config(0)
    other.trainer.lora.rank = 4
    base = AdapterBase("1", weights_digest(llama_dir), llama_dir)
    return tenant_policies(base, {"x": None}, other.trainer).export("x", tmp_path / "foreign", llama_dir)
