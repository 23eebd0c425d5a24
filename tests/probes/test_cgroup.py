"""The cgroup memory probe: real cgroups as root (v1 on this machine), and file trees laid out as
the kernel lays out the cases this machine cannot show (the v2 memory controller, a container's
bind-mounted subtree)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cliff_tui.probes.cgroup import (
    CgroupMount,
    cgroup_directory,
    cgroup_paths,
    find_mounts,
    read_cgroup_memory,
    read_cpu_quota,
)
from cliff_tui.records import CpuQuota

MiB = 1024 * 1024
V1_NO_LIMIT = "9223372036854771712"
PID = 4242


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def host(tmp_path: Path, mountinfo: str, cgroup: str) -> tuple[str, str]:
    """A /proc with this process's mountinfo and PID's cgroup file; returns (proc, mountinfo)."""
    write(tmp_path / "proc" / str(PID) / "cgroup", cgroup)
    write(tmp_path / "mountinfo", mountinfo)
    return str(tmp_path / "proc"), str(tmp_path / "mountinfo")


def v2_mount(tmp_path: Path, root: str = "/") -> str:
    return f"30 23 0:26 {root} {tmp_path}/cg rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def v2_cgroup(directory: Path, current: int, maximum: str, swap: int = 0, swap_max: str = "max") -> None:
    write(directory / "memory.current", f"{current}\n")
    write(directory / "memory.max", f"{maximum}\n")
    write(directory / "memory.swap.current", f"{swap}\n")
    write(directory / "memory.swap.max", f"{swap_max}\n")
    write(directory / "memory.stat", f"anon {current // 2}\nfile {current // 4}\nkernel 4096\n")


# --- v2 -----------------------------------------------------------------------------------------


def test_v2_limit_is_the_smallest_memory_max_on_the_path_up(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/app.slice/web.service\n")
    v2_cgroup(tmp_path / "cg/app.slice", 300 * MiB, str(200 * MiB))
    v2_cgroup(tmp_path / "cg/app.slice/web.service", 150 * MiB, str(500 * MiB), swap=7 * MiB, swap_max=str(64 * MiB))
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert (r.version, r.path, r.limit_bytes, r.limited_by) == (2, "/app.slice/web.service", 200 * MiB, "/app.slice")
    assert (r.usage_bytes, r.swap_bytes, r.swap_limit_bytes) == (150 * MiB, 7 * MiB, 64 * MiB)
    assert (r.anon_bytes, r.file_bytes) == (75 * MiB, 150 * MiB // 4)
    assert r.reasons == {}


def test_v2_max_everywhere_is_no_limit_with_the_reason(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/user.slice\n")
    v2_cgroup(tmp_path / "cg/user.slice", 10 * MiB, "max")
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes is None and r.swap_limit_bytes is None
    assert "memory.max" in r.reasons["limit_bytes"] and "/user.slice" in r.reasons["limit_bytes"]
    assert r.usage_bytes == 10 * MiB


def test_v2_without_the_memory_controller_says_so(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/plain\n")
    write(tmp_path / "cg/plain/cgroup.procs", f"{PID}\n")
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.version == 2 and r.limit_bytes is None and r.usage_bytes is None
    assert "memory controller is not enabled" in r.reasons["limit_bytes"]


def test_v2_root_cgroup_has_no_limit(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/\n")
    write(tmp_path / "cg/cgroup.procs", f"{PID}\n")
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes is None and "root cgroup" in r.reasons["limit_bytes"]


def test_container_subtree_is_found_under_its_mount_root(tmp_path):
    """Docker without a cgroup namespace: /proc/PID/cgroup names the host path, the mount shows
    only the container's subtree."""
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path, root="/docker/abc"), "0::/docker/abc/worker\n")
    v2_cgroup(tmp_path / "cg/worker", 40 * MiB, str(256 * MiB))
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.directory == str(tmp_path / "cg/worker") and r.limit_bytes == 256 * MiB


