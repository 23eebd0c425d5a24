"""``cliff-tui run``: one context, a deep prefill and a generation, in this process."""

from __future__ import annotations

import threading

from cliff_tui.events import RunSettings
from cliff_tui.jobs import OnWorker, Outcome, Publish


class RunJob:
    follows_own_process = True

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.title = f"depth {settings.depth:,} · n_gen {settings.n_gen}"

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        from cliff_tui.engine.runner import Run  # llama.cpp loads when a run starts

        Run(self.settings, publish, cancel=cancel).execute()
        return "done"
