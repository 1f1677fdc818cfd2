"""What a rollout answers: the result the admin APIs return, the errors a version is refused with, and what one way
of bringing a version in hands back to the rollout."""

from __future__ import annotations

from dataclasses import dataclass

from serving.router import Slot


class SwapError(RuntimeError):
    """A version could not be put into service (load, smoke generation or weight probe failed)."""


class SignatureRefused(SwapError):
    """A registry version whose files or verdict do not carry the trainer's signature (serving/swap/version_loader.py)."""


class AdminRefused(RuntimeError):
    """An admin swap with nothing to swap from: kind "failed-precondition" (no registry) or "not-found" (no alias).
    gRPC answers it with that status code, HTTP with 409 or 404; the message is the same."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class SwapResult:
    ok: bool
    version: str  # what serves the group now ("" for a tenant on the shared policy)
    previous: str
    message: str
    pause_s: float = 0.0  # how long new requests were held (in place); 0 for a switch between engines
    mode: str = ""  # "in_place" | "two_engine" | "adapter" | "canary" (promoted) | "" (nothing changed)
    tenant: str = ""  # the group's tenant; "" for the shared group


@dataclass
class BroughtIn:
    """A version now serving its group: its slot (None: a tenant back on the shared policy), the slot it replaced
    (still loaded, draining), how it came in (SwapResult.mode) and how long new requests were held for it."""

    slot: Slot | None
    replaced: Slot | None
    mode: str
    pause_s: float = 0.0
