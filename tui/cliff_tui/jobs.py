"""Work that produces events besides the sampler: a run, a triangulation, an attached server.

A job blocks until done or ``cancel`` is set, publishing events as it goes. The TUI runs it in a
Textual thread worker, the headless front end on its main thread: the same job either way.
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

from cliff_tui.events import RunSettings

Publish = Callable[[object], None]


class Job(Protocol):
    title: str
    follows_own_process: bool

    def run(self, publish: Publish, cancel: threading.Event) -> None:
        """Do the work; raise :class:`cliff_tui.engine.errors.CliffError` for user mistakes."""


class RunJob:
    """``cliff-tui run``: the seed's single experiment, in this process."""

    follows_own_process = True

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.title = f"depth {settings.depth:,} · n_gen {settings.n_gen}"
        self.result = None

    def run(self, publish: Publish, cancel: threading.Event) -> None:
        from cliff_tui.engine.runner import Run

        self.result = Run(self.settings, publish, cancel=cancel).execute()
