"""trainer/loop.py with a policy per tenant group on the real stack (DeepSpeed, MLflow, a Delta table): every step
draws each tenant group, each group registers its own adapter versions with its lineage and moves its own aliases, and
a restart goes on from each group's checkpoint."""

from __future__ import annotations

import json
import re
import sys

import pytest

from liverl.contracts import names
from tests.trainer.conftest import TrajectoryFactory, cli_overrides, commit_batch, run_trainer, trainer_config
from trainer.groups.tenant_groups import SHARED_GROUP
from trainer.io.base_policy import register_base
from trainer.io.registry import Registry
from trainer.io.state import TrainerState
from trainer.loop import Trainer

pytestmark = pytest.mark.slow  # real DeepSpeed + MLflow

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


def _rows(factory: TrajectoryFactory, tenant: str, n: int, start: int = 0) -> list[dict]:
    rows = []
    for i in range(start, start + n):
        text = "fix the file : edit file done" if i % 2 == 0 else "fix the file : ask ask ask"
        row = factory.row(f"{tenant}-{i:03d}", text, 1.0 if i % 2 == 0 else 0.0)
        rows.append(row | {"tenant_id": tenant, "session_id": f"s-{tenant}-{i:03d}"})
    return rows


def _step_groups(lines: list[str]) -> list[str]:
    """The group of each progress line of a step ("<group> | step N | loss ..."), in order."""
    return [line.split(" | ")[0] for line in lines if re.match(r"\S+ \| step \d+ \| loss ", line)]


def _train_to_the_table_end(config) -> tuple[list[str], int, Trainer]:
    """A trainer started, run to the table's end and closed: its lines (printed), the versions it registered, itself."""
    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    registered = trainer.run(follow=False)
    trainer.close()
    print("\n".join(lines))
    return lines, registered, trainer


def test_each_tenant_trains_registers_and_is_gated_on_its_own(stack, tmp_path):
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=2)
    tc = config.trainer
    tc.lora.enabled, tc.learning_rate = True, 1e-2
    tc.tenants.adapters = ["big", "small"]
    tc.tenants.tokens_per_step = 3 * len(_rows(factory, "x", 1)[0]["token_ids"])  # three trajectories a group
    tc.deepspeed.zero_stage, tc.deepspeed.gradient_accumulation_steps = 0, 1
    gate = tc.gate
    gate.max_kl, gate.max_nll_increase, gate.max_reward_drop = 10.0, 10.0, 10.0  # promote healthy training
    gate.min_effective_fraction, gate.confidence_z = 0.01, 0.0
    base = register_base(config, llama, say=lambda *_: None)
    commit_batch(config.table.trajectories_uri,
                 _rows(factory, "big", 40) + _rows(factory, "small", 8) + _rows(factory, "zed", 8), "batch-0", 0)

    lines, registered, trainer = _train_to_the_table_end(config)
    steps = _step_groups(lines)
    assert sorted(steps[:3]) == [SHARED_GROUP, "big", "small"]  # the first step draws every group: none starved

    registry = Registry(config.mlflow)
    versions = [mv for mv in registry.versions() if mv.version != base]
    assert len(versions) == registered >= 3
    by_tenant: dict[str | None, list] = {}
    for mv in versions:
        by_tenant.setdefault(mv.tags.get(names.TAG_TENANT), []).append(mv)
        assert mv.tags[names.TAG_WEIGHTS_KIND] == names.WEIGHTS_ADAPTER and mv.tags[names.TAG_BASE_VERSION] == base
        assert json.loads(mv.tags[names.TAG_TABLE_VERSIONS]) == [0] and mv.tags[names.TAG_GATE_DECISION] in ("pass", "fail", "defer")
    assert set(by_tenant) == {"big", "small", None}
    aliases = registry.aliases()
    for tenant, alias in (("big", "candidate-big"), ("small", "candidate-small"), (None, "candidate")):
        assert aliases[alias] == by_tenant[tenant][-1].version  # each group's newest version, under its own alias
    for tenant in ("big", "small"):  # a tenant's champion is one of its own versions, or it has none yet
        champion = aliases.get(names.tenant_champion_alias(tenant))
        assert champion is None or champion in {mv.version for mv in by_tenant[tenant]}
    assert aliases["champion"] in {base} | {mv.version for mv in by_tenant[None]}
    trained = {tenant: sum(int(mv.tags[names.TAG_TRAJECTORIES]) for mv in mvs) for tenant, mvs in by_tenant.items()}
    held_out = config.trainer.gate.holdout_fraction
    assert trained["small"] <= 8 and trained["big"] > trained["small"] > 0 and trained[None] <= 8
    assert held_out > 0

    # A restart goes on from each group's checkpoint: only the group with new rows trains, from its last version.
    small_before = by_tenant["small"][-1].version
    commit_batch(config.table.trajectories_uri, _rows(factory, "small", 6, start=8), "batch-1", 1)
    lines, registered, _ = _train_to_the_table_end(config)
    assert registered == 1
    newest = registry.versions()[-1]
    assert newest.tags[names.TAG_TENANT] == "small" and newest.tags[names.TAG_PARENT_VERSION] == small_before
    assert json.loads(newest.tags[names.TAG_TABLE_VERSIONS]) == [1]
    assert set(_step_groups(lines)) == {"small"}


