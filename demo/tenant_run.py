"""The tenant demo's traffic phase and summary, as `liverl demo` runs them when demo.tenants.count > 0.

    run_tenants_phase: every arm's traffic, ended on demo.run.stop_after_versions counted per tenant (each tenant
                       served that many of its own adapter versions), demo.duration_s the ceiling
    summarise_tenants: one line per tenant, own adapter against the shared policy (demo/tenant_comparison.py),
                       and tenants.json in the report folder
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from demo.tenant_comparison import TenantComparison, compare_tenant
from demo.tenant_traffic import TenantTraffic, run_tenant_traffic
from demo.tenants import OWN, SHARED, TenantArm


class VersionTenants:
    """The tenant a registered version was trained for (its `liverl.tenant` tag; None: the shared policy), cached:
    a version's tags are written once, at registration."""

    def __init__(self, config) -> None:
        from liverl.io.registry import ModelRegistry

        self.registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
        self.known: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def tenant_of(self, version: str) -> str | None:
        from liverl.contracts import names
        from liverl.io.registry import RegistryUnavailable

        with self._lock:
            if version in self.known:
                return self.known[version]
        try:
            tenant = self.registry.tags(version).get(names.TAG_TENANT) or None
        except (RegistryUnavailable, LookupError, ValueError):  # asked again at the next session
            return None
        with self._lock:
            self.known[version] = tenant
        return tenant


class StopWhenEveryTenantServed:
    """Sets `stop` once every tenant's own arm was served `versions` of the tenant's own adapter versions and both
    arms have COMPARABLE sessions since its adapter first served (what the comparison needs for an interval)."""

    COMPARABLE = 2

    def __init__(self, versions: int, tenants: list[str], tenant_of: Callable[[str], str | None],
                 stop: threading.Event, say) -> None:
        self.versions, self.stop, self.say, self.tenant_of = versions, stop, say, tenant_of
        self.served: dict[str, list[str]] = {tenant: [] for tenant in tenants}
        self.since: dict[str, float] = {}  # tenant -> start of the first session its own adapter served
        self.counts: dict[tuple[str, str], int] = {}  # (tenant, arm) -> sessions since then
        self._lock = threading.Lock()

    def on_session(self, arm: TenantArm, session) -> None:
        if not self.versions:
            return
        own_adapter = arm.arm == OWN and self.tenant_of(session.served_version) == arm.tenant
        with self._lock:
            first = own_adapter and session.served_version not in self.served[arm.tenant]
            if first:
                self.served[arm.tenant].append(session.served_version)
                self.since.setdefault(arm.tenant, session.started_at)
            since = self.since.get(arm.tenant)
            if since is not None and session.started_at >= since and (own_adapter or arm.arm == SHARED):
                key = (arm.tenant, arm.arm)
                self.counts[key] = self.counts.get(key, 0) + 1
            reached = not self.stop.is_set() and all(
                len(self.served[t]) >= self.versions and self.counts.get((t, OWN), 0) >= self.COMPARABLE
                and self.counts.get((t, SHARED), 0) >= self.COMPARABLE for t in self.served)
            if reached:
                self.stop.set()
        if first:
            self.say(f"      {arm.tenant} served its own adapter v{session.served_version}")
        if reached:
            self.say(f"      every tenant was served {self.versions} of its own adapter versions, both arms compared: "
                     "ending the traffic (demo.run.stop_after_versions)")


def run_tenants_phase(config, arms: list[TenantArm], stop: threading.Event, on_session, say) -> TenantTraffic:
    """on_session(session): the single-tenant progress line's hook, called for every arm's sessions."""
    tenants = VersionTenants(config)
    rule = StopWhenEveryTenantServed(config.demo.run.stop_after_versions,
                                     [arm.tenant for arm in arms if arm.arm == OWN], tenants.tenant_of, stop, say)

    def each(arm: TenantArm, session) -> None:
        on_session(session)
        rule.on_session(arm, session)

    traffic = run_tenant_traffic(config, arms, stop=stop, on_session=each, say=say)
    traffic.version_tenants = tenants
    return traffic


def summarise_tenants(traffic: TenantTraffic, say) -> list[TenantComparison]:
    tenant_of = traffic.version_tenants.tenant_of
    comparisons = []
    for own in (arm for arm in traffic.arms if arm.arm == OWN):
        shared = next(a for a in traffic.arms if a.arm == SHARED and a.tenant == own.tenant)
        comparisons.append(compare_tenant(
            own.tenant, own.profile.wants, traffic.stats[own.tenant_id].sessions, traffic.stats[shared.tenant_id].sessions,
            lambda version, tenant=own.tenant: tenant_of(version) == tenant))
    say("      per tenant, served reward on its own adapter vs the shared policy on the same tenant's traffic:")
    for comparison in comparisons:
        say(f"        {comparison.line()}")
    return comparisons


def write_tenant_report(out: Path, comparisons: list[TenantComparison]) -> Path:
    path = out / "tenants.json"
    path.write_text(json.dumps([c.as_dict() for c in comparisons], indent=1, sort_keys=True) + "\n")
    return path
