"""Serve only signed weights: before a registry version is loaded, its downloaded files and its gate verdict
must carry the trainer's signature (liverl/io/signing.py), whatever the alias says.

An alias moved by anyone with registry access, a verdict rewritten by hand, or files replaced in the artifact
store all fail here; the swapper refuses the version, counts it and keeps serving what it serves.
"""

from __future__ import annotations

from pathlib import Path

from liverl.config.serving import ServingConfig
from liverl.contracts import names
from liverl.io.signing import SignatureMismatch, SignedStatement, folder_digest, verify


def check_signed(registry, version: str, folder: Path, config: ServingConfig) -> None:
    """Raise SignatureMismatch (saying why) unless `version`, downloaded into `folder`, may be served."""
    if not config.require_signature:
        return
    key = config.verify_key_file
    if key is None or not Path(key).is_file():
        raise SignatureMismatch(f"serving.require_signature is on but the trainer's public key {key} is missing: "
                                "copy the trainer's verify.pem there (it is made beside trainer.signing_key_file), "
                                "or set serving.require_signature = false to serve unsigned versions")
    tags = registry.tags(version)
    # The trainer signs "pass" before it moves the alias and writes the decision tag after it: an absent decision
    # is a promotion in progress; a recorded "fail" (a signed candidate refused after a crash) is never served.
    decision = tags.get(names.TAG_GATE_DECISION, "pass")
    statement = SignedStatement(registry.name, version, folder_digest(folder), decision)
    verify(statement, tags.get(names.TAG_SIGNATURE), Path(key))
