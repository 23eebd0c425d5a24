"""``cliff-tui watch --once --json`` end to end: a real subprocess, real psutil, this machine's NVML.

On this project's machine there is no GPU, so ``gpus`` is ``[]`` with a human reason; on a machine
with one, the same tests check the per-GPU fields instead.
"""

from __future__ import annotations

import ctypes
import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cliff_tui.headless import watch_line
from cliff_tui.probes.amd import find_amd_cards
from cliff_tui.probes.sampler import CPU_ONLY_TIERS, Sampler
from paths import CHILD_BYTES, free_pid  # the `child` fixture holds CHILD_BYTES


def _has_gpu() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return bool(find_amd_cards())


HAS_GPU = _has_gpu()


def cliff(*args: str, script: bool = False) -> dict:
    if script:
        exe = Path(sys.executable).with_name("cliff-tui")
        assert exe.exists(), f"console script not installed next to {sys.executable}"
        cmd = [str(exe), *args]
    else:
        cmd = [sys.executable, "-m", "cliff_tui", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}: {proc.stderr}"
    return json.loads(proc.stdout)  # stdout is exactly one JSON document


def check_sample(record: dict) -> None:
    ram, swap = record["ram"], record["swap"]
    total = psutil.virtual_memory().total
    assert ram["total_bytes"] == total
    assert isinstance(ram["used_bytes"], int) and 0 < ram["used_bytes"] < total
    assert 0 < ram["available_bytes"] <= total
    assert swap["total_bytes"] == psutil.swap_memory().total
    assert isinstance(swap["used_bytes"], int) and 0 <= swap["used_bytes"] <= swap["total_bytes"]
    assert isinstance(record["t"], float)
    assert isinstance(record["gpus"], list)
    if not HAS_GPU:
        assert record["gpus"] == []
        reason = record["gpus_reason"]
        assert reason.startswith("no GPU found")
        assert "NVIDIA" in reason and "RAM and swap are the memory tiers" in reason
    else:  # pragma: no cover - a GPU machine
        assert record["gpus"]
        for gpu in record["gpus"]:
            for key in ("vram_used_bytes", "vram_total_bytes", "shared_used_bytes"):
                assert key in gpu
                if gpu[key] is None:
                    assert gpu["reasons"][key]


def test_watch_once_json():
    record = cliff("watch", "--once", "--json")
    check_sample(record)
    assert "process" not in record


def test_bare_cliff_tui_is_watch():
    record = cliff("--once", "--json")
    check_sample(record)
    assert "process" not in record


def test_pid_adds_that_process(child):
    record = cliff("--pid", str(child.pid), "--once", "--json")
    check_sample(record)
    proc = record["process"]
    assert proc["pid"] == child.pid
    assert proc["name"].startswith("python")
    assert proc["rss_bytes"] >= CHILD_BYTES
    assert proc["reasons"].get("rss_bytes") is None


def test_console_script_with_pid_1():
    record = cliff("--pid", "1", "--once", "--json", script=True)
    check_sample(record)
    proc = record["process"]
    assert proc["pid"] == 1
    # PID 1 exists everywhere; reading it may be refused outside a container: then a reason, not a crash
    assert (isinstance(proc["rss_bytes"], int) and proc["rss_bytes"] > 0) or proc["reasons"]["rss_bytes"]


@pytest.mark.parametrize(
    "command",
    [
        ["watch", "--once"],
        ["watch", "--headless"],
        ["watch"],
        ["attach", "--llama-server", "http://127.0.0.1:9", "--once"],
        ["exporter", "--bind", "127.0.0.1:0"],
    ],
)
def test_a_pid_that_does_not_exist_is_refused_before_anything_starts(command):
    pid = free_pid()
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", *command, "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    assert proc.stderr == (
        f"cliff-tui: no process with PID {pid}: give the PID of a running process "
        "(`pgrep -f llama-server` prints a server's)\n"
    )


def test_the_one_line_reading_says_why_a_followed_process_has_no_rss():
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    sampler = Sampler(pid=gone.pid)
    gone.kill()
    gone.wait()
    try:
        line = watch_line(sampler.sample())
    finally:
        sampler.close()
    assert line.endswith(f"PID {gone.pid} RSS n/a (process {gone.pid} has exited)")


def test_the_one_line_reading_names_the_followed_processs_cpu_quota():
    """As root: a child in a cgroup held to half a CPU."""
    from cgroup_fixtures import quota_cgroup

    with quota_cgroup(50_000) as made:
        child = made.popen([sys.executable, "-c", "import time; time.sleep(30)"])
        sampler = Sampler(pid=child.pid)
        try:
            line = watch_line(sampler.sample())
        finally:
            sampler.close()
    assert f"PID {child.pid} RSS " in line and line.endswith(f"  CPU quota 0.5 CPUs (cgroup {made.path})")


def _no_vram() -> str | None:
    """Why this machine has no VRAM tier, as its sampler says (None: it has one)."""
    sampler = Sampler()
    try:
        return sampler.sample().no_vram
    finally:
        sampler.close()


def test_the_text_reading_says_why_there_is_no_vram_tier_on_stderr():
    proc = subprocess.run(
        [sys.executable, "-m", "cliff_tui", "watch", "--once", "--no-servers"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1  # one reading, for a script to read
    reason = _no_vram()
    assert proc.stderr == (f"cliff-tui: {reason}\n" if reason else "")
    if not HAS_GPU:
        assert reason.startswith("No VRAM tier: no GPU found (NVIDIA: ") and reason.endswith(CPU_ONLY_TIERS)


def test_the_reading_of_a_process_in_a_memory_cgroup_is_against_its_limit():
    from cgroup_fixtures import child_in_cgroup

    MiB = 1024 * 1024
    with child_in_cgroup(96 * MiB, 40 * MiB) as (_, held):
        proc = subprocess.run(
            [sys.executable, "-m", "cliff_tui", "watch", "--once", "--pid", str(held.pid)],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert proc.returncode == 0, proc.stderr
    ram = proc.stdout.split("  ")[1]
    shown = re.fullmatch(r"RAM ([\d.]+) MiB/96\.0 MiB \(cgroup limit; host [\d.]+ [MG]iB/[\d.]+ [MG]iB\)", ram)
    assert shown and 40 <= float(shown.group(1)) <= 96, ram
