"""Prompt text -> ids and ids -> text, exactly as the policy's tokenizer does them, minus its wrapper's cost.

transformers' `tokenizer(text)` and `tokenizer.decode(ids)` wrap the Rust `tokenizers` backend in
argument handling that costs ten to twenty times the work itself for a short prompt (hundreds of
microseconds, on the event loop, per request). When the call would reach the backend unchanged
(a fast tokenizer, no special-token splitting, no truncation or padding set on the backend, no
clean-up of decoded spaces), these functions call the backend directly; otherwise they call the
tokenizer as before. tests/serving/test_tokens.py holds the two paths equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def encode(tokenizer: PreTrainedTokenizerBase, text: str, release_gil: bool = False) -> list[int]:
    """The ids of `tokenizer(text, add_special_tokens=True)["input_ids"]`.

    release_gil: for a long prompt on a worker thread, so that its encoding stalls no other thread. The
    backend's encode holds the GIL and its encode_batch releases it; on the event loop, releasing costs
    far more than it saves: getting the GIL back waits for whichever thread took it meanwhile, up to the
    interpreter's 5 ms switch interval (7.5 us against 5.2 ms per short prompt with one busy thread beside
    it, measured here), on every request."""
    backend = _plain_backend(tokenizer)
    if backend is not None and backend.truncation is None and backend.padding is None:
        if release_gil:
            return backend.encode_batch([text], add_special_tokens=True)[0].ids
        return backend.encode(text, add_special_tokens=True).ids
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])


def decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """The text of `tokenizer.decode(ids, skip_special_tokens=True)`."""
    backend = _plain_backend(tokenizer)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", True):
        return backend.decode(ids, skip_special_tokens=True)
    return tokenizer.decode(ids, skip_special_tokens=True)


def _plain_backend(tokenizer):
    """The Rust backend when the tokenizer is a fast one that adds nothing of its own, else None."""
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "split_special_tokens", True):
        return None
    return getattr(tokenizer, "backend_tokenizer", None)
