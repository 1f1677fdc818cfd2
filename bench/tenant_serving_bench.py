"""Tenant adapter serving benchmark: throughput with 1, 8 and 32 active tenant adapters against the base model
alone, on one vLLM engine, side by side in one run.

    .venv/bin/python bench/tenant_serving_bench.py --requests 64 --concurrency 8 --max-tokens 16 --rounds 2

A tiny Llama (2 layers, 64 wide: the test policy, not a real model) and 32 random rank-8 LoRA adapters of it,
made offline in a temporary folder. One engine, started once with serving.lora (max_loras adapters per batch, room
for 32 tenant adapters in host memory); the phases take turns on it each round: the base alone (no adapter), then
the requests spread round-robin over 1, 8 and 32 tenant adapters, each through the path a tenant's request takes
(serving/engines/lora_slots.py's TenantEngine: LoraSlots keeps the adapter loaded and pinned). Each phase first sends
one request per adapter (loads them; not timed), then `--requests` requests with `--concurrency` in flight. It
measures the engine and the tenant path, not the HTTP API (bench/serving_bench.py measures that). Prints each
phase's completion tokens/s and p50/p99 request latency (medians over rounds), and its throughput as a ratio of
the base's; on a tiny model the LoRA work is a large share of each step, so expect lower ratios than a real one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

WORDS = ["fix", "the", "file", "parser", "edit", "search", "done"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 8
PHASES = (0, 1, 8, 32)  # tenant adapters active (0: the base alone)
SHARED_ADAPTERS = 3  # the room serving.tenants leaves in max_cpu_loras for the shared policy's adapters


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=64, help="timed requests per phase and round")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-loras", type=int, default=8, help="adapters one batch may mix (vLLM's max_loras)")
    args = parser.parse_args(argv)

    from bench.report import environment, environment_line, record

    measured_in = environment()
    with tempfile.TemporaryDirectory(prefix="tenant-serving-bench-") as tmp:
        base_dir, adapter_dirs = policies(Path(tmp), max(PHASES))
        rounds = asyncio.run(_bench(base_dir, adapter_dirs, args))
    figures = {}
    for phase in PHASES:
        runs = [r[phase] for r in rounds]
        figures[phase] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    base_rate = figures[0]["tokens_per_s"]
    print(environment_line())
    print(f"tiny Llama (2 layers, width 64), rank-{RANK} adapters, vLLM max_loras {args.max_loras}, "
          f"{args.requests} requests x {args.max_tokens} tokens, {args.concurrency} in flight, "
          f"medians of {args.rounds} rounds")
    for phase in PHASES:
        f = figures[phase]
        name = "base alone" if phase == 0 else f"{phase} tenant adapter{'s' if phase > 1 else ''}"
        print(f"{name:>20} | {f['tokens_per_s']:8.1f} tokens/s | ratio to base {f['tokens_per_s'] / base_rate:5.2f} | "
              f"p50 {f['p50_ms']:7.1f} ms | p99 {f['p99_ms']:7.1f} ms | loads {f['loads']:.0f} "
              f"evictions {f['evictions']:.0f}")
    record("tenant_serving", {"phases": {str(p): figures[p] for p in PHASES},
                              "ratio_to_base": {str(p): figures[p]["tokens_per_s"] / base_rate for p in PHASES[1:]},
                              "args": vars(args)}, measured_in=measured_in)


async def _bench(base_dir: Path, adapter_dirs: list[Path], args) -> list[dict]:
    from liverl.config.serving import ServingConfig
    from serving.engines.engine import Adapter
    from serving.engines.lora_slots import LoraSlots
    from serving.engines.vllm_engine import VllmEngine

    count = len(adapter_dirs)
    config = ServingConfig(engine="vllm", max_model_len=128, gpu_memory_utilization=0.08,
                           lora={"enabled": True, "max_loras": args.max_loras, "max_lora_rank": RANK,
                                 "max_cpu_loras": count + SHARED_ADAPTERS})
    engine = VllmEngine(base_dir, config)
    print(f"starting vLLM on {base_dir} ...", flush=True)
    await engine.start()
    try:
        slots = LoraSlots(engine, capacity=count)
        adapters = [Adapter(f"tenant-{i}", i + 1, path, str(i + 2), "1") for i, path in enumerate(adapter_dirs)]
        rounds = []
        for round_index in range(args.rounds):
            results = {}
            for phase in PHASES:
                results[phase] = await _phase(engine, slots, adapters[:phase], args, f"r{round_index}-p{phase}")
                print(f"round {round_index + 1} phase {phase}: {results[phase]['tokens_per_s']:.1f} tokens/s",
                      flush=True)
            rounds.append(results)
        return rounds
    finally:
        await engine.shutdown()


async def _phase(engine, slots, adapters, args, label: str) -> dict:
    from serving.engines.engine import Sampling
    from serving.engines.lora_slots import TenantEngine

    engines = [TenantEngine(engine, adapter, slots) for adapter in adapters] or [None]
    gate = asyncio.Semaphore(args.concurrency)
    latencies: list[float] = []

    async def one(i: int, timed: bool) -> int:
        tenant = engines[i % len(engines)]
        sampling = Sampling(temperature=1.0, max_tokens=args.max_tokens, seed=i + 1)
        prompt = [2] + [64 + (i * 7 + k) % len(WORDS) for k in range(8)]
        async with gate:
            started = time.perf_counter()
            deltas = (engine.generate(prompt, sampling, f"{label}-{timed}-{i}", True) if tenant is None
                      else tenant.generate(prompt, sampling, f"{label}-{timed}-{i}", True))
            tokens = 0
            async for delta in deltas:
                tokens += len(delta.token_ids)
            if timed:
                latencies.append(time.perf_counter() - started)
            return tokens

    await asyncio.gather(*(one(i, False) for i in range(len(engines))))  # every adapter loaded: not timed
    loads, evictions = slots.loads, slots.evictions  # of the timed part: 0 while every adapter stays loaded
    started = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i, True) for i in range(args.requests))))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {"tokens_per_s": tokens / elapsed, "requests_per_s": args.requests / elapsed,
            "p50_ms": 1000 * ordered[len(ordered) // 2], "p99_ms": 1000 * ordered[min(len(ordered) - 1,
                                                                                      int(0.99 * len(ordered)))],
            "loads": slots.loads - loads, "evictions": slots.evictions - evictions}


def policies(tmp: Path, count: int) -> tuple[Path, list[Path]]:
    """The tiny Llama base and `count` LoRA adapters of it in liverl's format (random non-zero lora_B; their manifest
    names base version "1", the first version of a fresh registered model)."""
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from demo.policy.tiny_policy import build_policy
    from liverl.contracts.adapter import AdapterManifest

    base_dir = build_policy(tmp / "base", WORDS, arch="llama", n_positions=128, seed=0)
    folders = []
    for i in range(count):
        torch.manual_seed(100 + i)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                               LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=TARGETS,
                                          init_lora_weights=False))
        folder = tmp / f"adapter-{i}"
        model.save_pretrained(folder)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(base_dir / name, folder / name)
        AdapterManifest(base_version="1", base_digest="", rank=RANK).write(folder)
        folders.append(folder)
    return base_dir, folders


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    main()
