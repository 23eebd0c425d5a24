"""Memory limit, usage and swap of the cgroup a process is in, and its CPU quota (Linux, cgroup
v1 and v2).

Docker ``--memory``, Kubernetes limits and systemd slices cap a process far below the host's RAM,
and /proc/meminfo still shows the host. The cgroup is found through /proc/PID/cgroup, its
directory through this process's /proc/self/mountinfo (a container may see a bind-mounted
subtree), and read from there:

- v1 (the ``memory`` hierarchy): memory.limit_in_bytes, memory.usage_in_bytes,
  memory.memsw.usage_in_bytes and memory.stat; the limit that applies is the smallest along the
  path up (memory.stat's ``hierarchical_memory_limit``);
- v2 (the unified hierarchy, when its memory controller is enabled): memory.max, memory.current,
  memory.swap.current, memory.swap.max and memory.stat; the smallest memory.max along the path up.

Docker ``--cpus`` and Kubernetes CPU limits give a process a quota of CPU time (v1
cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max), not fewer CPUs: its affinity still names every
core, and threads past the quota are throttled.

:class:`CgroupLimits` reads both for the sampler: what applies is searched for seldom, and what
was found is read again every few seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cliff_tui.records import CgroupReading, CpuQuota

# v1 reports "no limit" as PAGE_COUNTER_MAX pages: 9223372036854771712 with 4 KiB pages.
V1_UNLIMITED = 1 << 62

CgroupVersion = Literal[1, 2]


@dataclass(frozen=True)
class CgroupMount:
    version: CgroupVersion
    mount_point: str
    root: str  # the part of the hierarchy mounted there ("/" unless a container got a subtree)


@dataclass(frozen=True)
class CgroupMemory:
    """One reading. A field is None where it cannot be known; ``reasons`` says why, by field name."""

    pid: int
    version: CgroupVersion | None
    path: str | None  # as /proc/PID/cgroup names it
    directory: str | None  # where it was read
    limit_bytes: int | None  # the smallest memory limit on the path up; None: no limit
    limited_by: str | None  # the cgroup path whose limit that is
    swap_limit_bytes: int | None  # swap this cgroup may use on top of limit_bytes; None: no limit
    usage_bytes: int | None
    swap_bytes: int | None
    anon_bytes: int | None
    file_bytes: int | None
    reasons: dict[str, str] = field(default_factory=dict)


FIELDS = ("limit_bytes", "swap_limit_bytes", "usage_bytes", "swap_bytes", "anon_bytes", "file_bytes")


def find_mounts(
    mountinfo: str = "/proc/self/mountinfo", controller: str = "memory"
) -> dict[CgroupVersion, CgroupMount]:
    """The v1 hierarchy of ``controller`` and the v2 hierarchy, where mounted."""
    mounts: dict[CgroupVersion, CgroupMount] = {}
    with open(mountinfo, encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            root, point, fstype, options = _unescape(fields[3]), _unescape(fields[4]), tail[0], tail[2]
            if fstype == "cgroup2" and 2 not in mounts:
                mounts[2] = CgroupMount(2, point, root)
            elif fstype == "cgroup" and controller in options.split(",") and 1 not in mounts:
                mounts[1] = CgroupMount(1, point, root)
    return mounts


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def cgroup_paths(pid: int, proc: str = "/proc", controller: str = "memory") -> dict[CgroupVersion, str]:
    """The process's path in the v1 hierarchy of ``controller`` and in the v2 one."""
    paths: dict[CgroupVersion, str] = {}
    with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as f:
        for line in f:
            hierarchy, _, rest = line.rstrip("\n").partition(":")
            controllers, _, path = rest.partition(":")
            if hierarchy == "0" and controllers == "":
                paths[2] = path
            elif controller in controllers.split(","):
                paths[1] = path
    return paths


def cgroup_directory(mount: CgroupMount, path: str) -> Path | None:
    """Where ``path`` is in this mount; None if it lies outside the mounted subtree."""
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    relative = path[len(root) :].strip("/")
    return Path(mount.mount_point, relative) if relative else Path(mount.mount_point)


def read_cpu_quota(pid: int | None = None, *, proc: str = "/proc", mountinfo: str | None = None) -> CpuQuota | None:
    """The smallest CPU quota from the cgroup of ``pid`` (default: this process) up, v1 where a
    ``cpu`` hierarchy is mounted, else v2, with its periods; None where none is set or none can
    be read."""
    found = find_cpu_quota(pid, proc=proc, mountinfo=mountinfo)
    return found.read() if found is not None else None


