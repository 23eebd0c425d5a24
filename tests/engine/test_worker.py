"""The worker process a run or a calibration happens in: Ctrl-C belongs to the parent."""

from __future__ import annotations

import os
import signal
import threading
import time

from cliff_tui.engine.worker import run_in_worker


def _report_then_wait(conn) -> None:
    conn.send("started")
    time.sleep(30)


def test_an_interrupt_sent_to_the_worker_leaves_it_to_the_parent_to_stop():
    cancel, pids, seen = threading.Event(), [], []

    def on_message(message) -> None:
        seen.append(message)
        os.kill(pids[0], signal.SIGINT)  # as Ctrl-C reaches every process of the terminal's group
        threading.Timer(1.0, cancel.set).start()

    started = time.monotonic()
    code = run_in_worker(_report_then_wait, (), on_message, cancel, on_pid=lambda pid: pid and pids.append(pid))
    assert seen == ["started"]
    assert code is None  # cancelled by the parent, not a run that died of the interrupt
    assert 1.0 <= time.monotonic() - started < 10
