"""The terminal driver: its input thread sleeps until input comes, yet keys, a lone Escape, a
character split across reads, quitting and suspending all still work: the thread on a pipe in
this process, and the real dashboard on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from cliff_tui.ui.terminal import QuietLinuxDriver

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/task")

QUIET_S = 1.5


class Terminal:
    """A program on a 120×40 pseudo-terminal, drained as a terminal would."""

    def __init__(self, argv: list[str]) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {key: value for key, value in os.environ.items() if key != "TEXTUAL_DRIVER"}
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env={**env, "TERM": "xterm-256color", "ESCDELAY": "100"},
        )
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


class _Thread:
    """The driver's input thread reading a pipe, as it reads a terminal; what it hands the app,
    kept."""

    def __init__(self, driver: _KeptMessages) -> None:
        self.driver = driver
        self.read_end, self.write_end = os.pipe()
        driver.fileno = self.read_end
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.driver.run_input_thread()
        except BaseException as error:
            self.errors.append(error)

    def wake_ups(self) -> int:
        status = Path(f"/proc/self/task/{self.thread.native_id}/status").read_text()
        return int(status.split("voluntary_ctxt_switches:")[1].split()[0])

    def keys_within(self, seconds: float) -> list[str]:
        time.sleep(seconds)
        return [getattr(message, "key", type(message).__name__) for message in self.driver.kept]

    def stop(self) -> None:
        self.driver.exit_event.set()
        self.thread.join(2)
        os.close(self.write_end)
        os.close(self.read_end)


class _KeptMessages(QuietLinuxDriver):
    def __init__(self) -> None:
        super().__init__(object(), mouse=False)
        self.kept: list = []

    def process_message(self, message) -> None:
        self.kept.append(message)


@pytest.fixture
async def input_thread():
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}  # the driver takes them
    driver = _KeptMessages()
    thread = _Thread(driver)
    try:
        yield thread
    finally:
        thread.stop()
        driver.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


async def test_the_input_thread_sleeps_until_input_comes(input_thread):
    time.sleep(0.2)
    before = input_thread.wake_ups()
    time.sleep(QUIET_S)
    assert input_thread.wake_ups() - before <= 1  # Textual's own thread: some 15 in that time
    os.write(input_thread.write_end, b"q")
    assert input_thread.keys_within(0.3) == ["q"]


async def test_the_input_thread_ends_when_the_app_does(input_thread):
    input_thread.driver.exit_event.set()
    input_thread.thread.join(1)
    assert not input_thread.thread.is_alive() and input_thread.errors == []


async def test_a_lone_escape_is_reported_once_the_escape_delay_is_up(input_thread):
    os.write(input_thread.write_end, b"\x1b")
    assert input_thread.keys_within(0.4) == ["escape"]


async def test_a_sequence_whose_tail_comes_in_a_later_read_is_not_held(input_thread):
    os.write(input_thread.write_end, b"\x1b")
    time.sleep(0.05)
    os.write(input_thread.write_end, b"[")  # an unfinished sequence: reported after the delay, as Textual's
    assert input_thread.keys_within(0.4) == ["left_square_bracket"]  # own thread reports it: its last key
    os.write(input_thread.write_end, b"x")
    assert input_thread.keys_within(0.3) == ["left_square_bracket", "x"]  # the next key is a key of its own


async def test_a_character_split_across_two_reads_arrives_whole(input_thread):
    os.write(input_thread.write_end, "é".encode()[:1])
    time.sleep(0.1)
    os.write(input_thread.write_end, "é".encode()[1:] + b"x")
    assert input_thread.keys_within(0.3) == ["é", "x"] and input_thread.errors == []


# --- the real dashboard on a pseudo-terminal --------------------------------------------------


@pytest.fixture
def watch():
    terminal = Terminal([sys.executable, "-m", "cliff_tui", "watch", "-i", "1"])
    try:
        terminal.wait_for(b"RAM")
        yield terminal
    finally:
        terminal.close()


def test_keys_a_lone_escape_and_quit_reach_the_app(watch):
    watch.press(b"l")
    watch.wait_for(b"esc to close", limit=5)
    watch.press(b"\x1b")  # nothing follows it: reported once the escape delay (0.1 s) is up
    watch.read_for(0.5)
    assert watch.proc.poll() is None
    watch.press(b"q")  # quits only where the Escape closed the log: else it closes the log, or
    # follows an Escape still pending and reads as alt+q
    assert watch.exit_code(limit=5) == 0
    assert b"Traceback" not in watch.out


def test_the_dashboard_takes_keys_after_a_suspend_and_resume(watch):
    os.kill(watch.proc.pid, signal.SIGTSTP)
    watch.read_for(1.0)
    os.kill(watch.proc.pid, signal.SIGCONT)
    watch.wait_for(b"RAM", limit=10)  # drawn again
    watch.read_for(1.0)
    assert watch.proc.poll() is None
    watch.press(b"q")
    assert watch.exit_code(limit=5) == 0
    assert b"Traceback" not in watch.out
