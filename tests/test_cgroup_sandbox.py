"""The cgroup-and-swap sandbox undoes what it made: on an exception, and on SIGTERM (as root)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import cgroup_cliff as cc
from cgroup_fixtures import cannot_host

SUPPORT = Path(__file__).parent / "support"


@pytest.fixture
def root_with_memory_cgroups() -> None:
    try:
        cc.require_root()
        cc.cgroup_version()
    except cc.Unavailable as exc:
        cannot_host(exc)


@pytest.mark.parametrize("kind", ["file", "zram"])
def test_undone_when_the_body_raises(root_with_memory_cgroups, kind):
    if kind == "zram" and not cc.zram_available():
        pytest.skip("no zram: /sys/class/zram-control is absent")
    with pytest.raises(RuntimeError, match="boom"), cc.sandbox(64 * cc.MiB, 64 * cc.MiB, kind) as box:
        child = box.popen([sys.executable, "-c", "import time; time.sleep(60)"])
        assert box.swap.device in cc.active_swaps() and box.cgroup.directory.is_dir()
        assert box.cgroup.procs() == [child.pid]
        raise RuntimeError("boom")
    assert box.swap.device not in cc.active_swaps() and not box.cgroup.directory.exists()
    if kind == "file":
        assert not Path(box.swap.device).exists()
    else:
        assert not Path(f"/sys/block/zram{box.swap.zram_id}").exists()
    assert child.poll() == -signal.SIGKILL


def test_undone_on_sigterm(root_with_memory_cgroups, tmp_path):
    code = (
        f"import sys, time; sys.path[:0] = [{str(SUPPORT)!r}]; import cgroup_cliff as cc\n"
        "with cc.sandbox(64 * cc.MiB, 64 * cc.MiB) as box:\n"
        "    box.popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    print(box.swap.device, box.cgroup.directory, flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    device, directory = proc.stdout.readline().split()
    assert device in cc.active_swaps() and Path(directory).is_dir()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert device not in cc.active_swaps()
    assert not Path(device).exists() and not Path(directory).exists()


def test_leftovers_of_a_killed_owner_are_removed_next_time(root_with_memory_cgroups):
    """SIGKILL leaves the swap and the cgroup; the next sandbox removes them (their owner is dead)."""
    code = (
        f"import sys, time; sys.path[:0] = [{str(SUPPORT)!r}]; import cgroup_cliff as cc\n"
        "made = cc.sandbox(64 * cc.MiB, 64 * cc.MiB)\n"  # kept: a dropped generator would clean up
        "box = made.__enter__()\n"
        "print(box.swap.device, box.cgroup.directory, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    device, directory = proc.stdout.readline().split()
    proc.kill()
    proc.wait()
    assert device in cc.active_swaps() and Path(directory).is_dir()
    with cc.sandbox(64 * cc.MiB, 64 * cc.MiB):
        assert device not in cc.active_swaps()
        assert not Path(device).exists() and not Path(directory).exists()
