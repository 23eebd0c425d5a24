"""``cliff-tui`` on a 120×40 pseudo-terminal whose output is read and thrown away as a terminal
would: what the recording scripts run."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios
import threading

COLS, ROWS = 120, 40


def cliff_on_a_pty(args: list[str]) -> tuple[int, int]:
    """``python -m cliff_tui ARGS…`` on the terminal: its PID and the terminal's fd."""
    argv = [sys.executable, "-m", "cliff_tui", *args]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    threading.Thread(target=_drain, args=(fd,), daemon=True).start()
    return pid, fd


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass
