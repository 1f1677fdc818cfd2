"""gRPC: PolicyService (Generate, GenerateStream, ModelInfo), PolicyAdmin, health and reflection.

The same contract as the HTTP API: the key is checked and rate-limited by an interceptor before the
request message is read (UNAUTHENTICATED, RESOURCE_EXHAUSTED), messages past serving.max_request_bytes
are refused by gRPC itself (RESOURCE_EXHAUSTED), the tenant is the key's (PERMISSION_DENIED for
another), and every value outside its range is INVALID_ARGUMENT. Proto3 cannot tell an unset number
from 0, so in SamplingParams 0 means "the default" for top_p, max_tokens and seed, -1 or 0 disables
top_k, and temperature 0 is greedy.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from liverl.contracts import names
from liverl.contracts.refused_request import RefusedRequest
from liverl.v1 import serving_pb2, serving_pb2_grpc
from serving.auth import Forbidden, Keys, Principal
from serving.generation import (
    ROLES,
    BadRequest,
    Call,
    Caller,
    Completions,
    DeadlineExceeded,
    check_id,
    parse_role,
    role_name,
)
from serving.metrics import ServingMetrics
from serving.rate_limit import RateLimiter
from serving.recording.session_ids import REQUEST_ID_HEADER, header_value
from serving.swap.result import AdminRefused, SwapResult
from serving.swap.rollout import Rollout

POLICY_SERVICE = serving_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name
POLICY_ADMIN = serving_pb2.DESCRIPTOR.services_by_name["PolicyAdmin"].full_name
STREAMING_METHODS = {f"/{POLICY_SERVICE}/GenerateStream"}


class PolicyServicer(serving_pb2_grpc.PolicyServiceServicer):
    def __init__(self, completions: Completions, info: Callable[[], serving_pb2.ModelInfoResponse], keys: Keys):
        self.completions = completions
        self.info = info
        self.keys = keys

    async def Generate(self, request, context):
        call = await self._begin(request, context)
        # Trailing, not initial, metadata: grpc.aio sends initial metadata set apart from the response as a
        # write of its own (a batch, a syscall and a loop wake-up per call); trailing metadata goes with it.
        context.set_trailing_metadata(_id_metadata(call))
        try:
            await call.run()
        except DeadlineExceeded as error:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(error))
        return serving_pb2.GenerateResponse(
            request_id=call.request_id, text=call.text, token_ids=call.token_ids, logprobs=call.logprobs,
            policy_version=call.version, finish_reason=call.finish_reason, prompt_token_ids=call.prompt_token_ids,
            session_id=call.session_id)

    async def GenerateStream(self, request, context):
        call = await self._begin(request, context)
        await context.send_initial_metadata(_id_metadata(call))
        try:
            async for piece in call.stream():
                yield serving_pb2.GenerateChunk(
                    request_id=call.request_id, text=piece.text, token_ids=piece.delta.token_ids,
                    logprobs=piece.delta.logprobs, policy_version=call.version,
                    finish_reason=piece.delta.finish_reason or "")
        except DeadlineExceeded as error:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(error))

    async def ModelInfo(self, request, context):
        return self.info()

    async def _begin(self, request: serving_pb2.GenerateRequest, context) -> Call:
        metadata = dict(context.invocation_metadata() or ())
        principal = self.keys.principal(metadata.get("authorization"))  # the interceptor let it in
        try:
            caller = self._caller(request, metadata, principal)
            sampling = self._sampling(request)
            return await self.completions.begin(caller, request.prompt, request.prompt_token_ids, sampling)
        except Forbidden as error:
            self.completions.metrics.rejected.labels(error.reason).inc()
            if error.reason == "cross-tenant":
                self.completions.metrics.cross_tenant.labels(principal.tenant or "").inc()
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(error))
        except BadRequest as error:
            self.completions.metrics.rejected.labels(error.reason).inc()
            self._dead_letter(principal, request, error)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except RuntimeError as error:  # nothing loaded yet
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{error}: retry shortly")

    def _caller(self, request: serving_pb2.GenerateRequest, metadata: dict, principal: Principal) -> Caller:
        claimed = parse_role(metadata.get(names.META_AGENT_ROLE, ""))  # checked even when the request's wins
        role = role_name(request.agent_role or claimed)
        return Caller(api="grpc",
                      session_id=check_id(request.session_id or metadata.get(names.META_SESSION_ID, ""), "session_id"),
                      agent_id=check_id(request.agent_id or metadata.get(names.META_AGENT_ID, ""), "agent_id"),
                      agent_role=ROLES[principal.check_role(role)],
                      tenant_id=principal.tenant_for(metadata.get(names.META_TENANT), self.completions.default_tenant),
                      request_id=check_id(request.request_id, "request_id"),
                      user_id=check_id(metadata.get(names.META_USER_ID, ""), names.META_USER_ID))

    def _sampling(self, request: serving_pb2.GenerateRequest):
        if not request.HasField("sampling"):
            return self.completions.sampling()
        s = request.sampling
        return self.completions.sampling(temperature=s.temperature, top_p=s.top_p or None, top_k=s.top_k,
                                         max_tokens=s.max_tokens or None, seed=s.seed, stop=list(s.stop))

    def _dead_letter(self, principal: Principal, request: serving_pb2.GenerateRequest, error: BadRequest) -> None:
        completions = self.completions
        if completions.recorder is None:
            return
        tenant = principal.tenant or completions.default_tenant
        redactor = completions.redactor(tenant)
        message = redactor.redact_text(str(error)) if redactor is not None else str(error)
        fields = [field.name for field, _ in request.ListFields()]
        payload = RefusedRequest.of("grpc", error.reason, request.ByteSize(), fields=fields, known_fields=fields,
                                    error_params=[error.param] if error.param else ()).encode()
        completions.recorder.dead_letter(error.reason, message, tenant, "", payload)


def _id_metadata(call: Call) -> tuple[tuple[str, str], ...]:
    """What the response's metadata says (Generate's trailing, GenerateStream's initial): the version, and the
    session (the request's own id when none was named: a one-call session) and request ids a SessionEvent
    links to."""
    return ((names.META_POLICY_VERSION, call.version), (names.META_SESSION_ID, header_value(call.session_id)),
            (REQUEST_ID_HEADER, header_value(call.request_id)))


class AdminServicer(serving_pb2_grpc.PolicyAdminServicer):
    """ForceSwap and Rollback: the rollout's admin operations, answered as /admin/swap and /admin/rollback answer."""

    def __init__(self, rollout: Rollout):
        self.rollout = rollout

    async def ForceSwap(self, request, context):
        return await _admin_answer(self.rollout.force_swap(request.version, request.tenant), context)

    async def Rollback(self, request, context):
        return await _admin_answer(self.rollout.admin_rollback(request.reason, request.tenant), context)


async def _admin_answer(operation, context) -> serving_pb2.SwapResponse:
    """The admin operation's result; a refusal aborts the call with the code HTTP's status stands for."""
    try:
        return _swap_response(await operation)
    except AdminRefused as refused:
        await context.abort(ADMIN_REFUSALS[refused.kind], str(refused))


ADMIN_REFUSALS = {"failed-precondition": grpc.StatusCode.FAILED_PRECONDITION, "not-found": grpc.StatusCode.NOT_FOUND}


def _swap_response(result: SwapResult) -> serving_pb2.SwapResponse:
    return serving_pb2.SwapResponse(ok=result.ok, policy_version=result.version, previous_version=result.previous,
                                    message=result.message)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """API keys and rate limits on PolicyService, admin keys on PolicyAdmin; health and reflection stay open.
    Runs before the request message is read."""

    def __init__(self, keys: Keys, limiter: RateLimiter, metrics: ServingMetrics):
        self.keys = keys
        self.limiter = limiter
        self.metrics = metrics

    async def intercept_service(self, continuation, details):
        method = details.method
        authorization = dict(details.invocation_metadata or ()).get("authorization")
        is_admin = method.startswith(f"/{POLICY_ADMIN}/")
        if is_admin:
            principal = self.keys.admin(authorization)
        elif method.startswith(f"/{POLICY_SERVICE}/"):
            principal = self.keys.principal(authorization)
        else:
            return await continuation(details)
        if principal is None:
            self.metrics.rejected.labels("unauthenticated").inc()
            message = ("admin operations need an admin API key: send 'authorization: Bearer KEY'" if is_admin else
                       "missing or wrong API key: send 'authorization: Bearer KEY'")
            return _refusal(method in STREAMING_METHODS, grpc.StatusCode.UNAUTHENTICATED, message)
        wait_s = self.limiter.retry_after(principal.key_id)
        if wait_s:
            self.metrics.rejected.labels("rate-limited").inc()
            return _refusal(method in STREAMING_METHODS, grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"this API key is over its rate limit: retry in {wait_s:.1f} s")
        return await continuation(details)


def _refusal(streaming: bool, code: grpc.StatusCode, message: str):
    async def refuse(request, context):
        await context.abort(code, message)

    async def refuse_stream(request, context):
        await context.abort(code, message)
        yield  # pragma: no cover (makes this an async generator)

    if streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_stream)
    return grpc.unary_unary_rpc_method_handler(refuse)


