"""Helpers the benchmarks share: the exact command line, and how busy the machine was.

llama.cpp's OpenMP threads spin-wait, so any other CPU load spoils decode timings (see
bench/RESULTS.md, 'A real cliff in a memory cgroup'). :class:`OtherLoad` measures the CPU time
that processes *other than this benchmark and its children* used while it ran, so each results
section can say whether its figures come from a quiet machine.
"""

from __future__ import annotations

import os
import platform
import resource
import shlex
import sys
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
