"""Each tenant's served reward on its own adapter against the shared policy's on the same tenant's traffic.

Both arms play the same tenant's tasks and users at the same time (demo/tenants.py). The comparison starts when
the tenant's own adapter first served a session: from then on, own = the own arm's sessions served by one of the
tenant's adapter versions, shared = the control arm's sessions (served by the shared champion of the moment).
Before that both arms ran the shared policy, so earlier sessions would only blur the difference.

The difference of the means comes with a 95 % interval (normal approximation, unequal variances: Welch's
standard error); the arms are independent sessions, not pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from demo.evaluate.stats import Z_95
from demo.product.session import SessionStats


@dataclass(frozen=True)
class TenantComparison:
    tenant: str
    wants: str
    own: tuple[float, ...]  # served rewards of the own arm on the tenant's adapter, from the comparison's start
    shared: tuple[float, ...]  # served rewards of the control arm (the shared policy) over the same time
    own_versions: tuple[str, ...]  # the tenant's adapter versions that served those sessions
    shared_versions: tuple[str, ...]
    since: float | None  # unix time the tenant's adapter first served (None: it never did)

    @property
    def difference(self) -> float:
        return _mean(self.own) - _mean(self.shared)

    def interval(self) -> tuple[float, float] | None:
        """95 % interval of own - shared; None with fewer than 2 sessions in an arm."""
        if len(self.own) < 2 or len(self.shared) < 2:
            return None
        se = math.sqrt(statistics.variance(self.own) / len(self.own)
                       + statistics.variance(self.shared) / len(self.shared))
        return self.difference - Z_95 * se, self.difference + Z_95 * se

    def line(self) -> str:
        if self.since is None:
            return (f"{self.tenant} ({self.wants}): no adapter of its own served yet | shared policy "
                    f"{_mean(self.shared):.3f} (n {len(self.shared)})")
        interval = self.interval()
        ci = f"95 % [{interval[0]:+.3f}, {interval[1]:+.3f}]" if interval else "95 % interval needs 2+ sessions an arm"
        return (f"{self.tenant} ({self.wants}): own adapter {_mean(self.own):.3f} (n {len(self.own)}, "
                f"v{', v'.join(self.own_versions) or '-'}) vs shared policy {_mean(self.shared):.3f} "
                f"(n {len(self.shared)}, v{', v'.join(self.shared_versions) or '-'}) | own - shared "
                f"{self.difference:+.3f}, {ci}")

    def as_dict(self) -> dict:
        interval = self.interval()
        return {"tenant": self.tenant, "wants": self.wants, "since": self.since,
                "own": {"n": len(self.own), "mean": _mean(self.own), "versions": list(self.own_versions)},
                "shared": {"n": len(self.shared), "mean": _mean(self.shared), "versions": list(self.shared_versions)},
                "difference": self.difference, "interval95": list(interval) if interval else None}


def compare_tenant(tenant: str, wants: str, own_arm: Iterable[SessionStats], shared_arm: Iterable[SessionStats],
                   is_own_version: Callable[[str], bool]) -> TenantComparison:
    """is_own_version(version): whether a version is one of this tenant's adapters (its registry tag)."""
    on_adapter = [s for s in own_arm if is_own_version(s.served_version)]
    since = min((s.started_at for s in on_adapter), default=None)
    later = [] if since is None else [s for s in shared_arm if s.started_at >= since]
    baseline = later if since is not None else list(shared_arm)
    return TenantComparison(
        tenant=tenant, wants=wants, own=tuple(s.reward for s in on_adapter), shared=tuple(s.reward for s in baseline),
        own_versions=_versions(on_adapter), shared_versions=_versions(baseline), since=since,
    )


def _versions(sessions: list[SessionStats]) -> tuple[str, ...]:
    return tuple(sorted({s.served_version for s in sessions}, key=lambda v: (len(v), v)))


def _mean(values: tuple[float, ...]) -> float:
    return statistics.fmean(values) if values else float("nan")
