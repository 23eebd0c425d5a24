"""Keep the watchers out of the engine's way.

llama.cpp's threads spin-wait on every core they were given; a dashboard thread that wakes 4 times
a second preempts one of them, and the whole decode step waits at the next barrier. Lowering the
priority of the threads that only watch (the UI, the sampler) lets the scheduler run them in the
gaps instead: in a process that runs a model, every thread but the engine's; in one that only
watches (``watch``, ``attach``, the exporter), all of them. Linux only: there ``setpriority``
takes a thread id; elsewhere it would renice the whole process, engine included.
"""

from __future__ import annotations

import os
import sys
import threading

WATCHER_NICE = 10  # CFS weight 110 against the engine's 1024: still ~5 % of a busy core


def lower_thread_priority(native_id: int, nice: int = WATCHER_NICE) -> bool:
    """Renice one thread of this process (``threading.get_native_id()``); ``False`` where not done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        current = os.getpriority(os.PRIO_PROCESS, native_id)
        os.setpriority(os.PRIO_PROCESS, native_id, max(current, nice))
    except OSError:
        return False
    return True


def lower_other_threads(nice: int = WATCHER_NICE) -> int:
    """From the thread that drives the engine: renice every other thread of the process (the
    UI, the sampler, the terminal's reader and writer). Threads the engine starts later inherit
    the caller's normal priority. Returns how many were lowered."""
    if not sys.platform.startswith("linux"):
        return 0
    me = threading.get_native_id()
    try:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return 0
    return sum(lower_thread_priority(tid, nice) for tid in tids if tid != me)


def lower_this_process(nice: int = WATCHER_NICE) -> int:
    """In a process that only watches: every thread it has, the caller too, so that every thread
    started later inherits the lower priority. Returns how many were lowered."""
    if not sys.platform.startswith("linux"):
        return 0
    return lower_other_threads(nice) + lower_thread_priority(threading.get_native_id(), nice)