def test_liverl_train_with_tenant_adapters_trains_a_group_per_tenant(stack, tmp_path):
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    config = trainer_config(stack, tmp_path, steps_per_version=1)
    config.trainer.signing_key_file = tmp_path / "keys" / "signing.pem"
    base = register_base(config, llama, say=lambda *_: None)
    factory = TrajectoryFactory(llama)
    commit_batch(config.table.trajectories_uri, _rows(factory, "acme", 4) + _rows(factory, "zed", 4), "batch-0", 0)
    lines = run_trainer([sys.executable, "-m", "liverl.cli", "train", *cli_overrides(config),
                         "--trainer.signing_key_file", str(config.trainer.signing_key_file),
                         "--trainer.tenants.adapters", '["acme"]', "--trainer.lora.enabled", "true",
                         "--trainer.deepspeed.zero_stage", "0"], timeout_s=300)
    print("\n".join(lines))
    assert any(line.startswith(f"trainer ready | base v{base} | groups acme") for line in lines)
    assert set(_step_groups(lines)) == {"acme", SHARED_GROUP}
    assert any(line.startswith("trainer done | steps acme ") for line in lines)
    tenants = {mv.tags.get(names.TAG_TENANT) for mv in Registry(config.mlflow).versions() if mv.version != base}
    assert tenants == {"acme", None}


def test_a_group_waits_for_its_own_rows_and_a_checkpoint_leaves_the_held_ones_untrained(stack, tmp_path):
    """trainer.min_step_rows holds per group: small's fourth row waits for company; a stop then checkpoints small
    at its first step, resuming before the held row, and the restart trains it once."""
    config, base = _small_and_big(stack, tmp_path)

    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)

    def say(line: str) -> None:  # round 2: small has drawn (and holds) its 4th row, then big steps: stop there
        lines.append(line)
        if line.startswith("big | step 2 "):
            trainer.stop_requested = True

    trainer.say = say
    trainer.start()
    trainer.run(follow=True)
    trainer.close()
    print("\n".join(lines))
    assert _step_groups(lines) == ["small", "big", "big"]  # small's 4th row alone did not make a step

    lines, _, _ = _train_to_the_table_end(config)  # what waited is trained
    assert _step_groups(lines) == ["small"] and any(re.search(r"^small \| step 2 .*\| traj 1 ", line) for line in lines)
    small = [mv for mv in Registry(config.mlflow).versions()
             if mv.version != base and mv.tags.get(names.TAG_TENANT) == "small"]
    assert [int(mv.tags[names.TAG_TRAJECTORIES]) for mv in small] == [3, 1]  # each row trained once, none lost


class Crash(Exception):
    """The trainer's process dies here."""


def test_a_crash_after_one_group_checkpoints_loses_no_other_groups_rows(stack, tmp_path):
    """big checkpoints (and dies registering) while small has trained 3 rows since its last checkpoint and holds a
    4th: the restart resumes each group from its own checkpoint and trains each of small's rows exactly once."""
    config, base = _small_and_big(stack, tmp_path)

    lines: list[str] = []

    def dies_at_bigs_first_version(line: str) -> None:  # said after big's checkpoint and state were saved
        lines.append(line)
        if "(tenant big) registered" in line:
            raise Crash(line)

    trainer = Trainer(config, say=dies_at_bigs_first_version)
    trainer.start()
    with pytest.raises(Crash):
        trainer.run(follow=True)
    print("\n".join(lines))
    assert _step_groups(lines) == ["small", "big", "big"]

    lines, _, _ = _train_to_the_table_end(config)  # finishes big's registration, then resumes each group
    trained: dict[str | None, int] = {}
    for mv in Registry(config.mlflow).versions():
        if mv.version != base:
            tenant = mv.tags.get(names.TAG_TENANT)
            trained[tenant] = trained.get(tenant, 0) + int(mv.tags[names.TAG_TRAJECTORIES])
    assert trained == {"big": 6, "small": 4}  # every row of each tenant trained exactly once


