"""A gRPC proxy in front of the capture service that writes down every event the service acknowledged.

The SDK counts acknowledgements (`stats()["sent"]`) but does not say WHICH events were acknowledged, and
the chaos test must reconcile event by event. The proxy forwards each CaptureService/Capture call
unchanged (raw bytes both ways, the caller's token and liverl headers, the service's status and trailing
metadata on failure), and for each answer records the events of the request that the service did not
reject: exactly what the client was told is stored. A call that fails (the service was killed) records
nothing, so the SDK's resend is what gets recorded, once it is acknowledged.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from liverl.v1 import capture_pb2

SERVICE = "liverl.v1.CaptureService"
METHOD = "Capture"
FORWARDED_HEADERS = ("authorization", "x-liverl-")  # the tenant's token and liverl's own headers
# Reconnect quickly once a killed service is back (gRPC's default backoff grows to minutes).
UPSTREAM_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


@dataclass(frozen=True)
class AckedEvent:
    """One event the capture service acknowledged to a client."""

    event_id: str
    tenant_id: str  # the tenant of the caller's token (the service stamps it; SDK events carry none)
    session_id: str
    kind: str  # the SessionEvent body: "tool_call", "user_message", "feedback", ...
    agent_id: str
    feedback_kind: int  # liverl.v1.FeedbackKind for feedback events, 0 otherwise

    @property
    def session_key(self) -> tuple[str, str]:
        return self.tenant_id, self.session_id


class AckProxy:
    """Listens on 127.0.0.1:<port>; point the SDK at `target` instead of the capture service."""

    def __init__(self, upstream: str, tenant_of_token: dict[str, str], timeout_s: float = 10.0):
        self._tenant_of_token = tenant_of_token
        self._timeout_s = timeout_s
        self._channel = grpc.insecure_channel(upstream, options=UPSTREAM_OPTIONS)
        self._capture = self._channel.unary_unary(f"/{SERVICE}/{METHOD}")  # raw bytes in and out
        self._lock = threading.Lock()
        self.acked: dict[str, AckedEvent] = {}
        self.times_acked: Counter[str] = Counter()  # > 1: a resend of an event already stored (at-least-once)
        self.failed_calls: Counter[str] = Counter()  # status code name -> calls the service failed
        self.mismatches: list[str] = []  # answers whose `accepted` disagrees with the events not rejected
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(self._forward)})
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="ack-proxy"),
                                   handlers=(handler,))
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "AckProxy":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()
        self._channel.close()

    def events_of(self, kind: str) -> list[AckedEvent]:
        with self._lock:
            return [event for event in self.acked.values() if event.kind == kind]

    def _forward(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = [(key, value) for key, value in context.invocation_metadata()
                    if key.startswith(FORWARDED_HEADERS)]
        remaining = context.time_remaining()
        timeout = self._timeout_s if remaining is None else max(0.1, min(remaining, self._timeout_s))
        try:
            reply = self._capture(request, metadata=metadata, timeout=timeout)
        except grpc.RpcError as error:
            with self._lock:
                self.failed_calls[error.code().name] += 1
            context.set_trailing_metadata(error.trailing_metadata() or ())
            context.abort(error.code(), error.details() or "")
        tenant = self._tenant_of_token.get(dict(metadata).get("authorization", "").removeprefix("Bearer "), "")
        self._record(request, reply, tenant)
        return reply

    def _record(self, request: bytes, reply: bytes, tenant_id: str) -> None:
        events = capture_pb2.CaptureRequest.FromString(request).events
        answer = capture_pb2.CaptureResponse.FromString(reply)
        refused = {rejection.index for rejection in answer.rejected}
        stored = [event for index, event in enumerate(events) if index not in refused]
        with self._lock:
            if len(stored) != answer.accepted + answer.dropped_opt_out:
                self.mismatches.append(f"{len(events)} events, {len(refused)} rejected, but accepted="
                                       f"{answer.accepted} dropped_opt_out={answer.dropped_opt_out}")
            for event in stored:
                self.times_acked[event.event_id] += 1
                self.acked.setdefault(event.event_id, AckedEvent(
                    event.event_id, tenant_id, event.session_id, event.WhichOneof("body") or "",
                    event.agent_id or "main",
                    event.feedback.kind if event.WhichOneof("body") == "feedback" else 0))
