"""API layer floor: what one gRPC Generate and one HTTP /v1/completions cost the server's CPU,
liverl's API against the bare framework it runs on, with an engine that answers at once (or after
--answer-ms, as a real engine does).

    .venv/bin/python bench/api_layer_bench.py [--calls 4000] [--rounds 3] [--concurrency 8]
    .venv/bin/python bench/api_layer_bench.py --calls 600 --answer-ms 120   # at the serving bench's request rate

The serving benchmark (bench/serving_bench.py) compares whole paths against direct engine calls, and on a
shared 2-core machine every microsecond the API layer or its client spends comes out of the engine's
cores. This one isolates the layer: four servers on one uvloop loop in this process, each called by a
client in a process of its own (this script, --client), one at a time:

| server | what answers |
|---|---|
| `grpc-bare` | a grpc.aio server whose Generate returns a GenerateResponse of 16 tokens, ids in trailing metadata |
| `grpc-liverl` | liverl's PolicyService (auth interceptor, guards, Completions, metrics), recording off |
| `http-bare` | uvicorn + httptools with a raw ASGI app that returns a completion-sized JSON body |
| `http-liverl` | liverl's HTTP API (the ASGI completion routes, guards, handlers), recording off |

Both liverl servers are the real PolicyServer on a tiny policy whose engine is replaced by one that yields the
16-token completion at once, so what is left is API work. With --answer-ms every server (the bare ones too)
answers that long after the request arrived: at a real engine's rate a call's fixed costs (wake-ups, poller
hand-offs) are no longer shared with the calls of the same loop iteration, so the CPU per call is higher than
at thousands of calls per second, and it is this figure that a real engine's requests pay. Per run: calls/s,
the server process's CPU per call (all its threads: the loop, gRPC's poller) and the client's. Figures are
medians over rounds; the difference liverl - bare is what liverl's own code adds on top of the framework's
floor. Summary under "api_layer" (with --answer-ms: "api_layer_answer_<ms>ms"; bench/report.py).
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson  # light; imported once here rather than per request in the bare baseline

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KEY = "bench-key"
PROMPT = "fix the file then search"
TOKENS = 16


ANSWER_S = 0.0  # how long every server takes to answer (--answer-ms): the engine's latency, without its CPU


async def engine_latency() -> None:
    if ANSWER_S:
        await asyncio.sleep(ANSWER_S)


class InstantEngine:
    """An engine whose completion is ready at once (or after ANSWER_S): the API layer is all there is to measure."""

    name = "instant"

    async def generate(self, prompt_token_ids, sampling, request_id, final_only=False):
        from serving.engines.engine import Delta

        await engine_latency()
        yield Delta(list(range(5, 5 + TOKENS)), [-0.5] * TOKENS, "length")

    def failure(self) -> None:
        return None

    async def shutdown(self) -> None:
        pass


async def start_bare_grpc():
    """Created and started on the loop that serves it (grpc.aio binds a server to its loop)."""
    import grpc

    from liverl.v1 import serving_pb2, serving_pb2_grpc

    class Bare(serving_pb2_grpc.PolicyServiceServicer):
        async def Generate(self, request, context):
            await engine_latency()
            context.set_trailing_metadata((("x-liverl-policy-version", "1"), ("x-liverl-session-id", request.session_id)))
            return serving_pb2.GenerateResponse(request_id="req-0", text="edit fix file", token_ids=range(5, 21),
                                                logprobs=[-0.5] * TOKENS, policy_version="1", finish_reason="length",
                                                session_id=request.session_id)

    server = grpc.aio.server()
    serving_pb2_grpc.add_PolicyServiceServicer_to_server(Bare(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def bare_http_app(scope, receive, send):
    """A completion-shaped JSON reply to any request, read in full first."""
    while (await receive()).get("more_body"):
        pass
    await engine_latency()
    body = orjson.dumps({"id": "cmpl-0", "object": "text_completion", "created": int(time.time()), "model": "m",
                         "choices": [{"index": 0, "text": "edit fix file", "finish_reason": "length",
                                      "logprobs": None}],
                         "usage": {"prompt_tokens": 5, "completion_tokens": TOKENS, "total_tokens": 5 + TOKENS},
                         "liverl": {"token_ids": list(range(5, 21)), "logprobs": [-0.5] * TOKENS}})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


async def start_bare_http():
    import socket

    import uvicorn

    from serving.server import _uvicorn_without_signals

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _uvicorn_without_signals(uvicorn.Config(bare_http_app, log_level="warning", lifespan="off",
                                                     access_log=False, http="httptools", ws="none",
                                                     proxy_headers=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    return server, task, sock.getsockname()[1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="calls per server and round")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians over rounds")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--answer-ms", type=float, default=0.0,
                        help="every server answers this long after a call arrives (an engine's latency, no CPU)")
    parser.add_argument("--only", choices=["grpc-bare", "grpc-liverl", "http-bare", "http-liverl"],
                        help="call this one server and no other (to attach a profiler: bench/README.md)")
    parser.add_argument("--client", nargs=4, metavar=("API", "TARGET", "CALLS", "CONCURRENCY"),
                        help=argparse.SUPPRESS)  # internal: run as the client process
    args = parser.parse_args(argv)
    if args.client:
        api, target, calls, concurrency = args.client
        return _client(api, target, int(calls), int(concurrency))
    global ANSWER_S
    ANSWER_S = args.answer_ms / 1000

    import psutil

    from bench.report import environment_line, record
    from bench.tiny_server import tiny_server

    with tiny_server(KEY, "api-layer-bench-") as tiny:
        server, on_loop = tiny.server, tiny.on_loop
        server.router.champion.engine = InstantEngine()
        grpc_bare, grpc_bare_port = on_loop(start_bare_grpc())
        http_bare, http_bare_task, http_bare_port = on_loop(start_bare_http())
        targets = {"grpc-bare": ("grpc", f"127.0.0.1:{grpc_bare_port}"),
                   "grpc-liverl": ("grpc", f"127.0.0.1:{server.grpc_port}"),
                   "http-bare": ("http", f"http://127.0.0.1:{http_bare_port}"),
                   "http-liverl": ("http", f"http://127.0.0.1:{server.http_port}")}
        if args.only:
            targets = {args.only: targets[args.only]}
        try:
            print(environment_line(), flush=True)
            runs = {name: [] for name in targets}
            me = psutil.Process()
            for number in range(1, args.rounds + 1):
                order = list(targets) if number % 2 else list(reversed(targets))
                for name in order:
                    runs[name].append(_measure(me, *targets[name], args.calls, args.concurrency))
                print(f"round {number}: " + " | ".join(
                    f"{name} {runs[name][-1]['calls_per_s']:.0f}/s server {runs[name][-1]['server_cpu_us']:.0f} us "
                    f"client {runs[name][-1]['client_cpu_us']:.0f} us" for name in targets), flush=True)
            if not args.only:  # the README's floor is the instant engine's; a slow engine's is kept beside it
                name = f"api_layer_answer_{args.answer_ms:g}ms" if args.answer_ms else "api_layer"
                record(name, _summarize(runs, args))
        finally:
            http_bare.should_exit = True
            on_loop(asyncio.wait_for(asyncio.shield(http_bare_task), 10))
            on_loop(grpc_bare.stop(1))


def _measure(me, api: str, target: str, calls: int, concurrency: int) -> dict:
    """One client run against target: calls/s, and CPU per call of this (server) process and of the client."""
    client = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--client", api, target, str(calls),
                               str(concurrency)], stdout=subprocess.PIPE, text=True)
    if client.stdout.readline().strip() != "warm":
        raise RuntimeError(f"the {api} client did not start (exit code {client.wait()})")
    before = me.cpu_times()
    result = json.loads(client.stdout.readline())
    after = me.cpu_times()
    client.wait(30)
    server_s = after.user + after.system - before.user - before.system
    return {"calls_per_s": calls / result["wall_s"], "server_cpu_us": server_s / calls * 1e6,
            "client_cpu_us": result["cpu_s"] / calls * 1e6, "failures": result["failures"]}


def _summarize(runs: dict[str, list[dict]], args) -> dict:
    medians = {name: {key: round(statistics.median(run[key] for run in rs), 1)
                      for key in ("calls_per_s", "server_cpu_us", "client_cpu_us")} for name, rs in runs.items()}
    print(f"\nmedians of {args.rounds} rounds ({args.calls} calls each, concurrency {args.concurrency}, "
          f"answer after {args.answer_ms:g} ms):")
    for api in ("grpc", "http"):
        bare, ours = medians[f"{api}-bare"], medians[f"{api}-liverl"]
        print(f"  {api}: server CPU per call bare {bare['server_cpu_us']:.0f} us, liverl {ours['server_cpu_us']:.0f} us "
              f"(liverl's own code +{ours['server_cpu_us'] - bare['server_cpu_us']:.0f} us); client "
              f"{ours['client_cpu_us']:.0f} us; calls/s liverl/bare x{ours['calls_per_s'] / bare['calls_per_s']:.2f}",
              flush=True)
    failures = sum(run["failures"] for rs in runs.values() for run in rs)
    if failures:
        print(f"  {failures} calls failed", flush=True)
    return {"calls": args.calls, "rounds": args.rounds, "concurrency": args.concurrency,
            "answer_ms": args.answer_ms, "medians": medians,
            "failures": failures}


def _client(api: str, target: str, calls: int, concurrency: int) -> None:
    """The client process: warms up, says "warm", runs `calls` calls, prints wall and CPU time as JSON."""
    import uvloop

    uvloop.run(_drive(api, target, calls, concurrency))


async def _drive(api: str, target: str, calls: int, concurrency: int) -> None:
    import resource

    import aiohttp
    import grpc

    from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc

    auth = (("authorization", f"Bearer {KEY}"),)
    async with grpc.aio.insecure_channel(target if api == "grpc" else "127.0.0.1:1") as channel, \
            aiohttp.ClientSession(target if api == "http" else None,
                                  connector=aiohttp.TCPConnector(limit=256)) as session:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)

        async def grpc_call(i):
            await stub.Generate(serving_pb2.GenerateRequest(
                prompt=PROMPT, session_id=f"bench-{i}",
                sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=TOKENS, seed=i + 1)),
                metadata=auth, timeout=60)

        async def http_call(i):
            async with session.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": TOKENS, "seed": i + 1,
                                                              "temperature": 1.0},
                                    headers={"authorization": f"Bearer {KEY}",
                                             "x-liverl-session-id": f"bench-{i}"}) as reply:
                reply.raise_for_status()
                await reply.read()

        call = grpc_call if api == "grpc" else http_call
        for i in range(200):  # channels, connections, caches
            await call(i)
        print("warm", flush=True)
        failures, pending = 0, iter(range(calls))

        async def worker():
            nonlocal failures
            for i in pending:
                try:
                    await call(i)
                except Exception:
                    failures += 1

        usage = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "failures": failures}), flush=True)


if __name__ == "__main__":
    main()
