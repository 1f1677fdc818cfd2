"""Seal and open Kafka record values with their session's key (AES-256-GCM).

Every record that belongs to a session is keyed "<tenant>/<session>" (liverl.contracts.keys); its subject is
the keyed pseudonym of that session, and its value is sealed under the subject's own key before it reaches
Kafka or a spool. Sealing also re-keys the record "<tenant>/<subject>": a Kafka key cannot be erased, so the
session id as the product sent it never reaches one (the pseudonym keeps one session in one partition, as the
id did). The record's identity (topic, sealed key, subject) is the associated data, so a sealed value moved
to another record does not open. The header names.HEADER_SEALED carries the subject id; the value is
VERSION + 12-byte nonce + ciphertext and tag. Deleting the subject's key (`liverl forget`) leaves every copy
(Kafka segments, spools, backups, the pipelines' dead letters) unreadable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from liverl.contracts import names
from liverl.io.kafka_writer import Record
from liverl.privacy.ciphers import SubjectCiphers
from liverl.privacy.keystore import SubjectForgotten, SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms

VERSION = b"\x01"
NONCE_BYTES = 12


class Forgotten(Exception):
    """The record's subject was erased: its key is gone, the value can never be read again."""


class Sealer:
    """Seals records on their way to Kafka; one per process (thread-safe: the caches tolerate races)."""

    def __init__(self, store: SubjectKeyStore, pseudonyms: Pseudonyms | None = None, cache_size: int = 65_536):
        self.store = store
        self.pseudonyms = pseudonyms or Pseudonyms(store, cache_size)
        self._ciphers = SubjectCiphers(store, cache_size)
        self.dropped_forgotten = 0

    def seal_all(self, records: Sequence[Record]) -> list[Record]:
        """The records sealed; those of forgotten subjects are dropped (counted in dropped_forgotten). The keys
        the records need that this process does not hold yet are fetched (or made) together, per tenant: one
        durable write for a whole capture request."""
        sealers = self._sealers({record.key for record in records if not is_sealed(record)})
        sealed = []
        for record in records:
            if is_sealed(record):
                sealed.append(record)  # sealed before (a spooled record written again): its key is a pseudonym
                continue
            found = sealers[record.key]
            if found is None:
                self.dropped_forgotten += 1
            else:
                sealed.append(_sealed(record, *found))
        return sealed

    def seal(self, record: Record) -> Record:
        """One record sealed; SubjectForgotten when its subject was erased."""
        (found,) = self._sealers({record.key}).values()
        if found is None:
            raise SubjectForgotten(f"the session of record key {record.key!r} was forgotten")
        return _sealed(record, *found)

    def _sealers(self, keys: set[bytes]) -> dict[bytes, tuple[str, AESGCM] | None]:
        """Kafka key -> (subject, cipher), or None for a forgotten subject."""
        found: dict[bytes, tuple[str, AESGCM] | None] = {}
        missing: dict[str, dict[str, list[bytes]]] = {}  # tenant -> subject -> keys
        for key in keys:
            tenant, session = split_key(key)
            subject = self.pseudonyms.session(tenant, session)
            cipher = self._ciphers.get(tenant, subject)
            if cipher is not None:
                found[key] = (subject, cipher)
            else:
                missing.setdefault(tenant, {}).setdefault(subject, []).append(key)
        for tenant, subjects in missing.items():
            forgotten = self.store.forgotten(tenant)
            live = [subject for subject in subjects if subject not in forgotten]
            made = self.store.create_many(tenant, live) if live else {}
            for subject, record_keys in subjects.items():
                cipher = None
                if subject in made:
                    cipher = self._ciphers.put(tenant, subject, made[subject])
                for key in record_keys:
                    found[key] = None if cipher is None else (subject, cipher)
        return found


def is_sealed(record: Record) -> bool:
    return any(name == names.HEADER_SEALED for name, _ in record.headers)


def _sealed(record: Record, subject: str, cipher: AESGCM) -> Record:
    tenant, _ = split_key(record.key)
    key = sealed_key(tenant, subject)
    nonce = os.urandom(NONCE_BYTES)
    value = VERSION + nonce + cipher.encrypt(nonce, record.value, associated_data(record.topic, key, subject))
    return Record(record.topic, key, value, (*record.headers, (names.HEADER_SEALED, subject.encode())),
                  record.event_time_ms)


def sealed_key(tenant: str, subject: str) -> bytes:
    """The Kafka key of a sealed record: its tenant and its session's pseudonym, never the session id."""
    return f"{tenant}/{subject}".encode("utf-8")


class Opener:
    """Opens sealed values for the readers (the pipelines, `liverl topics`); plain values pass through."""

    def __init__(self, store: SubjectKeyStore, cache_size: int = 65_536):
        self.store = store
        self._ciphers = SubjectCiphers(store, cache_size)

    def open(self, topic: str, key: bytes | None, headers: Sequence[tuple[str, bytes]], value: bytes | None) -> bytes:
        """The plain value; Forgotten when its subject's key is gone; ValueError when it does not open."""
        subject = next((v for name, v in headers or () if name == names.HEADER_SEALED), None)
        if subject is None:
            return value or b""
        subject_id = subject.decode("ascii", "replace")
        tenant, _ = split_key(key or b"")
        cipher = self._ciphers.get(tenant, subject_id)
        if cipher is None:
            raise Forgotten(f"the key of subject {subject_id} (tenant {tenant!r}) is gone: the record was "
                            "erased by `liverl forget` (or the key store is not the one that sealed it)")
        value = value or b""
        if value[:1] != VERSION or len(value) < 1 + NONCE_BYTES + 16:
            raise ValueError(f"a sealed value of {len(value)} bytes has no version-{VERSION[0]} envelope")
        try:
            return cipher.decrypt(value[1:1 + NONCE_BYTES], value[1 + NONCE_BYTES:],
                                  associated_data(topic, key or b"", subject_id))
        except Exception as error:  # InvalidTag: another record's value, or tampered with
            raise ValueError(f"the sealed value does not open under subject {subject_id}'s key: it was altered "
                             "or moved from another record") from error


def split_key(key: bytes) -> tuple[str, str]:
    """(tenant, session) of a session's Kafka key "<tenant>/<session>"."""
    text = key.decode("utf-8", "surrogateescape")
    tenant, _, session = text.partition("/")
    return tenant, session


def associated_data(topic: str, key: bytes, subject: str) -> bytes:
    return b"\0".join((topic.encode(), key, subject.encode()))
