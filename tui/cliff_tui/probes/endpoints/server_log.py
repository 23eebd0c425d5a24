"""A local llama-server's own log, where it writes to a file cliff-tui can read (its stdout or stderr
redirected to one): the requests it failed because the context pool had no free cells.

llama-server logs ``send_error: task id = N, error: Context size has been exceeded.`` for each such
request (after ``failed to find free space in the KV cache, retrying with smaller batch size``
warnings, which alone are not a failure).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

FAILURE = "error: Context size has been exceeded"
TAIL_BYTES = 256 * 1024  # what --once reads of a log


@dataclass(frozen=True)
class LogRead:
    failures: int | None  # requests failed for lack of cells since the log was first read; None: unread
    note: str  # where the log is, or why it cannot be read


class ServerLog:
    """New lines of a server's log file, read from where it ended when attach started."""

    def __init__(self, pid: int) -> None:
        self.path, self.note = log_file(pid)
        self.offset = _size(self.path) if self.path else 0
        self.failures = 0

    def read(self) -> LogRead:
        if self.path is None:
            return LogRead(None, self.note)
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError as exc:
            return LogRead(None, f"its log {self.path}: {exc.strerror or exc}")
        end = data.rfind(b"\n") + 1  # a line half-written is read next time
        self.offset += end
        self.failures += data[:end].count(FAILURE.encode())
        return LogRead(self.failures, f"its log {self.path}")


def log_file(pid: int) -> tuple[str | None, str]:
    """The regular file the process writes its stderr (else stdout) to, or None and why not."""
    why = "its log is a terminal or a pipe (redirect llama-server's output to a file to read its failures)"
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if stat.S_ISREG(os.stat(f"/proc/{pid}/fd/{fd}").st_mode):
                return target, f"its log {target}"
        except PermissionError:
            why = f"its log: /proc/{pid}/fd is not readable (another user's process)"
        except OSError:
            continue
    return None, why


def recent_failures(pid: int, within_s: float, now: float) -> LogRead:
    """For one reading: failures in the log's tail, counted only if the log was written within
    ``within_s`` (the server's log lines carry no wall-clock time)."""
    path, note = log_file(pid)
    if path is None:
        return LogRead(None, note)
    try:
        size, mtime = os.stat(path).st_size, os.stat(path).st_mtime
        with open(path, "rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read()
    except OSError as exc:
        return LogRead(None, f"its log {path}: {exc.strerror or exc}")
    recent = now - mtime <= within_s
    return LogRead(tail.count(FAILURE.encode()) if recent else 0, f"its log {path}")


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
