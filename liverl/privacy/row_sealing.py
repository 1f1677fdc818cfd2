"""Seal and open a trajectory-table row's token ids under its data subject's key (AES-256-GCM).

The token ids of prompts and completions are the user's text, exact, because the trainer needs them so. A row's
subject is the keyed pseudonym of its session (liverl.privacy.pseudonyms), the same subject, and so the same
key, that its session's Kafka records were sealed with (liverl.privacy.sealing). The pipelines seal each row
before it is staged or committed; the trainer opens rows as it reads them. Once `liverl forget` deletes the key,
every copy of the row (the table's history, a backup of its Parquet files, a staged batch) stays unreadable,
whether or not the vacuum has reached it yet.

    subject_id        "s-<hex>", the subject whose key seals the row (not personal data)
    sealed_token_ids  VERSION + 12-byte nonce + AES-GCM(the ids as little-endian int32)
    token_ids         [] while sealed

The associated data binds the blob to its row (tenant, subject, trajectory id): a blob copied into another row,
or altered, does not open. Everything else in the row (masks, logprobs, rewards, counts) stays in clear: it is
not the user's text, and the audits a person reads are made from it.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Mapping
from dataclasses import replace

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from liverl.contracts.trajectory_row import TrajectoryRow
from liverl.privacy.ciphers import SubjectCiphers
from liverl.privacy.keystore import SubjectKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.sealing import Forgotten

VERSION = b"\x01"
NONCE_BYTES = 12
_TAG_BYTES = 16
_PURPOSE = b"liverl/trajectory/token_ids"  # keeps a row's blob apart from the same key's Kafka values


class RowSealer:
    """Seals rows' token ids, and the other session data the pipelines keep at rest (the staged trace sources),
    one per worker."""

    def __init__(self, store: SubjectKeyStore, pseudonyms: Pseudonyms | None = None, cache_size: int = 65_536):
        self.pseudonyms = pseudonyms or Pseudonyms(store, cache_size)
        self._ciphers = SubjectCiphers(store, cache_size)

    def seal_blobs(self, tenant: str, session_id: str, purpose: bytes, blobs: list[bytes]) -> tuple[str, list[bytes]]:
        """(subject, the blobs sealed) for data of one session; blob i is bound to (purpose, tenant, subject, i),
        so blobs do not open in another place or order. SubjectForgotten when the subject was erased."""
        subject = self.pseudonyms.session(tenant, session_id)
        cipher = self._ciphers.get_or_make(tenant, subject)
        return subject, [_seal(cipher, blob, _bound(purpose, tenant, subject, str(i))) for i, blob in enumerate(blobs)]

    def seal_row(self, row: TrajectoryRow) -> TrajectoryRow:
        """The row with its token ids sealed (a sealed row is returned as it is). The subject's key is made when
        the session had none (its records travelled in clear); SubjectForgotten when the subject was erased
        meanwhile: drop the row, it may never be stored again."""
        if row.sealed:
            return row
        subject = self.pseudonyms.session(row.tenant_id, row.session_id)
        cipher = self._ciphers.get_or_make(row.tenant_id, subject)
        sealed = _seal(cipher, _packed(row.token_ids), associated_data(row.tenant_id, subject, row.trajectory_id))
        return replace(row, token_ids=[], subject_id=subject, sealed_token_ids=sealed)


class RowOpener:
    """Opens rows' token ids (the trainer, anything else that needs the ids); rows in clear pass through."""

    def __init__(self, store: SubjectKeyStore, cache_size: int = 65_536):
        self._ciphers = SubjectCiphers(store, cache_size)

    def open_blobs(self, tenant: str, subject: str, purpose: bytes, blobs: list[bytes]) -> list[bytes]:
        """What seal_blobs sealed; Forgotten when the subject's key is gone, ValueError when a blob was altered,
        reordered or moved from elsewhere."""
        cipher = self._cipher(tenant, subject, "its data")
        return [_open(cipher, blob, _bound(purpose, tenant, subject, str(i)), f"a sealed blob of subject {subject}")
                for i, blob in enumerate(blobs)]

    def open_row(self, row: Mapping) -> dict:
        """The row (as pyarrow's to_pylist gives it) with its token ids in clear and no sealed blob; Forgotten when
        the subject's key is gone (`liverl forget`); ValueError when the blob was altered or moved."""
        blob = row.get("sealed_token_ids")
        if not blob:
            return dict(row)
        tenant, subject, trajectory = row.get("tenant_id") or "", row.get("subject_id") or "", row.get("trajectory_id")
        cipher = self._cipher(tenant, subject, f"trajectory {trajectory}'s token ids")
        plain = _open(cipher, blob, associated_data(tenant, subject, trajectory or ""),
                      f"trajectory {trajectory}'s sealed token ids")
        return {**row, "token_ids": _unpacked(plain), "sealed_token_ids": None}

    def _cipher(self, tenant: str, subject: str, what: str) -> AESGCM:
        cipher = self._ciphers.get(tenant, subject) if subject else None
        if cipher is None:
            raise Forgotten(f"the key of subject {subject or '(none)'} (tenant {tenant!r}) is gone, so {what} can "
                            "never be read: the subject was erased by `liverl forget` (or this key store is not the "
                            "one that sealed it)")
        return cipher


def _seal(cipher: AESGCM, data: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return VERSION + nonce + cipher.encrypt(nonce, data, aad)


def _open(cipher: AESGCM, blob: bytes, aad: bytes, what: str) -> bytes:
    if blob[:1] != VERSION or len(blob) < 1 + NONCE_BYTES + _TAG_BYTES:
        raise ValueError(f"{what}: {len(blob)} bytes with no version-{VERSION[0]} envelope")
    try:
        return cipher.decrypt(blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:], aad)
    except Exception as error:  # InvalidTag: moved from elsewhere, or tampered with
        raise ValueError(f"{what} do not open under the subject's key: altered or moved from elsewhere (or "
                         "reordered)") from error


def associated_data(tenant: str, subject: str, trajectory_id: str) -> bytes:
    return _bound(_PURPOSE, tenant, subject, trajectory_id)


def _bound(purpose: bytes, tenant: str, subject: str, place: str) -> bytes:
    return b"\0".join((purpose, tenant.encode("utf-8", "surrogateescape"), subject.encode(), place.encode()))


def _packed(token_ids) -> bytes:
    ids = array("i", token_ids)  # (T,) int32, as the table's column
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tobytes()


def _unpacked(data: bytes) -> list[int]:
    if len(data) % 4:
        raise ValueError(f"sealed token ids of {len(data)} bytes are not int32 values")
    ids = array("i")
    ids.frombytes(data)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids.tolist()
