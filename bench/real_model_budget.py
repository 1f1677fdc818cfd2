"""The real model's budget on this machine: SmolLM2-135M-Instruct (the packaged base policy) in vLLM and HF.

    .venv/bin/python bench/real_model_budget.py [--prompts 16] [--tokens 64] [--folder DIR]

Measures, each vLLM engine in a process of its own (so every start is a cold one and memory is returned):
- engine start (construction until it answers) without and with LoRA enabled (max rank 16);
- tokens/s of 16 chat prompts x 64 new tokens at temperature 0.7 / top-p 0.9 (every completion runs to 64 tokens),
  float32 and bfloat16, and float32 with a LoRA adapter applied (peft, B = 0: the base's outputs, LoRA's cost);
- the baseline: HF `generate` on the same prompts, batched, float32.
Prints one line per figure and the ratios (vLLM / HF, bf16 / fp32, LoRA / none) beside the cores and load.
Not a test: the figures vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTIONS = (
    "Write a Python function that returns the square of a number.",
    "What is the capital of France?",
    "Explain recursion in one sentence.",
    "Give three uses of a hash map.",
    "How many legs does a spider have?",
    "Write a haiku about the sea.",
    "What does HTTP stand for?",
    "Name a prime number larger than 10.",
    "Summarise the water cycle briefly.",
    "What is 12 times 7?",
    "Write a Python one-liner that reverses a string.",
    "Why is the sky blue?",
    "List two differences between lists and tuples in Python.",
    "What is the boiling point of water in Celsius?",
    "Suggest a name for a pet turtle.",
    "What is a unit test?",
)
TEMPERATURE, TOP_P = 0.7, 0.9


def chat_prompts(folder: Path, n: int) -> list[str]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return [tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                          tokenize=False, add_generation_prompt=True) for i in range(n)]


def vllm_child(folder: Path, dtype: str, lora: Path | None, n: int, tokens: int) -> dict:
    """One engine: its start time and the generation rate; runs in its own process (see main)."""
    started = time.perf_counter()
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    options = {"enable_lora": True, "max_lora_rank": 16, "max_loras": 1} if lora else {}
    llm = LLM(model=str(folder), dtype=dtype, gpu_memory_utilization=0.2, max_model_len=1024, enforce_eager=True,
              seed=0, disable_log_stats=True, **options)
    start_s = time.perf_counter() - started
    prompts = chat_prompts(folder, n)
    params = SamplingParams(temperature=TEMPERATURE, top_p=TOP_P, max_tokens=tokens, ignore_eos=True, seed=0)
    request = LoRARequest("bench", 1, str(lora)) if lora else None
    llm.generate(prompts[:2], SamplingParams(max_tokens=4), lora_request=request, use_tqdm=False)  # warm-up
    began = time.perf_counter()
    outputs = llm.generate(prompts, params, lora_request=request, use_tqdm=False)
    elapsed = time.perf_counter() - began
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {"start_s": start_s, "tokens": generated, "generate_s": elapsed, "tokens_per_s": generated / elapsed}


def hf_generate(folder: Path, n: int, tokens: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    batch = tokenizer(chat_prompts(folder, n), return_tensors="pt", padding=True)
    torch.manual_seed(0)
    with torch.no_grad():
        model.generate(**tokenizer(chat_prompts(folder, 2), return_tensors="pt", padding=True), max_new_tokens=4)
        began = time.perf_counter()
        out = model.generate(**batch, do_sample=True, temperature=TEMPERATURE, top_p=TOP_P, max_new_tokens=tokens,
                             min_new_tokens=tokens, pad_token_id=tokenizer.pad_token_id)
        elapsed = time.perf_counter() - began
    generated = int(out.shape[0] * (out.shape[1] - batch["input_ids"].shape[1]))
    return {"tokens": generated, "generate_s": elapsed, "tokens_per_s": generated / elapsed}


def zero_adapter(folder: Path, target: Path) -> Path:
    """A rank-16 LoRA adapter on the attention projections whose B is 0 (peft's init): the base's outputs."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    config = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    get_peft_model(model, config).save_pretrained(str(target))
    return target


def run_child(folder: Path, dtype: str, lora: Path | None, n: int, tokens: int) -> dict:
    argv = [sys.executable, __file__, "--child", "--folder", str(folder), "--dtype", dtype,
            "--prompts", str(n), "--tokens", str(tokens)] + (["--lora", str(lora)] if lora else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"vLLM child {dtype} lora={bool(lora)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def base_folder(given: Path | None) -> Path:
    if given is not None:
        return given
    from trainer.io.pretrained import ensure_converted, packaged_model

    return ensure_converted(packaged_model("smollm2"), Path(".liverl"))[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt (every completion runs to it)")
    parser.add_argument("--folder", type=Path, default=None, help="HF folder; default: the converted SmolLM2 cache")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--lora", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(vllm_child(args.folder, args.dtype, args.lora, args.prompts, args.tokens)), flush=True)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    folder = base_folder(args.folder)
    print(f"model {folder} | {os.cpu_count()} cores | load {os.getloadavg()[0]:.2f} | "
          f"{args.prompts} prompts x {args.tokens} tokens at T {TEMPERATURE} top-p {TOP_P}", flush=True)
    hf = hf_generate(folder, args.prompts, args.tokens)
    print(f"HF generate fp32 (baseline): {hf['tokens_per_s']:.1f} tokens/s ({hf['generate_s']:.1f} s)", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        adapter = zero_adapter(folder, Path(scratch) / "adapter")
        runs = {}
        for name, dtype, lora in (("fp32", "float32", None), ("bf16", "bfloat16", None), ("fp32+lora", "float32", adapter)):
            runs[name] = run_child(folder, dtype, lora, args.prompts, args.tokens)
            r = runs[name]
            print(f"vLLM {name}: start {r['start_s']:.1f} s | {r['tokens_per_s']:.1f} tokens/s ({r['generate_s']:.1f} s)",
                  flush=True)
    fp32, bf16, lora = runs["fp32"], runs["bf16"], runs["fp32+lora"]
    ratios = {
        "vllm_fp32_vs_hf_tokens_per_s": fp32["tokens_per_s"] / hf["tokens_per_s"],
        "vllm_bf16_vs_hf_tokens_per_s": bf16["tokens_per_s"] / hf["tokens_per_s"],
        "vllm_bf16_vs_fp32_tokens_per_s": bf16["tokens_per_s"] / fp32["tokens_per_s"],
        "vllm_lora_vs_none_tokens_per_s": lora["tokens_per_s"] / fp32["tokens_per_s"],
        "vllm_lora_vs_none_start_s": lora["start_s"] / fp32["start_s"],
    }
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}x")
    print(json.dumps({"hf": hf, **runs, "ratios": ratios, "load_1m": os.getloadavg()[0]}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
