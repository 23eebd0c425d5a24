"""System RAM, swap and one process's resident memory, through psutil (RAM and swap on Linux: see
read_memory)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import psutil

from cliff_tui.errors import BadInput
from cliff_tui.records import ProcessReading, RamReading, SwapReading
from cliff_tui.text import inert
from cliff_tui.units import KiB

_MEMINFO = "/proc/meminfo"
CHILDREN_EVERY_S = 2.0


def read_memory() -> tuple[RamReading, SwapReading]:
    """RAM and swap as psutil reports them. On Linux from one read of /proc/meminfo, the lines
    psutil takes them from: psutil reads the file once for RAM and again for swap, and parses
    /proc/vmstat too for page-in counts we do not show (most of a 4 Hz sample's cost). psutil
    itself where the file is absent or lacks those lines, and for the odd MemAvailable values
    it estimates around (0 on some kernels, above MemTotal in a container)."""
    fields = _meminfo_kib(b"MemTotal:", b"MemAvailable:", b"SwapTotal:", b"SwapFree:")
    if fields is None:
        return _psutil_ram(), _psutil_swap()
    total, available, swap_total, swap_free = (kib * KiB for kib in fields)
    swap = SwapReading(used_bytes=swap_total - swap_free, total_bytes=swap_total)
    if not 0 < available <= total:
        return _psutil_ram(), swap
    # "used" = total − available, as psutil and free(1) count it: page cache and buffers the
    # kernel can drop do not compete with a model.
    return RamReading(used_bytes=total - available, total_bytes=total, available_bytes=available), swap


def _psutil_ram() -> RamReading:
    vm = psutil.virtual_memory()
    return RamReading(used_bytes=int(vm.used), total_bytes=int(vm.total), available_bytes=int(vm.available))


def _psutil_swap() -> SwapReading:
    sm = psutil.swap_memory()
    return SwapReading(used_bytes=int(sm.used), total_bytes=int(sm.total))


def _meminfo_kib(*names: bytes) -> list[int] | None:
    try:
        with open(_MEMINFO, "rb") as f:
            data = f.read()
    except OSError:
        return None
    values = []
    for name in names:
        at = data.find(name)
        if at < 0:
            return None
        values.append(int(data[at + len(name) : data.index(b"\n", at)].split()[0]))
    return values


def check_process(pid: int) -> None:
    """:class:`BadInput` where no process has ``pid`` now: a PID to follow names a running one."""
    if not psutil.pid_exists(pid):
        raise BadInput(
            f"no process with PID {pid}: give the PID of a running process (`pgrep -f llama-server` prints a server's)"
        )


class ProcessProbe:
    """Resident memory of ``pid`` and of its children (a llama-server's workers, say).

    Finding the children means reading every process's /proc/PID/stat (psutil has no other way):
    most of a sample's cost on a desktop with hundreds of processes. The list is found again every
    ``children_every_s``; in between, the known children's RSS is read (a new child shows up within
    that time, one that exited drops out at once)."""

    def __init__(
        self, pid: int, *, children_every_s: float = CHILDREN_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.pid = pid
        self.children_every_s = children_every_s
        self._clock = clock
        self._process: psutil.Process | None = None
        self._reason: str | None = None
        self._children: list[psutil.Process] = []
        self._children_found_at = -math.inf
        try:
            self._process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._reason = f"no process with PID {pid}"
        except psutil.AccessDenied:
            self._reason = f"not allowed to read PID {pid} (try as its owner or root)"

    def read(self) -> ProcessReading:
        proc = self._process
        if proc is None:
            return self._missing(self._reason or f"no process with PID {self.pid}")
        try:
            with proc.oneshot():
                name = inert(proc.name())  # any local user names their own processes
                rss = int(proc.memory_info().rss)
                cpu = proc.cpu_times()
            children = self._known_children(proc)
            children_rss, n_children = _children_rss(children)
        except psutil.NoSuchProcess:
            self._children = []
            return self._missing(f"process {self.pid} has exited")
        except psutil.AccessDenied:
            return self._missing(f"not allowed to read PID {self.pid} (try as its owner or root)")
        return ProcessReading(
            pid=self.pid,
            name=name,
            rss_bytes=rss,
            children_rss_bytes=children_rss,
            n_children=n_children,
            swap_bytes=read_vm_swap(self.pid),
            cpu_s=cpu.user + cpu.system + _cpu_s(children),
            major_faults=read_major_faults(self.pid),
        )

    def children_pids(self) -> list[int]:
        if self._process is None:
            return []
        try:
            return [c.pid for c in self._known_children(self._process)]
        except psutil.Error:
            return []

    def _known_children(self, proc: psutil.Process) -> list[psutil.Process]:
        now = self._clock()
        if now - self._children_found_at >= self.children_every_s:
            self._children = proc.children(recursive=True)
            self._children_found_at = now
        return self._children

    def _missing(self, reason: str) -> ProcessReading:
        return ProcessReading(
            pid=self.pid, name=None, rss_bytes=None, children_rss_bytes=None, reasons={"rss_bytes": reason}
        )


def read_vm_swap(pid: int, proc: str = "/proc") -> int | None:
    """Bytes of ``pid``'s memory in swap (``VmSwap`` in /proc/PID/status; None where not Linux)."""
    try:
        with open(f"{proc}/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    at = data.find(b"VmSwap:")
    if at < 0:
        return None
    return int(data[at + 7 : data.index(b"\n", at)].split()[0]) * KiB


def read_major_faults(pid: int, proc: str = "/proc") -> int | None:
    """Major page faults of ``pid`` so far (``majflt``, field 12 of /proc/PID/stat): pages it had to
    read back, from swap or from a file."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[9]) if len(fields) > 9 else None


def read_cpu_busy_s() -> float | None:
    """Seconds all cores have spent busy (not idle or waiting on I/O) since boot."""
    try:
        t = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _cpu_s(children: list[psutil.Process]) -> float:
    total = 0.0
    for child in children:
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _children_rss(children: list[psutil.Process]) -> tuple[int, int]:
    total = 0
    count = 0
    for child in children:
        try:
            total += int(child.memory_info().rss)
            count += 1
        except psutil.Error:
            continue
    return total, count
