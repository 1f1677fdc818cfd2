"""The trainer's side of signed weights: its key, and the signature it puts on every version the gate passes.

The statement signed is liverl/io/signing.py's: the registered model, the version, the digest of the version's
files (recorded as a tag when it is registered) and the decision "pass". Serving verifies it with the public key
before it serves the version, so an alias moved by anyone else, or files replaced in the artifact store, are
refused.
"""

from __future__ import annotations

from pathlib import Path

from liverl.contracts import names
from liverl.io.signing import SignedStatement, generate_key_pair, sign

TAG_FILES_DIGEST = "liverl.files_digest"  # folder_digest of the registered folder (what the signature binds)
PUBLIC_KEY_NAME = "verify.pem"


def ensure_signing_key(private_key_file: Path) -> Path:
    """The private key, made (with its public half `verify.pem` beside it) when missing."""
    private_key_file = Path(private_key_file)
    if not private_key_file.is_file():
        generate_key_pair(private_key_file, private_key_file.with_name(PUBLIC_KEY_NAME))
    return private_key_file


def sign_pass(registry, version: str, files_digest: str, private_key_file: Path) -> None:
    """Tag the version with the signature of its files and a passing verdict (before the alias moves)."""
    statement = SignedStatement(registry.name, version, files_digest, "pass")
    registry.set_tag(version, names.TAG_SIGNATURE, sign(statement, ensure_signing_key(private_key_file)))


def sign_canary(registry, version: str, files_digest: str, private_key_file: Path) -> None:
    """Tag the deferred version with the signature of its files and "canary" (before the canary alias names it):
    serving may then serve it to its canary share while its decision stays "defer"."""
    statement = SignedStatement(registry.name, version, files_digest, "canary")
    registry.set_tag(version, names.TAG_CANARY_SIGNATURE, sign(statement, ensure_signing_key(private_key_file)))
