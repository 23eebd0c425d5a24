"""Helpers the benchmarks share: the exact command line, how busy the machine was, and a program
run in a pseudo-terminal as a user's terminal would run it.

llama.cpp's OpenMP threads spin-wait, so any other CPU load spoils decode timings (see
bench/RESULTS.md, 'A real cliff in a memory cgroup'). :class:`OtherLoad` measures the CPU time
that processes *other than this benchmark and its children* used while it ran, so each results
section can say whether its figures come from a quiet machine.
"""

from __future__ import annotations

import fcntl
import os
import platform
import pty
import resource
import select
import shlex
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUIET_CORES = 0.05  # other processes' average CPU use below which the machine counts as quiet


def command_line(script: str) -> str:
    """The command as typed from the repository root (``python bench/x.py …``)."""
    return shlex.join(["python", os.path.relpath(os.path.abspath(script), ROOT), *sys.argv[1:]])


def machine_line() -> str:
    import psutil

    cores = psutil.cpu_count(logical=False) or os.cpu_count()
    return (
        f"{platform.processor() or platform.machine()}, {cores} cores ({os.cpu_count()} logical), "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}"
    )


def machine_pace(loops: int = 1_000_000) -> float:
    """Milliseconds a fixed loop of Python takes on this core now. The host can slow a VM's CPUs
    without any process in it being busy and without the steal counter moving (see
    bench/RESULTS.md, 'Filled against prefilled'): a run timed beside this figure says which runs
    met a slow machine."""
    t = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i
    return (time.perf_counter() - t) * 1000


def _own_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # children that were waited for
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _busy_cpu() -> float:
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


class OtherLoad:
    """CPU used by other processes between :meth:`start` and :meth:`stop`, in cores on average.
    Call :meth:`stop` only after every child process has been waited for."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> OtherLoad:
        import psutil

        self._t0, self._busy0, self._own0 = time.monotonic(), _busy_cpu(), _own_cpu()
        self._load0 = os.getloadavg()[0]
        self._procs = {}
        for p in psutil.process_iter(["pid", "name"]):
            try:
                self._procs[p.pid] = (p.info["name"], sum(p.cpu_times()[:2]))
            except psutil.Error:
                pass
        self.cores: float | None = None
        self.top: list[str] = []
        return self

    def stop(self) -> OtherLoad:
        import psutil

        wall = max(time.monotonic() - self._t0, 1e-9)
        other = (_busy_cpu() - self._busy0) - (_own_cpu() - self._own0)
        self.cores = max(0.0, other / wall)
        mine = {os.getpid()}
        used = []
        for p in psutil.process_iter(["pid", "name"]):
            if p.pid in mine or p.pid not in self._procs:
                continue
            try:
                delta = sum(p.cpu_times()[:2]) - self._procs[p.pid][1]
            except psutil.Error:
                continue
            if delta / wall > 0.02:
                used.append((delta / wall, p.info["name"]))
        self.top = [f"{name} {share:.2f}" for share, name in sorted(used, reverse=True)[:4]]
        return self

    @property
    def busy(self) -> bool:
        return self.cores is not None and self.cores > QUIET_CORES

    def describe(self) -> str:
        if self.cores is None:
            return "other load: not measured"
        text = f"other processes used {self.cores:.2f} cores on average while it ran"
        if self.top:
            text += f" (of which still running: {', '.join(self.top)})"
        return text + (" — machine BUSY, figures are indicative only" if self.busy else " — quiet")


def busy_label(load: OtherLoad) -> str:
    return " (validation run, machine busy)" if load.busy else ""


COLS, ROWS = 120, 40


def tui_env(**extra: str) -> dict[str, str]:
    """The environment of a TUI in a modern terminal, cliff-tui's sources first on its path."""
    return {
        **os.environ,
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tui"), os.environ.get("PYTHONPATH")])),
        **extra,
    }


class PtyProgram:
    """A program in a pseudo-terminal of ``cols``×``rows``, its output read and thrown away by a
    thread of this process as a terminal would (an unread pty blocks the program once full); the
    last 64 KiB are kept, to wait for a marker and to show on failure. :meth:`stop` ends it by its
    PID."""

    def __init__(self, argv: list[str], env: dict[str, str], cols: int = COLS, rows: int = ROWS) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        try:
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.master = master
        self.bytes_read = 0
        self.tail = b""
        self._done = threading.Event()
        self._reader = threading.Thread(target=self._drain, name="pty drain", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while not self._done.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if not ready:
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the program ended and closed the terminal
                return
            if not data:
                return
            self.bytes_read += len(data)
            self.tail = (self.tail + data)[-65536:]

    def wait_for(self, marker: bytes, timeout: float) -> bool:
        """Whether ``marker`` showed within ``timeout`` seconds while the program ran."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if marker in self.tail:
                return True
            time.sleep(0.05)
        return marker in self.tail

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc.pid)

    def rss(self) -> int:
        import psutil

        return psutil.Process(self.proc.pid).memory_info().rss

    def screen_tail(self, chars: int = 600) -> str:
        """The end of its output, escape sequences removed, for a message."""
        import re

        text = re.sub(
            r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-_])", " ", self.tail.decode(errors="replace")
        )
        return " ".join(text.split())[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._done.set()
        self._reader.join(2)
        os.close(self.master)


def tree_cpu_seconds(pid: int) -> float:
    """User + system seconds of a process and its children."""
    import psutil

    p = psutil.Process(pid)
    t = p.cpu_times()
    total = t.user + t.system
    for child in p.children(recursive=True):
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total