def test_cgroup_outside_the_mounted_subtree_is_a_reason_not_a_crash(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path, root="/docker/abc"), "0::/system.slice/other\n")
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes is None and "outside the hierarchy" in r.reasons["limit_bytes"]


# --- v1 -----------------------------------------------------------------------------------------


def v1_cgroup(directory: Path, limit: str, usage: int, swap: int, hierarchical: str | None = None) -> None:
    write(directory / "memory.limit_in_bytes", f"{limit}\n")
    write(directory / "memory.usage_in_bytes", f"{usage}\n")
    write(directory / "memory.memsw.usage_in_bytes", f"{usage + swap}\n")
    write(
        directory / "memory.stat",
        (
            f"cache 1\nrss 2\nswap 3\nhierarchical_memory_limit {hierarchical or limit}\n"
            f"hierarchical_memsw_limit {V1_NO_LIMIT}\ntotal_cache {usage // 4}\ntotal_rss {usage // 2}\n"
            f"total_swap {swap}\n"
        ),
    )


def v1_host(tmp_path: Path, cgroup: str, root: str = "/") -> tuple[str, str]:
    mountinfo = (
        f"31 23 0:28 / {tmp_path}/fs rw - tmpfs tmpfs rw\n"
        f"32 31 0:29 / {tmp_path}/cpu rw - cgroup cgroup rw,cpu\n"
        f"35 31 0:32 {root} {tmp_path}/mem rw,relatime - cgroup cgroup rw,memory\n" + v2_mount(tmp_path)
    )
    return host(tmp_path, mountinfo, f"9:name=systemd:/\n4:memory:{cgroup}\n1:cpu:/\n0::/\n")


def test_v1_memory_hierarchy_wins_over_a_v2_mount_without_it(tmp_path):
    proc, mountinfo = v1_host(tmp_path, "/jobs/a")
    v1_cgroup(tmp_path / "mem/jobs", V1_NO_LIMIT, 300 * MiB, 0)
    v1_cgroup(tmp_path / "mem/jobs/a", str(150 * MiB), 149 * MiB, 109 * MiB)
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert (r.version, r.limit_bytes, r.limited_by) == (1, 150 * MiB, "/jobs/a")
    assert (r.usage_bytes, r.swap_bytes, r.anon_bytes, r.file_bytes) == (
        149 * MiB,
        109 * MiB,
        149 * MiB // 2,
        149 * MiB // 4,
    )
    assert r.swap_limit_bytes is None and "memory+swap" in r.reasons["swap_limit_bytes"]


def test_v1_limit_above_the_visible_subtree_comes_from_hierarchical_memory_limit(tmp_path):
    proc, mountinfo = v1_host(tmp_path, "/docker/abc", root="/docker/abc")
    v1_cgroup(tmp_path / "mem", V1_NO_LIMIT, 80 * MiB, 0, hierarchical=str(512 * MiB))
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes == 512 * MiB and r.limited_by == "a cgroup above /docker"
    assert "limit_bytes" not in r.reasons


def test_v1_unlimited_is_none_with_the_reason(tmp_path):
    proc, mountinfo = v1_host(tmp_path, "/jobs/a")
    v1_cgroup(tmp_path / "mem/jobs/a", V1_NO_LIMIT, 20 * MiB, 0)
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes is None and "/jobs/a" in r.reasons["limit_bytes"]
    assert r.usage_bytes == 20 * MiB


def test_v1_without_swap_accounting(tmp_path):
    proc, mountinfo = v1_host(tmp_path, "/jobs/a")
    directory = tmp_path / "mem/jobs/a"
    v1_cgroup(directory, str(64 * MiB), 20 * MiB, 0)
    (directory / "memory.memsw.usage_in_bytes").unlink()
    stat = (directory / "memory.stat").read_text().splitlines()
    write(directory / "memory.stat", "\n".join(line for line in stat if "swap" not in line and "memsw" not in line))
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes == 64 * MiB
    assert r.swap_bytes is None and "swap accounting" in r.reasons["swap_bytes"]


