"""What a hot-swap answers: the result the admin APIs return, the errors a version is refused with, and what one
swap mode hands back to the swapper."""

from __future__ import annotations

from dataclasses import dataclass

from serving.router import Slot


class SwapError(RuntimeError):
    """A version could not be put into service (load, smoke generation or weight probe failed)."""


class SignatureRefused(SwapError):
    """A registry version whose files or verdict do not carry the trainer's signature (serving/signature_check.py)."""


@dataclass
class SwapResult:
    ok: bool
    version: str
    previous: str
    message: str
    pause_s: float = 0.0  # how long new requests were held (in place); 0 for a switch between engines
    mode: str = ""  # "in_place" | "two_engine" | "adapter" | "canary" (promoted) | "" (nothing changed)


@dataclass
class BroughtIn:
    """A version now serving as champion: its slot, the champion it replaced (still loaded, draining), how it came
    in (SwapResult.mode) and how long new requests were held for it."""

    slot: Slot
    replaced: Slot | None
    mode: str
    pause_s: float = 0.0