def _add_service(name: str, servicer, server, metrics: ServingMetrics) -> None:
    """Register servicer's methods like the generated add_*_to_server, but a message that does not
    parse is refused as INVALID_ARGUMENT (counted) instead of failing inside gRPC as UNKNOWN."""
    handlers = {}
    for method in serving_pb2.DESCRIPTOR.services_by_name[name].methods:
        request_type = getattr(serving_pb2, method.input_type.name)
        response_type = getattr(serving_pb2, method.output_type.name)
        implementation = _refusing_undecodable(getattr(servicer, method.name), method.server_streaming, metrics)
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(implementation, request_deserializer=_tolerant(request_type),
                                     response_serializer=response_type.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        serving_pb2.DESCRIPTOR.services_by_name[name].full_name, handlers),))


def _tolerant(message_type):
    def parse(raw: bytes):
        try:
            return message_type.FromString(raw)
        except DecodeError:
            return None  # refused by _refusing_undecodable

    return parse


def _refusing_undecodable(implementation, streaming: bool, metrics: ServingMetrics):
    async def refuse(context) -> None:
        metrics.rejected.labels("undecodable").inc()
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request message does not parse: send a "
                            "serialized message of the method's request type")

    async def unary(request, context):
        if request is None:
            await refuse(context)
        return await implementation(request, context)

    async def stream(request, context):
        if request is None:
            await refuse(context)
        async for item in implementation(request, context):
            yield item

    return stream if streaming else unary


def build_grpc_server(host: str, port: int, completions: Completions,
                      info: Callable[[], serving_pb2.ModelInfoResponse], rollout: Rollout, keys: Keys,
                      limiter: RateLimiter, max_message_bytes: int, tls: tuple[bytes, bytes] | None = None):
    """The aio server with every service added; returns (server, bound port, health servicer).
    tls: (private key, certificate chain) PEM bytes: the port speaks TLS only."""
    server = grpc.aio.server(interceptors=[AuthInterceptor(keys, limiter, completions.metrics)],
                             options=[("grpc.max_receive_message_length", max_message_bytes)])
    _add_service("PolicyService", PolicyServicer(completions, info, keys), server, completions.metrics)
    _add_service("PolicyAdmin", AdminServicer(rollout), server, completions.metrics)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [POLICY_SERVICE, POLICY_ADMIN, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME], server)
    if tls is None:
        bound = server.add_insecure_port(f"{host}:{port}")
    else:
        bound = server.add_secure_port(f"{host}:{port}", grpc.ssl_server_credentials([tls]))
    return server, bound, health_servicer
