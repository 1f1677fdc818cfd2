"""Replicas that follow the same alias, as one fleet: a rolling swap, canary first, rollback everywhere.

They never talk to each other; they meet in the registry, through three things, the same for every alias a
replica follows (the shared one and each tenant's):
- the update lease of each alias (liverl/io/lease.py): at most `serving.max_unavailable` replicas update it at once;
- the canary: the replica with `serving.fleet_canary` holds a canary lease (renewed every poll) and
  tags each version it has taken (`TAG_CANARY_TOOK`); while a canary is alive, the others take only
  versions it has taken, of any alias. A canary that stops renewing expires after lease_ttl_s and blocks nobody;
- the rollback tag (`names.TAG_SERVING_ROLLBACK`): a replica whose probation fails tags the version;
  every replica serving it rolls back in place, and none takes it again.
Blocking registry calls: the rollout (serving/swap/rollout.py) runs them on worker threads.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from liverl.io.lease import RegistryLease
from liverl.io.registry import ModelRegistry

TAG_CANARY_TOOK = "liverl.serving.canary-took"  # set on a version by the canary replica once it serves it
UPDATE_LEASE = "serving-update"
CANARY_LEASE = "serving-canary"


def replica_id(config: ServingConfig) -> str:
    """This replica's id: the configured one, or <hostname>-<pid>; only characters registry tags allow."""
    raw = config.replica_id or f"{socket.gethostname()}-{os.getpid()}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)


class Fleet:
    def __init__(self, config: ServingConfig, registry: ModelRegistry):
        self.config = config
        self.registry = registry
        self.replica = replica_id(config)
        self.canary_lease = RegistryLease(registry, f"{CANARY_LEASE}-{config.alias}", self.replica, 1,
                                          config.lease_ttl_s)
        self._update_leases: dict[str, RegistryLease] = {}

    def update_lease(self, alias: str) -> RegistryLease:
        """The update lease of the replicas following alias (the shared one, or a tenant's)."""
        found = self._update_leases.get(alias)
        if found is None:
            found = self._update_leases[alias] = RegistryLease(self.registry, f"{UPDATE_LEASE}-{alias}", self.replica,
                                                               self.config.max_unavailable, self.config.lease_ttl_s)
        return found

    def heartbeat(self) -> None:
        """The canary replica (re)claims the canary lease; others do nothing."""
        if self.config.fleet_canary:
            if self.canary_lease.try_acquire():
                self.canary_lease.renew()

    def is_canary(self) -> bool:
        return self.config.fleet_canary and self.replica in self.canary_lease.holders()

    def may_take(self, version: str, tags: dict[str, str]) -> bool:
        """Whether this replica may take `version` now: the canary always, others once it has (or none lives)."""
        if self.config.fleet_canary or TAG_CANARY_TOOK in tags:
            return True
        return not self.canary_lease.holders()

    def mark_taken_by_canary(self, version: str) -> None:
        if self.is_canary():
            self.registry.set_tag(version, TAG_CANARY_TOOK, json.dumps({"replica": self.replica,
                                                                       "at_ms": int(time.time() * 1000)}))


def rolled_back_at_ms(tags: dict[str, str]) -> int | None:
    """When some replica rolled the version back (or refused it), or None: no replica takes it again, and
    one that took it before that moment rolls back (one an admin forced in afterwards stays)."""
    value = tags.get(names.TAG_SERVING_ROLLBACK)
    if value is None:
        return None
    try:
        return int(json.loads(value).get("at_ms", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def tag_rolled_back(registry: ModelRegistry, version: str, reason: str, detail: dict) -> None:
    """Mark a version this replica rolled back (or refused), with why, on the registry version itself: what
    rolled_back_at_ms reads. Blocking."""
    registry.set_tag(version, names.TAG_SERVING_ROLLBACK,
                     json.dumps({"reason": reason, "at_ms": int(time.time() * 1000), **detail}))
