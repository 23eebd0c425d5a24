"""Whether a worker that died of SIGKILL was killed by the out-of-memory killer, confirmed.

A SIGKILL alone says nothing: a user's ``kill -9`` sends one too. What confirms an OOM kill is the
memory cgroup's own count of them, read before the worker started and after it died (v1
``memory.oom_control``'s ``oom_kill``, v2 ``memory.events``' ``oom_kill``), and where it can be
read, the kernel's log line naming the PID (``/dev/kmsg``: "Killed process PID"). The worker's
cgroup is found while it lives (its /proc entry goes with it); its resident memory is read as it
runs, so the last reading before the kill is known.
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from cliff_tui.probes.cgroup import (
    CgroupVersion,
    cgroup_directory,
    cgroup_paths,
    find_mounts,
    read_cgroup_memory,
)
from cliff_tui.records import OomKill

KMSG = "/dev/kmsg"
KMSG_RECORDS_READ = 20_000  # the newest of the kernel's ring buffer is what matters; it holds far fewer


def oom_kill_count(directory: Path, version: CgroupVersion) -> int | None:
    """The cgroup's count of OOM kills (None: not readable, or a kernel that does not count them)."""
    name = "memory.oom_control" if version == 1 else "memory.events"
    try:
        text = (directory / name).read_text(encoding="ascii")
    except (OSError, ValueError):
        return None
    return parse_oom_kill(text)


def parse_oom_kill(text: str) -> int | None:
    """``oom_kill N`` from v1 memory.oom_control or v2 memory.events."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def kernel_says_oom_killed(pid: int, kmsg: str = KMSG) -> bool | None:
    """Whether the kernel's log holds "Killed process PID" (None: the log cannot be read here)."""
    try:
        fd = os.open(kmsg, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    needle = f"Killed process {pid} "
    found = False
    try:
        for _ in range(KMSG_RECORDS_READ):
            try:
                record = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on
                    continue
                break  # EAGAIN: the end
            if not record:
                break
            if needle in record.decode("utf-8", "replace"):
                found = True
    finally:
        os.close(fd)
    return found


def rss_of(pid: int, proc: str = "/proc") -> int | None:
    try:
        with open(f"{proc}/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _Where:
    directory: Path
    version: CgroupVersion
    path: str
    kills_before: int | None


class OomWatch:
    """One worker: its memory cgroup and the cgroup's OOM kill count when it started, its resident
    memory as it runs, and at its end whether the OOM killer ended it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.last_rss_bytes: int | None = None
        self._where = _find(pid)
        memory = read_cgroup_memory(pid)
        self.limit_bytes = memory.limit_bytes
        self.limit_path = memory.limited_by
        self.poll()

    def poll(self) -> None:
        rss = rss_of(self.pid)
        if rss:
            self.last_rss_bytes = rss

    def ended(self, exitcode: int | None, depth: int | None) -> OomKill | None:
        """What its end says about memory; None where it was not a SIGKILL."""
        if exitcode != -signal.SIGKILL:
            return None
        where = self._where
        counted = None
        if where is not None and where.kills_before is not None:
            after = oom_kill_count(where.directory, where.version)
            counted = after is not None and after > where.kills_before
        kernel = kernel_says_oom_killed(self.pid)
        return OomKill(
            pid=self.pid,
            confirmed=bool(counted or kernel),
            by_cgroup=counted,
            by_kernel_log=kernel,
            cgroup_path=where.path if where else None,
            limit_bytes=self.limit_bytes,
            limit_path=self.limit_path,
            last_rss_bytes=self.last_rss_bytes,
            depth=depth,
        )


def _find(pid: int) -> _Where | None:
    try:
        mounts = find_mounts()
        paths = cgroup_paths(pid)
    except (OSError, ValueError):
        return None
    for version in (1, 2):
        if version in mounts and version in paths:
            directory = cgroup_directory(mounts[version], paths[version])
            if directory is not None and directory.is_dir():
                return _Where(directory, version, paths[version], oom_kill_count(directory, version))
    return None


def raise_oom_score(value: int = 1000, pid: int | str = "self") -> None:
    """Make a process (this one by default) the OOM killer's first choice: raising it needs no
    privilege, for a process of one's own."""
    try:
        Path(f"/proc/{pid}/oom_score_adj").write_text(str(value), encoding="ascii")
    except OSError:
        pass
