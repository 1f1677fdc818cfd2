"""Serving benchmark: the same concurrent load through gRPC, through HTTP and straight into the engine,
side by side in one run, and gRPC with ModelCall recording on and off; then the same load before, during
and after a forced hot-swap, once in place and once on a second engine (the fallback), side by side.

    .venv/bin/python bench/serving_bench.py --engine vllm --concurrency 8 --requests 64 --max-tokens 16 --rounds 3
    .venv/bin/python bench/serving_bench.py --model .liverl/base-smollm2 ...   # the real model (after `make demo`)

Starts its own embedded stack (broker + MLflow) in a temporary folder, registers three tiny policy versions (or
`--model`'s folder three times), serves version 1, and prints, per round, requests/s, tokens/s and p50/p99 latency
per path with the ratio to direct engine calls of the same round, the CPU each process group spent per request and
the mean number of requests inside the engine; then the medians of the rounds' ratios, the CPU account (what each
path adds outside the engine, and the ratio that implies), the recording lag (completion finished -> record
acknowledged by Kafka) at p50/p99, and recording on against off once more, switched every second within one gRPC
load (--toggle-requests), where the machine's drift falls on both sides alike. Per swap mode: how long new requests
were held (the pause), failed requests during the swap (goal 0), the worst latency during the swap relative to the
steady p99 (goal <= 2x) and the peak memory (RSS of this process, which hosts the server, and its children, vLLM's
engine process) relative to steady (goal <= 1.1x).

Where the load comes from: direct calls run on the server's own event loop (they are engine calls, with
no client); the gRPC and HTTP clients run in a driver process of their own (this script, `--drive`), as a
product's clients do, so the server's overhead is measured and not the clients' competing for its GIL.
All processes still share this machine's CPUs (figures are relative, not absolute). "recording off"
switches the running server's recorder off between two runs (what serving.record=false does, without
loading a second engine). The figures go to the benchmark summary (bench/report.py) under "serving".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

WORDS = ["edit", "search", "ask", "fix", "file", "done"]
PROMPT = "fix the file then search"


@dataclass
class Run:
    name: str
    latencies: list[float] = field(default_factory=list)
    tokens: int = 0
    failures: int = 0
    wall_s: float = 0.0
    cpu_us: dict[str, float] = field(default_factory=dict)  # CPU per request, by process group (CpuMeter)
    in_engine: float = 0.0  # mean requests inside the engine over the run (EngineOccupancy)

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies) / self.wall_s

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "latencies": self.latencies, "tokens": self.tokens,
                           "failures": self.failures, "wall_s": self.wall_s, "cpu_us": self.cpu_us})

    @staticmethod
    def from_json(line: str) -> "Run":
        return Run(**json.loads(line))

    def figures(self) -> dict:
        lat = sorted(self.latencies) or [0.0]
        return {"requests_per_s": round(len(self.latencies) / self.wall_s, 2),
                "tokens_per_s": round(self.tokens / self.wall_s, 1), "p50_ms": round(statistics.median(lat) * 1000, 2),
                "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000, 2), "failed": self.failures,
                "cpu_us_per_request": {k: round(v, 1) for k, v in self.cpu_us.items()},
                "mean_in_engine": round(self.in_engine, 2)}

    def line(self, baseline: "Run | None") -> str:
        lat = sorted(self.latencies) or [0.0]
        p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        rps, tps = len(self.latencies) / self.wall_s, self.tokens / self.wall_s
        text = (f"{self.name:<10} req/s {rps:7.1f} | tok/s {tps:8.1f} | p50 {p50 * 1000:7.1f} ms | "
                f"p99 {p99 * 1000:7.1f} ms | failed {self.failures}")
        if self.in_engine:
            text += f" | in engine {self.in_engine:.2f}"
        if self.cpu_us:
            text += " | CPU/req " + " ".join(f"{k} {v:.0f} us" for k, v in self.cpu_us.items())
        if baseline is not None:
            b = sorted(baseline.latencies)
            text += (f" | vs direct: req/s x{rps / (len(b) / baseline.wall_s):.2f}, "
                     f"p50 x{p50 / statistics.median(b):.2f}, p99 x{p99 / b[min(len(b) - 1, int(0.99 * len(b)))]:.2f}")
        return text


async def _load(name: str, one_request, concurrency: int, total: int) -> Run:
    """total requests, at most `concurrency` at a time; one_request(i) -> completion token count."""
    run, next_index = Run(name), iter(range(total))

    async def worker():
        for i in next_index:
            started = time.perf_counter()
            try:
                tokens = await one_request(i)  # (not `run.tokens += await ...`: that reads before awaiting)
                run.tokens += tokens
                run.latencies.append(time.perf_counter() - started)
            except Exception:
                run.failures += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    run.wall_s = time.perf_counter() - started
    return run


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--model", type=Path, default=None,
                        help="serve this policy folder (e.g. the real demo's .liverl/base-smollm2; each swap registers "
                             "it again as a new version); default: tiny policies")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64, help="requests per path")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--swap-phase-s", type=float, default=20.0, help="steady load before the swap and after it")
    parser.add_argument("--swap-modes", default="in_place,two_engine", help="swaps to run under load, in order")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds; ratios are their medians")
    parser.add_argument("--toggle-requests", type=int, default=2048,
                        help="after the rounds: one gRPC load of this many requests with recording switched on and "
                             "off every --toggle-s (0: skip)")
    parser.add_argument("--toggle-s", type=float, default=1.0)
    parser.add_argument("--only", choices=["direct", "grpc", "http", "grpc-norec"],
                        help="run this one path for --rounds rounds and nothing else (for a profiler; no ratios)")
    parser.add_argument("--drive", nargs=3, metavar=("GRPC_TARGET", "HTTP_BASE", "MODEL"),
                        help=argparse.SUPPRESS)  # internal: run as the client driver process
    args = parser.parse_args(argv)
    if args.drive:
        return _driver(*args.drive)
    from bench.serving_stack import register, serving_stack
    from demo.policy.tiny_policy import build_policy

    def policy(tmp: Path, n: int) -> Path:
        return args.model or build_policy(tmp / f"v{n + 1}", WORDS, seed=n)

    with serving_stack("serving-bench-", args.engine, "bench-policy", "--serving.probation_s", "5") as (config, tmp):
        register(config, policy(tmp, 0), alias="champion")
        modes = [mode for mode in args.swap_modes.split(",") if mode]
        versions = [register(config, policy(tmp, n + 1)) for n in range(len(modes))]
        _bench(config, args, list(zip(modes, versions)))


def _bench(config, args, swaps: list[tuple[str, str]]) -> None:
    import uvloop

    from bench.report import environment, environment_line, record
    from serving.server import PolicyServer

    loop = uvloop.new_event_loop()  # the loop `liverl serve` runs the server on (serving.cli)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = PolicyServer(config, say=lambda line: print(line, flush=True))

    def on_server(coroutine, timeout_s=600):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout_s)

    on_server(server.start(), timeout_s=1800)  # vLLM's start takes minutes on a busy machine
    try:
        print(environment_line(), flush=True)
        before = environment()  # vLLM's own processes load the machine by the end: the summary gets this one
        figures = {"engine": args.engine, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                   "requests": args.requests, **_side_by_side(server, on_server, args)}
        if args.only:
            return
        for mode, version in swaps:
            server.rollout.config.swap_mode = mode
            figures[f"swap_{mode}"] = _swap_under_load(server, args, version, mode)
            time.sleep(server.rollout.config.probation_s + 1)  # the replaced version is freed before the next
        if swaps:
            _compare_swaps(figures, [mode for mode, _ in swaps])
        # another model's figures under a name of their own: the overhead table reads the tiny policy's "serving"
        record("serving" if args.model is None else f"serving-{args.model.name}", figures, measured_in=before)
    finally:
        on_server(server.stop(grace_s=10))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def _side_by_side(server, on_server, args) -> dict:
    slot = server.router.champion
    prompt_ids = list(slot.tokenizer(PROMPT)["input_ids"])
    occupancy = EngineOccupancy(slot.engine)
    slot.engine = occupancy  # every path's requests pass through it; put back before the swaps
    try:
        return _rounds(server, on_server, args, slot, prompt_ids, occupancy)
    finally:
        slot.engine = occupancy.engine


def _rounds(server, on_server, args, slot, prompt_ids, occupancy) -> dict:
    from serving.engines.engine import Sampling

    async def direct_run(requests: int) -> Run:  # on the server's loop, where the engine lives
        async def one(i):
            n = 0
            async for delta in occupancy.generate(prompt_ids, Sampling(max_tokens=args.max_tokens, seed=i + 1),
                                                    f"direct-{time.time_ns()}-{i}", final_only=True):
                n += len(delta.token_ids)
            return n
        return await _load("direct", one, args.concurrency, requests)

    def settled() -> None:
        """Each timed run starts with no recording work of the previous one left (fair to every path)."""
        if server.recorder is not None:
            server.recorder.flush(60)

    print(f"\nside by side: engine={args.engine} concurrency={args.concurrency} requests={args.requests} "
          f"max_tokens={args.max_tokens} rounds={args.rounds} (gRPC/HTTP clients in a driver process)", flush=True)
    rounds: list[dict[str, Run]] = []
    with Driver(server, args) as driver:
        meter = CpuMeter(driver.process.pid)
        paths = {"direct": lambda: on_server(direct_run(args.requests)),
                 "grpc": lambda: driver.run("grpc", "grpc", args.requests),
                 "http": lambda: driver.run("http", "http", args.requests),
                 "grpc-norec": lambda: _recording_off(server, lambda: driver.run("grpc", "grpc-norec", args.requests))}
        if args.only:  # a steady load on one path, to attach py-spy to (bench/README.md)
            return _only(paths[args.only], args)
        for warm_up in paths.values():  # engine, channel, connections, tokenizer, caches
            warm_up()
        settled()
        lags_from = len(server.recorder.lags_s) if server.recorder is not None else 0
        for number in range(1, args.rounds + 1):
            runs: dict[str, Run] = {}
            shift = (number - 1) % len(paths)
            order = list(paths)[shift:] + list(paths)[:shift]  # rotated: drift favours no path
            for name in order:
                settled()
                runs[name] = occupancy.measure(lambda: meter.measure(paths[name], args.requests))
            print(f"round {number} (order {', '.join(order)}):")
            print(runs["direct"].line(None))
            for name in ("grpc", "http", "grpc-norec"):
                print(runs[name].line(runs["direct"]))
            if runs["grpc-norec"].latencies:
                on_off = runs["grpc"].requests_per_s / runs["grpc-norec"].requests_per_s
                print(f"recording on/off (grpc): req/s x{on_off:.2f}", flush=True)
            rounds.append(runs)
        settled()
        lags = sorted(list(server.recorder.lags_s)[lags_from:]) if server.recorder is not None else []
        interleaved = _recording_interleaved(server, driver, occupancy, args) if args.toggle_requests else {}
    figures = _summarize(rounds, lags, server)
    if interleaved:
        figures["ratios"]["recording_on_vs_off_interleaved"] = interleaved["ratio"]
    return {**figures, "recording_interleaved": interleaved}


def _only(run, args) -> dict:
    run()  # warm-up
    print(f"only {args.only}: {args.rounds} rounds from now", flush=True)
    for number in range(1, args.rounds + 1):
        print(f"round {number}: " + run().line(None), flush=True)
    return {}


def _summarize(rounds: list[dict[str, "Run"]], lags: list[float], server) -> dict:
    def median_ratio(name: str, baseline: str) -> float:
        return statistics.median(r[name].requests_per_s / r[baseline].requests_per_s for r in rounds)

    ratios = {"grpc_vs_direct": median_ratio("grpc", "direct"), "http_vs_direct": median_ratio("http", "direct"),
              "recording_on_vs_off": median_ratio("grpc", "grpc-norec")}
    goals = {"grpc_vs_direct": 0.95, "http_vs_direct": 0.9, "recording_on_vs_off": 0.97}
    print(f"\nmedians of {len(rounds)} rounds (requests/s ratios):")
    for key, value in ratios.items():
        print(f"  {key:<20} x{value:.3f} (goal >= {goals[key]})")
    lag = {}
    if lags:
        lag = {"p50_ms": round(statistics.median(lags) * 1000, 1),
               "p99_ms": round(lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000, 1), "records": len(lags)}
        print(f"recording lag (completion -> Kafka ack): p50 {lag['p50_ms']:.1f} ms | p99 {lag['p99_ms']:.1f} ms "
              f"| {lag['records']} records")
    print(f"records: sent {server.metrics.value('liverl_serving_records_total', {'outcome': 'sent'}):.0f}, "
          f"spooled {server.metrics.value('liverl_serving_records_total', {'outcome': 'spooled'}):.0f}", flush=True)
    per_path = {name: statistics.median(r[name].requests_per_s for r in rounds) for name in rounds[0]}
    cpu = {name: {group: round(statistics.median(r[name].cpu_us[group] for r in rounds), 1)
                  for group in rounds[0][name].cpu_us} for name in rounds[0]}
    print("CPU per request, medians of the rounds (us): " + " | ".join(
        f"{name}: " + " ".join(f"{group} {value:.0f}" for group, value in groups.items())
        for name, groups in cpu.items()), flush=True)
    in_engine = {name: round(statistics.median(r[name].in_engine for r in rounds), 2) for name in rounds[0]}
    print("mean requests inside the engine, medians of the rounds: " + " | ".join(
        f"{name} {value:.2f}" for name, value in in_engine.items()), flush=True)
    account = _cpu_account(cpu, per_path, in_engine)
    return {"rounds": len(rounds), "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "median_requests_per_s": {k: round(v, 2) for k, v in per_path.items()},
            "median_in_engine": in_engine, "cpu_account": account,
            "median_cpu_us_per_request": cpu, "recording_lag": lag,
            "per_round": [{name: run.figures() for name, run in r.items()} for r in rounds]}


def _cpu_account(cpu: dict, per_path: dict, in_engine: dict) -> dict:
    """Per comparison: the CPU per request a path adds outside the engine (server, driver, stack) against its
    baseline, as a share of the machine's time per baseline request (cores / baseline req/s), and the ratio
    that share and the engine's occupancy imply. Every process shares the same cores, so this is where a
    path's time goes; the steadier figure beside the measured ratios, which the machine's drift moves."""
    def outside(name: str) -> float:
        return sum(value for group, value in cpu[name].items() if group != "engine")

    account = {}
    print("CPU account (medians; added outside the engine, share of the machine's time per baseline request):")
    for key, path, base in (("grpc_vs_direct", "grpc", "direct"), ("http_vs_direct", "http", "direct"),
                            ("recording_on_vs_off", "grpc", "grpc-norec")):
        machine_us = (os.cpu_count() or 1) * 1e6 / per_path[base]
        added = outside(path) - outside(base)
        occupancy = in_engine[path] / in_engine[base] if in_engine[base] else 1.0
        implied = occupancy / (1 + added / machine_us)
        account[key] = {"added_cpu_us": round(added, 1), "machine_us_per_request": round(machine_us, 1),
                        "occupancy_ratio": round(occupancy, 3), "implied_ratio": round(implied, 3)}
        print(f"  {key:<20} +{added:6.0f} us of {machine_us / 1000:5.1f} ms ({added / machine_us:6.1%}), requests in "
              f"the engine x{occupancy:.3f} -> implied x{implied:.3f}", flush=True)
    return account


def _recording_interleaved(server, driver, occupancy, args) -> dict:
    """Recording on against off within one steady gRPC load, switched every args.toggle_s: the machine's drift,
    which moves a round's ratio by tenths, lands on both sides alike. Requests count for the phase they left
    the engine in (where finish() decides whether to record); the first and last phases (load starting and
    ending) are left out."""
    recorder = server.completions.recorder
    if recorder is None:
        return {}
    outcome = {}  # the driver's Run, once the load is over (not settled() of the rounds: no flush here)
    load = threading.Thread(target=lambda: outcome.setdefault("run", driver.run("grpc", "toggle",
                                                                                args.toggle_requests)))
    phases: list[tuple[bool, float, int]] = []  # (recording, seconds, requests finished)
    on = True
    load.start()
    try:
        while load.is_alive():
            server.completions.recorder = recorder if on else None
            started, before = time.perf_counter(), occupancy.finished
            load.join(args.toggle_s)
            phases.append((on, time.perf_counter() - started, occupancy.finished - before))
            on = not on
    finally:
        server.completions.recorder = recorder
    steady = phases[1:-1]
    if min(sum(1 for state, _, _ in steady if state == side) for side in (True, False)) < 2:
        print(f"\nrecording on/off interleaved: {len(steady)} steady phases, too few for a ratio: raise "
              f"--toggle-requests (or lower --toggle-s)", flush=True)
        return {}

    def rate(recording: bool) -> float:  # requests/s over every steady phase of that kind
        return (sum(n for state, _, n in steady if state == recording)
                / sum(seconds for state, seconds, _ in steady if state == recording))

    on_rate, off_rate = rate(True), rate(False)
    ratio = on_rate / off_rate if off_rate else 0.0  # no request finished unrecorded: nothing to compare
    # each pair of neighbouring phases on its own: how far one second's ratio strays
    neighbours = (sorted(pair, key=lambda phase: not phase[0]) for pair in zip(steady[::2], steady[1::2]))
    pairs = sorted((on[2] / on[1]) / (off[2] / off[1]) for on, off in neighbours if off[2]) or [0.0]
    pair_median = statistics.median(pairs)
    print(f"\nrecording on/off interleaved (gRPC, {args.toggle_requests} requests, switched every {args.toggle_s:g} s, "
          f"{len(steady)} steady phases): on {on_rate:.1f} req/s, off {off_rate:.1f} req/s, ratio x{ratio:.3f} "
          f"(neighbouring phases: median x{pair_median:.3f}, {pairs[0]:.2f}-{pairs[-1]:.2f}) (goal >= 0.97)",
          flush=True)
    return {"ratio": round(ratio, 3), "on_requests_per_s": round(on_rate, 2), "off_requests_per_s": round(off_rate, 2),
            "phases": len(steady), "toggle_s": args.toggle_s, "pair_median": round(pair_median, 3),
            "failed": outcome["run"].failures if "run" in outcome else None}


def _recording_off(server, run):
    """run() while the running server records nothing (as with serving.record=false), then record again."""
    recorder, server.completions.recorder = server.completions.recorder, None
    try:
        return run()
    finally:
        server.completions.recorder = recorder


class Driver:
    """The gRPC and HTTP clients, in a process of their own (this script with --drive): one JSON order per
    line on its stdin, one Run per line on its stdout."""

    def __init__(self, server, args):
        self.args = args
        self.command = [sys.executable, str(Path(__file__).resolve()), "--drive", f"127.0.0.1:{server.grpc_port}",
                        f"http://127.0.0.1:{server.http_port}", server.config.mlflow.registered_model]

    def __enter__(self) -> "Driver":
        self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def run(self, api: str, name: str, requests: int) -> Run:
        order = {"api": api, "name": name, "requests": requests, "concurrency": self.args.concurrency,
                 "max_tokens": self.args.max_tokens}
        self.process.stdin.write(json.dumps(order) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(DRIVER_REPLY):
                return Run.from_json(line[len(DRIVER_REPLY):])
        raise RuntimeError(f"the driver process ended (exit code {self.process.wait()})")

    def __exit__(self, *exc):
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


DRIVER_REPLY = "RUN "


def _driver(grpc_target: str, http_base: str, model: str) -> None:
    """The driver process: runs each order read from stdin against the server, answers with the Run."""
    import aiohttp
    import grpc

    from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc

    async def drive() -> None:
        # aiohttp rather than httpx: on these shared cores the client's CPU comes out of the server's and the
        # engine's, and httpx costs more than twice aiohttp's CPU per request (docs/measurements.md).
        connector = aiohttp.TCPConnector(limit=256)
        async with grpc.aio.insecure_channel(grpc_target) as channel, \
                aiohttp.ClientSession(http_base, connector=connector,
                                      timeout=aiohttp.ClientTimeout(total=120)) as client:
            stub = serving_pb2_grpc.PolicyServiceStub(channel)
            while line := await asyncio.to_thread(sys.stdin.readline):
                order = json.loads(line)
                max_tokens = order["max_tokens"]

                async def grpc_one(i):
                    response = await stub.Generate(serving_pb2.GenerateRequest(
                        prompt=PROMPT, session_id=f"bench-{i}",
                        sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=i + 1)),
                        timeout=120)
                    return len(response.token_ids)

                async def http_one(i):
                    async with client.post("/v1/completions", json={
                            "model": model, "prompt": PROMPT, "max_tokens": max_tokens, "seed": i + 1,
                            "temperature": 1.0}, headers={"x-liverl-session-id": f"bench-{i}"}) as r:
                        r.raise_for_status()
                        return (await r.json())["usage"]["completion_tokens"]

                one = grpc_one if order["api"] == "grpc" else http_one
                run = await _load(order["name"], one, order["concurrency"], order["requests"])
                print(DRIVER_REPLY + run.to_json(), flush=True)

    import uvloop

    uvloop.run(drive())  # uvloop, as the server: the clients' CPU comes out of the same two cores


class CpuMeter:
    """CPU time (user + system) per request of each process group during one timed run: `server` (this
    process: the event loop, the recording thread, gRPC's and librdkafka's threads), `engine` (vLLM's engine
    processes), `driver` (the clients) and `stack` (broker, MLflow). On a machine with fewer cores than busy
    processes every group's CPU comes out of the same budget, so this says where a path's time goes even when
    requests/s moves with the load."""

    def __init__(self, driver_pid: int):
        import psutil

        me = psutil.Process()
        children = [child for child in me.children(recursive=True) if child.pid != driver_pid]
        engine = [child for child in children if _command(child).startswith("VLLM::")]
        self.groups = {"server": [me], "engine": engine, "driver": [psutil.Process(driver_pid)],
                       "stack": [child for child in children if child not in engine]}

    def _seconds(self) -> dict[str, float]:
        import psutil

        totals = {}
        for name, processes in self.groups.items():
            totals[name] = 0.0
            for process in processes:
                try:
                    times = process.cpu_times()
                    totals[name] += times.user + times.system
                except psutil.Error:
                    pass  # gone meanwhile
        return totals

    def measure(self, run, requests: int) -> "Run":
        before = self._seconds()
        result = run()
        after = self._seconds()
        result.cpu_us = {name: (after[name] - before[name]) * 1e6 / max(1, requests) for name in after}
        return result


class EngineOccupancy:
    """Stands in for the engine and keeps the time-weighted mean number of requests inside it. A path whose
    clients take longer to send the next request (a response crossing processes, a new request parsed) leaves
    the engine fewer requests to batch, so each engine step yields fewer tokens: this says how much of a path's
    shortfall is that, rather than CPU the path takes from the engine's cores."""

    def __init__(self, engine, clock=time.perf_counter):
        self.engine = engine
        self._clock = clock
        self._inside, self._area, self._since = 0, 0.0, clock()
        self.finished = 0  # requests that left the engine, ever

    def __getattr__(self, name):  # everything but generate is the engine's own
        return getattr(self.engine, name)

    def _tick(self, change: int) -> None:  # no lock: the loop ticks, and measure() only while the loop does not
        now = self._clock()
        self._area += self._inside * (now - self._since)
        self._inside, self._since = self._inside + change, now

    async def generate(self, *args, **kwargs):
        self._tick(+1)
        try:
            async for delta in self.engine.generate(*args, **kwargs):
                yield delta
        finally:
            self._tick(-1)
            self.finished += 1

    def measure(self, run) -> "Run":
        """run() -> Run, with its mean occupancy (read between runs, when no request is inside)."""
        self._tick(0)
        area, started = self._area, self._since
        result = run()
        self._tick(0)
        result.in_engine = (self._area - area) / max(1e-9, self._since - started)
        return result


