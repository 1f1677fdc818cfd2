"""`liverl demo --tenants 3` on real parts: three tenants, an adapter each, against the shared policy.

One run (fixed seed) backs every assertion. It ends on a count, not a clock (demo.run.stop_after_versions, counted
per tenant: every tenant was served one of its own trained adapter versions, and both of its arms have sessions
since), with CEILING_S only as the ceiling. What is asserted is the plumbing: every tenant's own sessions ran on an
adapter registered for that tenant, its control sessions on the shared policy, and the report compares the two
arms per tenant. Whether the own adapter wins is what a demo run measures (docs/measurements.md), not this test;
the gate passes any finite candidate (tests/e2e/test_loop.py) and the base is fitted briefly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.run import base_policy_folder
from demo.tenants import CONTROL_SUFFIX
from infra.embedded.stack import down
from liverl.contracts import names
from liverl.io.registry import ModelRegistry
from tests.e2e.loop_run import ended_on_its_count, loop_config, run_printing

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

TENANTS = ("brisk", "careful", "frugal")
CEILING_S = 12 * 60.0  # traffic time only; the count ends the run long before on a healthy machine
BASE_FIT_STEPS = 60  # calls that mostly parse; learning is not what this test judges
TENANTS_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo-tenants.toml"


@pytest.fixture(scope="module")
def tenants_result(request, tmp_path_factory):
    import torch

    from demo.policy import bootstrap_base_policy

    config = loop_config(request, tmp_path_factory, "tenants", TENANTS_CONFIG, ceiling_s=CEILING_S,
                         stop_after_versions=1, seed=7)
    config.demo.tenants.count = len(TENANTS)
    config.demo.run.keep_stack = True  # the registry answers the assertions; stopped below
    config.trainer.gate.min_holdout = 2  # the fewest the gate judges with an error bar: a group's first versions pass
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:  # the demo reuses the base it finds in its folder
        bootstrap_base_policy(base_policy_folder(config), seed=config.demo.seed, fit_steps=BASE_FIT_STEPS, arch="llama",
                              answered_right=config.demo.toy_answered_right, answer_top=config.demo.toy_answer_top)
    finally:
        torch.set_num_threads(threads)
    try:
        result, lines = run_printing(config)
        yield result, lines, config
    finally:
        down(config, say=lambda *_: None)


def test_the_run_ended_when_every_tenant_was_served_its_own_adapter(tenants_result):
    _, lines, _ = tenants_result
    for tenant in TENANTS:
        assert any(f"{tenant} served its own adapter v" in line for line in lines), f"{tenant} never got its adapter"
    assert ended_on_its_count(lines), "the run ended on the clock, not the count"


def test_each_tenant_is_compared_on_both_arms_in_the_summary_and_the_report(tenants_result):
    result, lines, _ = tenants_result
    assert [c.tenant for c in result.tenants] == list(TENANTS)
    for comparison in result.tenants:
        assert comparison.own and comparison.shared, f"{comparison.tenant}: an arm has no sessions"
        assert comparison.interval() is not None
        assert any(line.strip().startswith(f"{comparison.tenant} (") and "vs shared policy" in line for line in lines)
    report = json.loads((result.report_dir / "tenants.json").read_text())
    assert [entry["tenant"] for entry in report] == list(TENANTS)
    for entry in report:
        assert entry["own"]["n"] >= 2 and entry["shared"]["n"] >= 2 and len(entry["interval95"]) == 2
    assert "per tenant" in (result.report_dir / "index.html").read_text()


def test_own_sessions_ran_on_the_tenants_adapter_and_control_sessions_on_the_shared_policy(tenants_result):
    result, _, config = tenants_result
    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    tenant_of = {mv.version: mv.tags.get(names.TAG_TENANT) for mv in registry.versions()}
    for comparison in result.tenants:
        assert {tenant_of[v] for v in comparison.own_versions} == {comparison.tenant}
        assert all(tenant_of[v] is None for v in comparison.shared_versions), (
            f"{comparison.tenant}{CONTROL_SUFFIX} was served a tenant's adapter: {comparison.shared_versions}")
