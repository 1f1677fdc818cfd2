"""Registry and lineage per tenant, against the real MLflow registry: `liverl tenants` lists each tenant's champion
and the history of its versions with their lineage, and each tenant's staleness counts the promotions that changed
what served that tenant (the shared policy's timeline counts shared promotions only)."""

from __future__ import annotations

import uuid

import pytest

from liverl.cli import main
from liverl.contracts import names
from liverl.io.lineage import Lineage, encode
from trainer.groups.tenant_registry import tenant_histories
from trainer.io.registry import Registry
from trainer.io.served_lineage import promoted_versions

pytestmark = pytest.mark.slow  # real MLflow


def _tags(tenant: str | None, decision: str, parent: str, table: tuple[int, ...] = ()) -> dict[str, str]:
    tags = {**encode(Lineage(table_versions=table, kafka_offsets={"events": {"0": [0, 10 * len(table)]}},
                             parent_version=parent, trajectories=4 * len(table), step=len(table))),
            names.TAG_GATE_DECISION: decision}
    if tenant is not None:
        tags |= {names.TAG_TENANT: tenant, names.TAG_WEIGHTS_KIND: names.WEIGHTS_ADAPTER, names.TAG_BASE_VERSION: "1"}
    return tags


@pytest.fixture
def model(stack, tiny_policy_dir):
    """v1 shared base, v2 a's (promoted), v3 shared (promoted), v4 a's (refused), v5 b's (promoted)."""
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"policy-{uuid.uuid4().hex[:8]}"
    registry = Registry(config.mlflow)
    for i, tags in enumerate([_tags(None, "pass", ""), _tags("a", "pass", "1", (0, 1)), _tags(None, "pass", "1", (0,)),
                              _tags("a", "fail", "2", (2,)), _tags("b", "pass", "1", (1, 2))], start=1):
        assert registry.register(tiny_policy_dir, tags, f"v{i}") == str(i)
    for alias, version in {"champion": "3", "candidate": "3", "champion-a": "2", "candidate-a": "4",
                           "champion-b": "5", "candidate-b": "5"}.items():
        registry.set_alias(alias, version)
    return config


def test_each_tenant_s_champion_and_history_with_its_lineage(model):
    histories = tenant_histories(Registry(model.mlflow))
    assert list(histories) == ["a", "b"]
    a = histories["a"]
    assert (a.champion, a.candidate, [v.version for v in a.versions]) == ("2", "4", ["2", "4"])
    first = a.versions[0]
    assert (first.decision, first.parent_version, first.base_version, first.table_versions) == ("pass", "1", "1", (0, 1))
    assert first.kafka_offsets == {"events": {"0": [0, 20]}} and first.trajectories == 8
    assert a.versions[1].decision == "fail"
    assert histories["b"].champion == "5" and [v.version for v in histories["b"].versions] == ["5"]


def test_staleness_timelines_per_tenant(model):
    registry = Registry(model.mlflow)
    # the shared policy's: its own promotions (before, every passed version counted: tenants' too)
    assert promoted_versions(registry).promoted == (1, 3)
    # a: the shared base served it until its own v2 was promoted; the shared v3 never served a
    assert promoted_versions(registry, "a").promoted == (1, 2)
    assert promoted_versions(registry, "b").promoted == (1, 3, 5)  # b was served the shared v3 before its v5
    assert promoted_versions(registry, "c").promoted == (1, 3)  # no adapter: the shared timeline


def test_liverl_tenants_lists_every_tenant_and_one_on_request(model, capsys):
    where = ["--mlflow.tracking_uri", model.mlflow.tracking_uri, "--mlflow.registered_model",
             model.mlflow.registered_model]
    assert main(["tenants", *where]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "shared policy | champion v3 | candidate v3"
    assert out[1] == "tenant a | champion v2 | candidate v4 | 2 versions"
    assert out[2].startswith("  v2 pass | parent v1 | base v1 | table [0, 1] | trajectories 8 | step 2 | kafka events[0:0-20]")
    assert out[3].startswith("  v4 fail | parent v2") and out[4].startswith("tenant b | champion v5")

    assert main(["tenants", "--tenant", "b", *where]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "tenant b | champion v5 | candidate v5 | 1 versions"
    assert main(["tenants", "--tenant", "zed", *where]) == 1
    assert "served the shared policy v3" in capsys.readouterr().out
