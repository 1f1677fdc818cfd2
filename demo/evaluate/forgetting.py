"""The forgetting set: how much general ability a trained version lost, with an interval.

Five short texts written for liverl (forgetting_text/*.txt: prose, science, code, dialogue, instructions; about
3,500 SmolLM2 tokens), kept apart from the gate's general text (demo/product/tasks/chat/general_text.txt, which the
trainer's gate reads and nothing here changes), so the demo's closing measure is not read off the same text a
candidate was judged on. Each text is cut into chunks of CHUNK_TOKENS tokens, each chunk scored on its own; the
figure is the NLL ratio served / base over all chunks (1.0: nothing lost, above 1: worse at ordinary text), with a
95 % percentile bootstrap interval that resamples chunks, pairing each chunk's served and base NLL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demo.evaluate.stats import bootstrap_ratio

FORGETTING_DIR = Path(__file__).with_name("forgetting_text")
CHUNK_TOKENS = 128  # long enough for context to matter, short enough for ~28 units of resampling
MIN_CHUNK_TOKENS = 16  # a text's last, shorter chunk is kept from this length


@dataclass(frozen=True)
class Chunk:
    domain: str  # the text's file stem: prose, science, code, dialogue, instructions
    ids: tuple[int, ...]


def domains() -> dict[str, str]:
    """domain -> text, in name order."""
    texts = {path.stem: path.read_text() for path in sorted(FORGETTING_DIR.glob("*.txt"))}
    if not texts:
        raise FileNotFoundError(f"no forgetting texts (*.txt) under {FORGETTING_DIR}")
    return texts


def chunks(tokenizer, size: int = CHUNK_TOKENS) -> list[Chunk]:
    out = []
    for domain, text in domains().items():
        ids = tokenizer(text)["input_ids"]
        out += [Chunk(domain, tuple(ids[start:start + size])) for start in range(0, len(ids), size)
                if len(ids[start:start + size]) >= MIN_CHUNK_TOKENS]
    return out


def chunk_nll(model, pieces: Sequence[Chunk]) -> list[float]:
    """Summed next-token NLL (nats) of each chunk under the model, each chunk on its own (len - 1 tokens scored)."""
    import torch

    sums = []
    with torch.no_grad():
        for piece in pieces:
            ids = torch.tensor([piece.ids])  # (1, T)
            sums.append(float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1))
    return sums


def arm_figures(pieces: Sequence[Chunk], sums: Sequence[float]) -> dict:
    """One model's figures on the forgetting set; `chunk_nll` is kept for the paired ratio."""
    scored = [len(piece.ids) - 1 for piece in pieces]
    by_domain = {}
    for domain in dict.fromkeys(piece.domain for piece in pieces):
        picked = [i for i, piece in enumerate(pieces) if piece.domain == domain]
        by_domain[domain] = sum(sums[i] for i in picked) / sum(scored[i] for i in picked)
    return {"nll": sum(sums) / sum(scored), "tokens": sum(len(piece.ids) for piece in pieces), "chunks": len(pieces),
            "by_domain": by_domain, "domains": [piece.domain for piece in pieces], "chunk_nll": list(sums)}


def ratio_figures(base: dict, served: dict) -> dict:
    """NLL served / base over the same chunks, with its 95 % bootstrap interval and the ratio per domain."""
    if base["domains"] != served["domains"]:
        raise ValueError("the two forgetting figures were measured on different chunks (other texts or tokenizer)")
    ratio, (low, high) = bootstrap_ratio(served["chunk_nll"], base["chunk_nll"])
    return {"ratio": ratio, "ci95": [low, high], "chunks": len(base["domains"]), "tokens": base["tokens"],
            "by_domain": {d: served["by_domain"][d] / base["by_domain"][d] for d in base["by_domain"]}}


def describe(figures: dict) -> str:
    low, high = figures["ci95"]
    verdict = ("worse than the base" if low > 1 else "better than the base" if high < 1
               else "no change shown")
    return (f"forgetting set NLL served/base {figures['ratio']:.4f}, 95 % [{low:.4f}, {high:.4f}] over "
            f"{figures['chunks']} chunks ({figures['tokens']} tokens, {len(figures['by_domain'])} domains): {verdict}")
