"""HTTP layer microbenchmark: /v1/completions through FastAPI, as it was served before, and through the
plain ASGI front that serves it now (serving.http.asgi_routes), side by side on one running server.

    .venv/bin/python bench/http_layer_bench.py [--requests 200] [--rounds 5]

No socket and no uvicorn: each app is called directly with an in-memory ASGI receive/send pair, on the
server's own event loop (uvloop, as `liverl serve` runs it), so the layer is not swamped by the network
stack. The server is real (the light "hf" engine on a tiny policy, recording off), and both apps run the
same guards and handlers against the same HttpContext; only what stands around them differs. The
FastAPI baseline is the route as it was declared before: four Depends (caller, json_body, authenticated,
context), FastJSONResponse / StreamingResponse with the lease released by a BackgroundTask, FastAPI's
exception handlers. Cases: a served completion (max_tokens 1), the same streamed, and a request refused
for its key (401: the layer and nothing else). Per round, N sequential requests per app (alternating
which goes first); the figures are the medians over rounds of microseconds per request, the difference
(what the layer saved per request) and the ratio of requests/s. Summary under "http_layer" (bench/report.py).
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KEY = "bench-key"
AUTH = [(b"authorization", f"Bearer {KEY}".encode())]
# What an agent framework sends: its key, liverl's session and role headers, a JSON body.
HEADERS = [(b"host", b"127.0.0.1"), (b"user-agent", b"OpenAI/Python 1.0"), (b"accept", b"application/json"),
           (b"content-type", b"application/json"), *AUTH, (b"x-liverl-session-id", b"s-bench"),
           (b"x-liverl-agent-role", b"orchestrator")]
CASES = {
    "completion": ("/v1/completions", HEADERS, b'{"model": "", "prompt": "fix the file", "max_tokens": 1}', 200),
    "stream": ("/v1/completions", HEADERS,
               b'{"model": "", "prompt": "fix the file", "max_tokens": 1, "stream": true}', 200),
    "refused_401": ("/v1/completions", HEADERS[:4], b'{"prompt": "fix"}', 401),
}


async def post(app, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """One POST through the ASGI app, as uvicorn would make it (the body in one message; receive then waits
    until the response is complete, and says http.disconnect). Returns the status."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [*headers, (b"content-length", b"%d" % len(body))],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    finished = asyncio.get_running_loop().create_future()
    status, unsent = 0, True

    async def receive():
        nonlocal unsent
        if unsent:
            unsent = False
            return {"type": "http.request", "body": body, "more_body": False}
        await finished
        return {"type": "http.disconnect"}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif not message.get("more_body", False) and not finished.done():
            finished.set_result(None)

    await app(scope, receive, send)
    return status


async def per_request_us(app, case: str, requests: int) -> float:
    path, headers, body, expected = CASES[case]
    started = time.perf_counter()
    for _ in range(requests):
        status = await post(app, path, headers, body)
        if status != expected:
            raise RuntimeError(f"{case}: status {status}, expected {expected}")
    return (time.perf_counter() - started) / requests * 1e6


def fastapi_baseline(ctx):
    """The completion routes as FastAPI served them before serving.http.asgi_routes, over today's guards and handlers."""
    from fastapi import Depends, Request
    from fastapi.responses import StreamingResponse
    from starlette.background import BackgroundTask

    from serving.http.api import build_fastapi_app
    from serving.http.completions import chat, complete
    from serving.http.dependencies import FastJSONResponse, authenticated, context, json_body
    from serving.http.guard import identify_caller

    async def caller(request: Request, principal=Depends(authenticated), ctx=Depends(context)):
        return identify_caller(ctx, principal, request.headers, request.path_params.get("session_id", ""))

    def route(handler):
        async def serve(who=Depends(caller), body=Depends(json_body), principal=Depends(authenticated),
                        ctx=Depends(context)):
            reply = await handler(ctx, principal, who, body)
            if reply.events is not None:
                return StreamingResponse(reply.events, media_type="text/event-stream", headers=reply.headers,
                                         background=BackgroundTask(reply.call.close))
            return FastJSONResponse(reply.payload, headers=reply.headers)
        return serve

    app = build_fastapi_app(ctx)
    for path, handler in (("/v1/completions", complete), ("/v1/chat/completions", chat)):
        app.add_api_route(path, route(handler), methods=["POST"])
        app.add_api_route("/s/{session_id}" + path, route(handler), methods=["POST"])
    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential requests per app, case and round")
    parser.add_argument("--rounds", type=int, default=5, help="figures are medians over rounds")
    args = parser.parse_args(argv)

    from bench.report import environment_line, record
    from bench.tiny_server import tiny_server
    from serving.http.api import build_http_app
    from serving.http.guard import HttpContext
    from serving.http.responses.state import ResponseStore

    with tiny_server(KEY, "http-layer-bench-") as tiny:
        server, c = tiny.server, tiny.server.config.serving
        ctx = HttpContext(server.completions, server.model_info, server.rollout, server.keys, server.limiter,
                          c.max_request_bytes, c.body_timeout_s, server.engine_failure)
        apps = {"fastapi": fastapi_baseline(ctx), "asgi": build_http_app(ctx, ResponseStore.from_config(c))}
        print(environment_line(), flush=True)
        figures = {"requests": args.requests, "rounds": args.rounds, "engine": "hf"}
        for case in CASES:
            figures[case] = _compare(apps, case, args, tiny.on_loop)
        record("http_layer", figures)


def _compare(apps: dict, case: str, args, on_server) -> dict:
    for app in apps.values():  # warm-up: first-call costs (imports, caches) are not the layer
        on_server(per_request_us(app, case, 20))
    times: dict[str, list[float]] = {name: [] for name in apps}
    for round_ in range(args.rounds):
        order = list(apps) if round_ % 2 == 0 else list(reversed(apps))
        for name in order:
            times[name].append(on_server(per_request_us(apps[name], case, args.requests)))
        print(f"{case:<12} round {round_ + 1} | " + " | ".join(f"{n} {times[n][-1]:8.1f} us/req" for n in apps),
              flush=True)
    old, new = statistics.median(times["fastapi"]), statistics.median(times["asgi"])
    print(f"{case:<12} median  | fastapi {old:8.1f} us/req | asgi {new:8.1f} us/req | saved {old - new:7.1f} "
          f"us/req | req/s x{old / new:.2f}", flush=True)
    return {"fastapi_us_per_request": round(old, 1), "asgi_us_per_request": round(new, 1),
            "saved_us_per_request": round(old - new, 1), "requests_per_s_ratio": round(old / new, 3),
            "rounds_us": {name: [round(t, 1) for t in ts] for name, ts in times.items()}}


if __name__ == "__main__":
    main()
