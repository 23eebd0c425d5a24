"""A real ``cliff-tui exporter`` process for the tests: started, found on the port it chose, stopped."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from typing import Iterator

SERVING = re.compile(r"serving (http://\S+)/metrics")


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cliff_tui", "exporter", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())


def wait_serving(proc: subprocess.Popen, limit: float = 60) -> tuple[str, list[str]]:
    """The base URL it printed, and every stderr line up to and including that one."""
    lines: list[str] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            match = SERVING.search(line)
            if match:
                return match.group(1), lines
        elif proc.poll() is not None:
            break
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