@dataclass(frozen=True)
class FoundCpuQuota:
    """A quota found on the path up, and where: its periods are read from there each time."""

    path: str
    cpus: float
    directory: Path

    def read(self) -> CpuQuota:
        return CpuQuota(self.path, self.cpus, *_throttled_periods(self.directory))


def find_cpu_quota(
    pid: int | None = None, *, proc: str = "/proc", mountinfo: str | None = None
) -> FoundCpuQuota | None:
    """:func:`read_cpu_quota`'s search, without the periods."""
    pid = os.getpid() if pid is None else pid
    try:
        mounts = find_mounts(mountinfo or f"{proc}/self/mountinfo", "cpu")
        paths = cgroup_paths(pid, proc, "cpu")
    except (OSError, ValueError):  # ValueError: bytes that are not UTF-8
        return None
    version: CgroupVersion = 1 if 1 in mounts and 1 in paths else 2
    if version not in mounts or version not in paths:
        return None
    directory = cgroup_directory(mounts[version], paths[version])
    if directory is None:
        return None
    # the mount point too: a container's own cgroup is the root of what it mounts
    up = _up(Path(mounts[version].mount_point), directory, paths[version], including_top=True)
    found = [FoundCpuQuota(path, cpus, where) for where, path in up if (cpus := _cpu_quota(version, where)) is not None]
    return min(found, key=lambda quota: quota.cpus, default=None)


