"""Tenant groups draw their steps apart: every active tenant gets its share of each step within its token budget
(a tenant with ten times the rows cannot starve a small one), and no row reaches another group's step."""

from __future__ import annotations

from liverl.config import load_config
from liverl.io.table_history import TableHistory
from tests.trainer.conftest import commit_batch
from trainer.groups.tenant_groups import (
    SHARED_GROUP,
    build_tenant_steps,
    candidate_alias,
    champion_alias,
    group_of,
    group_streams,
)
from trainer.io.row_stream import RowStream, StreamPosition
from trainer.step.builder import build_step


def _rows(trajectories, tenant: str, n: int) -> list[dict]:
    return [row | {"tenant_id": tenant, "session_id": f"s-{row['trajectory_id']}"}
            for row in trajectories.batch(tenant, n)]


def _tenant(trajectory) -> str:
    return trajectory.trajectory_id.split("-")[0]  # _rows names each trajectory after its tenant


def _config(tokens_per_step: int):
    config = load_config(environ={}, overrides=[
        "--trainer.tenants.adapters", '["big", "small"]', "--trainer.tenants.tokens_per_step", str(tokens_per_step),
        "--trainer.gate.holdout_fraction", "0", "--trainer.deepspeed.micro_batch_tokens", "4096",
    ]).trainer
    return config


def test_groups_and_their_aliases():
    tenants = _config(64).tenants
    assert [group_of(t, tenants) for t in ("big", "small", "other", None)] == ["big", "small", SHARED_GROUP,
                                                                               SHARED_GROUP]
    assert champion_alias("big") == "champion-big" and candidate_alias("big") == "candidate-big"
    assert champion_alias(SHARED_GROUP) == "champion" and candidate_alias(SHARED_GROUP) == "candidate"


def test_a_tenant_with_ten_times_the_rows_does_not_starve_a_small_one(trajectories, tmp_path):
    uri = str(tmp_path / "table")
    big, small, other = _rows(trajectories, "big", 40), _rows(trajectories, "small", 4), _rows(trajectories, "zed", 3)
    commit_batch(uri, big + small + other, "batch-0", 0)
    tokens = len(big[0]["token_ids"])
    config = _config(tokens_per_step=3 * tokens)  # three trajectories of a tenant per step

    # One stream for every tenant (the trainer without tenants): the big tenant's rows come first in the table's
    # order, so the first steps hold no row of the small one.
    single = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    first = build_step(single, {}, "1", 0, config, say=lambda *_: None, max_tokens=3 * tokens)
    assert {_tenant(t) for t in first.trajectories} == {"big"}

    streams = group_streams(TableHistory(uri), {}, config)
    trained: dict[str, int] = {}
    served = {group: "1" for group in streams}
    steps = []
    while plans := build_tenant_steps(streams, trained, served, 0, config, say=lambda *_: None):
        steps.append({group: [_tenant(t) for t in plan.trajectories] for group, plan in plans.items()})
    assert steps[0] == {"big": ["big"] * 3, "small": ["small"] * 3, SHARED_GROUP: ["zed"] * 3}
    assert steps[1] == {"big": ["big"] * 3, "small": ["small"]}  # the small tenant's last row, at once
    assert all(len(step["big"]) == 3 for step in steps[:-1]) and len(steps) == 14  # 40 rows, 3 a step
    # every row trained once, each in its own group's steps only
    assert len(trained) == 47
    assert all(tenant == group or (group == SHARED_GROUP and tenant == "zed")
               for step in steps for group, tenants in step.items() for tenant in tenants)


def test_a_trajectory_larger_than_the_budget_is_still_drawn_alone(trajectories, tmp_path):
    uri = str(tmp_path / "table")
    commit_batch(uri, _rows(trajectories, "small", 2), "batch-0", 0)
    config = _config(tokens_per_step=1)
    streams = group_streams(TableHistory(uri), {}, config)
    plans = build_tenant_steps(streams, {}, {group: "1" for group in streams}, 0, config, say=lambda *_: None)
    assert list(plans) == ["small"] and len(plans["small"].trajectories) == 1  # one at least, never stuck


def test_a_group_resumes_from_its_own_position(trajectories, tmp_path):
    uri = str(tmp_path / "table")
    commit_batch(uri, _rows(trajectories, "big", 6) + _rows(trajectories, "small", 2), "batch-0", 0)
    config = _config(tokens_per_step=2 * len(_rows(trajectories, "big", 1)[0]["token_ids"]))
    streams = group_streams(TableHistory(uri), {}, config)
    served = {group: "1" for group in streams}
    first = build_tenant_steps(streams, {}, served, 0, config, say=lambda *_: None)
    positions = {group: stream.position for group, stream in streams.items()}
    resumed = group_streams(TableHistory(uri), positions, config)
    again = build_tenant_steps(resumed, {}, served, 0, config, say=lambda *_: None)
    assert [t.trajectory_id for t in first["big"].trajectories] == ["big-000", "big-001"]
    assert [t.trajectory_id for t in again["big"].trajectories] == ["big-002", "big-003"]
    assert "small" not in again  # both of its rows were in the first step
