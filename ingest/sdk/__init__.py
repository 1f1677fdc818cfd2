"""The Python SDK an agent product uses to record its sessions (docs/architecture.md, contract 7)."""

from ingest.sdk.client import CaptureClient
from ingest.sdk.session import FeedbackKind, SessionRecorder

__all__ = ["CaptureClient", "FeedbackKind", "SessionRecorder"]
