"""Compatibility re-export: the spool lives in liverl.io.spool now. Import it from there; this module
goes away once nothing imports it."""

from liverl.io.spool import Position, Spool, SpoolFull

__all__ = ["Position", "Spool", "SpoolFull"]
