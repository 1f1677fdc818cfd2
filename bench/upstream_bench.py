"""Upstream benchmark: the same streamed completions sent straight to a `vllm serve` server and through liverl
(serving.engine = "upstream", recording on) in front of that same server, side by side in one run; prints tokens/s
of each path and their ratio (goal >= 0.95x: liverl's text, routing and recording must cost the fleet next to
nothing), the median over the rounds with its 95% interval, which decides the goal (bench/median_interval.py).

    .venv/bin/python bench/upstream_bench.py                          # 3 rounds of 64 requests, 8 at a time
    .venv/bin/python bench/upstream_bench.py --requests 128 --concurrency 16 --max-tokens 32 --rounds 5
    .venv/bin/python bench/upstream_bench.py --shared                 # liverl and vLLM on the same cores
    .venv/bin/python bench/upstream_bench.py --model .liverl/base-smollm2 --rounds 9   # the real model

Starts its own embedded stack (broker + MLflow, for the ModelCalls), one vLLM server of a tiny Llama (or --model's
folder) with the flags of docs/upstream.md (tests/serving/vllm_serve.py), and liverl on a thread of this process.
The clients run in a driver process of their own (`--drive`), as a product's would, so the server's overhead is
measured and not the clients' competing for its GIL. Both paths get the same prompt token ids and seeds, so they
sample the same tokens; the paths alternate within each round, and the ratio is the median of the rounds' ratios.
"liverl CPU/request" is what this process (liverl's server and recorder) spent per request of the liverl path (and,
as "idle", per request of the direct path, when it serves nothing). A request that fails on either path is counted
and printed, and any failure means the goal is not met.

Two modes, the one that ran printed first:

    separated (the default on 2 cores or more): the vLLM server's process tree (its API server, its engine core) is
        pinned to one half of the cores, with OMP_NUM_THREADS sized to it; liverl's server, its recorder's stack
        (broker + MLflow) and the driver process to the other half, for both paths (the direct path's client runs
        on the cores liverl's path's client runs on). This models a deployment: the fleet on its own (GPU) hosts,
        liverl serve on its own CPU; the ratio is what liverl costs a client, not what it takes from vLLM.
    shared (--shared): every process on every core, vLLM with its own thread count (one per core). This models
        liverl serve on the fleet's own host: on a CPU vLLM every cycle liverl spends is taken from generation, so
        the ratio falls with liverl's CPU/request (and swings with whatever else the host runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPT_IDS = [2, 60, 61, 62, 63]
GOAL = 0.95  # liverl's tokens/s over direct calls to the same server


async def _load(url: str, headers: dict, model: str, requests: int, concurrency: int, max_tokens: int,
                liverl: bool) -> dict:
    """Streamed completions, `concurrency` at a time: tokens/s, p50 latency, failures."""
    import httpx
    import orjson

    latencies, tokens, failures, indexes = [], 0, 0, iter(range(requests))
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=300,
                                 limits=httpx.Limits(max_connections=concurrency)) as client:
        async def one(i: int) -> int:
            body = {"model": model, "prompt": PROMPT_IDS, "max_tokens": max_tokens, "temperature": 1.0,
                    "seed": 1000 + i, "stream": True}
            if not liverl:
                body |= {"logprobs": 0, "return_token_ids": True}  # what the upstream engine asks the server for
            count = 0
            async with client.stream("POST", "/v1/completions", json=body) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if line.startswith("data:") and line[5:].strip() != "[DONE]":
                        chunk = orjson.loads(line[5:])
                        count += len(chunk["liverl"]["token_ids"] if liverl else chunk["choices"][0]["token_ids"])
            return count

        async def worker():
            nonlocal tokens, failures
            for i in indexes:
                started = time.perf_counter()
                try:
                    tokens += await one(i)
                    latencies.append(time.perf_counter() - started)
                except Exception as error:  # counted, and said once per failure
                    failures += 1
                    print(f"  failed: {type(error).__name__}: {error}", file=sys.stderr)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall_s = time.perf_counter() - started
    return {"tokens_per_s": tokens / wall_s, "tokens": tokens, "p50_ms": statistics.median(latencies or [0]) * 1000,
            "failed": failures}


def _driver(spec: str) -> None:
    """One run of one path, as a client process; prints its figures as one JSON line."""
    s = json.loads(spec)
    figures = asyncio.run(_load(s["url"], s["headers"], s["model"], s["requests"], s["concurrency"],
                                s["max_tokens"], s["liverl"]))
    print(json.dumps(figures), flush=True)


def _drive(spec: dict) -> dict:
    """One run in a driver process; adds the CPU this process (liverl's server and recorder) spent per request."""
    cpu = _cpu_s()
    out = subprocess.run([sys.executable, __file__, "--drive", json.dumps(spec)], capture_output=True, text=True,
                         check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return figures | {"liverl_cpu_ms": (_cpu_s() - cpu) * 1000 / spec["requests"]}


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64, help="requests per path per round")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, default=None,
                        help="serve this HF folder (e.g. .liverl/base-smollm2, which `liverl train --init-from-package "
                             "smollm2` converts); default: a tiny Llama")
    parser.add_argument("--shared", action="store_true",
                        help="liverl, the clients and vLLM on every core (liverl on the fleet's host); default: "
                             "vLLM on half the cores, liverl and the clients on the other (liverl on its own host)")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # internal: run as the client driver process
    args = parser.parse_args(argv)
    if args.drive:
        return _driver(args.drive)
    cores = sorted(os.sched_getaffinity(0))
    split = None if args.shared or len(cores) < 2 else (cores[len(cores) // 2:], cores[:len(cores) // 2])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.serving_stack import running_server, serving_stack
    from demo.policy.tiny_policy import build_policy
    from liverl.config.serving import UpstreamServingConfig
    from tests.serving.lora_adapters import WORDS
    from tests.serving.vllm_serve import API_KEY, VllmServe

    with tempfile.TemporaryDirectory(prefix="upstream-bench-") as tmp:
        tmp = Path(tmp)
        base = args.model or build_policy(tmp / "base", WORDS, arch="llama", n_positions=128, seed=0)
        (tmp / "key").write_text(API_KEY)
        vllm = _start_vllm(VllmServe(base, tmp / "vllm.log"), split)
        try:
            with serving_stack("upstream-bench-stack-", "hf", "upstream-bench") as (config, _):
                vllm.wait_ready()
                s = config.serving
                s.upstream = UpstreamServingConfig(urls=[vllm.url], api_key_file=tmp / "key")
                s.engine, s.policy_dir, s.max_model_len = "upstream", base, 128
                s.rate_limit_per_s, s.rate_limit_burst = 1e6, 1_000_000
                with running_server(config, say=lambda *_: None) as server:
                    if split:
                        _pin(split, vllm.process.pid)
                    print(_mode_line(split, cores, vllm.process.pid), flush=True)
                    _rounds(args, vllm, API_KEY, f"http://127.0.0.1:{server.http_port}",
                            config.mlflow.registered_model)
        finally:
            vllm.stop()


def _start_vllm(vllm, split: tuple[list[int], list[int]] | None):
    """Start the server; separated, on its half of the cores (its processes inherit this thread's affinity, and
    OpenMP sizes its pool to OMP_NUM_THREADS, not to the machine), then take this thread to liverl's half, where
    the stack, liverl's server thread and the driver processes started from it run."""
    if split is None:
        return vllm.start(wait=False)
    omp = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(len(split[0]))  # VllmServe's environment is this one, plus its own
    os.sched_setaffinity(0, split[0])
    try:
        vllm.start(wait=False)
    finally:
        os.sched_setaffinity(0, split[1])
        if omp is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = omp
    return vllm


def _pin(split: tuple[list[int], list[int]], vllm_pid: int) -> None:
    """Every thread of the vLLM server's processes onto its half, every other thread of this process's tree (liverl's
    server, the stack) onto liverl's: an affinity is per thread, and threads started before the split keep theirs."""
    import psutil

    vllm = _tree(vllm_pid)
    vllm_pids = {p.pid for p in vllm}
    liverl = [p for p in _tree(os.getpid()) if p.pid not in vllm_pids]
    for processes, cores in ((vllm, split[0]), (liverl, split[1])):
        for process in processes:
            try:
                for thread in process.threads():
                    os.sched_setaffinity(thread.id, cores)
            except (psutil.NoSuchProcess, ProcessLookupError):  # gone meanwhile: nothing to pin
                pass


def _tree(pid: int) -> list:
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _mode_line(split: tuple[list[int], list[int]] | None, cores: list[int], vllm_pid: int) -> str:
    if split is None:
        return f"mode shared: vLLM, liverl and the clients all on cores {_cores(cores)} (liverl on the fleet's host)"
    vllm = _tree(vllm_pid)
    on = sorted({c for p in vllm for t in p.threads() for c in os.sched_getaffinity(t.id)})
    return (f"mode separated: vLLM ({len(vllm)} processes, OMP_NUM_THREADS={len(split[0])}) on cores {_cores(on)}, "
            f"liverl and the clients on cores {_cores(split[1])} (liverl on a host of its own; --shared: all on "
            f"{_cores(cores)})")


def _cores(cores) -> str:
    return ",".join(map(str, cores))


def _rounds(args, vllm, api_key: str, liverl_url: str, liverl_model: str) -> None:
    from bench.median_interval import median_interval  # main() put the repository on the path

    common = {"requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens}
    direct = {**common, "url": vllm.url, "headers": {"Authorization": f"Bearer {api_key}"},
              "model": vllm.models()[0], "liverl": False}
    through = {**common, "url": liverl_url, "headers": {}, "model": liverl_model, "liverl": True}
    print(f"{os.cpu_count()} cores | load {os.getloadavg()[0]:.2f} | {args.requests} requests x {args.max_tokens} "
          f"tokens, {args.concurrency} at a time, streamed", flush=True)
    for warm_up in (direct, through):  # connections, caches and the recorder's first write out of the rounds
        _drive({**warm_up, "requests": args.concurrency})
    ratios, failed = [], [0, 0]
    for round_ in range(1, args.rounds + 1):
        runs = [_drive(direct), _drive(through)] if round_ % 2 else list(reversed([_drive(through), _drive(direct)]))
        ratio = runs[1]["tokens_per_s"] / runs[0]["tokens_per_s"]
        ratios.append(ratio)
        failed[0] += runs[0]["failed"]
        failed[1] += runs[1]["failed"]
        print(f"round {round_} | direct tok/s {runs[0]['tokens_per_s']:8.1f} p50 {runs[0]['p50_ms']:7.1f} ms | "
              f"liverl tok/s {runs[1]['tokens_per_s']:8.1f} p50 {runs[1]['p50_ms']:7.1f} ms | "
              f"ratio x{ratio:.3f} | liverl CPU/request {runs[1]['liverl_cpu_ms']:.1f} ms "
              f"(idle {runs[0]['liverl_cpu_ms']:.1f}) | failed {runs[0]['failed']}/{runs[1]['failed']} | "
              f"tokens {runs[0]['tokens']}/{runs[1]['tokens']} | load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"ratio liverl/direct tokens/s over {len(ratios)} rounds: {median_interval(ratios).line(GOAL)}", flush=True)
    sent = args.requests * len(ratios)
    if any(failed):  # a failed request is a goal missed, whatever the ratio of those that were answered
        print(f"FAILED requests: direct {failed[0]} of {sent}, through liverl {failed[1]} of {sent}: the goal is "
              "not met while any request fails", flush=True)


if __name__ == "__main__":
    main()