def test_unreadable_file_is_a_reason(tmp_path):
    proc, mountinfo = v1_host(tmp_path, "/jobs/a")
    v1_cgroup(tmp_path / "mem/jobs/a", "garbage", 20 * MiB, 0, hierarchical=V1_NO_LIMIT)
    r = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert r.limit_bytes is None and "not a number" in r.reasons["limit_bytes"]


# --- parsing ------------------------------------------------------------------------------------


def test_mountinfo_escapes_and_first_mount_wins(tmp_path):
    write(
        tmp_path / "mi",
        "40 1 0:5 / /sys/fs/cgroup/my\\040mem rw - cgroup cgroup rw,memory,cpu\n"
        "41 1 0:6 / /elsewhere rw - cgroup cgroup rw,memory\n"
        "42 1 0:7 /sub /sys/fs/cgroup/unified rw shared:1 - cgroup2 cgroup2 rw\n",
    )
    mounts = find_mounts(str(tmp_path / "mi"))
    assert mounts[1] == CgroupMount(1, "/sys/fs/cgroup/my mem", "/")
    assert mounts[2] == CgroupMount(2, "/sys/fs/cgroup/unified", "/sub")


def test_cgroup_directory():
    mount = CgroupMount(2, "/sys/fs/cgroup", "/docker/abc")
    assert cgroup_directory(mount, "/docker/abc") == Path("/sys/fs/cgroup")
    assert cgroup_directory(mount, "/docker/abc/x") == Path("/sys/fs/cgroup/x")
    assert cgroup_directory(mount, "/docker/abcdef") is None


def test_missing_process_is_a_reason(tmp_path):
    (tmp_path / "proc").mkdir()
    write(tmp_path / "mountinfo", v2_mount(tmp_path))
    r = read_cgroup_memory(PID, proc=str(tmp_path / "proc"), mountinfo=str(tmp_path / "mountinfo"))
    assert r.version is None and "no such process" in r.reasons["limit_bytes"]


# --- real ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="no /proc/self/cgroup: not Linux")
def test_this_process_reads_without_error():
    r = read_cgroup_memory()
    assert r.pid == os.getpid()
    assert cgroup_paths(os.getpid())
    # either a figure or a reason for every field
    for name in ("limit_bytes", "usage_bytes", "swap_bytes", "anon_bytes", "file_bytes"):
        assert getattr(r, name) is not None or name in r.reasons


def test_real_cgroup_limit_and_usage_of_a_child():
    from cgroup_fixtures import child_in_cgroup

    with child_in_cgroup(96 * MiB, 40 * MiB) as (made, child):
        r = read_cgroup_memory(child.pid)
        assert (r.limit_bytes, r.limited_by) == (96 * MiB, made.path)
        assert r.usage_bytes >= 40 * MiB and r.anon_bytes >= 40 * MiB
        assert r.swap_bytes is not None or "swap_bytes" in r.reasons
    assert not made.directory.exists()
    assert child.poll() is not None


# --- CPU quota ----------------------------------------------------------------------------------


def v1_cpu_host(tmp_path: Path, cgroup: str, root: str = "/") -> tuple[str, str]:
    mountinfo = (
        f"32 31 0:29 {root} {tmp_path}/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"
        f"33 31 0:30 / {tmp_path}/cpuset rw - cgroup cgroup rw,cpuset\n"
        f"35 31 0:32 / {tmp_path}/mem rw,relatime - cgroup cgroup rw,memory\n" + v2_mount(tmp_path)
    )
    return host(tmp_path, mountinfo, f"5:cpuset:/other\n4:memory:/other\n2:cpu,cpuacct:{cgroup}\n0::/\n")


