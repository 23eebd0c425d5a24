"""A real ``cliff-tui exporter`` process for the tests: started, found on the port it chose, stopped."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SERVING = re.compile(r"serving (http://\S+)/metrics")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}


def start(*args: str) -> subprocess.Popen:
    """The exporter, its stderr lines handed to ``proc.lines`` by a reader thread (a select() on the
    pipe would miss a line already sitting in Python's buffer)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cliff_tui", "exporter", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    proc.lines = queue.Queue()  # type: ignore[attr-defined]
    threading.Thread(target=_read_lines, args=(proc,), daemon=True).start()
    return proc


def _read_lines(proc: subprocess.Popen) -> None:
    for line in proc.stderr:
        proc.lines.put(line.rstrip("\n"))  # type: ignore[attr-defined]
    proc.lines.put(None)  # type: ignore[attr-defined]


def wait_serving(proc: subprocess.Popen, limit: float = 60) -> tuple[str, list[str]]:
    """The base URL it printed, and every stderr line up to and including that one."""
    lines: list[str] = []
    deadline = time.monotonic() + limit
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = proc.lines.get(timeout=left)  # type: ignore[attr-defined]
        except queue.Empty:
            break
        if line is None:
            break
        lines.append(line)
        match = SERVING.search(line)
        if match:
            return match.group(1), lines
    raise AssertionError(f"the exporter did not start (rc {proc.poll()}): {lines}")


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextmanager
def exporter(*args: str) -> Iterator[tuple[str, subprocess.Popen, list[str]]]:
    proc = start(*args)
    try:
        url, lines = wait_serving(proc)
        yield url, proc, lines
    finally:
        stop(proc)
