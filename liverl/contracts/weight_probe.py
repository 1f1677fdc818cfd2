"""The weight probe: what a version's weights say about a fixed set of token sequences, so a serving replica can
prove it loaded exactly the weights the trainer exported before the version takes traffic.

The trainer's export writes it into the policy folder (full weights and adapters alike; for an adapter it was
measured on base + adapter); serving reads it after every swap, runs the same sequences through its engine and
compares:

    liverl_weight_probe.json   {"format": 1, "dtype": "float32",
                                "sequences": [[id, id, ...], ...],
                                "logprobs":  [[lp(seq[1] | seq[:1]), lp(seq[2] | seq[:2]), ...], ...]}

`logprobs[i][j]` is the log-probability of `sequences[i][j + 1]` after `sequences[i][:j + 1]` under the raw
distribution (log_softmax of the logits: temperature 1, no top-k or top-p), which is what vLLM's prompt logprobs
give. `dtype` is the dtype the weights were run in when measured: it bounds the noise serving must allow.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

PROBE_FILE = "liverl_weight_probe.json"
FORMAT = 1


@dataclass(frozen=True)
class WeightProbe:
    """Written by trainer.io.weight_probe at export; read by serving.swap.weight_check after a swap."""

    sequences: tuple[tuple[int, ...], ...]  # (N, T) token ids
    logprobs: tuple[tuple[float, ...], ...]  # (N, T - 1): each token after the first, given the ones before
    dtype: str  # "float32" | "bfloat16" | "float16": the precision the trainer measured in

    def write(self, folder: Path) -> Path:
        """Write the probe into folder atomically (a reader never sees half a file)."""
        path = Path(folder) / PROBE_FILE
        staging = path.with_name(path.name + ".partial")
        body = {"format": FORMAT, "dtype": self.dtype, "sequences": [list(s) for s in self.sequences],
                "logprobs": [list(lp) for lp in self.logprobs]}
        staging.write_text(json.dumps(body) + "\n")
        os.replace(staging, path)
        return path


def has_probe(folder: Path) -> bool:
    return (Path(folder) / PROBE_FILE).is_file()


def read_probe(folder: Path) -> WeightProbe:
    """The folder's probe; ValueError naming the file when it is malformed (a half-written or foreign file)."""
    path = Path(folder) / PROBE_FILE
    try:
        body = json.loads(path.read_text())
        if body["format"] != FORMAT:
            raise ValueError(f"format {body['format']!r}, this code reads {FORMAT}")
        sequences = tuple(tuple(int(t) for t in s) for s in body["sequences"])
        logprobs = tuple(tuple(float(x) for x in lp) for lp in body["logprobs"])
        dtype = str(body["dtype"])
        _check_shape(sequences, logprobs)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a readable weight probe ({error}): re-export the version") from error
    return WeightProbe(sequences, logprobs, dtype)


def _check_shape(sequences: tuple[tuple[int, ...], ...], logprobs: tuple[tuple[float, ...], ...]) -> None:
    if not sequences or len(sequences) != len(logprobs):
        raise ValueError(f"{len(sequences)} sequences but {len(logprobs)} rows of logprobs")
    for ids, row in zip(sequences, logprobs):
        if len(ids) < 2 or len(row) != len(ids) - 1 or min(ids) < 0:
            raise ValueError(f"a sequence of {len(ids)} ids needs {max(len(ids) - 1, 1)} logprobs, has {len(row)}")
        if not all(math.isfinite(x) and x <= 0.0 for x in row):
            raise ValueError("logprobs must be finite and <= 0")
