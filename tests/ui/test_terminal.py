"""The real dashboard on a real pseudo-terminal: its input thread sleeps until a key comes, yet
keys, a lone Escape and quitting all still work."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/task")

QUIET_S = 3.0
MOST_WAKE_UPS_A_SECOND = 5.0  # Textual's own input thread wakes ten times a second


class Terminal:
    """A program on a 120×40 pseudo-terminal, drained as a terminal would."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                     env={**os.environ, "TERM": "xterm-256color"})
        os.close(slave)
        self.out = bytearray()

    def read_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if select.select([self.master], [], [], left)[0]:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the program exited
                    return
                if not chunk:
                    return
                self.out += chunk

    def wait_for(self, text: bytes, limit: float = 60.0) -> None:
        start = len(self.out)
        end = time.monotonic() + limit
        while text not in self.out[start:] and time.monotonic() < end and self.proc.poll() is None:
            self.read_for(0.1)
        assert text in self.out[start:], f"{text!r} never drawn; the program wrote {bytes(self.out[-400:])!r}"

    def press(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def exit_code(self, limit: float) -> int | None:
        """The program's exit status once it ends within ``limit`` s (drained meanwhile: a
        terminal that is not read blocks its writes), else None."""
        end = time.monotonic() + limit
        while self.proc.poll() is None and time.monotonic() < end:
            self.read_for(0.1)
        return self.proc.poll()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        os.close(self.master)


def _wake_ups(pid: int) -> dict[int, int]:
    """Each thread's voluntary context switches: how often it went to sleep and was woken."""
    counts = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                counts[int(task.name)] = int(line.split()[1])
    return counts


@pytest.fixture
def watch():
    terminal = Terminal([sys.executable, "-m", "cliff_tui", "watch", "-i", "1"])
    try:
        terminal.wait_for(b"RAM")
        yield terminal
    finally:
        terminal.close()


def test_no_thread_but_the_main_one_wakes_often_while_nobody_types(watch):
    pid = watch.proc.pid
    before = _wake_ups(pid)
    watch.read_for(QUIET_S)
    after = _wake_ups(pid)
    rates = {tid: (after[tid] - before[tid]) / QUIET_S for tid in after if tid in before and tid != pid}
    assert rates and max(rates.values()) <= MOST_WAKE_UPS_A_SECOND, rates


def test_keys_a_lone_escape_and_quit_still_reach_the_app(watch):
    watch.press(b"l")
    watch.wait_for(b"esc to close", limit=5)
    watch.press(b"\x1b")  # nothing follows it: reported once Textual's escape delay (0.1 s) is up
    watch.read_for(0.5)
    watch.press(b"q")  # quits only where the Escape closed the log: else it closes the log, or
    # follows an Escape still pending and reads as alt+q
    assert watch.exit_code(limit=5) == 0
