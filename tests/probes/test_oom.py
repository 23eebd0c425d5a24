"""An OOM kill confirmed by the memory cgroup's own count, not guessed from a SIGKILL (as root, in
real cgroups; v2's memory.events read from a file laid out as v2 writes it where this kernel has
only v1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from multiprocessing import resource_tracker
from pathlib import Path

from cgroup_cliff import MiB
from cgroup_fixtures import limited_cgroup, no_swap_cgroup
from cliff_tui.engine.worker import run_in_worker
from cliff_tui.probes.oom import OomWatch, oom_kill_count, parse_oom_kill

V2_EVENTS = "low 0\nhigh 0\nmax 41\noom 3\noom_kill 2\noom_group_kill 0\n"
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"


def test_the_oom_kill_count_is_read_from_v1_oom_control_and_v2_memory_events(tmp_path: Path):
    (tmp_path / "memory.events").write_text(V2_EVENTS)
    (tmp_path / "memory.oom_control").write_text(V1_OOM_CONTROL)
    assert oom_kill_count(tmp_path, 2) == 2  # not "oom" (3): the kills, not the times it ran out
    assert oom_kill_count(tmp_path, 1) == 7
    assert oom_kill_count(tmp_path / "gone", 2) is None
    assert parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n") is None  # a kernel that does not count them


def _hold(code: str, made) -> subprocess.Popen:
    child = made.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    return child


def test_a_sigkill_from_a_user_is_not_called_an_oom_kill():
    with limited_cgroup(512 * MiB) as made:
        child = _hold("x = bytearray(8 << 20); print('ready', flush=True); import time; time.sleep(30)", made)
        watch = OomWatch(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        oom = watch.ended(child.returncode, depth=None)
    assert oom is not None and not oom.confirmed
    assert oom.by_cgroup is False
    assert oom.limit_bytes == 512 * MiB and oom.last_rss_bytes and oom.last_rss_bytes >= 8 * MiB
    assert "OOM-killed" not in oom.words and "not the OOM killer" in oom.words


def test_an_oom_kill_past_a_limit_with_no_swap_is_confirmed_by_the_cgroup():
    with no_swap_cgroup(64 * MiB) as made:
        code = (
            "import time; print('ready', flush=True); time.sleep(0.5); "
            "chunks = [bytearray(8 << 20) for _ in range(64)]; time.sleep(30)"
        )
        child = _hold(code, made)
        watch = OomWatch(child.pid)
        while child.poll() is None:
            watch.poll()
        oom = watch.ended(child.returncode, depth=1234)
    assert child.returncode == -signal.SIGKILL
    assert oom is not None and oom.confirmed and oom.by_cgroup is True
    assert oom.limit_bytes == 64 * MiB and oom.limit_path == made.path
    assert oom.last_rss_bytes is not None and 16 * MiB <= oom.last_rss_bytes
    assert oom.tier == "RAM (cgroup limit 64.0 MiB)"
    assert oom.words.startswith("OOM-killed at depth 1,234 at RSS ") and "of limit 64.0 MiB" in oom.words


def _report_oom_score(conn) -> None:
    conn.send(Path("/proc/self/oom_score_adj").read_text().strip())


def test_the_worker_is_the_oom_killers_first_choice_and_the_monitor_is_left_alone():
    before = Path("/proc/self/oom_score_adj").read_text().strip()
    seen: list[str] = []
    code = run_in_worker(_report_oom_score, (), seen.append, threading.Event())
    assert code == 0 and seen == ["1000"]
    assert Path("/proc/self/oom_score_adj").read_text().strip() == before
    tracker = resource_tracker._resource_tracker._pid  # picked next, while a killed worker lets go
    assert Path(f"/proc/{tracker}/oom_score_adj").read_text().strip() == "1000"
