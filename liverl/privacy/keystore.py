"""The subject key store: one data key per subject, a pseudonym key per tenant, tombstones of the forgotten.

`SubjectKeyStore` is the interface a KMS can implement (a data key per subject, created on first use and
destroyable; a per-tenant secret for keyed pseudonyms; a tombstone list; a user -> sessions index).
`FileKeyStore` is the embedded implementation: a folder per tenant (its name the tenant's hex, so any tenant
id is a safe file name) of 0600 files in a 0700 folder, shared by several processes (capture, serving, import,
the pipelines, `liverl forget`):

    <keys_dir>/<tenant hex>/pseudonym.key   32 random bytes: the tenant's HMAC key for pseudonyms (its inode and
                                            mtime, random in the ns, tell a running process it was replaced)
    <keys_dir>/<tenant hex>/keys.log        "<subject id> <key hex>" lines: every live subject key, and
                                            "<user id> <subject id>" lines: the user -> sessions index
    <keys_dir>/<tenant hex>/tombstones      forgotten subject and user ids, one a line

A key must be as durable as the records sealed with it, and capture acknowledges records per request, so new
keys (and the request's new user links) are appended in one write and one fsync per request (a file per key
cost two fsyncs per new session).
Appends and rewrites hold an exclusive lock on the tenant's `lock` file; readers read without it and pick
up new lines (or a rewritten file) when a subject is not known yet. Forgetting rewrites keys.log without the
subject (a new file moved over the old one, whose bytes are overwritten first).
Subject and user ids are pseudonyms (liverl.privacy.pseudonyms): nothing here names a person.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

KEY_BYTES = 32
_ID = re.compile(r"^[a-z]-[0-9a-f]{8,64}$")  # the shape of every pseudonym liverl.privacy.pseudonyms makes


class SubjectForgotten(Exception):
    """The subject was erased (`liverl forget`): its key is gone and it may never get a new one."""


class SubjectKeyStore(Protocol):
    def key(self, tenant: str, subject: str) -> bytes | None:
        """The subject's key; None when it has none (never had one, or was forgotten)."""

    def create_many(self, tenant: str, subjects: Iterable[str], links: Iterable[tuple[str, str]] = ()
                    ) -> dict[str, bytes]:
        """The subjects' keys, made durably on first use (with the (user, subject) links, in the same write);
        SubjectForgotten when one of them is tombstoned."""

    def pseudonym_key(self, tenant: str) -> bytes:
        """The tenant's secret for keyed pseudonyms, made on first use (kept when subjects are forgotten)."""

    def pseudonym_key_version(self, tenant: str) -> object | None:
        """A cheap token that changes whenever the tenant's pseudonym key is replaced (forget_tenant, in any
        process), None while it has none; never makes one. Pseudonyms compares it on every call."""

    def link_many(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        """Record that each (user, session subject) pair belongs together (both pseudonyms)."""

    def subjects_of(self, tenant: str, user: str) -> list[str]:
        """The session subjects linked to the user."""

    def forget(self, tenant: str, subjects: list[str], user: str | None = None) -> int:
        """Tombstone the subjects (and the user), then destroy their keys; returns how many keys existed."""

    def forget_tenant(self, tenant: str) -> int:
        """Destroy every key of the tenant, its pseudonym key included; returns how many subject keys existed."""

    def forgotten(self, tenant: str) -> frozenset[str]:
        """The tenant's tombstoned subject and user ids."""

    def knows_tenant(self, tenant: str) -> bool:
        """Whether the tenant has a pseudonym key here (anything of it ever arrived); never makes one."""


class FileKeyStore:
    """SubjectKeyStore on a local folder (the demo's and a single machine's; a KMS replaces it in production)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._keys: dict[str, dict[str, bytes]] = {}  # tenant -> subject -> key, as far as keys.log was read
        self._read_to: dict[str, tuple[int, int]] = {}  # tenant -> (keys.log inode, bytes read)
        self._tombstones: dict[str, tuple[tuple[int, int], frozenset[str]]] = {}  # tenant -> (file stat, ids)
        self._reading = threading.RLock()  # one thread at a time reads keys.log into the index (gRPC threads)
        self._key_paths: dict[str, str] = {}  # tenant -> its pseudonym.key path (a stat per call: no Path ops)

    # --- keys ------------------------------------------------------------------------------------

    def key(self, tenant: str, subject: str) -> bytes | None:
        found = self._keys.get(tenant, {}).get(subject)
        if found is None or not self._index_current(tenant):
            self._refresh(tenant)
            found = self._keys.get(tenant, {}).get(subject)
        return found

    def _index_current(self, tenant: str) -> bool:
        """Whether keys.log is still the file the index was read from: `forget` (in any process) rewrites it as
        a new file, and `forget_tenant` removes it; one stat, so a forgotten key is never served from memory."""
        try:
            inode = os.stat(self._folder(tenant, make=False) / "keys.log").st_ino
        except FileNotFoundError:
            return False
        return self._read_to.get(tenant, (None, 0))[0] == inode

    def create(self, tenant: str, subject: str) -> bytes:
        return self.create_many(tenant, [subject])[subject]

    def create_many(self, tenant: str, subjects: Iterable[str], links: Iterable[tuple[str, str]] = ()
                    ) -> dict[str, bytes]:
        wanted = {_checked(subject) for subject in subjects}
        linked = "".join(f"{_checked(user)} {_checked(subject)}\n" for user, subject in links)
        self._refuse_forgotten(tenant, wanted)
        known = self._keys.setdefault(tenant, {})
        if not wanted <= known.keys() or linked:
            with self._reading, self._locked(tenant):
                self._refresh(tenant)  # another process may have made some (it may also start a new dict)
                self._refuse_forgotten(tenant, wanted)  # forgotten meanwhile: never a new key
                known = self._keys[tenant]
                made = {subject: secrets.token_bytes(KEY_BYTES) for subject in sorted(wanted - known.keys())}
                if made or linked:
                    _append(self._folder(tenant) / "keys.log",
                            "".join(f"{subject} {key.hex()}\n" for subject, key in made.items()) + linked)
                    known.update(made)
        return {subject: known[subject] for subject in wanted}

    def pseudonym_key(self, tenant: str) -> bytes:
        path = self._folder(tenant) / "pseudonym.key"
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        temporary = path.with_name(f".pseudonym.{secrets.token_hex(8)}")
        _write_new(temporary, secrets.token_bytes(KEY_BYTES))
        _tag_mtime(temporary)
        try:
            os.link(temporary, path)  # of several processes making it at once, one wins; all read its key
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
        return path.read_bytes()

    def pseudonym_key_version(self, tenant: str) -> tuple[int, int] | None:
        """(inode, mtime in ns) of pseudonym.key: forget_tenant removes the file and the next key is a new one.
        Its mtime carries random nanoseconds (_tag_mtime), so a new key on a reused inode within the same clock
        tick still differs."""
        path = self._key_paths.get(tenant)
        if path is None:
            path = self._key_paths[tenant] = str(self._folder(tenant, make=False) / "pseudonym.key")
        try:
            found = os.stat(path)
        except FileNotFoundError:
            return None
        return found.st_ino, found.st_mtime_ns

    # --- the user -> sessions index --------------------------------------------------------------

    def link(self, tenant: str, user: str, subject: str) -> None:
        self.link_many(tenant, [(user, subject)])

    def link_many(self, tenant: str, pairs: Iterable[tuple[str, str]]) -> None:
        self.create_many(tenant, [], pairs)

    def subjects_of(self, tenant: str, user: str) -> list[str]:
        pairs = _pairs(self._folder(tenant, make=False) / "keys.log")
        return sorted({subject for linked, subject in pairs if linked == _checked(user)})

    # --- erasure ---------------------------------------------------------------------------------

    def forget(self, tenant: str, subjects: list[str], user: str | None = None) -> int:
        doomed = {_checked(subject) for subject in subjects}
        folder = self._folder(tenant)
        with self._locked(tenant):
            known = self.forgotten(tenant)
            new = [item for item in [*sorted(doomed), *([_checked(user)] if user else [])] if item not in known]
            if new:
                _append(folder / "tombstones", "".join(f"{item}\n" for item in new))
            before = _pairs(folder / "keys.log")
            _rewrite(folder / "keys.log", [(a, b) for a, b in before if a not in doomed and a != user])
            for subject in doomed:
                self._keys.get(tenant, {}).pop(subject, None)
        return sum(1 for a, b in before if a in doomed and not b.startswith("s-"))

    def forget_tenant(self, tenant: str) -> int:
        folder = self._folder(tenant, make=False)
        if not folder.exists():
            return 0
        with self._locked(tenant):
            keys = sum(1 for _, b in _pairs(folder / "keys.log") if not b.startswith("s-"))
            for name in ("keys.log", "pseudonym.key"):
                _overwrite(folder / name)
        shutil.rmtree(folder)
        self._keys.pop(tenant, None)
        self._read_to.pop(tenant, None)
        return keys

    def knows_tenant(self, tenant: str) -> bool:
        return (self._folder(tenant, make=False) / "pseudonym.key").exists()

    def forgotten(self, tenant: str) -> frozenset[str]:
        path = self._folder(tenant, make=False) / "tombstones"
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return frozenset()
        seen = self._tombstones.get(tenant)
        if seen is not None and seen[0] == (stat.st_mtime_ns, stat.st_size):  # a stat per call, not a read
            return seen[1]
        ids = frozenset(line for line in path.read_text().splitlines() if line)
        self._tombstones[tenant] = ((stat.st_mtime_ns, stat.st_size), ids)
        return ids

    # --- files -----------------------------------------------------------------------------------

    def _refuse_forgotten(self, tenant: str, subjects: set[str]) -> None:
        gone = subjects & self.forgotten(tenant)
        if gone:
            raise SubjectForgotten(f"subject {sorted(gone)[0]} of tenant {tenant!r} was forgotten; it gets no new key")

    def _refresh(self, tenant: str) -> None:
        """Read what keys.log gained since the last read (all of it when it was rewritten)."""
        with self._reading:
            self._read_new(tenant)

    def _read_new(self, tenant: str) -> None:
        path = self._folder(tenant, make=False) / "keys.log"
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self._keys[tenant] = {}
            self._read_to.pop(tenant, None)
            return
        try:
            inode = os.fstat(descriptor).st_ino
            seen_inode, offset = self._read_to.get(tenant, (None, 0))
            if seen_inode != inode:
                self._keys[tenant], offset = {}, 0
            os.lseek(descriptor, offset, os.SEEK_SET)
            chunks = []
            while chunk := os.read(descriptor, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(descriptor)
        data = b"".join(chunks)
        complete = data[:data.rfind(b"\n") + 1]  # a line still being appended is read next time
        known = self._keys.setdefault(tenant, {})
        for subject, key in _parse(complete.decode("ascii", "replace")):
            known[subject] = key
        self._read_to[tenant] = (inode, offset + len(complete))

    @contextmanager
    def _locked(self, tenant: str):
        descriptor = os.open(self._folder(tenant) / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _folder(self, tenant: str, make: bool = True) -> Path:
        folder = self.root / tenant.encode("utf-8").hex()
        if make and not folder.exists():
            for part in (self.root, folder):
                part.mkdir(mode=0o700, parents=True, exist_ok=True)
                os.chmod(part, 0o700)
        return folder


def _checked(identifier: str) -> str:
    if not _ID.match(identifier):
        raise ValueError(f"{identifier!r} is not a subject or user pseudonym (liverl.privacy.pseudonyms makes them)")
    return identifier


def _parse(text: str) -> list[tuple[str, bytes]]:
    out = []
    for line in text.splitlines():
        subject, _, key = line.partition(" ")
        if _ID.match(subject) and len(key) == 2 * KEY_BYTES:  # an overwritten (zeroed) line is skipped
            out.append((subject, bytes.fromhex(key)))
    return out


def _pairs(path: Path) -> list[tuple[str, str]]:
    """The "<a> <b>" lines of a log file ([] when it does not exist)."""
    try:
        text = path.read_text("ascii", "replace")
    except FileNotFoundError:
        return []
    return [tuple(line.split(" ", 1)) for line in text.splitlines() if line.count(" ") == 1]


def _append(path: Path, text: str) -> None:
    """Append in one write, fsync'd before returning (the file made 0600 if new)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(descriptor, text.encode("ascii"))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_new(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _tag_mtime(path: Path) -> None:
    """Set the file's mtime to now with random nanoseconds: with its inode, a version no later file repeats."""
    now = time.time_ns()
    os.utime(path, ns=(now, now - now % 1_000_000_000 + secrets.randbelow(1_000_000_000)))


def _rewrite(path: Path, pairs: list[tuple[str, str]]) -> None:
    """Replace the file by one holding these lines (moved over it durably); the old bytes are overwritten."""
    lines = "".join(f"{a} {b}\n" for a, b in pairs)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    _write_new(temporary, lines.encode("ascii"))
    _overwrite(path)
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _overwrite(path: Path) -> None:
    """Zero a file's bytes in place (a best effort on copy-on-write or journaled storage)."""
    try:
        with open(path, "r+b") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(0)
            file.write(b"\0" * size)
            file.flush()
            os.fsync(file.fileno())
    except FileNotFoundError:
        pass
