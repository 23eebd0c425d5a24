"""A memory cgroup's limit below RAM is the RAM tier: on the sample, in JSON, in fit's capacity
(a real v1/v2 cgroup as root; skipped with the reason elsewhere)."""

from __future__ import annotations

import json
import subprocess
import sys

from cgroup_cliff import MiB

LIMIT = 200 * MiB


def inside(box, *args: str) -> subprocess.CompletedProcess:
    proc = box.popen(
        [sys.executable, "-m", "cliff_tui", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_watch_once_inside_a_cgroup_reports_its_limit_as_the_ram_tier(memory_sandbox):
    box = memory_sandbox(LIMIT, swap_bytes=256 * MiB)
    proc = inside(box, "watch", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["cgroup"]["limit_bytes"] == LIMIT
    assert 0 < record["cgroup"]["usage_bytes"] <= LIMIT
    assert record["ram"]["total_bytes"] > LIMIT  # the host's RAM, which btop and nvitop would show


def test_fit_inside_a_cgroup_sizes_the_tier_by_its_limit(memory_sandbox, tiny_model):
    box = memory_sandbox(LIMIT, swap_bytes=256 * MiB)
    proc = inside(box, "fit", "-m", str(tiny_model), "--json", "--reserve", "16MiB")  # the default keeps 256 MiB free
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["tier"] == "RAM (cgroup limit 200 MiB)"
    assert record["capacity_bytes"] <= LIMIT
