"""A memory cgroup with swap behind it, as root, undone afterwards: a real cliff on a CPU machine.

``sandbox(limit)`` makes swap (a swap file, or a zram device where the kernel has zram), creates a
memory cgroup named ``cliff-test-<pid>-<n>`` (v2 ``memory.max`` / ``memory.swap.max`` where the v2
memory controller is enabled, else v1 ``memory.limit_in_bytes``), and yields a :class:`Sandbox`
whose ``popen`` starts commands inside it. On exit, and also at interpreter exit or on SIGTERM /
SIGHUP, it kills what is left in the cgroup, removes it, turns the swap off and deletes it. Things
left behind by a run that was SIGKILLed (the owner PID in the name is dead) are removed on the
next ``sandbox()`` — swap files and cgroups; a zram device has no name to find it by (``swapoff
/dev/zramN`` and write N to /sys/class/zram-control/hot_remove by hand).

Where it cannot work it raises :class:`Unavailable` with the reason (the fixtures turn that into
a skip, a failure under CI: not root, swapon refused, a cgroup that cannot be made), or
:class:`PlatformLacks` where the kernel has no such thing (no zram, no memory or cpu controller):
a skip everywhere.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cliff_tui.probes.cgroup import CgroupMemory, find_mounts, read_cgroup_memory

PREFIX = "cliff-test-"
MiB = 1024 * 1024
SWAP_DIR = Path("/var/tmp")
SwapKind = Literal["file", "zram"]
_NAME = re.compile(rf"^{PREFIX}(\d+)-\d+")
_counter = itertools.count()


class Unavailable(Exception):
    """This machine cannot host the sandbox; the message says why."""


class PlatformLacks(Unavailable):
    """What this kernel does not have at all, rather than what the test run was not given."""


# --- cleanup that also runs on atexit and SIGTERM/SIGHUP ------------------------------------------

_undo: dict[int, Callable[[], None]] = {}
_undo_lock = threading.Lock()
_handlers_installed = False


def _register(undo: Callable[[], None]) -> int:
    _install_handlers()
    key = next(_counter)
    with _undo_lock:
        _undo[key] = undo
    return key


def _run(key: int) -> None:
    with _undo_lock:
        undo = _undo.pop(key, None)
    if undo is not None:
        undo()


def undo_all() -> None:
    """Undo everything still registered, newest first (the cgroup before the swap it used)."""
    with _undo_lock:
        keys = sorted(_undo, reverse=True)
    for key in keys:
        try:
            _run(key)
        except Exception as exc:  # keep undoing the rest
            print(f"cgroup_cliff: cleanup step failed: {exc}", flush=True)


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(undo_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        if previous == signal.SIG_IGN:  # nohup: the signal does not end us, so nothing to undo early
            continue

        def handler(num: int, frame: object, previous: object = previous) -> None:
            undo_all()
            if callable(previous):
                previous(num, frame)
            else:
                signal.signal(num, signal.SIG_DFL)
                os.kill(os.getpid(), num)

        signal.signal(signum, handler)


# --- commands -----------------------------------------------------------------------------------


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _check(*argv: str) -> None:
    done = _sh(*argv)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[:200]}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(name: str) -> bool:
    match = _NAME.match(name)
    return bool(match) and not _pid_alive(int(match.group(1)))


def _name() -> str:
    return f"{PREFIX}{os.getpid()}-{next(_counter)}"


# --- swap ---------------------------------------------------------------------------------------


@dataclass
class Swap:
    kind: SwapKind
    device: str  # what swapon was given
    size_bytes: int
    zram_id: int | None = None


def active_swaps() -> list[str]:
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    return [line.split()[0] for line in lines if line.strip()]


def zram_available() -> bool:
    return Path("/sys/class/zram-control/hot_add").exists()


@contextmanager
def swap(size_bytes: int, kind: SwapKind = "file") -> Iterator[Swap]:
    made = _make_zram(size_bytes) if kind == "zram" else _make_swap_file(size_bytes)
    key = _register(lambda: _remove_swap(made))
    try:
        yield made
    finally:
        _run(key)


def _make_swap_file(size_bytes: int) -> Swap:
    path = SWAP_DIR / f"{_name()}.swap"
    try:
        done = _sh("fallocate", "-l", str(size_bytes), str(path))
        if done.returncode != 0:  # a file system without fallocate: write it out
            _check("dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={size_bytes // MiB}", "status=none")
        path.chmod(0o600)
        _check("mkswap", str(path))
        _check("swapon", str(path))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Swap("file", str(path), size_bytes)


def _make_zram(size_bytes: int) -> Swap:
    if not zram_available():
        raise PlatformLacks("no zram: /sys/class/zram-control is absent (kernel without the zram module)")
    zram_id = int(Path("/sys/class/zram-control/hot_add").read_text())
    made = Swap("zram", f"/dev/zram{zram_id}", size_bytes, zram_id)
    try:
        Path(f"/sys/block/zram{zram_id}/disksize").write_text(str(size_bytes))
        _wait_for(Path(made.device))
        _check("mkswap", made.device)
        _check("swapon", made.device)
    except BaseException:
        _release_zram(zram_id)
        raise
    return made


def _wait_for(path: Path, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise Unavailable(f"{path} did not appear (no devtmpfs?)")
        time.sleep(0.05)


def _remove_swap(made: Swap) -> None:
    if made.device in active_swaps():
        done = _sh("swapoff", made.device)
        if done.returncode != 0:
            raise RuntimeError(f"swapoff {made.device} failed: {done.stderr.strip()} — run it by hand")
    if made.kind == "file":
        Path(made.device).unlink(missing_ok=True)
    elif made.zram_id is not None:
        _release_zram(made.zram_id)


def _release_zram(zram_id: int) -> None:
    Path(f"/sys/block/zram{zram_id}/reset").write_text("1")
    Path("/sys/class/zram-control/hot_remove").write_text(str(zram_id))


# --- the cgroup ---------------------------------------------------------------------------------


@dataclass
class Cgroup:
    version: Literal[1, 2]
    directory: Path
    limit_bytes: int | None  # its memory limit; None for a cgroup of the CPU controller
    children: list[subprocess.Popen] = field(default_factory=list)  # started by popen: reaped on removal

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def path(self) -> str:
        """As /proc/PID/cgroup names it: under the root of the mounted hierarchy, which in a
        container sharing the host's cgroups is the container's own."""
        mount = find_mounts(controller="memory" if self.limit_bytes is not None else "cpu")[self.version]
        return mount.root.rstrip("/") + "/" + self.name

    def add(self, pid: int) -> None:
        """Move ``pid`` in. Memory it already holds stays charged where it was (v1 and v2): start
        processes with :meth:`popen` so that everything they allocate is charged here."""
        (self.directory / "cgroup.procs").write_text(str(pid))

    def popen(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start ``argv`` inside the cgroup: a shell joins it, then execs the command."""
        join = f'echo $$ > {shlex.quote(str(self.directory / "cgroup.procs"))} && exec "$@"'
        proc = subprocess.Popen(["/bin/sh", "-c", join, "sh", *argv], **kwargs)  # type: ignore[call-overload]
        self.children.append(proc)
        self._wait_joined(proc)
        return proc

    def _wait_joined(self, proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while proc.pid not in self.procs():
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[4:]} exited ({proc.returncode}) before it joined {self.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.args[4:]} did not join {self.name} within {timeout_s:.0f} s")
            time.sleep(0.005)

    def procs(self) -> list[int]:
        text = (self.directory / "cgroup.procs").read_text()
        return [int(p) for p in text.split()]

    def reading(self) -> CgroupMemory:
        """This cgroup's memory, read as cliff-tui's probe reads it (through a member PID)."""
        members = self.procs()
        if not members:
            raise RuntimeError(f"cgroup {self.name} has no process to read it through")
        return read_cgroup_memory(members[0])

    def stat(self) -> dict[str, int]:
        stat: dict[str, int] = {}
        for line in (self.directory / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            stat[key] = int(value)
        return stat

    def major_faults(self) -> int | None:
        stat = self.stat()
        return stat.get("total_pgmajfault" if self.version == 1 else "pgmajfault")

    def failcnt(self) -> int | None:
        """v1: times usage hit the limit; v2: memory.events 'max'."""
        if self.version == 1:
            return int((self.directory / "memory.failcnt").read_text())
        for line in (self.directory / "memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
        return None


def cgroup_version(controller: str = "memory") -> Literal[1, 2]:
    """2 where the v2 hierarchy has ``controller`` enabled for children, else 1 where a v1
    hierarchy of it is mounted; Unavailable otherwise."""
    mounts = find_mounts(controller=controller)
    if 2 in mounts:
        control = Path(mounts[2].mount_point, "cgroup.subtree_control")
        if control.exists() and controller in control.read_text().split():
            return 2
    if 1 in mounts:
        return 1
    raise PlatformLacks(
        f"no {controller} cgroup controller: no v1 {controller} hierarchy, and cgroup v2's "
        f"cgroup.subtree_control does not enable {controller}"
    )


@contextmanager
def cgroup(limit_bytes: int, swap_limit_bytes: int | None = None, swappiness: int | None = None) -> Iterator[Cgroup]:
    """A memory cgroup limited to ``limit_bytes`` of RAM; swap allowed up to ``swap_limit_bytes``
    (None: unlimited). ``swappiness`` (v1 only) sets memory.swappiness for it."""
    with _new_cgroup("memory", limit_bytes) as made:
        _limit(made, swap_limit_bytes, swappiness)
        yield made


@contextmanager
def cpu_cgroup(quota_us: int, period_us: int = 100_000) -> Iterator[Cgroup]:
    """A cgroup of the CPU controller whose processes may use ``quota_us`` of CPU time in each
    ``period_us`` (what Docker's ``--cpus`` sets)."""
    with _new_cgroup("cpu", None) as made:
        try:
            if made.version == 2:
                (made.directory / "cpu.max").write_text(f"{quota_us} {period_us}")
            else:
                (made.directory / "cpu.cfs_period_us").write_text(str(period_us))
                (made.directory / "cpu.cfs_quota_us").write_text(str(quota_us))
        except OSError as exc:
            raise Unavailable(f"cannot set the CPU quota of {made.directory}: {exc.strerror or exc}") from None
        yield made


@contextmanager
def _new_cgroup(controller: str, limit_bytes: int | None) -> Iterator[Cgroup]:
    """An empty cgroup at the top of ``controller``'s hierarchy, removed (its processes killed)
    on exit, also at exit or on SIGTERM if the test dies first."""
    version = cgroup_version(controller)
    top = Path(find_mounts(controller=controller)[version].mount_point)
    _remove_stale_cgroups(top)
    made = Cgroup(version, top / _name(), limit_bytes)
    try:
        made.directory.mkdir()
    except OSError as exc:
        raise Unavailable(f"cannot create a cgroup in {top}: {exc.strerror or exc}") from None
    key = _register(lambda: _remove_cgroup(made))
    try:
        yield made
    finally:
        _run(key)


def _limit(made: Cgroup, swap_limit_bytes: int | None, swappiness: int | None) -> None:
    d = made.directory
    try:
        if made.version == 2:
            (d / "memory.max").write_text(str(made.limit_bytes))
            if (d / "memory.swap.max").exists():  # absent without swap accounting: swap is unlimited then
                (d / "memory.swap.max").write_text("max" if swap_limit_bytes is None else str(swap_limit_bytes))
            return
        (d / "memory.limit_in_bytes").write_text(str(made.limit_bytes))
        if swap_limit_bytes is not None and (d / "memory.memsw.limit_in_bytes").exists():
            (d / "memory.memsw.limit_in_bytes").write_text(str(made.limit_bytes + swap_limit_bytes))
        if swappiness is not None:
            (d / "memory.swappiness").write_text(str(swappiness))
    except OSError as exc:
        raise Unavailable(f"cannot set the memory limit of {d}: {exc.strerror or exc}") from None


def _remove_cgroup(made: Cgroup, timeout_s: float = 10.0) -> None:
    """Kill its processes, reap the ones we started (a zombie keeps a v1 cgroup busy), rmdir."""
    if not made.directory.exists():
        return
    deadline = time.monotonic() + timeout_s
    while members := made.procs():
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(made.children)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {members} stay in {made.directory}: kill them and rmdir it by hand")
        time.sleep(0.02)
    _reap(made.children)
    while True:
        try:
            made.directory.rmdir()
            return
        except OSError as exc:  # EBUSY while the kernel finishes with the killed tasks
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot remove {made.directory}: {exc.strerror} — rmdir it by hand") from None
            time.sleep(0.05)


def _reap(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            try:
                child.kill()
                child.wait(timeout=1.0)
            except (OSError, subprocess.TimeoutExpired):
                pass


def _remove_stale_cgroups(top: Path) -> None:
    for directory in top.glob(f"{PREFIX}*"):
        if directory.is_dir() and _stale(directory.name):
            try:
                _remove_cgroup(Cgroup(1, directory, 0), timeout_s=2.0)
            except (OSError, RuntimeError) as exc:
                print(f"cgroup_cliff: could not remove stale {directory}: {exc}", flush=True)


def remove_stale_swaps() -> None:
    for device in active_swaps():
        if _stale(Path(device).name):
            _sh("swapoff", device)
    for path in SWAP_DIR.glob(f"{PREFIX}*.swap"):
        if _stale(path.name) and str(path) not in active_swaps():
            path.unlink(missing_ok=True)


# --- both ---------------------------------------------------------------------------------------


@dataclass
class Sandbox:
    cgroup: Cgroup
    swap: Swap

    def popen(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen:
        return self.cgroup.popen(argv, **kwargs)


def require_root() -> None:
    if os.geteuid() != 0:
        raise Unavailable("needs root (swapon and cgroup writes): run the tests as root, as CI does")


@contextmanager
def sandbox(
    limit_bytes: int, swap_bytes: int = 1024 * MiB, swap_kind: SwapKind = "file", swappiness: int | None = None
) -> Iterator[Sandbox]:
    """Swap of ``swap_bytes`` and a cgroup limited to ``limit_bytes`` of RAM, both undone after."""
    require_root()
    remove_stale_swaps()
    version = cgroup_version()  # fail before making swap
    with swap(swap_bytes, swap_kind) as made_swap, cgroup(limit_bytes, swappiness=swappiness) as made:
        assert made.version == version
        yield Sandbox(made, made_swap)


def system_swap_used() -> int:
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        fields[key] = int(rest.split()[0]) * 1024
    return fields["SwapTotal"] - fields["SwapFree"]


def vmstat(name: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return 0


def vm_swap_of(pid: int) -> int | None:
    """/proc/PID/status VmSwap: this process's anonymous pages in swap."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmSwap:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# --- watching it --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CgroupSample:
    t: float  # time.time()
    usage_bytes: int
    swap_bytes: int | None
    anon_bytes: int | None
    file_bytes: int | None
    failcnt: int | None
    vm_swap_bytes: int  # summed over the cgroup's processes (their anonymous pages in swap)
    system_swap_bytes: int  # SwapTotal − SwapFree
    major_faults: int | None  # the cgroup's pgmajfault: pages read back (from swap or file)
    swap_ins: int  # /proc/vmstat pswpin (system-wide pages read from swap)


class Monitor:
    """Samples a cgroup every ``interval_s`` in a thread, from the probe cliff-tui uses, plus
    the members' VmSwap and the system's swap."""

    def __init__(self, made: Cgroup, interval_s: float = 0.2) -> None:
        self.cgroup = made
        self.interval_s = interval_s
        self.samples: list[CgroupSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cgroup-monitor", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> CgroupSample | None:
        members = self.cgroup.procs()
        if not members:
            return None
        r = read_cgroup_memory(members[0])
        if r.usage_bytes is None:
            return None
        vm_swap = sum(v for v in map(vm_swap_of, members) if v is not None)
        return CgroupSample(
            time.time(),
            r.usage_bytes,
            r.swap_bytes,
            r.anon_bytes,
            r.file_bytes,
            self.cgroup.failcnt(),
            vm_swap,
            system_swap_used(),
            self.cgroup.major_faults(),
            vmstat("pswpin"),
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                taken = self.sample()
            except OSError:  # the cgroup emptied between reads
                taken = None
            if taken is not None:
                self.samples.append(taken)
            self._stop.wait(self.interval_s)

    def peak(self, name: str) -> int:
        return max((getattr(s, name) or 0 for s in self.samples), default=0)

    def first_at_limit(self, margin_bytes: int = 2 * MiB) -> CgroupSample | None:
        return first_at_limit(self.samples, self.cgroup.limit_bytes, margin_bytes)


def first_at_limit(
    samples: Sequence[CgroupSample], limit_bytes: int, margin_bytes: int = 2 * MiB
) -> CgroupSample | None:
    """The first sample where usage reached the limit (within ``margin_bytes``) or failcnt moved."""
    for s in samples:
        if s.usage_bytes >= limit_bytes - margin_bytes or (s.failcnt or 0) > 0:
            return s
    return None


def paging_onset(samples: Sequence[CgroupSample], windows: Sequence[Any], faults_per_token: float = 64.0) -> int | None:
    """The first depth at which the cgroup's own fault counter shows decode reading pages back
    token after token: its major faults inside a decode window (``DecodeWindow``s of a
    recording), per token decoded. The prefill's writes into a cache paged out as it was created
    fall between windows and are not counted."""
    for w in sorted(windows, key=lambda w: w.t):
        if w.phase not in ("probe", "depth") or w.tok_s <= 0:
            continue
        start = w.t - w.n_tokens / w.tok_s
        inside = [s for s in samples if start <= s.t <= w.t and s.major_faults is not None]
        if len(inside) < 2 or inside[-1].t <= inside[0].t:
            continue
        per_s = (inside[-1].major_faults - inside[0].major_faults) / (inside[-1].t - inside[0].t)
        if per_s / w.tok_s >= faults_per_token:
            return w.depth
    return None


def cache_outside(path: Path) -> None:
    """Read ``path`` into the page cache from this process's cgroup, outside the sandbox: a member
    mapping it then finds its pages cached and charged elsewhere, so the sandbox's limit bounds what
    the model allocates (its KV cache), not its weights, whichever run last dropped them."""
    with open(path, "rb") as f:
        while f.read(16 * MiB):
            pass
