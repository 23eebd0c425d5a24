"""``cliff-tui run``: one context, a deep prefill and a generation, in this process."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from cliff_tui.engine.settings import resolve_settings
from cliff_tui.errors import check_readable
from cliff_tui.events import Notice
from cliff_tui.jobs import OnWorker, Outcome, Publish
from cliff_tui.records import RunSettings

if TYPE_CHECKING:
    from cliff_tui.engine.fill import FillChoice


class RunJob:
    follows_own_process = True

    def __init__(self, settings: RunSettings, fill: FillChoice = "real") -> None:
        self.settings = settings
        self.fill = fill
        self.title = f"depth {settings.depth:,} · n_gen {settings.n_gen}"

    def check(self) -> None:
        resolve_settings(self.settings)
        if self.settings.prompt_file:
            check_readable(self.settings.prompt_file, "prompt file")

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        from cliff_tui.engine.fill import AUTO_REAL_DEPTH, choose_fill
        from cliff_tui.engine.runner import Run, RunOptions  # llama.cpp loads when a run starts

        self.check()
        fill = choose_fill(self.fill, self.settings.depth)
        if self.fill == "auto" and fill == "synthetic":
            publish(
                Notice(
                    time.time(),
                    f"depth {self.settings.depth:,} is past {AUTO_REAL_DEPTH:,}: the KV cache "
                    "is filled synthetically and only its last stretch prefilled (--fill "
                    "real to prefill it all)",
                )
            )
        Run(self.settings, publish, cancel=cancel, options=RunOptions(fill=fill)).execute()
        return "done"
