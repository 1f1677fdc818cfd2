"""gRPC: PolicyService (Generate, GenerateStream, ModelInfo), PolicyAdmin, health and reflection."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from liverl.contracts import names
from liverl.v1 import serving_pb2, serving_pb2_grpc
from serving.auth import Keys
from serving.generation import BadRequest, Caller, Completions, parse_role

POLICY_SERVICE = serving_pb2.DESCRIPTOR.services_by_name["PolicyService"].full_name
POLICY_ADMIN = serving_pb2.DESCRIPTOR.services_by_name["PolicyAdmin"].full_name
STREAMING_METHODS = {f"/{POLICY_SERVICE}/GenerateStream"}


class PolicyServicer(serving_pb2_grpc.PolicyServiceServicer):
    def __init__(self, completions: Completions, info):
        self.completions = completions
        self.info = info  # () -> serving_pb2.ModelInfoResponse

    async def Generate(self, request, context):
        call = await self._begin(request, context)
        await context.send_initial_metadata(((names.META_POLICY_VERSION, call.version),))
        await call.run()
        return serving_pb2.GenerateResponse(
            request_id=call.request_id, text=call.text, token_ids=call.token_ids, logprobs=call.logprobs,
            policy_version=call.version, finish_reason=call.finish_reason, prompt_token_ids=call.prompt_token_ids)

    async def GenerateStream(self, request, context):
        call = await self._begin(request, context)
        await context.send_initial_metadata(((names.META_POLICY_VERSION, call.version),))
        async for piece in call.stream():
            yield serving_pb2.GenerateChunk(
                request_id=call.request_id, text=piece.text, token_ids=piece.delta.token_ids,
                logprobs=piece.delta.logprobs, policy_version=call.version,
                finish_reason=piece.delta.finish_reason or "")

    async def ModelInfo(self, request, context):
        return self.info()

    async def _begin(self, request, context):
        metadata = dict(context.invocation_metadata() or ())
        caller = Caller(api="grpc", session_id=request.session_id or metadata.get(names.META_SESSION_ID, ""),
                        agent_id=request.agent_id or metadata.get(names.META_AGENT_ID, ""),
                        tenant_id=metadata.get(names.META_TENANT, ""), request_id=request.request_id)
        try:
            caller.agent_role = request.agent_role or parse_role(metadata.get(names.META_AGENT_ROLE, ""))
            s = request.sampling if request.HasField("sampling") else None
            sampling = self.completions.sampling(
                temperature=s.temperature if s else None, top_p=s.top_p if s else None,
                top_k=s.top_k if s else None, max_tokens=s.max_tokens if s else None, seed=s.seed if s else None,
                stop=list(s.stop) if s else None)
            return self.completions.begin(caller, request.prompt, list(request.prompt_token_ids), sampling)
        except BadRequest as error:
            self.completions.metrics.rejected.labels(error.reason).inc()
            if self.completions.recorder is not None:
                self.completions.recorder.dead_letter(error.reason, str(error), caller.tenant_id or
                                                      self.completions.default_tenant, caller.session_id,
                                                      request.SerializeToString())
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except RuntimeError as error:  # nothing loaded yet
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(error))


class AdminServicer(serving_pb2_grpc.PolicyAdminServicer):
    def __init__(self, swapper):
        self.swapper = swapper

    async def ForceSwap(self, request, context):
        version = request.version
        if not version:
            if self.swapper.registry is None:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                    "serving a fixed policy_dir: there is no registry alias to swap to")
            version = await _alias_version(self.swapper)
            if not version:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"alias {self.swapper.config.alias!r} is not set")
        elif self.swapper.registry is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "serving a fixed policy_dir: versions cannot be loaded from the registry")
        result = await self.swapper.swap_to(version, reason="force")
        return serving_pb2.SwapResponse(ok=result.ok, policy_version=result.version,
                                        previous_version=result.previous, message=result.message)

    async def Rollback(self, request, context):
        result = await self.swapper.rollback("admin", {"message": request.reason})
        return serving_pb2.SwapResponse(ok=result.ok, policy_version=result.version,
                                        previous_version=result.previous, message=result.message)


async def _alias_version(swapper) -> str | None:
    import asyncio

    return await asyncio.to_thread(swapper.registry.alias_version, swapper.config.alias)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """API keys on PolicyService, admin keys on PolicyAdmin; health and reflection stay open."""

    def __init__(self, keys: Keys, metrics):
        self.keys = keys
        self.metrics = metrics

    async def intercept_service(self, continuation, details):
        method = details.method
        authorization = dict(details.invocation_metadata or ()).get("authorization")
        if method.startswith(f"/{POLICY_ADMIN}/"):
            allowed = self.keys.allows_admin(authorization)
        elif method.startswith(f"/{POLICY_SERVICE}/"):
            allowed = self.keys.allows_use(authorization)
        else:
            allowed = True
        if allowed:
            return await continuation(details)
        self.metrics.rejected.labels("unauthenticated").inc()
        return _refusal(method in STREAMING_METHODS, method.startswith(f"/{POLICY_ADMIN}/"))


def _refusal(streaming: bool, admin: bool):
    message = ("admin operations need an admin API key: send 'authorization: Bearer KEY'" if admin else
               "missing or wrong API key: send 'authorization: Bearer KEY'")

    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def refuse_stream(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover (makes this an async generator)

    if streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_stream)
    return grpc.unary_unary_rpc_method_handler(refuse)


def build_grpc_server(host: str, port: int, completions: Completions, info, swapper, keys: Keys, metrics):
    """The aio server with every service added; returns (server, bound port, health servicer)."""
    server = grpc.aio.server(interceptors=[AuthInterceptor(keys, metrics)])
    serving_pb2_grpc.add_PolicyServiceServicer_to_server(PolicyServicer(completions, info), server)
    serving_pb2_grpc.add_PolicyAdminServicer_to_server(AdminServicer(swapper), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [POLICY_SERVICE, POLICY_ADMIN, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME], server)
    bound = server.add_insecure_port(f"{host}:{port}")
    return server, bound, health_servicer
