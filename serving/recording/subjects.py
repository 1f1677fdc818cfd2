"""The data subjects of serving's records: each recorded call's user, as the tenant's keyed pseudonym, linked to
its session in the key store, so that `liverl forget --user` finds a session only serving saw.

Serving learns a call's user from x-liverl-user-id (HTTP header, gRPC metadata) or OpenAI's `user`, but a
ModelCall carries no user. The recording thread (serving.recording.recorder), never the request, turns the user into its
pseudonym (liverl.privacy.pseudonyms) and gathers the (user, session subject) pairs of a batch; they are written
in one append per tenant before the batch goes to Kafka, as capture writes a request's links before it
acknowledges its records. The session subject is the keyed pseudonym of the session id as the record is keyed
(after redaction): the one its records are sealed under. A call of a forgotten user is not recorded (a forgotten
subject never comes back). The user id as given lives only in memory until then: it is never stored.
"""

from __future__ import annotations

from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms

Links = dict[str, set[tuple[str, str]]]  # tenant -> (user pseudonym, session subject) pairs still to write


class ServingSubjects:
    def __init__(self, store: SubjectKeyStore, pseudonyms: Pseudonyms, cache_size: int = 65_536,
                 make_keys: bool = False):
        """make_keys: records are sealed (privacy.encrypt_payloads), so write() also makes the linked sessions'
        keys, in the same durable write as their links (the sealer then finds them made)."""
        self.store = store
        self.pseudonyms = pseudonyms
        self.make_keys = make_keys
        self._cache_size = cache_size
        self._linked: set[tuple[str, str, str]] = set()  # (tenant, user, subject) written; cleared when full

    def add(self, tenant: str, user_id: str, session_id: str, links: Links) -> bool:
        """Add the call's (user, session subject) pair to `links` unless this process wrote it before; False when
        the user was forgotten (drop the record). session_id: as the record is keyed (redacted)."""
        user = self.pseudonyms.user(tenant, user_id)
        if not user:
            return True
        if user in self.store.forgotten(tenant):  # a stat per call while the file is unchanged
            return False
        subject = self.pseudonyms.session(tenant, session_id)
        if (tenant, user, subject) not in self._linked:
            links.setdefault(tenant, set()).add((user, subject))
        return True

    def key_version(self, tenant: str) -> object:
        """The tenant's pseudonym key version to tag what is kept in memory with (the key made if need be)."""
        return self.pseudonyms.key_version(tenant)

    def erased_since(self, tenant: str, session_id: str, key_version: object) -> bool:
        """Whether `liverl forget` erased the session (as its records are keyed) or its whole tenant since
        key_version (pseudonym_key_version when the session's data was kept in memory)."""
        if self.store.pseudonym_key_version(tenant) != key_version:
            return True
        return self.pseudonyms.session(tenant, session_id) in self.store.forgotten(tenant)

    def erasure_state(self, tenant: str) -> object:
        """What an erasure in the tenant changes: its pseudonym key version (a tenant's erasure replaces it) and how
        many subjects it has forgotten (a user's or a session's erasure adds to them)."""
        return self.store.pseudonym_key_version(tenant), len(self.store.forgotten(tenant))

    def write(self, links: Links) -> None:
        """The links, durably, one append per tenant (with the keys of their sessions when make_keys); raises
        what the key store raises (the caller counts it: a failed write never fails a request)."""
        for tenant, pairs in links.items():
            forgotten = self.store.forgotten(tenant)
            subjects = {subject for _, subject in pairs if subject not in forgotten} if self.make_keys else set()
            self.store.create_many(tenant, sorted(subjects), sorted(pairs))
            if len(self._linked) + len(pairs) > self._cache_size:
                self._linked.clear()
            self._linked.update((tenant, user, subject) for user, subject in pairs)


def serving_subjects(config) -> ServingSubjects:
    """The subjects of a serving process, on the config's key store (share its pseudonyms with the sealer)."""
    from liverl.privacy import key_store

    store = key_store(config)
    return ServingSubjects(store, Pseudonyms(store, config.privacy.key_cache_size), config.privacy.key_cache_size,
                           make_keys=config.privacy.encrypt_payloads)
