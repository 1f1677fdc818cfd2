"""Tenant adapter swap benchmark: one tenant's adapter rolled to a new version under steady load from several
tenants on one vLLM engine; the swapped tenant's requests and the other tenants' measured apart, each against its
own steady latency just before the swap.

    .venv/bin/python bench/tenant_swap_bench.py --tenants 4 --concurrency 8 --max-tokens 8 --phase-s 15 --rounds 3

Starts its own embedded stack (broker + MLflow) in a temporary folder and registers the tiny Llama base (version 1,
the shared champion) and a rank-8 adapter of it per tenant, under the tenant's alias champion-<tenant>, plus one
more adapter version of the first tenant per round (bench/tenant_serving_bench.py builds them), each with the weight
probe the trainer's export leaves. Serving runs as in production (PolicyServer on vLLM with serving.lora and
serving.tenants.watch: it follows the tenants' aliases); room for one adapter more than there are tenants, so the
swap evicts nobody. `--concurrency` streaming gRPC clients spread round-robin over the tenants (x-liverl-tenant)
keep it busy. Each round: `--phase-s` of steady load, then the first tenant's alias moves to its next version (what
the trainer's gate does on a pass) and serving's watcher rolls it (fetch, add_lora, smoke and weight probe, switch:
serving/swap/rollout.py, TenantGroup), then `--settle-s` more for the old adapter's retirement. The swap window runs from the
alias move to the end of that settle time.

Per round, for the swapped tenant and for the other tenants apart: requests overlapping the window, those held
(first token later than twice the group's steady p99 and 50 ms past it, as bench/adapter_swap_bench.py counts
them) and their largest extra wait (first token minus the steady median), failed requests (goal 0), and the
slowest first token in the window as a ratio of the steady p99. Then the medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

PROMPT_IDS = [2, 64, 65, 66]


@dataclass
class Sample:
    tenant: str
    started: float
    first_token_s: float
    ended: float
    version: str


@dataclass
class Swap:
    """One round's roll of the swapped tenant, on the bench's clock (time.perf_counter)."""

    version: str
    steady_from: float  # the steady phase before it starts here
    moved: float = 0.0  # the alias names the new version
    started: float = float("nan")  # serving said tenant-swap-start
    switched: float = float("nan")  # serving said tenant-swap: the tenant's route is the new adapter
    window_end: float = 0.0


@dataclass
class Load:
    samples: list[Sample] = field(default_factory=list)
    failures: list[tuple[str, float, str]] = field(default_factory=list)  # (tenant, when, gRPC status)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--tenants", type=int, default=4, help="tenants with an adapter of their own")
    parser.add_argument("--concurrency", type=int, default=8, help="streams in flight, round-robin over tenants")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="swaps of the first tenant's adapter")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="load before the first steady phase (untimed)")
    parser.add_argument("--phase-s", type=float, default=15.0, help="steady load before each swap")
    parser.add_argument("--settle-s", type=float, default=2.0, help="the window's length after the switch")
    parser.add_argument("--watch-interval-s", type=float, default=0.5, help="serving.watch_interval_s")
    args = parser.parse_args(argv)
    if args.concurrency < args.tenants:
        parser.error("--concurrency must be at least --tenants: every tenant needs a stream")

    from bench.report import environment, environment_line, record
    from bench.serving_stack import register, running_server, serving_stack
    from bench.tenant_serving_bench import RANK, policies
    from liverl.contracts import names

    tenants = [f"t{i}" for i in range(args.tenants)]
    resident = args.tenants + 1  # every tenant's adapter and the swapped tenant's next one
    measured_in = environment()
    with serving_stack("tenant-swap-bench-", args.engine, "tenant-swap-bench", "--serving.probation_s", "1",
                       "--serving.max_model_len", "128", "--serving.record", "false",
                       "--serving.min_swap_interval_s", "0", "--serving.watch_interval_s", str(args.watch_interval_s),
                       "--serving.lora.enabled", "true", "--serving.lora.max_lora_rank", str(RANK),
                       "--serving.lora.max_loras", str(resident), "--serving.lora.max_cpu_loras", str(resident + 3),
                       "--serving.tenants.watch", json.dumps(tenants),
                       "--serving.tenants.max_resident_adapters", str(resident)) as (config, tmp):
        base_dir, adapter_dirs = policies(tmp, args.tenants + args.rounds)
        _write_probes(base_dir, adapter_dirs)
        base = register(config, base_dir, alias=names.ALIAS_CHAMPION)
        adapter = {names.TAG_WEIGHTS_KIND: names.WEIGHTS_ADAPTER, names.TAG_BASE_VERSION: base}
        first = {t: register(config, folder, adapter, alias=names.tenant_champion_alias(t))
                 for t, folder in zip(tenants, adapter_dirs)}
        following = [register(config, folder, adapter) for folder in adapter_dirs[args.tenants:]]
        lines: list[tuple[float, str]] = []  # serving's lines, stamped on arrival (said on the server's thread)

        def said(line: str) -> None:
            lines.append((time.perf_counter(), line))
            print(line, flush=True)

        with running_server(config, say=said) as server:
            load, swaps = asyncio.run(_bench(config, f"127.0.0.1:{server.grpc_port}", lines, tenants, first,
                                             following, args))
    rounds = [_round(load, swap, tenants[0]) for swap in swaps]

    print(environment_line())
    print(f"tiny Llama (2 layers, width 64), rank-{RANK} adapters, {args.engine}, {args.tenants} tenants, "
          f"{args.concurrency} streams x {args.max_tokens} tokens, {args.rounds} swaps of {tenants[0]}'s adapter, "
          f"steady {args.phase_s:.0f} s before each; first-token latencies")
    for index, (swap, figures) in enumerate(zip(swaps, rounds), 1):
        print(f"round {index} | {tenants[0]} -> v{swap.version}: alias moved -> swap started "
              f"{swap.started - swap.moved:.2f} s -> switched {swap.switched - swap.moved:.2f} s -> first served "
              f"{figures['swapped']['first_served_s']:.2f} s | window {swap.window_end - swap.moved:.2f} s")
        for group in ("swapped", "others"):
            print(f"  {_group_line(group, figures[group])}")
    medians = {group: {key: statistics.median(r[group][key] for r in rounds) for key in rounds[0][group]}
               for group in ("swapped", "others")}
    totals = {group: {key: sum(r[group][key] for r in rounds) for key in ("across", "held", "failed")}
              for group in ("swapped", "others")}
    failed_in_all = len(load.failures)
    print(" | ".join(
        [f"ratio worst / steady p99 (medians of {len(rounds)} rounds): swapped tenant "
         f"{medians['swapped']['worst_over_p99']:.2f}x, other tenants {medians['others']['worst_over_p99']:.2f}x"]
        + [f"{group}: held {totals[group]['held']} of {totals[group]['across']}, max extra wait "
           f"{max(r[group]['max_extra_wait_ms'] for r in rounds):.0f} ms, failed {totals[group]['failed']}"
           for group in ("swapped", "others")]
        + [f"failed in all {failed_in_all} of {len(load.samples) + failed_in_all}"]))
    record("tenant_swap", {"medians": medians, "totals": totals, "rounds": rounds, "failed_in_all": failed_in_all,
                           "requests": len(load.samples), "args": vars(args)}, measured_in=measured_in)


async def _bench(config, target: str, lines: list[tuple[float, str]], tenants: list[str], first: dict[str, str],
                 following: list[str], args) -> tuple[Load, list[Swap]]:
    import grpc

    from liverl.contracts import names
    from liverl.io.registry import ModelRegistry
    from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc

    registry = ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)
    for tenant, version in first.items():  # serving rolls each tenant onto its first adapter once it is up
        await _said(lines, f"serving tenant-swap tenant={tenant} version={version} ", 600)
    load = Load()
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)

        async def worker(w: int) -> None:
            tenant, i = tenants[w % len(tenants)], 0
            while not stop.is_set():
                started = time.perf_counter()
                first_token, served = 0.0, ""
                try:
                    async for chunk in stub.GenerateStream(serving_pb2.GenerateRequest(
                            prompt_token_ids=PROMPT_IDS, session_id=f"bench-{w}",
                            sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=args.max_tokens,
                                                               seed=i + 1)),
                            metadata=((names.META_TENANT, tenant),), timeout=300):
                        first_token = first_token or time.perf_counter() - started
                        served = chunk.policy_version
                    load.samples.append(Sample(tenant, started, first_token, time.perf_counter(), served))
                except grpc.aio.AioRpcError as error:
                    load.failures.append((tenant, time.perf_counter(), error.code().name))
                i += 1

        workers = [asyncio.create_task(worker(w)) for w in range(args.concurrency)]
        swaps = []
        try:
            await asyncio.sleep(args.warmup_s)
            for version in following:
                swap = Swap(version, steady_from=time.perf_counter())
                await asyncio.sleep(args.phase_s)
                await asyncio.to_thread(registry.set_alias, names.tenant_champion_alias(tenants[0]), version)
                swap.moved = time.perf_counter()
                swap.started = await _said(lines, f"serving tenant-swap-start tenant={tenants[0]} version={version} ",
                                           120)
                swap.switched = await _said(lines, f"serving tenant-swap tenant={tenants[0]} version={version} ", 300)
                await asyncio.sleep(args.settle_s)
                swap.window_end = time.perf_counter()
                swaps.append(swap)
                print(f"swapped {tenants[0]} to v{version} ({swap.switched - swap.moved:.2f} s after its alias moved)",
                      flush=True)
        finally:
            stop.set()
            await asyncio.gather(*workers)
    return load, swaps


async def _said(lines: list[tuple[float, str]], prefix: str, timeout_s: float) -> float:
    """When serving said a line starting with prefix; raises if it refused the swap or timeout_s passed first."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        for at, line in list(lines):
            if line.startswith(prefix):
                return at
            if line.startswith("serving tenant-swap-refused"):
                raise RuntimeError(f"serving refused a tenant's adapter: {line}")
        await asyncio.sleep(0.02)
    raise TimeoutError(f"serving did not say {prefix!r} within {timeout_s:.0f} s; its last lines: "
                       f"{[line for _, line in lines[-5:]]}")


