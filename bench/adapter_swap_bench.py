"""Adapter swap benchmark: a new LoRA adapter version put into service against a full in-place update of the same
base, each under the same concurrent streaming load, side by side in one run.

    .venv/bin/python bench/adapter_swap_bench.py --engine vllm --concurrency 4 --max-tokens 8 --phase-s 5
    .venv/bin/python bench/adapter_swap_bench.py --model .liverl/base-smollm2 ...   # the real model (after `make demo`)

Starts its own embedded stack (broker + MLflow) in a temporary folder and registers a tiny Llama base (or
`--model`'s folder; version 1, the champion), a LoRA adapter of it (version 2) and the same adapter merged into the
base's weights (version 3, full weights: what the adapter path replaces). Serving starts on version 1 with
serving.lora enabled; under load it is promoted to version 2 (the adapter path: add_lora, smoke, switch) and then to
version 3 (the full in-place path: hold new requests, drain, reload the weights, smoke, release). Per swap:
promotion -> the first request served on the new version (its response complete), requests held (overlapping the
swap, their first token later than twice the steady p99 and 50 ms past it), failed requests (goal 0), the slowest
first token during the swap; then the ratios full / adapter.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

WORDS = ["fix", "the", "file", "parser", "edit", "search", "done"]
PROMPT_IDS = [2, 64, 65, 66]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Sample:
    started: float
    first_token_s: float
    ended: float
    version: str


@dataclass
class SwapFigures:
    mode: str
    promoted: float = 0.0
    returned: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    failed: int = 0

    def summary(self) -> dict:
        new = self.samples[-1].version if self.samples else ""
        steady = [s.first_token_s for s in self.samples if s.ended < self.promoted]
        p99 = sorted(steady)[min(len(steady) - 1, int(0.99 * len(steady)))] if steady else 0.0
        across = [s for s in self.samples if s.started < self.returned and s.ended > self.promoted]
        held = [s for s in across if s.first_token_s > max(2 * p99, p99 + 0.05)]
        first_new = min((s.ended for s in self.samples if s.version == new and s.ended > self.promoted),
                        default=float("nan"))
        return {"mode": self.mode, "promotion_to_first_served_s": first_new - self.promoted,
                "swap_call_s": self.returned - self.promoted, "held": len(held), "across": len(across),
                "failed": self.failed, "requests": len(self.samples), "steady_first_token_p99_ms": p99 * 1000,
                "worst_first_token_during_ms": max((s.first_token_s for s in across), default=0.0) * 1000}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
    parser.add_argument("--model", type=Path, default=None, help="a Llama-architecture policy folder as the base "
                        "(e.g. the real demo's .liverl/base-smollm2); default: a tiny Llama")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--phase-s", type=float, default=5.0, help="steady load before each swap and after it")
    args = parser.parse_args(argv)
    from bench.serving_stack import register, serving_stack
    from liverl.contracts import names

    with serving_stack("adapter-swap-bench-", args.engine, "adapter-bench", "--serving.probation_s", "1",
                       "--serving.max_model_len", "128", "--serving.lora.enabled", "true",
                       "--serving.lora.max_lora_rank", "8", "--serving.record", "false") as (config, tmp):
        base_dir, adapter_dir, merged_dir = _policies(tmp, args.model)
        base = register(config, base_dir, alias="champion")
        adapter = register(config, adapter_dir, {names.TAG_WEIGHTS_KIND: names.WEIGHTS_ADAPTER,
                                                 names.TAG_BASE_VERSION: base})
        merged = register(config, merged_dir)
        figures = _bench(config, args, [("adapter", adapter), ("full in place", merged)])
    adapter_run, full_run = figures
    for run in figures:
        print(" | ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in run.items()))
    ratio = full_run["promotion_to_first_served_s"] / max(adapter_run["promotion_to_first_served_s"], 1e-9)
    print(f"ratio full / adapter: promotion -> first served {ratio:.1f}x; held {full_run['held']} vs "
          f"{adapter_run['held']}; failed {full_run['failed']} vs {adapter_run['failed']}")


def _policies(tmp: Path, base_folder: Path | None) -> tuple[Path, Path, Path]:
    """The base (base_folder, or a tiny Llama), a LoRA adapter of it (liverl's format, random non-zero lora_B) and
    the two merged as full weights."""
    import shutil

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from demo.policy.tiny_policy import build_policy
    from liverl.contracts.adapter import AdapterManifest

    base_dir = base_folder or build_policy(tmp / "base", WORDS, arch="llama", n_positions=128, seed=0)
    torch.manual_seed(7)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False))
    adapter_dir = tmp / "adapter"
    model.save_pretrained(adapter_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base_dir / name, adapter_dir / name)
    AdapterManifest(base_version="1", base_digest="", rank=8).write(adapter_dir)
    merged_dir = tmp / "merged"
    model.merge_and_unload().save_pretrained(merged_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(merged_dir)
    return base_dir, adapter_dir, merged_dir


def _bench(config, args, swaps: list[tuple[str, str]]) -> list[dict]:
    from bench.serving_stack import running_server

    with running_server(config, say=lambda line: print(line, flush=True)) as server:
        return [asyncio.run(_swap_under_load(f"127.0.0.1:{server.grpc_port}", args, mode, version)).summary()
                for mode, version in swaps]


async def _swap_under_load(target: str, args, mode: str, version: str) -> SwapFigures:
    import grpc

    from liverl.v1 import common_pb2, serving_pb2, serving_pb2_grpc

    figures = SwapFigures(mode)
    async with grpc.aio.insecure_channel(target) as channel:
        stub = serving_pb2_grpc.PolicyServiceStub(channel)
        admin = serving_pb2_grpc.PolicyAdminStub(channel)
        stop = asyncio.Event()

        async def worker(w: int) -> None:
            i = 0
            while not stop.is_set():
                started = time.perf_counter()
                first, served = 0.0, ""
                try:
                    async for chunk in stub.GenerateStream(serving_pb2.GenerateRequest(
                            prompt_token_ids=PROMPT_IDS, session_id=f"bench-{w}",
                            sampling=common_pb2.SamplingParams(temperature=1.0, max_tokens=args.max_tokens,
                                                               seed=i + 1)), timeout=300):
                        first = first or time.perf_counter() - started
                        served = chunk.policy_version
                    figures.samples.append(Sample(started, first, time.perf_counter(), served))
                except grpc.aio.AioRpcError:
                    figures.failed += 1
                i += 1

        workers = [asyncio.create_task(worker(w)) for w in range(args.concurrency)]
        await asyncio.sleep(args.phase_s)
        figures.promoted = time.perf_counter()
        result = await admin.ForceSwap(serving_pb2.SwapRequest(version=version), timeout=600)
        figures.returned = time.perf_counter()
        print(f"{mode}: ok={result.ok} {result.previous_version} -> {result.policy_version} ({result.message})",
              flush=True)
        await asyncio.sleep(args.phase_s)
        stop.set()
        await asyncio.gather(*workers)
    figures.samples.sort(key=lambda s: s.ended)
    return figures


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.serving_stack
    main()
