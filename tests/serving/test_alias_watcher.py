"""What the alias watcher (serving/swap/alias_watcher.py) reports from one look at the registry's aliases: the shared
group, then each followed tenant, with the version its champion alias names and, while a canary is followed, its
canary's; a tenant with only a canary alias (the gate's live canary of its first adapter) is followed too."""

from __future__ import annotations

import asyncio

from liverl.config.serving import ServingConfig
from serving.swap.alias_watcher import AliasWatcher, Sighting


class Aliases:
    """The one registry call the watcher makes."""

    def __init__(self, aliases: dict[str, str]):
        self._aliases = aliases

    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)


def _look(aliases: dict[str, str], said: list[str] | None = None, **serving) -> list[Sighting]:
    config = ServingConfig.model_validate({"lora": {"enabled": True}, **serving})
    watcher = AliasWatcher(config, Aliases(aliases), say=(said if said is not None else []).append)
    return asyncio.run(watcher.look())


ALIASES = {"champion": "1", "canary": "2", "champion-globex": "3", "canary-acme": "4", "candidate-initech": "5"}


def test_a_tenant_with_only_a_canary_alias_is_followed_for_its_canary():
    seen = _look(ALIASES, canary_alias="canary", canary_fraction=0.5, tenants={"discover": True})
    assert seen == [Sighting("", "champion", "1", "2"), Sighting("acme", "champion-acme", "", "4"),
                    Sighting("globex", "champion-globex", "3", "")]


def test_without_a_canary_followed_only_champion_aliases_count():
    for serving in ({"canary_alias": "canary", "canary_fraction": 0.0}, {}):  # a zero share follows none
        seen = _look(ALIASES, tenants={"discover": True}, **serving)
        assert seen == [Sighting("", "champion", "1", None), Sighting("globex", "champion-globex", "3", None)]


def test_watched_tenants_come_first_and_the_rest_past_max_tenants_are_said_once():
    said: list[str] = []
    serving = {"canary_alias": "canary", "canary_fraction": 0.5,
               "tenants": {"watch": ["globex"], "discover": True, "max_tenants": 1}}
    seen = _look(ALIASES, said, **serving)
    assert [s.tenant for s in seen] == ["", "globex"]
    assert said == ["serving tenant-ignored tenant=acme reason=max_tenants max_tenants=1"]
    watched_only = _look(ALIASES, canary_alias="canary", canary_fraction=0.5, tenants={"watch": ["acme"]})
    assert [(s.tenant, s.version, s.canary) for s in watched_only] == [("", "1", "2"), ("acme", "", "4")]
