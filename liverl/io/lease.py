"""A lease with expiry held in the model registry: at most `slots` owners at a time, none forever.

Kept as registered-model tags, one per claimant (`liverl.lease.<name>.<owner>` = owner, since, expiry),
so no two owners ever write the same key. An owner holds the lease while its claim is among the
`slots` oldest live ones (since, then owner id); a claim nobody renews expires after `ttl_s`, so a dead
owner blocks the others for at most that long. MLflow has no compare-and-swap; ordering by the claim's
own timestamp makes two claims written at once agree on who goes first, given clocks closer than the
time between a write and the read that follows it (the same host, or NTP). Blocking HTTP calls.

    lease = RegistryLease(registry, "serving-update", owner="replica-a", slots=1, ttl_s=120)
    if lease.try_acquire():
        try: ...            # renew() when the work may outlast ttl_s
        finally: lease.release()
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from liverl.io.registry import ModelRegistry

LEASE_TAG_PREFIX = "liverl.lease."


@dataclass(frozen=True)
class Claim:
    owner: str
    since_ms: int
    expires_ms: int


class RegistryLease:
    def __init__(self, registry: ModelRegistry, name: str, owner: str, slots: int = 1, ttl_s: float = 120.0):
        if slots < 1:
            raise ValueError(f"a lease needs at least one slot, not {slots}")
        if "." in owner or not owner:
            raise ValueError(f"lease owner {owner!r} must be a non-empty id without dots")
        self.registry = registry
        self.name = name
        self.owner = owner
        self.slots = slots
        self.ttl_s = ttl_s
        self._since_ms = 0  # our claim's start while we hold or seek the lease

    @property
    def _key(self) -> str:
        return f"{LEASE_TAG_PREFIX}{self.name}.{self.owner}"

    def claims(self) -> list[Claim]:
        """Live claims on this lease, oldest first (the first `slots` of them hold it)."""
        prefix = f"{LEASE_TAG_PREFIX}{self.name}."
        tags = self._model_tags()
        now = _now_ms()
        live = []
        for key, value in tags.items():
            if not key.startswith(prefix):
                continue
            try:
                claim = Claim(**json.loads(value))
            except (ValueError, TypeError):
                continue  # not ours to judge: an unreadable claim never holds the lease
            if claim.expires_ms > now:
                live.append(claim)
        return sorted(live, key=lambda c: (c.since_ms, c.owner))

    def holders(self) -> list[str]:
        return [claim.owner for claim in self.claims()[: self.slots]]

    def try_acquire(self) -> bool:
        """Claim the lease; True when we hold it now. Otherwise our claim is withdrawn: try again later."""
        self.registry.ensure_model()
        self._since_ms = self._since_ms or _now_ms()
        self._write()
        if self.owner in self.holders():
            return True
        self.release()
        return False

    def renew(self) -> None:
        """Push our claim's expiry ttl_s ahead (call well within ttl_s while holding)."""
        if self._since_ms:
            self._write()

    def release(self) -> None:
        self._since_ms = 0
        name = self.registry.name
        try:
            self.registry.tracking.answer(f"releasing lease {self.name!r} of {name!r}",
                                          lambda: self.registry.client.delete_registered_model_tag(name, self._key))
        except Exception:
            # Gone already, or the registry is down: an unrenewed claim expires by itself.
            pass

    def _write(self) -> None:
        claim = {"owner": self.owner, "since_ms": self._since_ms, "expires_ms": _now_ms() + int(self.ttl_s * 1000)}
        name = self.registry.name
        self.registry.tracking.answer(
            f"claiming lease {self.name!r} of {name!r}",
            lambda: self.registry.client.set_registered_model_tag(name, self._key, json.dumps(claim)))

    def _model_tags(self) -> dict[str, str]:
        name = self.registry.name
        model = self.registry.tracking.lookup(f"reading registered model {name!r}",
                                              lambda: self.registry.client.get_registered_model(name))
        return {} if model is None else dict(model.tags or {})


def _now_ms() -> int:
    return int(time.time() * 1000)
