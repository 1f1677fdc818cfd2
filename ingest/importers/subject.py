"""The data subject of an import: every session built is given the user `liverl import --user` names.

The user id is stored as the tenant's keyed pseudonym (never as given) and each session is linked to it in
the key store, as the capture service does, so `liverl forget --user` finds imported sessions too. Sessions
of a forgotten user, or forgotten sessions, are not published again (the sealer drops their records).
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.importers.build import BuiltSession
from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms


@dataclass
class ImportSubject:
    store: SubjectKeyStore
    pseudonyms: Pseudonyms
    tenant: str
    user: str  # the pseudonym; "" when the import names no user

    @classmethod
    def of(cls, config, tenant: str, user_id: str | None) -> "ImportSubject":
        from liverl.privacy import key_store

        store = key_store(config)
        pseudonyms = Pseudonyms(store, config.privacy.key_cache_size)
        return cls(store, pseudonyms, tenant, pseudonyms.user(tenant, user_id or ""))

    def owned(self, built: BuiltSession) -> BuiltSession:
        """built with the user on every event and linked to its session; emptied when the user was forgotten."""
        if not self.user:
            return built
        if self.user in self.store.forgotten(self.tenant):
            return BuiltSession(built.session_id)
        for event in built.events:
            event.user_id = self.user
        self.store.link(self.tenant, self.user, self.pseudonyms.session(self.tenant, built.session_id))
        return built
