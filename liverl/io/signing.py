"""Signed weights: the trainer signs what it exports and the gate's verdict; serving serves only what checks.

Whoever can write to the registry can move an alias, but cannot forge a signature: the trainer holds an
Ed25519 private key, serving holds only the public one. What is signed is a `SignedStatement`: the
registered model, the version, the digest of every file of the version's folder, and the gate's decision. The
signature travels as the version's tag `names.TAG_SIGNATURE` (base64), so a version whose files were replaced,
whose verdict was rewritten, or that was registered by anything but the trainer fails `verify`.

Two decisions are signed: "pass" (the version may serve), and "canary" (tag `names.TAG_CANARY_SIGNATURE`): the gate
deferred the version and serves it live to a share of the sessions to decide (trainer/gate/canary.py). Serving
accepts a "canary" statement for its canary slot alone, and only while the version's decision is still "defer".

    digest = folder_digest(folder)                       # the trainer, on its export; serving, on its download
    tag = sign(SignedStatement(model, version, digest, "pass"), private_key)
    verify(SignedStatement(...), tag, public_key) -> None, or raises SignatureMismatch saying why
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from liverl.io.file_digest import file_sha256


SERVABLE = ("pass", "canary")  # the decisions the gate signs


class SignatureMismatch(ValueError):
    """A version's files, verdict or signature do not check: it must not be served."""


@dataclass(frozen=True)
class SignedStatement:
    model: str  # the registered model's name
    version: str  # its registry version
    files_digest: str  # folder_digest of the version's folder
    decision: str  # "pass" (may serve) or "canary" (a deferred candidate the gate serves to its canary share)

    def canonical(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()


def folder_digest(folder: Path) -> str:
    """sha256 over every file's relative path and content hash, in path order (sub-folders included)."""
    folder = Path(folder)
    outer = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        outer.update(path.relative_to(folder).as_posix().encode() + b"\0" + file_sha256(path).encode() + b"\n")
    return outer.hexdigest()


def generate_key_pair(private_file: Path, public_file: Path) -> None:
    """A new Ed25519 pair as PEM files (the private one mode 0600); for the embedded stack and tests."""
    import os

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private_file, public_file = Path(private_file), Path(public_file)
    private_file.parent.mkdir(parents=True, exist_ok=True)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    public_file.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))


def sign(statement: SignedStatement, private_key_file: Path) -> str:
    """The statement's signature (base64 text) under the PEM Ed25519 private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(Path(private_key_file).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{private_key_file} is not an Ed25519 private key; make one with generate_key_pair")
    return base64.b64encode(key.sign(statement.canonical())).decode()


def verify(statement: SignedStatement, signature: str | None, public_key_file: Path) -> None:
    """Raise SignatureMismatch (saying why) unless the statement is one the gate signs (SERVABLE) and carries a valid
    signature."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if statement.decision not in SERVABLE:
        raise SignatureMismatch(f"version {statement.version} has gate decision {statement.decision!r}, not 'pass'")
    if not signature:
        raise SignatureMismatch(f"version {statement.version} carries no signature: it was not published by the "
                                "trainer's gate")
    key = serialization.load_pem_public_key(Path(public_key_file).read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{public_key_file} is not an Ed25519 public key")
    try:
        key.verify(base64.b64decode(signature, validate=True), statement.canonical())
    except (InvalidSignature, ValueError) as error:
        raise SignatureMismatch(f"version {statement.version}: the signature does not match its files and verdict "
                                f"(files {statement.files_digest[:12]}): {type(error).__name__}") from None
