"""Where the tests' files are, and facts about this machine the tests share."""

from __future__ import annotations

from pathlib import Path

import psutil

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
DATA = TESTS / "data"

CHILD_BYTES = 50_000_000  # what the ``child`` fixture holds resident


def free_pid() -> int:
    """A PID no process has now: the highest one free below the kernel's limit."""
    limit = Path("/proc/sys/kernel/pid_max")
    top = int(limit.read_text()) if limit.exists() else 99_999
    return next(pid for pid in range(top - 1, 1, -1) if not psutil.pid_exists(pid))
