"""The Python SDK an agent product uses to record its sessions (contract 6 in the team brief)."""

from ingest.sdk.client import CaptureClient
from ingest.sdk.session import FeedbackKind, SessionRecorder

__all__ = ["CaptureClient", "FeedbackKind", "SessionRecorder"]