def _command(process) -> str:
    try:
        return " ".join(process.cmdline()) or process.name()
    except Exception:
        return ""


class MemoryWatch:
    """Samples the RSS of this process (the server) and its children (vLLM's engine process) every 50 ms."""

    def __init__(self):
        self.samples: list[tuple[float, int]] = []  # (perf_counter, bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass  # gone meanwhile
            self.samples.append((time.perf_counter(), total))
            self._stop.wait(0.05)

    def peak(self, start: float, end: float) -> int:
        return max((rss for at, rss in self.samples if start <= at <= end), default=0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _swap_under_load(server, args, version: str, mode: str) -> dict:
    import grpc

    from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc

    target = f"127.0.0.1:{server.grpc_port}"
    samples: list[tuple[float, float, str]] = []  # (start, latency, version)
    failures = 0
    swap_window: list[float] = []

    async def drive():
        nonlocal failures
        async with grpc.aio.insecure_channel(target) as channel:
            stub = serving_pb2_grpc.PolicyServiceStub(channel)
            admin = serving_pb2_grpc.PolicyAdminStub(channel)
            stop = asyncio.Event()

            async def worker(w):
                nonlocal failures
                i = 0
                while not stop.is_set():
                    started = time.perf_counter()
                    try:
                        response = await stub.Generate(serving_pb2.GenerateRequest(
                            prompt=PROMPT, session_id=f"swap-{w}",
                            sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=args.max_tokens,
                                                               seed=i + 1)), timeout=300)
                        samples.append((started, time.perf_counter() - started, response.policy_version))
                    except grpc.aio.AioRpcError:
                        failures += 1
                    i += 1

            workers = [asyncio.create_task(worker(w)) for w in range(args.concurrency)]
            await asyncio.sleep(args.swap_phase_s)
            swap_window.append(time.perf_counter())
            result = await admin.ForceSwap(serving_pb2.SwapRequest(version=version), timeout=600)
            swap_window.append(time.perf_counter())
            await asyncio.sleep(args.swap_phase_s)
            stop.set()
            await asyncio.gather(*workers)
            return result

    print(f"\nswap under load ({mode}): concurrency={args.concurrency}, {args.swap_phase_s:.0f} s before and after",
          flush=True)
    pause_before = server.metrics.value("liverl_serving_swap_pause_seconds_sum")
    with MemoryWatch() as memory:
        began = time.perf_counter()
        result = asyncio.run(drive())
    start, end = swap_window
    pause_s = server.metrics.value("liverl_serving_swap_pause_seconds_sum") - pause_before
    before = [lat for s, lat, _ in samples if s + lat < start]
    during = [lat for s, lat, _ in samples if s + lat >= start and s <= end]
    after = [lat for s, lat, _ in samples if s > end]
    steady_p50 = statistics.median(before)
    steady_p99 = sorted(before)[min(len(before) - 1, int(0.99 * len(before)))]
    steady_rss, swap_rss = memory.peak(began, start), memory.peak(start, end + 1.0)
    print(f"swap: ok={result.ok} {result.previous_version} -> {result.policy_version} in {end - start:.2f} s "
          f"({result.message})")
    for name, lats in (("before", before), ("during", during), ("after", after)):
        if lats:
            print(f"{name:<7} requests {len(lats):5d} | p50 {statistics.median(lats) * 1000:7.1f} ms | "
                  f"max {max(lats) * 1000:8.1f} ms")
    print(f"failed requests: {failures} (goal 0)")
    print(f"new requests held: {pause_s * 1000:.1f} ms")
    worst = max(during) if during else 0.0
    if during:
        print(f"worst latency during the swap: {worst * 1000:.1f} ms = x{worst / steady_p50:.2f} the "
              f"steady p50, x{worst / steady_p99:.2f} the steady p99 (goal <= 2)")
    print(f"peak memory during the swap: {swap_rss / 2**20:.0f} MiB = x{swap_rss / steady_rss:.2f} the steady "
          f"{steady_rss / 2**20:.0f} MiB (goal <= 1.1)")
    versions_after = {v for s, _, v in samples if s > end}
    print(f"versions served after the swap: {sorted(versions_after)}", flush=True)
    return {"ok": result.ok, "swap_s": round(end - start, 3), "pause_ms": round(pause_s * 1000, 2),
            "failed": failures, "requests_during": len(during), "steady_p99_ms": round(steady_p99 * 1000, 2),
            "worst_during_ms": round(worst * 1000, 2), "worst_vs_steady_p99": round(worst / steady_p99, 3),
            "steady_rss_mib": round(steady_rss / 2**20, 1), "peak_rss_mib": round(swap_rss / 2**20, 1),
            "peak_vs_steady_rss": round(swap_rss / steady_rss, 3), "versions_after": sorted(versions_after)}


def _compare_swaps(figures: dict, modes: list[str]) -> None:
    """One line per swap mode, side by side: the hot-swap figures the README's Measured section holds."""
    print("\nswap modes side by side:")
    for mode in modes:
        f = figures[f"swap_{mode}"]
        print(f"{mode:<11} swap {f['swap_s']:7.2f} s | held {f['pause_ms']:8.1f} ms | failed {f['failed']} | "
              f"worst/steady p99 x{f['worst_vs_steady_p99']:.2f} | peak/steady RSS x{f['peak_vs_steady_rss']:.2f}",
              flush=True)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    main()
