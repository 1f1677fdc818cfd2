"""Who `liverl forget` erases: a whole tenant, one user, or one session, as the stores know them.

Stores hold no raw user id and may hold a session id only as records carried it (its redacted form), so a
subject is resolved to what can be matched: the user's pseudonym and the subject ids of every session linked
to the user in the key store, or of the one session (under its id as given and as redaction stores it).
A row or trace belongs to the subject when the keyed pseudonym of its session id is one of those ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms


@dataclass(frozen=True)
class Subject:
    tenant: str
    scope: str  # "tenant" | "user" | "session"
    user: str | None  # the user's pseudonym (scope "user")
    sessions: frozenset[str]  # session subject ids (scopes "user" and "session")
    pseudonyms: Pseudonyms

    def holds(self, tenant: str, session_id: str) -> bool:
        """Whether a row of (tenant, session id as stored) belongs to the subject."""
        if tenant != self.tenant:
            return False
        return self.scope == "tenant" or self.pseudonyms.session(tenant, session_id or "") in self.sessions


def resolve(store: SubjectKeyStore, tenant: str, user: str | None = None, session: str | None = None,
            redact_id=None) -> Subject:
    """The subject of `liverl forget --tenant T [--user U | --session S]`. redact_id: the redaction's id
    function (a session id holding personal data is stored as its pseudonym)."""
    if user and session:
        raise ValueError("name either --user or --session, not both: a user's erasure covers all their sessions")
    if not tenant or "/" in tenant:
        raise ValueError(f"--tenant {tenant!r} is not a tenant id (a name without '/')")
    pseudonyms = Pseudonyms(store)
    if user:
        pseudonym = pseudonyms.user(tenant, user)
        return Subject(tenant, "user", pseudonym, frozenset(store.subjects_of(tenant, pseudonym)), pseudonyms)
    if session:
        stored = {session, redact_id(session) if redact_id else session}
        return Subject(tenant, "session", None, frozenset(pseudonyms.session(tenant, s) for s in stored), pseudonyms)
    return Subject(tenant, "tenant", None, frozenset(), pseudonyms)
