"""What `liverl forget` will erase, worked out before anything is changed: printed first, the whole of --dry-run.

A subject is known when something of it is here: a session key or a user link in the key store, a tombstone
(forgotten before: erasing again is harmless and completes what a crash may have cut short), or rows in the
trajectory or dead-letter table. An unknown subject is refused, because a typo or another tenant's id would
otherwise add a permanent tombstone for a pseudonym nobody had and report success; --allow-unknown records
the opt-out on purpose, for a subject whose data has not arrived yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.subject import Subject, SubjectRefused


@dataclass(frozen=True)
class ErasurePlan:
    subject: Subject
    known: bool
    already_forgotten: bool
    sessions_with_keys: int
    trajectory_rows: int
    dead_letter_rows: int

    def describe(self) -> str:
        """One line for the operator; names the subject by its pseudonym, never by the id as given."""
        s = self.subject
        who = {"tenant": f"every subject of tenant {s.tenant!r}",
               "user": f"user {s.user} of tenant {s.tenant!r} ({len(s.sessions)} sessions linked)",
               "session": f"session {sorted(s.sessions)[0] if s.sessions else '?'} of tenant {s.tenant!r}"}[s.scope]
        if not self.known:
            return (f"{who} is not known here: recording the opt-out only (its data is dropped if it arrives); "
                    "nothing else to erase")
        again = " (forgotten before: erasing again)" if self.already_forgotten else ""
        return (f"erasing {who}{again}: {self.sessions_with_keys} session keys, {self.trajectory_rows} trajectory "
                f"rows, {self.dead_letter_rows} dead-letter rows, then the staged files, traces, audit samples and "
                "capture state are swept")

    def summary(self) -> dict:
        s = self.subject
        return {"tenant": s.tenant, "scope": s.scope, "user": s.user, "known": self.known,
                "already_forgotten": self.already_forgotten, "sessions_with_keys": self.sessions_with_keys,
                "trajectory_rows": self.trajectory_rows, "dead_letter_rows": self.dead_letter_rows}


def plan_erasure(config, store: SubjectKeyStore, tenant: str, allow_unknown: bool,
                 resolve: Callable[[], Subject]) -> ErasurePlan:
    """The plan for the subject `resolve` names; SubjectRefused when its tenant or itself is unknown (unless
    allow_unknown). The tenant is checked before resolving, which would make the tenant a pseudonym key."""
    tables = (config.table.trajectories_uri, config.table.dead_letters_uri)
    if not store.knows_tenant(tenant) and not any(_rows_of_tenant(uri, tenant) for uri in tables) \
            and not allow_unknown:
        raise SubjectRefused(f"tenant {tenant!r} is not known here (no key, no row of it): check the name; "
                             "--allow-unknown records an opt-out for a subject whose data has not arrived yet")
    subject = resolve()
    trajectory_rows, dead_letter_rows = (_rows_of(uri, subject) for uri in tables)
    forgotten = store.forgotten(tenant)
    if subject.scope == "user":
        already, keyed = subject.user in forgotten, len(subject.sessions)
    elif subject.scope == "session":
        already = bool(subject.sessions & forgotten)
        keyed = sum(1 for s in subject.sessions if store.key(tenant, s) is not None)
    else:
        already, keyed = False, 0
    known = subject.scope == "tenant" or already or bool(keyed or trajectory_rows or dead_letter_rows)
    if not known and not allow_unknown:
        flag = "--user" if subject.scope == "user" else "--session"
        raise SubjectRefused(f"the {subject.scope} named by {flag} is not known to tenant {tenant!r} (no session, "
                             "key or row of it): check the id and the tenant; --allow-unknown records the opt-out "
                             "so that its data is dropped if it arrives later")
    return ErasurePlan(subject, known, already, keyed, trajectory_rows, dead_letter_rows)


def _rows_of(uri: str | None, subject: Subject) -> int:
    return sum(1 for tenant, session in _keys(uri, subject.tenant) if subject.holds(tenant, session))


def _rows_of_tenant(uri: str | None, tenant: str) -> bool:
    return bool(_keys(uri, tenant))


def _keys(uri: str | None, tenant: str) -> list[tuple[str, str]]:
    """(tenant_id, session_id) of the table's rows of the tenant ([] for no table)."""
    from deltalake import DeltaTable

    if not uri or not DeltaTable.is_deltatable(uri):
        return []
    table = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=["tenant_id", "session_id"])
    return [(t, s) for t, s in zip(table.column("tenant_id").to_pylist(), table.column("session_id").to_pylist())
            if t == tenant]
