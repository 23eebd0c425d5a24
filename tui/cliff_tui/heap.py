"""The process's own heap: freed pages handed back, and the cycle collector kept to what changes."""

from __future__ import annotations

import ctypes
import gc


def return_freed_memory() -> None:
    """Hand the heap's freed pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing): pages freed after a burst of work (a fill's buffers, start-up's imports) stay
    resident otherwise, and count as RSS."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own symbols: no library search
    if trim is not None:
        trim(0)


def freeze_start_up() -> None:
    """Collect once, then leave what survived start-up (modules, a screen's widgets) out of every
    later collection, so that a full one walks only what came after it (see bench/RESULTS.md,
    'Watch CPU against btop'). A cycle frozen here that dies later is not freed until
    :func:`thaw`: a one-time cost, accepted."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Undo :func:`freeze_start_up` (a screen that closes in a process that goes on)."""
    gc.unfreeze()


def collect_cycles() -> None:
    """A full collection. A screen leaves cycles behind with every line it draws (a Textual strip
    keeps itself in its own caches); left to the collector's own pace they reach its oldest
    generation and wait there for minutes, and the resident memory grows with them."""
    gc.collect()