def _cpu_quota(version: CgroupVersion, directory: Path) -> float | None:
    """CPUs' worth of time per period set on this one cgroup; None: no quota, or unreadable."""
    try:
        if version == 1:
            quota = int((directory / "cpu.cfs_quota_us").read_text(encoding="ascii"))
            period = int((directory / "cpu.cfs_period_us").read_text(encoding="ascii"))
        else:
            text = (directory / "cpu.max").read_text(encoding="ascii").split()
            if text[0] == "max":
                return None
            quota, period = int(text[0]), int(text[1])
    except (OSError, ValueError, IndexError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def _throttled_periods(directory: Path) -> tuple[int | None, int | None]:
    """cpu.stat's periods and throttled periods (v1 and v2 name them alike)."""
    try:
        text = (directory / "cpu.stat").read_text(encoding="ascii")
    except (OSError, ValueError):
        return None, None
    stat = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    periods, throttled = stat.get("nr_periods", "").strip(), stat.get("nr_throttled", "").strip()
    return (int(periods) if periods.isdigit() else None), (int(throttled) if throttled.isdigit() else None)


def _up(top: Path, directory: Path, path: str, including_top: bool = False) -> Iterator[tuple[Path, str]]:
    """A cgroup's directory and path, then each of its parents', up to the mount point (the root
    cgroup's own, unless ``including_top``)."""
    while directory != top and top in directory.parents:
        yield directory, path
        directory, path = directory.parent, path.rsplit("/", 1)[0] or "/"
    if including_top and directory == top:
        yield directory, path


def read_cgroup_memory(pid: int | None = None, *, proc: str = "/proc", mountinfo: str | None = None) -> CgroupMemory:
    """The memory cgroup of ``pid`` (default: this process), v1 where the memory controller is
    on a v1 hierarchy, else v2."""
    pid = os.getpid() if pid is None else pid
    try:
        mounts = find_mounts(mountinfo or f"{proc}/self/mountinfo")
        paths = cgroup_paths(pid, proc)
    except FileNotFoundError:
        return _unknown(pid, f"no {proc}/{pid}/cgroup: no such process, or not Linux")
    except OSError as exc:
        return _unknown(pid, f"cannot read the cgroup of PID {pid}: {exc.strerror or exc}")
    except ValueError:  # bytes that are not UTF-8
        return _unknown(pid, f"cannot read the cgroup of PID {pid}: its mounts or cgroup file are not UTF-8")
    if 1 in mounts and 1 in paths:
        return _read(1, pid, mounts[1], paths[1])
    if 2 in mounts and 2 in paths:
        return _read(2, pid, mounts[2], paths[2])
    return _unknown(pid, "no memory cgroup: neither a v1 memory hierarchy nor cgroup v2 is mounted")


def _unknown(
    pid: int, reason: str, version: CgroupVersion | None = None, path: str | None = None, directory: str | None = None
) -> CgroupMemory:
    return CgroupMemory(
        pid,
        version,
        path,
        directory,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        reasons=dict.fromkeys(FIELDS, reason),
    )


def _read(version: CgroupVersion, pid: int, mount: CgroupMount, path: str) -> CgroupMemory:
    directory = cgroup_directory(mount, path)
    if directory is None:
        return _unknown(pid, f"cgroup {path} is outside the hierarchy mounted at {mount.mount_point}", version, path)
    if not directory.is_dir():
        return _unknown(pid, f"{directory} is missing (the process moved or exited?)", version, path, str(directory))
    if version == 2 and not (directory / "memory.current").exists():
        why = (
            f"cgroup {path} is the root cgroup: no memory limit"
            if directory == Path(mount.mount_point)
            else f"the v2 memory controller is not enabled for cgroup {path}"
        )
        return _unknown(pid, why, 2, path, str(directory))
    reader = _V1Reader if version == 1 else _V2Reader
    return reader(directory, mount, path).reading(pid)


class _Reader:
    version: CgroupVersion

    def __init__(self, directory: Path, mount: CgroupMount, path: str) -> None:
        self.directory = directory
        self.mount_point = Path(mount.mount_point)
        self.path = path
        self.reasons: dict[str, str] = {}

    def value(self, name: str, field_name: str, directory: Path | None = None) -> str | None:
        where = (directory or self.directory) / name
        try:
            return where.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            self.reasons.setdefault(field_name, f"{where} is missing")
        except OSError as exc:
            self.reasons.setdefault(field_name, f"cannot read {where}: {exc.strerror or exc}")
        return None

    def number(self, name: str, field_name: str, directory: Path | None = None) -> int | None:
        text = self.value(name, field_name, directory)
        if text is None or text == "max":
            return None
        try:
            return int(text)
        except ValueError:
            self.reasons.setdefault(field_name, f"{(directory or self.directory) / name}: not a number ({text[:40]!r})")
            return None

    def stat(self) -> dict[str, int]:
        text = self.value("memory.stat", "anon_bytes")
        if text is None:
            self.reasons.setdefault("file_bytes", self.reasons["anon_bytes"])
            return {}
        stat: dict[str, int] = {}
        for line in text.splitlines():
            key, _, number = line.partition(" ")
            if number.strip().isdigit():
                stat[key] = int(number)
        return stat

    def stat_field(self, stat: dict[str, int], key: str, field_name: str) -> int | None:
        if key in stat:
            return stat[key]
        if stat:
            self.reasons.setdefault(field_name, f"{self.directory / 'memory.stat'} has no {key!r}")
        return None

    def smallest(self, name: str, field_name: str) -> tuple[int | None, str | None]:
        """The smallest limit ``name`` from this cgroup up to the top of the mounted hierarchy
        (the root cgroup has none) and the cgroup it is set on; None where none is set."""
        best: int | None = None
        best_path: str | None = None
        for directory, path in _up(self.mount_point, self.directory, self.path):
            # a parent's unreadable file is no reason: its own cgroup's is
            number = self.number(name, field_name if directory == self.directory else "_", directory)
            if number is not None and number < V1_UNLIMITED and (best is None or number < best):
                best, best_path = number, path
        self.reasons.pop("_", None)
        if best is None:
            self.reasons.setdefault(field_name, f"no {name} set on cgroup {self.path} or above it")
        return best, best_path

    def record(self, pid: int, **values: int | str | None) -> CgroupMemory:
        return CgroupMemory(
            pid=pid,
            version=self.version,
            path=self.path,
            directory=str(self.directory),
            reasons=self.reasons,
            **values,  # type: ignore[arg-type]  # each caller passes the fields by name, typed as in CgroupMemory
        )


class _V1Reader(_Reader):
    version: CgroupVersion = 1

    def reading(self, pid: int) -> CgroupMemory:
        stat = self.stat()
        limit, limited_by = self.smallest("memory.limit_in_bytes", "limit_bytes")
        above = stat.get("hierarchical_memory_limit", V1_UNLIMITED)
        if above < V1_UNLIMITED and (limit is None or above < limit):
            # set above the part of the hierarchy this mount shows (a container's own subtree)
            limit, limited_by = above, "a cgroup above " + (self.path.rsplit("/", 1)[0] or "/")
            self.reasons.pop("limit_bytes", None)
        usage = self.number("memory.usage_in_bytes", "usage_bytes")
        return self.record(
            pid,
            limit_bytes=limit,
            limited_by=limited_by,
            swap_limit_bytes=self._swap_limit(stat, limit),
            usage_bytes=usage,
            swap_bytes=self._swap(stat, usage),
            anon_bytes=self.stat_field(stat, "total_rss", "anon_bytes"),
            file_bytes=self.stat_field(stat, "total_cache", "file_bytes"),
        )

    def _swap(self, stat: dict[str, int], usage: int | None) -> int | None:
        if "total_swap" in stat:
            return stat["total_swap"]
        memsw = self.number("memory.memsw.usage_in_bytes", "swap_bytes")
        if memsw is None:
            self.reasons["swap_bytes"] = "no swap accounting in this cgroup (memory.memsw.* absent: swapaccount=0?)"
            return None
        return max(memsw - usage, 0) if usage is not None else None

    def _swap_limit(self, stat: dict[str, int], limit: int | None) -> int | None:
        memsw = stat.get("hierarchical_memsw_limit")
        if memsw is None:
            self.reasons["swap_limit_bytes"] = "no swap accounting in this cgroup (memory.memsw.* absent)"
            return None
        if memsw >= V1_UNLIMITED or limit is None:
            self.reasons["swap_limit_bytes"] = "no memory+swap limit on this cgroup or above it"
            return None
        return max(memsw - limit, 0)


class _V2Reader(_Reader):
    version: CgroupVersion = 2

    def reading(self, pid: int) -> CgroupMemory:
        limit, limited_by = self.smallest("memory.max", "limit_bytes")
        swap_limit, _ = self.smallest("memory.swap.max", "swap_limit_bytes")
        stat = self.stat()
        return self.record(
            pid,
            limit_bytes=limit,
            limited_by=limited_by,
            swap_limit_bytes=swap_limit,
            usage_bytes=self.number("memory.current", "usage_bytes"),
            swap_bytes=self.number("memory.swap.current", "swap_bytes"),
            anon_bytes=self.stat_field(stat, "anon", "anon_bytes"),
            file_bytes=self.stat_field(stat, "file", "file_bytes"),
        )


CGROUP_EVERY_S = 2.0  # a memory limit's use and a CPU quota's periods, where one was found, read again this often
CGROUP_SEARCH_EVERY_S = 30.0  # whether a memory limit or a CPU quota applies, searched for this often


class CgroupLimits:
    """A process's (None: this one's) memory cgroup limit, where it is below RAM, and CPU quota.

    What applies is searched for every ``search_every_s`` or when the followed process changes
    (most hosts have neither, and both seldom change); where something applies it is read again
    every ``every_s``. So a limit set later shows within ``search_every_s``, as does a quota
    changed or removed (its periods are read meanwhile where it was found); a limit removed shows
    at the next read."""

    def __init__(
        self,
        every_s: float = CGROUP_EVERY_S,
        search_every_s: float = CGROUP_SEARCH_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every_s = every_s
        self.search_every_s = search_every_s
        self._clock = clock
        self._read_at: tuple[int | None, float] | None = None
        self._searched_at: tuple[int | None, float] | None = None
        self._last: tuple[CgroupReading | None, CpuQuota | None] = (None, None)
        self._quota: FoundCpuQuota | None = None
        self._lock = threading.Lock()  # the sampler and a run's fresh baseline (the job's thread) both read

    def read(
        self, pid: int | None, ram_total: int, fresh: bool = False
    ) -> tuple[CgroupReading | None, CpuQuota | None]:
        """``fresh``: searched for and read now, whenever it was last."""
        if not sys.platform.startswith("linux"):
            return None, None
        with self._lock:
            return self._read(pid, ram_total, fresh)

    def _read(self, pid: int | None, ram_total: int, fresh: bool) -> tuple[CgroupReading | None, CpuQuota | None]:
        now = self._clock()
        if not fresh and not self._due(self._read_at, pid, now, self.every_s):
            return self._last
        self._read_at = (pid, now)
        searching = fresh or self._due(self._searched_at, pid, now, self.search_every_s)
        if searching:
            self._searched_at = (pid, now)
            self._quota = find_cpu_quota(pid)
        limit = self._memory_limit(pid, ram_total) if searching or self._last[0] is not None else None
        self._last = (limit, self._quota.read() if self._quota is not None else None)
        return self._last

    @staticmethod
    def _due(last: tuple[int | None, float] | None, pid: int | None, now: float, every_s: float) -> bool:
        return last is None or last[0] != pid or now - last[1] >= every_s

    @staticmethod
    def _memory_limit(pid: int | None, ram_total: int) -> CgroupReading | None:
        memory = read_cgroup_memory(pid)
        if memory.limit_bytes is None or memory.limit_bytes >= ram_total or memory.path is None:
            return None
        return CgroupReading(
            memory.limited_by or memory.path, memory.limit_bytes, memory.usage_bytes, memory.swap_bytes
        )
