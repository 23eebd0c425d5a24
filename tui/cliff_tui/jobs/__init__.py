"""Work that produces events besides the sampler: a run, a triangulation, an attached server.

A job blocks until it is done or ``cancel`` is set, publishing events as it goes; what it measured
reaches the front ends through those events (the store), never through the job object. The
session runs it: the TUI in a thread worker, headless on its main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal, Protocol

Publish = Callable[[object], None]
OnWorker = Callable[[int | None], None]
"""Told the PID of each worker process a job starts (None when it ends), so the sampler follows it."""
Outcome = Literal["done", "cancelled"]


class Job(Protocol):
    title: str
    follows_own_process: bool  # the model runs in this process: the sampler follows this PID

    def check(self) -> None:
        """Raise :class:`cliff_tui.errors.BadInput` for what the job would refuse, before anything
        loads: the command line calls it before the screen opens, ``run`` first of all."""
        ...

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        """Do the work; raise :class:`cliff_tui.errors.CliffError` for what the user can fix."""
        ...
