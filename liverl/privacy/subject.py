"""Who `liverl forget` erases: a whole tenant, one user, or one session, as the stores know them.

Stores hold no raw user id and may hold a session id only as records carried it (its redacted form), so a
subject is resolved to what can be matched: the user's pseudonym and the subject ids of every session linked
to the user in the key store, or of the one session (under its id as given and as redaction stores it).
A row or trace belongs to the subject when the keyed pseudonym of its session id is one of those ids.

An erasure cannot be undone, so the names are checked before anything is resolved: an empty or blank name
(an unset shell variable), a name that looks like a pattern, or a tenant without "--all" never widens to
more than was named (`SubjectRefused`).
"""

from __future__ import annotations

from dataclasses import dataclass

from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms

WILDCARD_CHARACTERS = frozenset("*?%[]")  # glob, SQL LIKE and regex classes: no store matches ids by pattern


class SubjectRefused(ValueError):
    """The request names no single subject (empty, a pattern, unknown, or ambiguous): nothing was erased."""


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

    def holds_subject(self, tenant: str, subject_id: str) -> bool:
        """Whether a sealed record of (tenant, session pseudonym) belongs to the subject: a sealed record is keyed by
        its session's pseudonym alone (liverl.privacy.sealing)."""
        return tenant == self.tenant and (self.scope == "tenant" or subject_id in self.sessions)


def checked_name(value: str | None, flag: str, literal: bool = False) -> str | None:
    """value as given, or None when the flag was not given at all; SubjectRefused when it names nobody, or looks
    like a pattern (unless literal: the caller says that is the id as sent)."""
    if value is None:
        return None
    if not value.strip():
        raise SubjectRefused(f"{flag} is empty: name the one subject to erase (an unset shell variable?); "
                             "to erase a whole tenant, say --tenant T --all")
    if WILDCARD_CHARACTERS & set(value) and not literal:
        raise SubjectRefused(f"{flag} {value!r} looks like a pattern: liverl forget erases exactly the subject "
                             f"named, never a match; if that is the id as the product sent it, add --literal")
    return value


def check_request(tenant: str | None, user: str | None, session: str | None, whole_tenant: bool,
                  literal: bool = False) -> None:
    """Refuse a request that does not name exactly one subject, before anything is looked up or changed."""
    checked_name(tenant, "--tenant", literal)
    if tenant is None:
        raise SubjectRefused("--tenant is required")
    if "/" in tenant:
        raise SubjectRefused(f"--tenant {tenant!r} is not a tenant id (a name without '/')")
    checked_name(user, "--user", literal)
    checked_name(session, "--session", literal)
    named = [flag for flag, given in (("--user", user is not None), ("--session", session is not None),
                                      ("--all", whole_tenant)) if given]
    if len(named) != 1:
        raise SubjectRefused("name exactly one of --user U, --session S or --all (the whole tenant), not "
                             f"{' and '.join(named) if named else 'none'}: a user's erasure covers all their sessions")


def resolve(store: SubjectKeyStore, tenant: str, user: str | None = None, session: str | None = None,
            redact_id=None, whole_tenant: bool = False, literal: bool = False) -> Subject:
    """The subject of `liverl forget --tenant T (--user U | --session S | --all)`. redact_id: the redaction's id
    function (a session id holding personal data is stored as its pseudonym). SubjectRefused as check_request."""
    check_request(tenant, user, session, whole_tenant, literal)
    pseudonyms = Pseudonyms(store)
    if user is not None:
        pseudonym = pseudonyms.user(tenant, user)
        return Subject(tenant, "user", pseudonym, frozenset(store.subjects_of(tenant, pseudonym)), pseudonyms)
    if session is not None:
        stored = {session, redact_id(session) if redact_id else session}
        return Subject(tenant, "session", None, frozenset(pseudonyms.session(tenant, s) for s in stored), pseudonyms)
    return Subject(tenant, "tenant", None, frozenset(), pseudonyms)