def v1_quota(directory: Path, quota: int, period: int = 100_000) -> None:
    write(directory / "cpu.cfs_quota_us", f"{quota}\n")
    write(directory / "cpu.cfs_period_us", f"{period}\n")


def test_v1_cpu_quota_is_the_smallest_on_the_path_up(tmp_path):
    proc, mountinfo = v1_cpu_host(tmp_path, "/kubepods/pod1/c1")
    v1_quota(tmp_path / "cpu", -1)
    v1_quota(tmp_path / "cpu/kubepods", -1)
    v1_quota(tmp_path / "cpu/kubepods/pod1", 150_000)
    v1_quota(tmp_path / "cpu/kubepods/pod1/c1", 400_000, 100_000)
    write(tmp_path / "cpu/kubepods/pod1/cpu.stat", "nr_periods 120\nnr_throttled 30\nthrottled_time 4500000000\n")
    write(tmp_path / "cpu/kubepods/pod1/c1/cpu.stat", "nr_periods 120\nnr_throttled 0\nthrottled_time 0\n")
    # the periods are those of the cgroup whose quota applies: it is the one throttled
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) == CpuQuota("/kubepods/pod1", 1.5, 120, 30)


def test_v1_without_a_quota_is_none(tmp_path):
    proc, mountinfo = v1_cpu_host(tmp_path, "/jobs")
    v1_quota(tmp_path / "cpu", -1)
    v1_quota(tmp_path / "cpu/jobs", -1)
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) is None


def test_a_container_s_quota_is_on_the_root_of_what_it_mounts(tmp_path):
    proc, mountinfo = v1_cpu_host(tmp_path, "/docker/abc", root="/docker/abc")
    v1_quota(tmp_path / "cpu", 50_000, 100_000)
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) == CpuQuota("/docker/abc", 0.5)


def test_v2_cpu_max(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/system.slice/llama.service\n")
    write(tmp_path / "cg/system.slice/cpu.max", "max 100000\n")
    write(tmp_path / "cg/system.slice/llama.service/cpu.max", "300000 100000\n")
    write(
        tmp_path / "cg/system.slice/llama.service/cpu.stat",
        "usage_usec 9000\nuser_usec 8000\nsystem_usec 1000\nnr_periods 7\nnr_throttled 2\nthrottled_usec 900\n",
    )
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) == CpuQuota("/system.slice/llama.service", 3.0, 7, 2)
    write(tmp_path / "cg/system.slice/llama.service/cpu.stat", "nr_periods x\ngarbage\n")
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) == CpuQuota("/system.slice/llama.service", 3.0)
    write(tmp_path / "cg/system.slice/llama.service/cpu.max", "max 100000\n")
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) is None


@pytest.mark.parametrize("text", ["garbage\n", "", "0 100000\n", "50000 0\n", "50000\n"])
def test_an_unreadable_quota_is_no_quota(tmp_path, text):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/a\n")
    write(tmp_path / "cg/a/cpu.max", text)
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) is None


def test_bytes_that_are_not_text_are_no_quota_and_a_reason(tmp_path):
    proc, mountinfo = host(tmp_path, v2_mount(tmp_path), "0::/a\n")
    write(tmp_path / "cg/a/cpu.max", "50000 100000\n")
    (tmp_path / "cg/a/cpu.stat").write_bytes(b"nr_periods \xff\n")
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) == CpuQuota("/a", 0.5)
    Path(mountinfo).write_bytes(f"30 23 0:26 / {tmp_path}/cg\\040\xff rw - cgroup2 cgroup2 rw\n".encode("latin-1"))
    assert read_cpu_quota(PID, proc=proc, mountinfo=mountinfo) is None
    memory = read_cgroup_memory(PID, proc=proc, mountinfo=mountinfo)
    assert memory.limit_bytes is None and "not UTF-8" in memory.reasons["limit_bytes"]


