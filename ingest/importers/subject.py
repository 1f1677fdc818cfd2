"""The data subjects of an import: each session's user, as the tenant's keyed pseudonym, linked to its session.

A session's user is the one its source names (OpenAI's `user`, OpenTelemetry's user.id), else the one
`liverl import --user` names. It is stored as the tenant's keyed pseudonym (never as given, and never as the
builder's redaction left it: an email would be "[REDACTED:email]" for every user) and each session is linked to it
in the key store, as the capture service does, so `liverl forget --user` finds imported sessions too. Sessions
of a forgotten user, or forgotten sessions, are not published again, and counted as such in the summary.
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

    @classmethod
    def of(cls, config, tenant: str) -> "ImportSubject":
        from liverl.privacy import key_store

        store = key_store(config)
        return cls(store, Pseudonyms(store, config.privacy.key_cache_size), tenant)

    def owned(self, built: BuiltSession, user_id: str) -> BuiltSession | None:
        """built with its user (user_id as the source or --user named it) as a pseudonym on every event and linked
        to its session; None when that user or the session was forgotten (publish nothing of it); as it is when
        it has no user."""
        user = self.pseudonyms.user(self.tenant, user_id or "")
        forgotten = self.store.forgotten(self.tenant)
        if (user and user in forgotten) or self.pseudonyms.session(self.tenant, built.session_id) in forgotten:
            return None
        if not user:
            return built
        for event in built.events:
            event.user_id = user
        self.store.link(self.tenant, user, self.pseudonyms.session(self.tenant, built.session_id))
        return built
