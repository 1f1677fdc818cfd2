"""The accelerator (or host, on CPU) memory vLLM's LoRA slots take for a model: the bytes of the stacked adapter
tensors the engine allocates, once with one slot and once with `--max-loras` (docs/capacity.md quotes it).

    .venv/bin/python scripts/lora_slot_memory.py --folder .liverl/base-smollm2 --max-loras 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path


def stacked_lora_bytes(worker) -> int:
    """Runs in vLLM's worker: the bytes of every LoRA layer's stacked A and B tensors."""
    total = 0
    for _, module in worker.model_runner.model.named_modules():
        for attribute in ("lora_a_stacked", "lora_b_stacked"):
            stacked = getattr(module, attribute, None)
            for tensor in (stacked if isinstance(stacked, (list, tuple)) else [stacked] if stacked is not None else []):
                total += tensor.numel() * tensor.element_size()
    return total


async def measure(folder: Path, max_loras: int, rank: int, dtype: str) -> int:
    from liverl.config import load_config
    from serving.engines.vllm_engine import VllmEngine

    config = load_config(environ={}, overrides=[
        "--serving.lora.enabled", "true", "--serving.lora.max_loras", str(max_loras),
        "--serving.lora.max_cpu_loras", str(max(8, max_loras)), "--serving.lora.max_lora_rank", str(rank),
        "--serving.max_model_len", "512", "--serving.dtype", dtype]).serving
    engine = VllmEngine(folder, config)
    await engine.start()
    try:
        return (await engine._llm.collective_rpc(stacked_lora_bytes))[0]
    finally:
        await engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="a Hugging Face policy folder")
    parser.add_argument("--max-loras", type=int, default=4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a function: this script's own
    one = asyncio.run(measure(args.folder, 1, args.rank, args.dtype))
    many = asyncio.run(measure(args.folder, args.max_loras, args.rank, args.dtype))
    print(f"LoRA slots at rank {args.rank}, {args.dtype}: 1 slot {one:,} bytes; {args.max_loras} slots {many:,} bytes "
          f"({many / args.max_loras / 2**20:.1f} MiB a slot)")


if __name__ == "__main__":
    main()