def _small_and_big(stack, tmp_path):
    """Two tenants' adapters, small's rows drawn first each round, steps of 3 rows that wait for 4 (the longest
    wait out of reach), a version every 2 steps, no held-out rows (the counts are exact); big's 6 rows and small's
    4 committed. Returns (config, base version)."""
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=2, minutes_per_version=0.0, min_step_rows=4,
                            max_step_wait_s=3600.0)
    tc = config.trainer
    tc.lora.enabled = True
    tc.tenants.adapters = ["small", "big"]
    tc.tenants.tokens_per_step = 3 * len(_rows(factory, "x", 1)[0]["token_ids"])
    tc.gate.holdout_fraction = 0.0
    tc.deepspeed.zero_stage, tc.deepspeed.gradient_accumulation_steps = 0, 1
    base = register_base(config, llama, say=lambda *_: None)
    commit_batch(config.table.trajectories_uri, _rows(factory, "big", 6) + _rows(factory, "small", 4), "batch-0", 0)
    return config, base


def test_a_group_whose_candidates_keep_being_refused_is_rewound_to_its_champion(stack, tmp_path):
    """trainer.tenants.rewind_after_refusals 2: after every 2 of acme's candidates refused in a row (no held-out
    rows: the gate refuses each), acme's adapter starts again from its champion (a new adapter while it has none),
    its next version names that parent, and a restart starts from there, not from the refused drift."""
    import torch
    from peft import get_peft_model_state_dict
    from peft.utils import load_peft_weights

    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=1, minutes_per_version=0.0)
    tc = config.trainer
    tc.lora.enabled, tc.learning_rate = True, 1e-2
    tc.tenants.adapters, tc.tenants.rewind_after_refusals = ["acme"], 2
    tc.tenants.tokens_per_step = 2 * len(_rows(factory, "x", 1)[0]["token_ids"])  # two trajectories a step
    tc.gate.holdout_fraction = 0.0
    tc.gate.background = False  # each verdict before the next step: the rewinds fall on known steps
    tc.deepspeed.zero_stage, tc.deepspeed.gradient_accumulation_steps = 0, 1
    base = register_base(config, llama, say=lambda *_: None)
    registry = Registry(config.mlflow)

    def run(rows: list[dict], batch: int) -> tuple[list[str], list[str], Trainer]:
        commit_batch(config.table.trajectories_uri, rows, f"batch-{batch}", batch)
        lines, _, trainer = _train_to_the_table_end(config)
        acme = [mv.version for mv in registry.versions() if mv.tags.get(names.TAG_TENANT) == "acme"]
        return lines, acme, trainer

    lines, first, _ = run(_rows(factory, "acme", 4), 0)
    assert len(first) == 2
    assert f"acme | rewound to a new adapter on base v{base} after 2 candidates refused in a row " \
           "(trainer.tenants.rewind_after_refusals)" in lines
    champion = first[0]
    registry.set_alias(names.tenant_champion_alias("acme"), champion)  # as a promotion would have

    lines, versions, trainer = run(_rows(factory, "acme", 8, start=4), 1)  # a restart: refusals 3 to 6
    later = versions[2:]
    assert len(later) == 4
    assert [line for line in lines if " rewound " in line] == [
        f"acme | rewound to its champion v{champion} after {n} candidates refused in a row "
        "(trainer.tenants.rewind_after_refusals)" for n in (4, 6)]
    parents = [registry.tags(v)[names.TAG_PARENT_VERSION] for v in later]
    assert parents == [base, later[0], champion, later[2]]  # after each rewind, the champion is the parent
    state = TrainerState.load(tc.checkpoint_dir, SHARED_GROUP).groups["acme"]
    assert (state.parent_version, state.checkpoint_tag, state.gate_refusals) == (champion, None, 6)
    held = get_peft_model_state_dict(trainer.policies.peft, adapter_name="tenant-acme")
    saved = load_peft_weights(str(registry.download(champion, tmp_path / "champion")))
    assert held.keys() == saved.keys() and all(torch.equal(held[k].detach(), saved[k]) for k in held)


