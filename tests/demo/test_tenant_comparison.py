import math

import pytest

from demo.evaluate.stats import Z_95
from demo.product.session import SessionStats
from demo.tenant_comparison import compare_tenant


def session(version: str, reward: float, started_at: float) -> SessionStats:
    return SessionStats(session_id=f"s-{started_at}", family="coding", task_id="t", served_version=version,
                        policy_versions=(version,), reward=reward, success=reward > 0, calls=1, subagent_calls=0,
                        broken_calls=0, started_at=started_at, ended_at=started_at + 1)


OWN_VERSIONS = {"5", "8"}


def test_the_comparison_starts_when_the_tenants_adapter_first_served():
    own_arm = [session("1", 0.0, 0), session("5", 1.0, 10), session("1", 0.0, 12), session("8", 0.5, 20)]
    shared_arm = [session("1", 1.0, 5), session("2", 0.25, 11), session("2", 0.75, 21)]
    c = compare_tenant("brisk", "short answers", own_arm, shared_arm, OWN_VERSIONS.__contains__)
    assert c.since == 10
    assert c.own == (1.0, 0.5) and c.own_versions == ("5", "8")  # the shared policy's own-arm session is no own
    assert c.shared == (0.25, 0.75) and c.shared_versions == ("2",)  # the control session before 10 is not compared
    assert c.difference == pytest.approx(0.25)
    se = math.sqrt(0.125 / 2 + 0.125 / 2)
    assert c.interval() == pytest.approx((0.25 - Z_95 * se, 0.25 + Z_95 * se))
    assert "own adapter 0.750 (n 2, v5, v8) vs shared policy 0.500 (n 2, v2)" in c.line()
    assert c.as_dict()["own"]["n"] == 2 and c.as_dict()["interval95"] == list(c.interval())


def test_a_tenant_never_served_its_adapter_reports_the_shared_arm_alone():
    c = compare_tenant("frugal", "low cost", [session("1", 0.0, 0)], [session("1", 0.5, 1)], OWN_VERSIONS.__contains__)
    assert c.since is None and c.own == () and c.interval() is None
    assert "no adapter of its own served yet" in c.line()
    assert c.as_dict()["interval95"] is None
