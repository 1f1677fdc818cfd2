"""Protection of the users' data at rest: per-subject payload encryption, and where erasure is recorded."""

from pathlib import Path

from pydantic import Field

from liverl.config.section import Section


class PrivacyConfig(Section):
    encrypt_payloads: bool = True
    """Seal every Kafka record value that belongs to a session (events, model calls, dead letters) with its
    session's own key (AES-256-GCM) before it reaches Kafka or a spool; the pipelines and `liverl topics` open
    them with the key store. `liverl forget` deletes the key, which makes every copy unreadable. Off: values
    are written as plain protobuf or JSON (sealed ones already written still open)."""
    keys_dir: Path | None = None
    """The embedded key store: one 0600 file per subject key, the per-tenant pseudonym key, the tombstones of
    forgotten subjects. Every stage on the machine must see the same folder; default: <data_dir>/keys/subjects."""
    audit_log: Path | None = None
    """Where `liverl forget` appends one JSON line per erasure (who, when, what, counts; no personal data);
    default: <data_dir>/audit/erasures.jsonl."""
    key_cache_size: int = Field(65_536, ge=16, le=10_000_000)
    """Subject keys each process keeps in memory (least recently used go first)."""