def test_a_tenant_without_a_champion_of_its_own_starts_from_the_shared_champion(stack, tmp_path):
    """Serving gives a tenant without a champion of its own the shared policy, so its rows are sampled from the
    shared champion's adapter: its own adapter starts from a copy of that one, not from the base, and a rewind goes
    back there too."""
    import torch
    from peft import get_peft_model_state_dict
    from peft.utils import load_peft_weights

    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=1, minutes_per_version=0.0)
    tc = config.trainer
    tc.lora.enabled, tc.learning_rate = True, 1e-2
    tc.tenants.adapters = ["acme"]
    tc.gate.holdout_fraction = 0.0  # no held-out rows: the gate refuses every candidate
    tc.gate.background = False  # each verdict before the next step: the rewind falls on a known step
    tc.deepspeed.zero_stage, tc.deepspeed.gradient_accumulation_steps = 0, 1
    base = register_base(config, llama, say=lambda *_: None)
    registry = Registry(config.mlflow)
    commit_batch(config.table.trajectories_uri, _rows(factory, "zed", 2), "batch-0", 0)  # the shared group's rows
    first = Trainer(config, say=lambda *_: None)
    first.start()
    first.run(follow=False)
    first.close()
    shared = [mv.version for mv in registry.versions() if mv.version != base][-1]
    registry.set_alias(names.ALIAS_CHAMPION, shared)  # as a promotion would have

    tc.tenants.adapters, tc.tenants.rewind_after_refusals = ["acme", "beta"], 1  # beta is named from now on
    lines: list[str] = []
    trainer = Trainer(config, say=lines.append)
    trainer.start()
    assert trainer.state.groups["beta"].parent_version == shared
    assert any(f"beta (parent v{shared}, step 0)" in line for line in lines if line.startswith("trainer ready"))
    held = get_peft_model_state_dict(trainer.policies.peft, adapter_name="tenant-beta")
    saved = load_peft_weights(str(registry.download(shared, tmp_path / "shared")))
    assert held.keys() == saved.keys() and all(torch.equal(held[k].detach(), saved[k]) for k in held)
    assert any(saved[k].any() for k in saved if ".lora_B." in k)  # a trained adapter, not a new one (lora_B 0)

    commit_batch(config.table.trajectories_uri, _rows(factory, "beta", 2), "batch-1", 1)
    trainer.run(follow=False)  # beta's candidate is refused: rewind_after_refusals 1 takes it back to the shared one
    trainer.close()
    print("\n".join(lines))
    assert f"beta | rewound to the shared champion v{shared} after 1 candidates refused in a row " \
           "(trainer.tenants.rewind_after_refusals)" in lines
    held = get_peft_model_state_dict(trainer.policies.peft, adapter_name="tenant-beta")
    assert all(torch.equal(held[k].detach(), saved[k]) for k in held)
    beta = [mv for mv in registry.versions() if mv.tags.get(names.TAG_TENANT) == "beta"]
    assert [mv.tags[names.TAG_PARENT_VERSION] for mv in beta] == [shared]


def test_naming_tenants_later_keeps_the_shared_policys_place(stack, tmp_path):
    """A trainer that ran one policy (an adapter) goes on with tenant groups in the same checkpoint_dir: the shared
    group resumes from its last version and table position (its rows are not trained again), and the newly named
    tenant's group reads the table from its start, training an adapter of its own."""
    from demo.policy.tiny_policy import build_policy

    llama = build_policy(tmp_path / "base", WORDS, arch="llama")
    factory = TrajectoryFactory(llama)
    config = trainer_config(stack, tmp_path, steps_per_version=1, minutes_per_version=0.0)
    tc = config.trainer
    tc.lora.enabled = True
    tc.gate.holdout_fraction = 0.0
    tc.deepspeed.zero_stage, tc.deepspeed.gradient_accumulation_steps = 0, 1
    tc.deepspeed.micro_batch_tokens = 12 * len(_rows(factory, "x", 1)[0]["token_ids"])  # one step for all rows
    base = register_base(config, llama, say=lambda *_: None)
    registry = Registry(config.mlflow)
    commit_batch(config.table.trajectories_uri, _rows(factory, "zed", 2) + _rows(factory, "acme", 2), "batch-0", 0)
    first = Trainer(config, say=lambda *_: None)
    first.start()
    first.run(follow=False)
    first.close()
    shared = registry.versions()[-1]
    assert shared.version != base and int(shared.tags[names.TAG_TRAJECTORIES]) == 4  # one policy: every tenant's rows

    tc.tenants.adapters = ["acme"]
    commit_batch(config.table.trajectories_uri, _rows(factory, "acme", 2, start=2), "batch-1", 1)
    lines, _, _ = _train_to_the_table_end(config)
    assert any(f"{SHARED_GROUP} (parent v{shared.version}, step 1)" in line for line in lines
               if line.startswith(f"trainer ready | base v{base} | groups acme"))
    assert set(_step_groups(lines)) == {"acme"}
    acme = registry.versions()[-1]
    assert acme.tags[names.TAG_TENANT] == "acme" and json.loads(acme.tags[names.TAG_TABLE_VERSIONS]) == [0, 1]
    assert int(acme.tags[names.TAG_TRAJECTORIES]) == 4 and acme.tags[names.TAG_BASE_VERSION] == base