def _write_probes(base_dir: Path, adapter_dirs: list[Path]) -> None:
    """Each version's weight probe, as the trainer's export leaves it (Trainer._to_publish): serving checks it in
    the swap's smoke test, before the tenant's route moves."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.io.weight_probe import measure_weight_probe

    measure_weight_probe(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)).write(base_dir)
    for folder in adapter_dirs:
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        measure_weight_probe(PeftModel.from_pretrained(base, folder)).write(folder)


def _round(load: Load, swap: Swap, swapped: str) -> dict:
    """The round's figures for the swapped tenant and for the others, each against its own steady phase."""
    figures = {}
    for group, member in (("swapped", lambda t: t == swapped), ("others", lambda t: t != swapped)):
        samples = [s for s in load.samples if member(s.tenant)]
        steady = sorted(s.first_token_s for s in samples if swap.steady_from <= s.ended < swap.moved)
        p50, p99 = _quantile(steady, 0.5), _quantile(steady, 0.99)
        across = [s for s in samples if s.started < swap.window_end and s.ended > swap.moved]
        held = [s for s in across if s.first_token_s > max(2 * p99, p99 + 0.05)]
        worst = max((s.first_token_s for s in across), default=0.0)
        figures[group] = {
            "steady": len(steady), "steady_p50_ms": 1000 * p50, "steady_p99_ms": 1000 * p99,
            "across": len(across), "held": len(held),
            "max_extra_wait_ms": 1000 * max((s.first_token_s - p50 for s in held), default=0.0),
            "failed": sum(member(t) and swap.moved <= at <= swap.window_end for t, at, _ in load.failures),
            "worst_ms": 1000 * worst, "worst_over_p99": worst / p99 if p99 else float("nan"),
        }
    first_served = min((s.ended for s in load.samples if s.version == swap.version), default=float("nan"))
    figures["swapped"]["first_served_s"] = first_served - swap.moved  # its first response on the new adapter
    return figures


def _group_line(group: str, f: dict) -> str:
    name = "swapped tenant" if group == "swapped" else "other tenants"
    return (f"{name:>14} | steady p50 {f['steady_p50_ms']:6.1f} ms, p99 {f['steady_p99_ms']:6.1f} ms ({f['steady']} "
            f"requests) | in the window {f['across']}: held {f['held']} (max extra wait {f['max_extra_wait_ms']:.1f} "
            f"ms), failed {f['failed']} | worst {f['worst_ms']:6.1f} ms = {f['worst_over_p99']:.2f}x steady p99")


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    main()
