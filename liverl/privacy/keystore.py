"""The subject key store: one data key per subject, a pseudonym key per tenant, tombstones of the forgotten.

`SubjectKeyStore` is the interface a KMS can implement (a data key per subject, created on first use and
destroyable; a per-tenant secret for keyed pseudonyms; a tombstone list; a user -> sessions index).
`FileKeyStore` is the embedded implementation: a folder per tenant (its name the tenant's hex, so any tenant
id is a safe file name) holding 0600 files, written atomically so several processes (capture, serving, the
pipelines, `liverl forget`) may share it:

    <keys_dir>/<tenant hex>/pseudonym.key       32 random bytes: the tenant's HMAC key for pseudonyms
    <keys_dir>/<tenant hex>/subjects/<id>.key   32 random bytes: one subject's AES-256 key
    <keys_dir>/<tenant hex>/users/<user id>     the subject ids of that user's sessions, one a line
    <keys_dir>/<tenant hex>/tombstones          forgotten subject and user ids, one a line

Subject and user ids are pseudonyms (liverl.privacy.pseudonyms): nothing here names a person.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import Protocol

KEY_BYTES = 32
_ID = re.compile(r"^[a-z]-[0-9a-f]{8,64}$")  # the shape of every pseudonym liverl.privacy.pseudonyms makes


class SubjectForgotten(Exception):
    """The subject was erased (`liverl forget`): its key is gone and it may never get a new one."""


class SubjectKeyStore(Protocol):
    def key(self, tenant: str, subject: str) -> bytes | None:
        """The subject's key; None when it has none (never had one, or was forgotten)."""

    def create(self, tenant: str, subject: str) -> bytes:
        """The subject's key, made on first use; SubjectForgotten when the subject is tombstoned."""

    def pseudonym_key(self, tenant: str) -> bytes:
        """The tenant's secret for keyed pseudonyms, made on first use (kept when subjects are forgotten)."""

    def link(self, tenant: str, user: str, subject: str) -> None:
        """Record that the session subject belongs to the user (both pseudonyms)."""

    def subjects_of(self, tenant: str, user: str) -> list[str]:
        """The session subjects linked to the user."""

    def forget(self, tenant: str, subjects: list[str], user: str | None = None) -> int:
        """Tombstone the subjects (and the user), then destroy their keys; returns how many keys existed."""

    def forget_tenant(self, tenant: str) -> int:
        """Destroy every key of the tenant, its pseudonym key included; returns how many subject keys existed."""

    def forgotten(self, tenant: str) -> frozenset[str]:
        """The tenant's tombstoned subject and user ids."""


class FileKeyStore:
    """SubjectKeyStore on a local folder (the demo's and a single machine's; a KMS replaces it in production)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._tombstones: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}  # tenant -> (file stat, ids)

    def key(self, tenant: str, subject: str) -> bytes | None:
        try:
            return self._subject_file(tenant, subject).read_bytes()
        except FileNotFoundError:
            return None

    def create(self, tenant: str, subject: str) -> bytes:
        if subject in self.forgotten(tenant):
            raise SubjectForgotten(f"subject {subject} of tenant {tenant!r} was forgotten; it gets no new key")
        path = self._subject_file(tenant, subject)
        key = _create_once(path)
        if subject in self.forgotten(tenant):  # forgotten while it was made: destroy it again
            path.unlink(missing_ok=True)
            raise SubjectForgotten(f"subject {subject} of tenant {tenant!r} was forgotten; it gets no new key")
        return key

    def pseudonym_key(self, tenant: str) -> bytes:
        return _create_once(self._tenant_dir(tenant) / "pseudonym.key")

    def link(self, tenant: str, user: str, subject: str) -> None:
        path = self._tenant_dir(tenant) / "users" / _checked(user)
        if subject in self.subjects_of(tenant, user):
            return
        _append_line(path, _checked(subject))

    def subjects_of(self, tenant: str, user: str) -> list[str]:
        return _read_lines(self._tenant_dir(tenant) / "users" / _checked(user))

    def forget(self, tenant: str, subjects: list[str], user: str | None = None) -> int:
        tombstones = self._tenant_dir(tenant) / "tombstones"
        known = self.forgotten(tenant)
        for item in [*subjects, *([user] if user else [])]:
            if item not in known:
                _append_line(tombstones, _checked(item))
        destroyed = 0
        for subject in subjects:
            path = self._subject_file(tenant, subject)
            if path.exists():
                _destroy(path)
                destroyed += 1
        if user:
            (self._tenant_dir(tenant) / "users" / _checked(user)).unlink(missing_ok=True)
        return destroyed

    def forget_tenant(self, tenant: str) -> int:
        folder = self.root / tenant.encode("utf-8").hex()
        if not folder.exists():
            return 0
        subjects = list((folder / "subjects").glob("*.key"))
        for path in subjects:
            _destroy(path)
        (folder / "pseudonym.key").exists() and _destroy(folder / "pseudonym.key")
        shutil.rmtree(folder)
        return len(subjects)

    def forgotten(self, tenant: str) -> frozenset[str]:
        path = self._tenant_dir(tenant, make=False) / "tombstones"
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return frozenset()
        seen = self._tombstones.get(tenant)
        if seen is not None and seen[0] == (stat.st_mtime_ns, stat.st_size):  # a stat per call, not a read
            return seen[1]
        ids = frozenset(_read_lines(path))
        self._tombstones[tenant] = ((stat.st_mtime_ns, stat.st_size), ids)
        return ids

    def _tenant_dir(self, tenant: str, make: bool = True) -> Path:
        folder = self.root / tenant.encode("utf-8").hex()
        if make and not folder.exists():
            for part in (self.root, folder, folder / "subjects", folder / "users"):
                part.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(part, 0o700)
        return folder

    def _subject_file(self, tenant: str, subject: str) -> Path:
        return self._tenant_dir(tenant) / "subjects" / f"{_checked(subject)}.key"


def _checked(identifier: str) -> str:
    if not _ID.match(identifier):
        raise ValueError(f"{identifier!r} is not a subject or user pseudonym (liverl.privacy.pseudonyms makes them)")
    return identifier


def _create_once(path: Path) -> bytes:
    """The key in path, or a new random one written there atomically (0600) when there is none: of several
    processes creating it at once, one wins and all return its key."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(descriptor, secrets.token_bytes(KEY_BYTES))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    try:
        os.link(temporary, path)  # fails when another process made it first
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return path.read_bytes()


def _destroy(path: Path) -> None:
    """Overwrite the key's bytes before unlinking it (a best effort on copy-on-write or journaled storage)."""
    with open(path, "r+b") as file:
        file.write(b"\0" * KEY_BYTES)
        file.flush()
        os.fsync(file.fileno())
    path.unlink()


def _append_line(path: Path, line: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(descriptor, (line + "\n").encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _read_lines(path: Path) -> list[str]:
    try:
        return [line for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []
