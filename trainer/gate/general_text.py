"""General ability, watched: the NLL of a fixed general text under the candidate against its base.

Training on a product's traffic can make a pretrained model forget how to write ordinary text; a candidate whose
mean NLL (nats per token) of `trainer.gate.general_text_file` rises more than `max_general_nll_increase` (a
fraction) over the reference is refused. The reference is the base the candidate's adapter applies to (frozen, so
the bound holds across every version), or the champion for full-weights training (no frozen base exists there).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from liverl.contracts.adapter import is_adapter_folder
from trainer.io.policy_io import load_full_weights, load_policy, resolve_base_folder


@torch.no_grad()
def text_nll(model: torch.nn.Module, input_ids: list[int]) -> float:
    """Mean next-token NLL of the ids under the model (one forward pass: the text is short by design)."""
    ids = torch.tensor([input_ids])
    return float(model(input_ids=ids, labels=ids).loss)


def tokenized(folder: Path, text_file: Path) -> list[int]:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(folder))(Path(text_file).read_text())["input_ids"]
    if len(ids) < 2:
        raise ValueError(f"trainer.gate.general_text_file {text_file} holds fewer than 2 tokens: nothing to score")
    return ids


@lru_cache(maxsize=8)
def _reference_nll(folder: str, text_file: str, mtime_ns: int) -> float:
    return text_nll(load_full_weights(Path(folder)).eval(), tokenized(Path(folder), Path(text_file)))


def judge_general_text(candidate_folder: Path, champion_folder: Path, text_file: Path, max_increase: float,
                       download_dir: Path | None = None) -> tuple[list[str], dict]:
    """(reasons, figures): the candidate's general-text NLL against its reference's."""
    if is_adapter_folder(candidate_folder):
        reference = resolve_base_folder(candidate_folder, download_dir=download_dir)
        reference_kind = "base"
    else:
        reference, reference_kind = Path(champion_folder), "champion"
    reference_nll = _reference_nll(str(reference), str(text_file), Path(text_file).stat().st_mtime_ns)
    nll = text_nll(load_policy(candidate_folder, download_dir=download_dir).eval(),
                   tokenized(candidate_folder, text_file))
    increase = nll / reference_nll - 1.0
    figures = {"general_nll": nll, f"general_nll_{reference_kind}": reference_nll, "general_nll_increase": increase}
    if not increase <= max_increase:  # written so that NaN fails
        return [f"general-text NLL {nll:.4f} is {increase:+.1%} over the {reference_kind}'s {reference_nll:.4f} "
                f"(limit +{max_increase:.0%})"], figures
    return [], figures
