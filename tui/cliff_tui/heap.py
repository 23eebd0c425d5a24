"""The process's own heap."""

from __future__ import annotations

import ctypes


def return_freed_memory() -> None:
    """Hand the heap's freed pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing): pages freed after a burst of work (a fill's buffers, start-up's imports) stay
    resident otherwise, and count as RSS."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own symbols: no library search
    if trim is not None:
        trim(0)
