"""Supervised fit of the tiny policy on demonstrations (plain torch, CPU): loss on the tool-call tokens only."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

from demo.policy.demonstrations import Demonstration


def encode(tokenizer, demos: Sequence[Demonstration]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + eos) per demonstration; the prompt has no special tokens, as served."""
    eos = tokenizer.eos_token_id
    pairs = []
    for demo in demos:
        prompt = tokenizer(demo.prompt)["input_ids"]
        completion = tokenizer(demo.completion)["input_ids"] + [eos]
        if tokenizer.unk_token_id in prompt + completion:
            raise ValueError(f"demonstration uses a word outside the vocabulary: {demo}")
        pairs.append((prompt, completion))
    return pairs


def completion_batch(pairs, pad_id: int):
    """Right-padded (B, T) input ids, (B, T) labels (-100 outside completions) and attention mask."""
    import torch

    length = max(len(p) + len(c) for p, c in pairs)
    ids = torch.full((len(pairs), length), pad_id, dtype=torch.long)
    labels = torch.full((len(pairs), length), -100, dtype=torch.long)
    mask = torch.zeros((len(pairs), length), dtype=torch.long)
    for row, (prompt, completion) in enumerate(pairs):
        sequence = prompt + completion
        ids[row, : len(sequence)] = torch.tensor(sequence)
        labels[row, len(prompt) : len(sequence)] = torch.tensor(completion)
        mask[row, : len(sequence)] = 1
    return ids, labels, mask


def fit(
    model,
    tokenizer,
    demos: Sequence[Demonstration],
    *,
    steps: int,
    batch_size: int = 64,
    learning_rate: float = 3e-3,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> float:
    """Fit `model` in place; returns the mean loss of the last 20 steps."""
    import torch

    pairs = encode(tokenizer, demos)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (steps - step) / (0.3 * steps)))
    model.train()
    recent: list[float] = []
    started = time.monotonic()
    for step in range(steps):
        ids, labels, mask = completion_batch(rng.sample(pairs, min(batch_size, len(pairs))), tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        recent = (recent + [loss.item()])[-20:]
        if log is not None and (step % 100 == 0 or step == steps - 1):
            log(f"fit step {step:4d} | loss {loss.item():.3f} | {time.monotonic() - started:.1f}s")
    model.eval()
    return sum(recent) / len(recent)
