"""Tiny Llama bases and peft LoRA adapters in the trainer's export format (liverl.contracts.adapter), made offline.

Adapters start from random lora_A *and* lora_B (peft's init_lora_weights=False), so each changes the outputs
of its base; its reference logprobs come from peft's own forward pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

WORDS = ["fix", "the", "file", "parser", "edit", "search", "done"]
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 8
MARGIN = 0.5  # logits: far above float noise between vLLM and peft (1e-5), so greedy decoding picks the target


def build_base(out_dir: Path, seed: int = 0) -> Path:
    from demo.policy.tiny_policy import build_policy

    return build_policy(out_dir, WORDS, arch="llama", n_positions=128, seed=seed)


def build_adapter(base_dir: Path, out_dir: Path, base_version: str, seed: int, rank: int = RANK,
                  scale: float = 1.0) -> Path:
    """A peft adapter folder of base_dir with the liverl manifest and the base's tokenizer files."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                                                  init_lora_weights=False))
    if scale != 1.0:
        with torch.no_grad():
            for name, parameter in peft_model.named_parameters():
                if "lora_B" in name:
                    parameter.mul_(scale)
    return _save(peft_model, base_dir, out_dir, base_version, rank)


def train_adapter(base_dir: Path, out_dir: Path, base_version: str, prompt_ids: list[int], target_id: int,
                  seed: int = 0, rank: int = RANK, steps: int = 200) -> Path:
    """An adapter of base_dir trained (Adam, from peft's zero-init) until greedy decoding of prompt_ids answers
    target_id, its logit MARGIN above the next, so a served answer shows whose adapter ran. AssertionError if not.
    (The tiny base's normed, tied head caps how sure it can get: about 5 % for a word, still the clear argmax.)"""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS))
    optimizer = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    inputs, target = torch.tensor([prompt_ids]), torch.tensor([target_id])
    for _ in range(steps):
        logits = peft_model(inputs).logits[:, -1]
        top = logits[0].topk(2)
        if top.indices[0] == target_id and top.values[0] - top.values[1] > MARGIN:
            break
        loss = torch.nn.functional.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        raise AssertionError(f"adapter for token {target_id} did not learn it in {steps} steps")
    return _save(peft_model, base_dir, out_dir, base_version, rank)


def _save(peft_model, base_dir: Path, out_dir: Path, base_version: str, rank: int) -> Path:
    from liverl.contracts.adapter import AdapterManifest

    out = Path(out_dir)
    peft_model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(base_dir) / name).is_file():
            shutil.copy(Path(base_dir) / name, out / name)
    AdapterManifest(base_version=base_version, base_digest="", rank=rank).write(out)
    return out


def reference_logprobs(base_dir: Path, adapter_dir: Path | None, prompt_ids: list[int],
                       tokens: list[int]) -> list[float]:
    """log p(token) of each completion token at temperature 1 under base (+ the adapter, applied by peft)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
    model.eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt_ids + tokens])).logits[0], -1)
    return [float(logprobs[len(prompt_ids) - 1 + i, t]) for i, t in enumerate(tokens)]
