"""CaptureClient: what an agent product holds to record its sessions (see ingest/README.md).

    client = CaptureClient(target="127.0.0.1:50051", token="demo-token", spool_dir=Path("spool"))
    s = client.start_session(task_family="coding", task_id="t1", user_id="u1")
    s.user_message("fix the bug"); call = s.tool_call("edit", '{"file": "a.py"}'); s.end("completed")
    client.feedback(s.session_id, FeedbackKind.EDIT_KEPT, value=1.0, target_call_id=call)  # any time later
    client.flush(timeout_s=10.0); client.stats(); client.close()

Replies of serving link directly (ingest/sdk/completions.py): `s.tool_call(..., request_id=reply)`;
`client.link_completion(reply)` is the session a reply was recorded in (opened here if this client does
not hold it); `client.feedback(reply, ...)` makes even a call sent without any liverl header trainable.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping
from pathlib import Path

import grpc

from ingest.sdk.completions import completion_ref, fixed_event_id, one_call_session
from ingest.sdk.ids import random_id
from ingest.sdk.sender import BackgroundSender
from ingest.sdk.session import FeedbackKind, SessionRecorder, fill_feedback, new_event, role_value
from liverl.config.redaction import RedactionConfig

# Late events of a session this client no longer holds get a sequence past any in-session one, so
# ordering a session by sequence still puts them after its end.
LATE_SEQUENCE_BASE = 1 << 62


class CaptureClient:
    def __init__(self, target: str, token: str, spool_dir: Path | None = None, *, max_queue_events: int = 10_000,
                 batch_size: int = 256, request_timeout_s: float = 10.0, max_spool_bytes: int = 256 << 20,
                 tls: bool = False, root_certificates: bytes | None = None, max_attempts: int = 6,
                 redaction: RedactionConfig | None = None):
        """target: the capture service's gRPC address. spool_dir: where events wait while it is
        unreachable (None: in memory only, bounded by max_queue_events). tls/root_certificates: TLS.
        max_attempts: tries of a batch the service fails on before it is dead-lettered locally
        (<spool_dir>/dead-letters.capture); an unreachable service is waited on without limit.
        redaction: what events written to spool_dir are redacted with, before they touch the disk (pass the
        service's ingest.redaction for its custom patterns; default: the default settings). Ids are spooled as
        given: the service pseudonymises those that hold personal data with the tenant's key."""
        credentials = grpc.ssl_channel_credentials(root_certificates) if tls or root_certificates else None
        self._sender = BackgroundSender(target, token, Path(spool_dir) if spool_dir else None, max_queue_events,
                                        batch_size, request_timeout_s=request_timeout_s,
                                        max_spool_bytes=max_spool_bytes, credentials=credentials,
                                        max_attempts=max_attempts, redaction=redaction)
        self._sessions: weakref.WeakValueDictionary[str, SessionRecorder] = weakref.WeakValueDictionary()

    def start_session(self, task_family: str = "", task_id: str = "", user_id: str = "", token_budget: int = 0,
                      attributes: Mapping[str, str] | None = None, role: str = "single",
                      session_id: str | None = None) -> SessionRecorder:
        """Open a session (records session_start); role "orchestrator" for a PARL main agent."""
        session = SessionRecorder(self._sender.submit, session_id or random_id(), user_id, "main", role)
        session._start(task_family, task_id, token_budget, attributes or {})
        self._sessions[session.session_id] = session
        return session

    def link_completion(self, reply: object, task_family: str = "", task_id: str = "", user_id: str = "",
                        attributes: Mapping[str, str] | None = None) -> SessionRecorder:
        """The session serving recorded `reply` in (an `openai` reply, its JSON body, or its id), to record
        what happened around it. A session this client does not hold is opened here (session_start, with an
        event id fixed by the session id, so opening it again anywhere stores it once); end it as usual."""
        ref = completion_ref(reply)
        session = self._sessions.get(ref.session_id)
        if session is None:
            session = SessionRecorder(self._sender.submit, ref.session_id, user_id, "main", "single")
            session._start(task_family, task_id, 0, attributes or {}, event_id=fixed_event_id(ref.session_id, "start"),
                           time_ms=ref.created_ms)
            self._sessions[ref.session_id] = session
        return session

    def feedback(self, session_id: str | object, kind: FeedbackKind | int, value: float = 1.0,
                 target_call_id: str = "", comment: str = "", user_id: str = "") -> None:
        """Feedback that may arrive long after the session ended (an edit kept an hour later).
        session_id: a session id, or a reply of serving (its session is used). Feedback on a call that named
        no session (a one-call session, whose id is the reply's `id`) records the session's start and end
        too, so the pipelines can train on it."""
        if not isinstance(session_id, str):
            ref = completion_ref(session_id)
            session_id = ref.session_id
        else:
            ref = completion_ref(session_id) if one_call_session(session_id) else None
        session = self._sessions.get(session_id)
        if session is not None:
            session.feedback(kind, value, target_call_id, comment)
            return
        if ref is not None and ref.one_call:
            session = self.link_completion(ref, user_id=user_id)
            session.feedback(kind, value, target_call_id, comment)
            session._end("completed", event_id=fixed_event_id(session_id, "end"))
            return
        event = new_event(session_id, user_id, "main", role_value("single"),
                          LATE_SEQUENCE_BASE + int(time.time() * 1000))
        fill_feedback(event, kind, value, target_call_id, comment)
        self._sender.submit(event)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every recorded event is acknowledged by the service; False if time ran out."""
        return self._sender.flush(timeout_s)

    def stats(self) -> dict:
        """Counters: recorded, sent, rejected (+ by reason), dropped, dropped_opt_out, spooled, queued,
        retries, dead_lettered (given up on after max_attempts), last_error, ..."""
        return self._sender.stats()

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush for up to timeout_s; what is still unsent stays in spool_dir for the next client."""
        self._sender.close(timeout_s)

    def __enter__(self) -> "CaptureClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
