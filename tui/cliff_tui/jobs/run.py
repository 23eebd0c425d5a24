"""``cliff-tui run``: one context, a deep prefill and a generation, in a worker process.

The model runs in a worker (:mod:`cliff_tui.engine.worker`), as each point of a triangulation
does: where memory runs out, the kernel's OOM killer takes the worker (its ``oom_score_adj`` is
raised), and this process, the screen and the recording outlive it to say so.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from cliff_tui.engine.settings import resolve_settings
from cliff_tui.errors import BadInput, Cancelled, CliffError, DoesNotFit, check_readable
from cliff_tui.events import Notice, RunFailed
from cliff_tui.jobs import OnWorker, Outcome, Publish
from cliff_tui.records import RunSettings

if TYPE_CHECKING:
    from cliff_tui.engine.options import FillChoice


class RunJob:
    follows_own_process = False

    def __init__(self, settings: RunSettings, fill: FillChoice = "real") -> None:
        self.settings = settings
        self.fill = fill
        self.title = f"depth {settings.depth:,} · n_gen {settings.n_gen}"

    def check(self) -> None:
        resolve_settings(self.settings)
        if self.settings.prompt_file:
            check_readable(self.settings.prompt_file, "prompt file")

    def run(self, publish: Publish, cancel: threading.Event, on_worker: OnWorker) -> Outcome:
        from cliff_tui.engine.options import AUTO_REAL_DEPTH, RunOptions, choose_fill
        from cliff_tui.engine.worker import run_point  # the model loads in the worker, not here

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
        end = run_point(self.settings, RunOptions(fill=fill), publish, cancel, on_pid=on_worker)
        if end.event is None:
            raise Cancelled("cancelled")
        if isinstance(end.event, RunFailed) and end.oom is None:
            raise _published(end.event)  # the user's to fix, said once (by the worker)
        return "done"


def _published(failed: RunFailed) -> CliffError:
    kinds: dict[str, type[CliffError]] = {"bad_input": BadInput, "cancelled": Cancelled}
    error: CliffError = (
        DoesNotFit(failed.message, failed.n_ctx)
        if failed.kind == "does_not_fit"
        else kinds.get(failed.kind, CliffError)(failed.message)
    )
    error.published = True
    return error
