"""Responses API benchmark: the same concurrent load through POST /v1/responses, through /v1/chat/completions and
straight into the engine, side by side in one run; the ratio of each HTTP path's tokens/s to direct engine calls
(goal for Responses: >= 0.95x, as chat).

    .venv/bin/python bench/responses_bench.py --engine hf --concurrency 8 --requests 64 --max-tokens 16 --rounds 3

Starts its own embedded stack (broker + MLflow) in a temporary folder, serves a tiny policy (or --model's folder)
with recording on, and prints per round each path's requests/s, tokens/s, p50/p99 latency and ratio to the direct
calls of the same round (the order of the paths rotates each round), then the medians of the rounds' ratios.
As in bench/serving_bench.py, direct calls run on the server's own event loop and the HTTP clients (aiohttp) in a
driver process of their own, so the server's overhead is measured rather than its clients' competing for its GIL.
The figures go to the benchmark summary (bench/report.py) under "responses".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.median_interval import median_interval  # noqa: E402
from bench.serving_bench import PROMPT, WORDS, Run, _load  # noqa: E402  (the same load and figures)

DRIVER_REPLY = "RUN "
PATHS = ("direct", "responses", "chat")
GOAL = 0.95  # tokens/s of each HTTP path over direct engine calls


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "hf"], default="hf")
    parser.add_argument("--model", type=Path, default=None, help="serve this policy folder; default: a tiny policy")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64, help="requests per path per round")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds; ratios are their medians")
    parser.add_argument("--drive", nargs=2, metavar=("HTTP_BASE", "MODEL"), help=argparse.SUPPRESS)  # internal
    args = parser.parse_args(argv)
    if args.drive:
        return _driver(*args.drive)
    from bench.serving_stack import register, running_server, serving_stack
    from demo.policy.tiny_policy import build_policy

    with serving_stack("responses-bench-", args.engine, "bench-policy") as (config, tmp):
        register(config, args.model or build_policy(tmp / "v1", WORDS), alias="champion")
        with running_server(config, say=lambda line: None) as server:
            _bench(server, args)


def _bench(server, args) -> None:
    from bench.report import environment, environment_line, record
    from liverl.contracts.chat import render_chat
    from serving.engines import tokens
    from serving.engines.engine import Sampling

    slot = server.router.champion
    # The prompt both HTTP paths give the engine (one user message, rendered and encoded as serving does), so the
    # three paths prefill the same tokens and a real chat model ends its replies alike on each.
    prompt_ids = tokens.encode(slot.tokenizer, render_chat(slot.tokenizer, [{"role": "user", "content": PROMPT}], None))
    server_loop = server._http_task.get_loop()  # running_server's loop, where the engine lives

    async def direct_run(requests: int) -> Run:
        async def one(i):
            n = 0
            async for delta in slot.engine.generate(prompt_ids, Sampling(max_tokens=args.max_tokens, seed=i + 1),
                                                    f"direct-{time.time_ns()}-{i}", final_only=True):
                n += len(delta.token_ids)
            return n
        return await _load("direct", one, args.concurrency, requests)

    def on_server(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, server_loop).result(600)

    print(environment_line(), flush=True)
    before = environment()
    command = [sys.executable, str(Path(__file__).resolve()), "--drive", f"http://127.0.0.1:{server.http_port}",
               server.config.mlflow.registered_model]
    driver = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def drive(api: str) -> Run:
        order = {"api": api, "requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens}
        driver.stdin.write(json.dumps(order) + "\n")
        driver.stdin.flush()
        for line in driver.stdout:
            if line.startswith(DRIVER_REPLY):
                return Run.from_json(line[len(DRIVER_REPLY):])
        raise RuntimeError(f"the driver process ended (exit code {driver.wait()})")

    def settled() -> None:
        if server.recorder is not None:
            server.recorder.flush(60)

    paths = {"direct": lambda: on_server(direct_run(args.requests)), "responses": lambda: drive("responses"),
             "chat": lambda: drive("chat")}
    print(f"\nside by side: engine={args.engine} concurrency={args.concurrency} requests={args.requests} "
          f"max_tokens={args.max_tokens} rounds={args.rounds} (HTTP clients in a driver process)", flush=True)
    rounds: list[dict[str, Run]] = []
    try:
        for warm_up in paths.values():
            warm_up()
        for number in range(1, args.rounds + 1):
            shift = (number - 1) % len(PATHS)
            order = list(PATHS[shift:] + PATHS[:shift])  # rotated: drift favours no path
            runs = {}
            for name in order:
                settled()
                runs[name] = paths[name]()
                runs[name].name = name
            print(f"round {number} (order {', '.join(order)}):")
            print(runs["direct"].line(None))
            for name in ("responses", "chat"):
                ratio = (runs[name].tokens / runs[name].wall_s) / (runs["direct"].tokens / runs["direct"].wall_s)
                print(runs[name].line(runs["direct"]) + f" | tok/s x{ratio:.3f}", flush=True)
            rounds.append(runs)
    finally:
        driver.stdin.close()
        driver.wait(30)

    def interval(name: str):
        return median_interval([(r[name].tokens / r[name].wall_s) / (r["direct"].tokens / r["direct"].wall_s)
                                for r in rounds])

    responses, chat = interval("responses"), interval("chat")
    ratios = {"responses_vs_direct": round(responses.median, 3), "chat_vs_direct": round(chat.median, 3)}
    failed = {name: sum(r[name].failures for r in rounds) for name in PATHS}
    print(f"\n{args.rounds} rounds, tokens/s ratio to direct engine calls | responses: {responses.line(GOAL)} | "
          f"chat: {chat.line(GOAL)} | failed {failed}", flush=True)
    record("responses", {"engine": args.engine, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                         "requests": args.requests, "ratios": ratios, "failed": failed,
                         "rounds": [{name: run.figures() for name, run in r.items()} for r in rounds]},
           measured_in=before)


def _driver(http_base: str, model: str) -> None:
    """The driver process: runs each order read from stdin against the server, answers with the Run."""
    import aiohttp
    import uvloop

    async def drive() -> None:
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(http_base, connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=120)) as client:
            while line := await asyncio.to_thread(sys.stdin.readline):
                order = json.loads(line)
                max_tokens = order["max_tokens"]

                async def responses_one(i):
                    async with client.post("/v1/responses", json={
                            "model": model, "input": PROMPT, "max_output_tokens": max_tokens, "seed": i + 1,
                            "temperature": 1.0}, headers={"x-liverl-session-id": f"bench-{i}"}) as r:
                        r.raise_for_status()
                        return (await r.json())["usage"]["output_tokens"]

                async def chat_one(i):
                    async with client.post("/v1/chat/completions", json={
                            "model": model, "messages": [{"role": "user", "content": PROMPT}],
                            "max_tokens": max_tokens, "seed": i + 1, "temperature": 1.0},
                            headers={"x-liverl-session-id": f"bench-{i}"}) as r:
                        r.raise_for_status()
                        return (await r.json())["usage"]["completion_tokens"]

                one = responses_one if order["api"] == "responses" else chat_one
                run = await _load(order["api"], one, order["concurrency"], order["requests"])
                print(DRIVER_REPLY + run.to_json(), flush=True)

    uvloop.run(drive())


if __name__ == "__main__":
    main()
