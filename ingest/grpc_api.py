"""The CaptureService over gRPC. The request arrives as raw bytes: parsed whole when nothing in it is
malformed, otherwise split per event (ingest.wire), so one malformed event is rejected on its own
instead of failing its whole batch.
"""

from __future__ import annotations

import grpc

from ingest.admission import RateLimited
from ingest.auth import AuthError, TokenAuth
from ingest.capture import CaptureCore
from ingest.routing import REPLICA_TOKEN_META, PeerForwarder
from ingest.validation import parse_binary
from ingest.wire import MalformedRequest, parsed_events, split_events
from liverl.contracts import names
from liverl.contracts.refused_request import RefusedRequest
from liverl.io.spool import SpoolFull
from liverl.v1 import capture_pb2

SERVICE_NAME = "liverl.v1.CaptureService"
RETRY_AFTER_KEY = "retry-after-s"  # trailing metadata of a rate-limited call
AUTH_STATUS = {"unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
               "permission_denied": grpc.StatusCode.PERMISSION_DENIED}


class CaptureHandler:
    def __init__(self, core: CaptureCore, auth: TokenAuth, max_batch_events: int,
                 peers: PeerForwarder | None = None):
        self.core = core
        self.auth = auth
        self.max_batch_events = max_batch_events
        self.peers = peers

    def capture(self, request: bytes, context: grpc.ServicerContext) -> capture_pb2.CaptureResponse:
        metadata = dict(context.invocation_metadata())
        try:
            tenant = self.auth.tenant_of(metadata.get("authorization"), metadata.get(names.META_TENANT))
        except AuthError as error:
            self.core.refuse_caller(error.status, error.message, api="grpc", tenant=_token_tenant(self.auth, metadata))
            context.abort(AUTH_STATUS[error.status], error.message)
        events, parse = parsed_events(request), _parsed
        if events is None:  # something in it is malformed: each event on its own
            try:
                events, parse = split_events(request), parse_binary
            except MalformedRequest as error:
                self._reject(context, "invalid_protobuf", f"the CaptureRequest is malformed: {error}", tenant,
                             request)
        if len(events) > self.max_batch_events:
            self._reject(context, "too_many_events", f"{len(events)} events in one request; send at most "
                                                     f"{self.max_batch_events} (ingest.max_batch_events)", tenant,
                         request)
        # Forwarded by another replica: charged to the rate limit there, and owned here.
        forwarded = self.peers is not None and self.peers.is_peer(metadata.get(REPLICA_TOKEN_META))
        try:
            if not forwarded:
                self.core.rate_limiter.take(tenant, len(events))
        except RateLimited as error:
            self.core.refuse_caller("rate_limited", str(error), api="grpc", tenant=tenant)
            # the SDK reads this to tell "slow down" from "the message is too big" (same status code)
            context.set_trailing_metadata(((RETRY_AFTER_KEY, f"{error.retry_after_s:.3f}"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        try:
            return self.core.capture(tenant, events, parse, api="grpc", time_left_s=context.time_remaining(),
                                     forwarded=forwarded)
        except SpoolFull as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"not stored, retry later: {error}")

    def _reject(self, context, reason: str, message: str, tenant: str, raw: bytes) -> None:
        try:  # a summary, never the request: its bytes may hold anything
            summary = RefusedRequest.of("grpc", reason, len(raw)).encode()
            self.core.reject_request(reason, message, tenant, summary, api="grpc")
        except SpoolFull:
            pass  # the caller learns of the rejection either way
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{reason}: {message}")

    def generic_handler(self) -> grpc.GenericRpcHandler:
        method = grpc.unary_unary_rpc_method_handler(
            self.capture, request_deserializer=None,  # raw bytes: split and parse per event
            response_serializer=capture_pb2.CaptureResponse.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE_NAME, {"Capture": method})


def _parsed(event):
    """The parse step of events that parsed with their whole request."""
    return event


def _token_tenant(auth: TokenAuth, metadata: dict) -> str:
    """The token's own tenant, for counting a cross-tenant attempt ("" when the token is no tenant's)."""
    try:
        return auth.tenant_of(metadata.get("authorization"))
    except AuthError:
        return ""
