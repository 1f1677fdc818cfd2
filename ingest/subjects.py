"""Data subjects on the capture path: keyed user pseudonyms, the user -> sessions index, forgotten users.

A user id is personal data whatever it looks like, so it never passes capture as given: it becomes the
tenant's keyed pseudonym (liverl.privacy.pseudonyms, "u-<hex>") before the session state, Kafka or a spool
sees it. Each (user, session) pair is linked in the key store so that `liverl forget --user` finds every
session key of the user. Events of a user `liverl forget` erased are dropped: a forgotten subject never
comes back.
"""

from __future__ import annotations

from cachetools import LRUCache

from ingest.validation import SessionEvent
from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms


class CaptureSubjects:
    def __init__(self, store: SubjectKeyStore, pseudonyms: Pseudonyms, cache_size: int = 65_536):
        self.store = store
        self.pseudonyms = pseudonyms
        self._linked: LRUCache = LRUCache(cache_size)

    def pseudonymise(self, tenant: str, event: SessionEvent) -> bool:
        """Replace the event's user id by its pseudonym; False when that user was forgotten (drop the event)."""
        if not event.user_id:
            return True
        event.user_id = self.pseudonyms.user(tenant, event.user_id)
        return event.user_id not in self.store.forgotten(tenant)

    def link(self, tenant: str, user: str, session_id: str) -> None:
        """Index the session (as its records are keyed: the redacted id) under the user (a pseudonym)."""
        if not user:
            return
        pair = (tenant, user, session_id)
        if pair in self._linked:
            return
        self.store.link(tenant, user, self.pseudonyms.session(tenant, session_id))
        self._linked[pair] = True
