"""The terminal driver on Linux and macOS: Textual's own, with an input thread that sleeps until
a key comes.

Textual's input thread wakes every 0.1 s to see whether the app is ending: ten wake-ups a
second on a dashboard that nobody types into (what that costs: bench/RESULTS.md, section
'Textual private paths'). Here the thread blocks in ``select`` on the terminal and on a
pipe that the driver's exit event writes to. It wakes on its own only when Textual's escape
delay is up after input that held an ESC (an Escape key, an arrow, a mouse report), so that a
lone Escape is still reported."""

from __future__ import annotations

import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual import constants
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

from cliff_tui.ui.textual_private import found, parser_debug

_TERMINAL, _WAKE = "terminal", "wake"


def terminal_driver() -> type[Driver]:
    """The quiet driver where this Textual has the parser it feeds, else Textual's own."""
    return QuietLinuxDriver if found().parsing is not None else LinuxDriver


class _WakingEvent(threading.Event):
    """An event that, when set, also writes a byte to a pipe: a thread blocked in ``select`` on
    the pipe's other end sees it at once."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd: int | None = wake_fd

    def set(self) -> None:
        super().set()
        if self._wake_fd is None:
            return
        try:
            os.write(self._wake_fd, b"!")
        except BlockingIOError:  # the pipe is full: the thread has a wake-up waiting already
            pass

    def stop_waking(self) -> bool:
        """Before the pipe is closed, as its number may soon name another file; False where
        that was done already."""
        waking, self._wake_fd = self._wake_fd is not None, None
        return waking


class QuietLinuxDriver(LinuxDriver):
    """Textual's Linux/macOS driver, its input thread woken by input or exit only."""

    exit_event: _WakingEvent

    def __init__(self, app: Any, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.exit_event = _WakingEvent(self._wake_write)

    def run_input_thread(self) -> None:
        parsing = found().parsing
        if parsing is None:
            super().run_input_thread()
            return
        parser = parsing.parser(parser_debug(self))
        decode = getincrementaldecoder("utf-8")().decode
        selector = selectors.SelectSelector()  # as Textual's: macOS's kqueue can't watch a tty
        selector.register(self.fileno, selectors.EVENT_READ, _TERMINAL)
        selector.register(self._wake_read, selectors.EVENT_READ, _WAKE)
        escape_due: float | None = None
        try:
            self._drain_wake()
            while not self.exit_event.is_set():
                timeout = None if escape_due is None else max(0.0, escape_due - time.monotonic())
                for key, _ in selector.select(timeout):
                    if key.data == _WAKE:
                        self._drain_wake()
                        continue
                    data = os.read(self.fileno, 4096)
                    if not data:  # the terminal closed: nothing more will come from it
                        selector.unregister(self.fileno)
                        continue
                    text = decode(data)
                    if not text:  # the first bytes of a character: the rest comes with the next read
                        continue  # (the parser takes an empty string for the end of input)
                    for event in parser.feed(text):
                        self.process_message(event)
                    if "\x1b" in text or escape_due is not None:  # the parser may be waiting to learn
                        escape_due = time.monotonic() + constants.ESCAPE_DELAY  # whether more follows
                if escape_due is not None and time.monotonic() >= escape_due:
                    escape_due = None
                for event in parser.tick():  # reports a lone Escape once its delay is up
                    self.process_message(event)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, parsing.error):
                pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_read, 64):
                pass
        except BlockingIOError:
            pass

    def suspend_application_mode(self) -> None:
        """As Textual's (ctrl+z, ``App.suspend``), but the wake pipe is kept for the input
        thread that resuming starts: only Textual's writer thread is closed."""
        self.stop_application_mode()
        super().close()

    def close(self) -> None:
        super().close()
        if self.exit_event.stop_waking():
            os.close(self._wake_read)
            os.close(self._wake_write)
