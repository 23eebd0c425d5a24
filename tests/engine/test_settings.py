"""The threads a run may take: what the affinity and a cgroup's CPU quota allow, by default and
at most; a real quota as root."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from cliff_tui.engine.settings import CpuShare, cpu_share
from cliff_tui.records import CpuQuota


@pytest.mark.parametrize(
    "share, usable, whole",
    [
        (CpuShare(8, None), 8, 8),
        (CpuShare(8, CpuQuota("/c", 1.5)), 2, 1),
        (CpuShare(8, CpuQuota("/c", 0.25)), 1, 1),
        (CpuShare(8, CpuQuota("/c", 4.0)), 4, 4),
        (CpuShare(2, CpuQuota("/c", 16.0)), 2, 2),  # a quota above the CPUs there are holds nothing back
    ],
)
def test_usable_and_whole(share, usable, whole):
    assert (share.usable, share.whole) == (usable, whole)


@pytest.mark.parametrize(
    "share, cores, threads, note",
    [
        (CpuShare(16, None), 8, 8, None),  # the physical cores, not the hyperthreads
        (CpuShare(4, None), 8, 4, None),  # taskset
        (CpuShare(16, None), None, 16, None),  # psutil cannot count the cores
        (
            CpuShare(64, CpuQuota("/kubepods/pod1", 4.0)),
            32,
            4,
            "4 threads, not 32: cgroup /kubepods/pod1 allows 4 CPUs of time (pass -t to choose)",
        ),
        (
            CpuShare(8, CpuQuota("/c", 1.5)),
            4,
            1,
            "1 thread, not 4: cgroup /c allows 1.5 CPUs of time (pass -t to choose)",
        ),
        (CpuShare(8, CpuQuota("/c", 1.0)), 4, 1, "1 thread, not 4: cgroup /c allows 1 CPU of time (pass -t to choose)"),
        (CpuShare(8, CpuQuota("/c", 6.0)), 4, 4, None),  # the quota holds nothing back
    ],
)
def test_default_threads(share, cores, threads, note):
    assert share.default_threads(cores) == (threads, note)


def test_too_many_threads_says_which_limit():
    assert CpuShare(2, None).too_many(2) is None
    assert CpuShare(2, None).too_many(3) == (
        "3 threads on 2 CPUs (what this process may use) would wait for each other and slow every token: use at most 2"
    )
    assert CpuShare(1, None).too_many(2).startswith("2 threads on 1 CPU (what")
    assert CpuShare(64, CpuQuota("/kubepods/pod1", 4.0)).too_many(8) == (
        "8 threads where cgroup /kubepods/pod1 allows 4 CPUs of time would be throttled and slow every token: "
        "use at most 4"
    )
    assert "allows 1 CPU of time" in CpuShare(4, CpuQuota("/c", 1.0)).too_many(2)
    assert CpuShare(4, CpuQuota("/c", 1.5)).too_many(2) is None  # two threads share 1.5 CPUs of time
    # a quota larger than the affinity: the affinity is the limit, and the words say so
    assert CpuShare(2, CpuQuota("/c", 8.0)).too_many(3).startswith("3 threads on 2 CPUs (what")


@pytest.mark.skipif(
    min(cpu_share().affinity, psutil.cpu_count(logical=False) or 1) < 2,
    reason="one CPU: -t 2 is refused for the affinity already, and one thread is the default",
)
def test_a_real_quota_sets_the_default_and_the_limit():
    from cgroup_fixtures import quota_cgroup

    code = (
        "from cliff_tui.engine.settings import cpu_share, default_threads; s = cpu_share(); "
        "print(s.usable, s.whole, *default_threads(), sep='|')"
    )
    with quota_cgroup(50_000) as made:
        shown = made.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True).communicate(timeout=60)[0]
        cores = min(cpu_share().affinity, psutil.cpu_count(logical=False) or 1)
        assert shown.split("|") == [
            "1",
            "1",
            "1",
            f"1 thread, not {cores}: cgroup {made.path} allows 0.5 CPUs of time (pass -t to choose)\n",
        ]
        refused = made.popen([sys.executable, "-m", "cliff_tui", "run", "-t", "2"], stderr=subprocess.PIPE, text=True)
        error = refused.communicate(timeout=60)[1]
        assert refused.returncode == 2
        assert (
            f"-t/--threads: 2 threads where cgroup {made.path} allows 0.5 CPUs of time would be throttled "
            "and slow every token: use at most 1"
        ) in error
