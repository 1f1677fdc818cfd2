"""Following the registry: one look at the model's aliases (one registry call) says, for every group serving
follows, the version its alias names now and, where a canary is followed, the version its canary alias names.

The groups are the shared alias (`serving.alias`) and, when `serving.tenants` is set, each tenant's
`champion-<tenant>` (the tenants watched, then those discovered, up to `tenants.max_tenants`), whose canary alias is
`<serving.canary_alias>-<tenant>` (`candidate-<tenant>`, the tenant's newest adapter, for "candidate"). A tenant whose
canary alias is set but whose champion alias is not is followed too: its canary takes a share of its sessions, the
shared champion the rest (the gate's live canary of a tenant's first adapter, trainer/gate/canary.py). The watcher
only reports what it saw; the rollout (serving/swap/rollout.py) decides what to do about it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from liverl.config.serving import ServingConfig
from liverl.contracts import names

if TYPE_CHECKING:
    from liverl.io.registry import ModelRegistry


@dataclass(frozen=True)
class Sighting:
    """What one group's alias named at one look."""

    tenant: str  # "" for the shared group
    alias: str
    version: str  # "" when the alias is not set
    canary: str | None = None  # the version its canary alias names ("" unset); None: no canary followed


class AliasWatcher:
    def __init__(self, config: ServingConfig, registry: ModelRegistry, say: Callable[[str], None] = print):
        self.config = config
        self.registry = registry
        self.say = say
        self._ignored: set[str] = set()  # discovered tenants past max_tenants, said once

    async def look(self) -> list[Sighting]:
        """The shared group's sighting first, then each followed tenant's."""
        c = self.config
        aliases = await asyncio.to_thread(self.registry.aliases)
        seen = [Sighting("", c.alias, aliases.get(c.alias, ""),
                         aliases.get(c.canary_alias, "") if self._follows_canary else None)]
        if c.tenants.active:
            for tenant in self.followed_tenants(aliases):
                alias = names.tenant_champion_alias(tenant)
                canary = aliases.get(names.canary_alias(c.canary_alias, tenant), "") if self._follows_canary else None
                seen.append(Sighting(tenant, alias, aliases.get(alias, ""), canary))
        return seen

    @property
    def _follows_canary(self) -> bool:
        return bool(self.config.canary_alias) and self.config.canary_fraction > 0

    def followed_tenants(self, aliases: dict[str, str]) -> list[str]:
        """The tenants followed (watched first, then discovered) whose alias, or followed canary alias, is set."""
        t, canary = self.config.tenants, self.config.canary_alias if self._follows_canary else None
        prefixes = [f"{names.ALIAS_CHAMPION}-", *([f"{canary}-"] if canary else [])]
        tenants = list(dict.fromkeys(t.watch))
        if t.discover:
            tenants += sorted({a[len(p):] for a in aliases for p in prefixes
                               if a.startswith(p) and names.TENANT_NAME.fullmatch(a[len(p):])})
            tenants = list(dict.fromkeys(tenants))
        for tenant in tenants[t.max_tenants:]:
            if tenant not in self._ignored:
                self._ignored.add(tenant)
                self.say(f"serving tenant-ignored tenant={tenant} reason=max_tenants max_tenants={t.max_tenants}")
        return [tenant for tenant in tenants[:t.max_tenants] if names.tenant_champion_alias(tenant) in aliases
                or (canary and names.canary_alias(canary, tenant) in aliases)]
