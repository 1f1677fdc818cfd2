"""Ciphers of subject keys, cached per process, that never outlive `liverl forget`.

Every use asks the key store for the subject's key (the embedded store answers from memory after one stat of its
key file), and a cached cipher is reused only while the store still holds that same key. Once a subject is
forgotten, by this process or another, a running capture, serving, distiller or trainer stops sealing and opening
its data at once, not at its next restart: a distiller that had cached the key would otherwise have opened the
subject's records still waiting in Kafka and written their rows back after the erasure.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from liverl.privacy.keystore import SubjectKeyStore


class SubjectCiphers:
    """(tenant, subject) -> AESGCM of the subject's current key; cleared when full (cheaper than an LRU)."""

    def __init__(self, store: SubjectKeyStore, cache_size: int = 65_536):
        self.store = store
        self._cache_size = cache_size
        self._ciphers: dict[tuple[str, str], tuple[bytes, AESGCM]] = {}

    def get(self, tenant: str, subject: str) -> AESGCM | None:
        """The cipher of the subject's key; None when the store holds none (never made, or forgotten)."""
        secret = self.store.key(tenant, subject)
        if secret is None:
            return None
        cached = self._ciphers.get((tenant, subject))
        return cached[1] if cached is not None and cached[0] == secret else self.put(tenant, subject, secret)

    def get_or_make(self, tenant: str, subject: str) -> AESGCM:
        """The subject's cipher, its key made durably when it has none; SubjectForgotten when it is tombstoned."""
        found = self.get(tenant, subject)
        return found or self.put(tenant, subject, self.store.create_many(tenant, [subject])[subject])

    def put(self, tenant: str, subject: str, secret: bytes) -> AESGCM:
        """Cache the cipher of a key the store just made (or returned)."""
        if len(self._ciphers) >= self._cache_size:
            self._ciphers.clear()
        cipher = AESGCM(secret)
        self._ciphers[(tenant, subject)] = (secret, cipher)
        return cipher
