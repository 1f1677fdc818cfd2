"""The tenants' traffic: every arm of every tenant (demo/tenants.py) runs its own stream of sessions at once.

Each arm has its own capture token and serving API key, so capture and serving record it as its tenant id, and
users arriving at its share of the tenant's rate: demo.run.sessions_per_s is split evenly among the tenants, then
by demo.tenants.control_share between the arms. Tasks and users are seeded per arm.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from demo.product.configured import capture_client, grpc_policy
from demo.product.session import SessionStats
from demo.product.traffic import TrafficStats, run_traffic
from demo.tenants import TenantArm


@dataclass
class TenantTraffic:
    """Each arm's sessions. Produced by run_tenant_traffic, consumed by the summary (demo/tenant_comparison.py)."""

    arms: list[TenantArm]
    stats: dict[str, TrafficStats] = field(default_factory=dict)  # tenant id of the arm -> its sessions
    version_tenants: object = None  # demo.tenant_run.VersionTenants: which tenant each served version belongs to

    def combined(self) -> TrafficStats:
        """Every arm's sessions together, for the single-tenant summary (served reward by version, freshness)."""
        total = TrafficStats()
        for stats in self.stats.values():
            total.sessions += stats.sessions
            total.errors += stats.errors
            total.feedback_sent += stats.feedback_sent
            total.feedback_failed += stats.feedback_failed
        total.sessions.sort(key=lambda s: s.ended_at)
        return total


def run_tenant_traffic(config, arms: list[TenantArm], *, stop: threading.Event,
                       on_session: Callable[[TenantArm, SessionStats], None], say) -> TenantTraffic:
    """Run every arm until demo.duration_s passed or `stop` is set; an arm whose stream fails stops them all."""
    demo = config.demo
    per_tenant = demo.run.sessions_per_s / demo.tenants.count
    traffic = TenantTraffic(arms)
    spool = config.stack.data_dir / "sdk-spool"

    def run_arm(index: int, arm: TenantArm) -> TrafficStats:
        policy = grpc_policy(config, api_key=arm.api_key)
        client = capture_client(config, spool / arm.tenant_id, token=arm.capture_token)
        try:
            return run_traffic(
                policy, client, duration_s=demo.duration_s, seed=demo.seed + 1000 * (index + 1),
                concurrency=demo.run.concurrency, families=arm.profile.families,
                feedback_delay_s=demo.run.feedback_delay_s, user_model=arm.profile.user_model,
                subagents_call_policy=demo.subagents_call_policy, user_id_prefix=arm.tenant_id, stop=stop,
                on_session=lambda session: on_session(arm, session), sessions_per_s=per_tenant * arm.share,
                judge=arm.profile.judge,
            )
        finally:
            client.flush(timeout_s=30.0)
            say(f"      SDK {arm.tenant_id}: {client.stats()}")
            client.close()
            policy.close()

    with ThreadPoolExecutor(max_workers=len(arms), thread_name_prefix="demo-tenant-arm") as pool:
        futures = {arm.tenant_id: pool.submit(run_arm, index, arm) for index, arm in enumerate(arms)}
        wait(futures.values(), return_when=FIRST_EXCEPTION)
        if any(future.done() and future.exception() for future in futures.values()):
            stop.set()  # the other arms end too, and the failure propagates below
        for tenant_id, future in futures.items():
            traffic.stats[tenant_id] = future.result()
    return traffic
