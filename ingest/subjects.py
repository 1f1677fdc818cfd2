"""Data subjects on the capture path: keyed user pseudonyms, the user -> sessions index, forgotten users.

A user id is personal data whatever it looks like, so it never passes capture as given: it becomes the
tenant's keyed pseudonym (liverl.privacy.pseudonyms, "u-<hex>") before the session state, Kafka or a spool
sees it. Each (user, session) pair is linked in the key store so that `liverl forget --user` finds every
session key of the user. Events of a user `liverl forget` erased are dropped: a forgotten subject never
comes back.
"""

from __future__ import annotations

from ingest.validation import SessionEvent
from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms


class CaptureSubjects:
    def __init__(self, store: SubjectKeyStore, pseudonyms: Pseudonyms, cache_size: int = 65_536,
                 make_keys: bool = False):
        """make_keys: payloads are sealed (privacy.encrypt_payloads), so write() also makes the keys of the
        request's sessions, in the same durable write as its links (the sealer then finds them made)."""
        self.make_keys = make_keys
        self.store = store
        self.pseudonyms = pseudonyms
        self._cache_size = cache_size
        self._linked: set[tuple[str, str, str]] = set()  # (tenant, user, session) written; cleared when full

    def forgotten(self, tenant: str) -> frozenset[str]:
        """The tenant's forgotten ids (read once per request)."""
        return self.store.forgotten(tenant)

    def pseudonymise(self, tenant: str, event: SessionEvent, forgotten: frozenset[str]) -> bool:
        """Replace the event's user id by its pseudonym; False when that user is in `forgotten` (drop the event)."""
        if not event.user_id:
            return True
        event.user_id = self.pseudonyms.user(tenant, event.user_id)
        return event.user_id not in forgotten

    def link(self, tenant: str, user: str, session_id: str, pending: list[tuple[str, str]]) -> None:
        """Index the session (as its records are keyed: the redacted id) under the user (a pseudonym): the
        pair is added to `pending` (the request's), unless this process linked it before."""
        if not user or (tenant, user, session_id) in self._linked:
            return
        pending.append((user, self.pseudonyms.session(tenant, session_id)))
        if len(self._linked) >= self._cache_size:
            self._linked.clear()
        self._linked.add((tenant, user, session_id))

    def write(self, tenant: str, pending: list[tuple[str, str]], session_ids: set[str],
              forgotten: frozenset[str]) -> None:
        """Write a request's new links, and (make_keys) the keys of its sessions (as their records are keyed)
        that are not forgotten, durably in one append, before its records are acknowledged."""
        subjects = [subject for subject in {self.pseudonyms.session(tenant, s) for s in session_ids}
                    if subject not in forgotten] if self.make_keys else []
        if pending or subjects:
            self.store.create_many(tenant, subjects, pending)
