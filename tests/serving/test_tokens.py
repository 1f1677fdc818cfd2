"""serving.engines.tokens: the backend shortcut gives exactly the ids and text the tokenizer itself gives."""

from __future__ import annotations

import pytest

from serving.engines import tokens

PROMPTS = ["fix the file then search", "", "  héllo\n\tworld 😀  ", "edit<eos>done<bos>", "x" * 300,
           "<|im_start|>user\nask<|im_end|>"]


@pytest.fixture(scope="module")
def tokenizer(tiny_policy_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_policy_dir)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_encode_and_decode_equal_the_tokenizers_own(tokenizer, prompt):
    ids = tokens.encode(tokenizer, prompt)
    assert ids == list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    assert tokens.encode(tokenizer, prompt, release_gil=True) == ids  # the worker thread's path
    assert tokens.decode(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=True)


def test_the_tiny_policy_takes_the_shortcut(tokenizer):
    assert tokens._plain_backend(tokenizer) is not None  # else the bench measures the slow path


def test_a_tokenizer_that_adds_its_own_steps_is_called_as_before(tiny_policy_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_dir)
    tokenizer.split_special_tokens = True
    tokenizer.clean_up_tokenization_spaces = True
    assert tokens._plain_backend(tokenizer) is None
    for prompt in PROMPTS:
        ids = tokens.encode(tokenizer, prompt)
        assert ids == list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
        assert tokens.decode(tokenizer, ids) == tokenizer.decode(ids, skip_special_tokens=True)