def test_no_cgroup_file_is_no_quota(tmp_path):
    (tmp_path / "proc").mkdir()
    write(tmp_path / "mountinfo", v2_mount(tmp_path))
    assert read_cpu_quota(PID, proc=str(tmp_path / "proc"), mountinfo=str(tmp_path / "mountinfo")) is None


def test_real_cpu_quota_of_a_child():
    from cgroup_fixtures import quota_cgroup
    from cliff_tui.probes.sampler import Sampler

    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    with quota_cgroup(50_000, 100_000) as made:
        child = made.popen([sys.executable, "-c", spin])
        deadline = time.monotonic() + 20  # a loaded machine starts the interpreter slowly
        while ((quota := read_cpu_quota(child.pid)).throttled_periods or 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (quota.path, quota.cpus) == (made.path, 0.5)
        assert quota.throttled_periods >= 2  # it spins: its periods run out
        assert quota.periods >= quota.throttled_periods
        assert read_cpu_quota() != quota
        assert Sampler(pid=child.pid).sample().cpu_quota.path == made.path  # as the run's samples carry it
    assert not made.directory.exists()
    assert child.poll() is not None


def test_the_sampler_searches_for_the_quota_seldom_and_reads_its_periods_each_time():
    from cgroup_fixtures import quota_cgroup
    from cliff_tui.probes.cgroup import CGROUP_SEARCH_EVERY_S, CgroupLimits

    now = [0.0]
    limits = CgroupLimits(clock=lambda: now[0])
    spin = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
    with quota_cgroup(50_000) as made:
        child = made.popen([sys.executable, "-c", spin])
        _, first = limits.read(child.pid, 1 << 50)
        (made.directory / ("cpu.max" if made.version == 2 else "cpu.cfs_quota_us")).write_text(
            "80000 100000" if made.version == 2 else "80000"
        )
        time.sleep(0.6)
        now[0] = 2.5
        _, kept = limits.read(child.pid, 1 << 50)
        now[0] = 2.5 + CGROUP_SEARCH_EVERY_S
        _, found = limits.read(child.pid, 1 << 50)
    assert (first.cpus, kept.cpus, found.cpus) == (0.5, 0.5, 0.8)
    assert kept.periods > first.periods and kept.throttled_periods >= first.throttled_periods


def test_the_sampler_finds_a_memory_limit_at_its_next_search_and_reads_its_use_in_between():
    from cgroup_fixtures import limited_cgroup
    from cliff_tui.probes.cgroup import CGROUP_SEARCH_EVERY_S, CgroupLimits

    now = [0.0]
    limits = CgroupLimits(clock=lambda: now[0])
    asked = CgroupLimits(clock=lambda: now[0])  # the same, but asked for a reading now
    code = "import sys; sys.stdin.readline(); x = bytearray(30 << 20); print('held', flush=True); sys.stdin.readline()"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with limited_cgroup(96 * MiB) as made:
            assert limits.read(child.pid, 1 << 50)[0] is None  # no limit where it started
            assert asked.read(child.pid, 1 << 50)[0] is None
            made.add(child.pid)
            made.children.append(child)  # reaped when the cgroup goes: a zombie keeps a v1 cgroup busy
            now[0] = 2.5
            assert limits.read(child.pid, 1 << 50)[0] is None  # not searched for again yet
            fresh = asked.read(child.pid, 1 << 50, fresh=True)[0]
            now[0] = CGROUP_SEARCH_EVERY_S
            found = limits.read(child.pid, 1 << 50)[0]
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline() == "held\n"
            now[0] = CGROUP_SEARCH_EVERY_S + 2.5
            later = limits.read(child.pid, 1 << 50)[0]
    finally:
        child.kill()
        child.wait()
    assert (found.path, found.limit_bytes) == (fresh.path, fresh.limit_bytes) == (made.path, 96 * MiB)
    # read again between two searches (the kernel charges a cgroup in batches of 64 pages, so not
    # every byte of the 30 MiB need show yet)
    assert later.usage_bytes >= found.usage_bytes + 29 * MiB
