"""Packed micro-batches: several windows share one row, and attention never crosses from one to another.

Padding every window of a micro-batch to its longest wastes the compute of the padding (short demo sessions
next to a long one: half the tokens). Packing lays windows end to end in rows of `row_tokens`; each window
keeps its own positions (they restart where it starts, at its own `position_offset`) and attends only to its
own earlier tokens through a block-diagonal causal 4D mask (trainer/gate/scoring.py builds it from the batch's
sequence ids). So a window's logprobs are those of scoring it alone (tests/trainer/test_packing.py checks
GPT-2 and Llama, eager and sdpa).

transformers' own packed-sequence support (position_ids alone) is not used: it isolates sequences only in
flash-attention varlen kernels, or by guessing boundaries from position jumps, which merges a window whose
positions happen to continue the previous window's.

Layout: a micro-batch is a list of rows, a row a list of samples; the padded layout is one sample per row.
A row may hold served and imported (supervised) windows side by side: collate_rows marks imported tokens one by
one in MicroBatch.supervised, so the loss never forms an importance ratio on them.
"""

from __future__ import annotations

from liverl.config.trainer import DeepSpeedConfig
from trainer.step.batching import Sample, pack


def micro_batches(samples: list[Sample], config: DeepSpeedConfig) -> list[list[list[Sample]]]:
    """The step's micro-batches as rows of samples, in the layout the config asks for (packed by default).
    Whoever plans a step's size must count micro-batches with this too, so the step fills its accumulation."""
    if config.pack_sequences:
        return pack_rows(samples, config.micro_batch_tokens, config.pack_row_tokens)
    return [[[sample] for sample in group] for group in pack(samples, config.micro_batch_tokens)]


def pack_rows(samples: list[Sample], token_budget: int, row_tokens: int) -> list[list[list[Sample]]]:
    """Micro-batches of rows, in order (a cursor over the table stays meaningful): each sample goes to the
    first row of the current micro-batch it fits in (row_tokens; a longer sample gets a row of its own), and
    a micro-batch closes when rows × widest row would pass token_budget. One sample at least per batch."""
    batches: list[list[list[Sample]]] = []
    rows: list[list[Sample]] = []
    fills: list[int] = []
    for sample in samples:
        length = len(sample.token_ids)
        slot = next((i for i, fill in enumerate(fills) if fill + length <= row_tokens), None)
        grown = list(fills)
        if slot is None:
            grown.append(length)
        else:
            grown[slot] += length
        if rows and len(grown) * max(grown) > token_budget:
            batches.append(rows)
            rows, fills = [], []
            slot, grown = None, [length]
        if slot is None:
            rows.append([sample])
        else:
            rows[slot].append(sample)
        fills = grown
    if rows:
        batches.append(rows)
    return batches

