"""Data subjects on the capture path: keyed user pseudonyms, the user -> sessions index, forgotten users.

A user id is personal data whatever it looks like, so it never passes capture as given: it becomes the
tenant's keyed pseudonym (liverl.privacy.pseudonyms, "u-<hex>") before the session state, Kafka or a spool
sees it. Each (user, session) pair is linked in the key store so that `liverl forget --user` finds every
session key of the user. Events of a user `liverl forget` erased are dropped: a forgotten subject never
comes back. Refused events are no exception: their dead letters carry the pseudonym, are keyed (and sealed)
by their session, and that session is linked to the user like an accepted event's, so forgetting the user
leaves them unreadable too.
"""

from __future__ import annotations

from ingest.validation import MAX_ID_CHARS, SessionEvent
from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms

# How the protobuf JSON mapping (ingest/http_api.py) may name the two ids of an event that did not parse
USER_KEYS = ("userId", "user_id")
SESSION_KEYS = ("sessionId", "session_id")


def well_formed(identifier: object) -> bool:
    """An id validation would accept (printable, at most MAX_ID_CHARS). Only such ids are hashed or remembered
    before validation: a refused event's oversized id must not fill the pseudonym and link caches."""
    return isinstance(identifier, str) and 0 < len(identifier) <= MAX_ID_CHARS and identifier.isprintable()


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

    def forgotten_user(self, tenant: str, user_id: str, forgotten: frozenset[str]) -> bool:
        """Whether the user (as sent, or as its pseudonym) is in `forgotten`: drop the event, valid or not."""
        return well_formed(user_id) and self.pseudonyms.user(tenant, user_id) in forgotten

    def pseudonymise(self, tenant: str, event: SessionEvent) -> None:
        """Replace the event's user id by its pseudonym (again: no change)."""
        if event.user_id:
            event.user_id = self.pseudonyms.user(tenant, event.user_id)

    def of_refused(self, tenant: str, item: object, event: SessionEvent | None) -> tuple[object, str, str]:
        """(item, user pseudonym, session id as sent) of a refused event, "" where unknown. A parsed event gets
        its pseudonym in place; an item that did not parse (a JSON object of the HTTP API) is read for its
        userId and sessionId and returned as a copy with the pseudonym in place of the user id, so its dead
        letter holds no raw user id either. Raw bytes that did not parse name nobody that can be read."""
        if event is not None:
            if not well_formed(event.user_id):
                event.user_id = ""  # an id refused for its form names nobody that can be linked: not kept
            self.pseudonymise(tenant, event)
            return item, event.user_id, event.session_id if well_formed(event.session_id) else ""
        if not isinstance(item, dict):
            return item, "", ""
        user_key = next((key for key in USER_KEYS if isinstance(item.get(key), str) and item[key]), None)
        session = next((item[key] for key in SESSION_KEYS if isinstance(item.get(key), str)), "")
        session = session if well_formed(session) else ""
        if user_key is None:
            return item, "", session
        user = self.pseudonyms.user(tenant, item[user_key]) if well_formed(item[user_key]) else ""
        item = {key: value for key, value in item.items() if key not in USER_KEYS}  # a copy: the caller's stays
        if user:
            item[user_key] = user
        return item, user, session

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
