"""The one cliff verdict on real runs of the default model: quiet, beside a CPU hog, held to a CPU
quota, and the GPU trace's shape (the cgroup cliff, where memory really is paged out, is in test_cgroup_cliff.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import psutil
import pytest

from cliff_tui.engine.settings import cpu_share
from cliff_tui.events import Alert, Notice, RunFinished
from cliff_tui.recording import demo
from cliff_tui.recording.export import export, replay_all
from cliff_tui.recording.reader import open_recording
from cliff_tui.store import Store


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cliff_tui", *args], capture_output=True, text=True, timeout=timeout)


def alarms(path) -> list[Alert]:
    """The live alerts, as the dashboard raised them (recomputed from the recording)."""
    return [a for a in replay_all(open_recording(path)).signs.alerts if a.level in ("amber", "red")]


MEASURED_LOAD = ("other processes used", "CPU quota")  # the causes an amber may name on a CPU box


def assert_no_cliff(cliff: dict, record) -> None:
    """A run with no memory sign is no cliff: ok or info; amber only with the load the rest of this
    shared machine put on it, measured and named (tests run side by side here)."""
    assert cliff["level"] in ("ok", "info", "amber"), cliff["text"]
    if cliff["level"] == "amber":
        assert any(cause in cliff["text"] for cause in MEASURED_LOAD), cliff["text"]
    assert "PCIe" not in cliff["text"]
    for alarm in alarms(record):
        assert alarm.level == "amber" and any(cause in alarm.message for cause in MEASURED_LOAD), alarm.message


@pytest.mark.model
@pytest.mark.slow
def test_a_quiet_cpu_run_to_8k_raises_no_alarm_live_or_final(tmp_path):
    record = tmp_path / "quiet.jsonl"
    proc = cli("run", "--headless", "--depth", "8k", "--n-gen", "32", "-o", "json", "--record", str(record))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_no_cliff(json.loads(proc.stdout)["cliff"], record)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CLIFF_SLOW") != "1", reason="16k prefill takes ~10 minutes here: CLIFF_SLOW=1")
def test_a_quiet_cpu_run_to_16k_raises_no_alarm(tmp_path):
    record = tmp_path / "quiet16.jsonl"
    proc = cli(
        "run", "--headless", "--depth", "16k", "--n-gen", "32", "-o", "json", "--record", str(record), timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_no_cliff(json.loads(proc.stdout)["cliff"], record)


@pytest.fixture
def cpu_hog():
    """A busy loop pinned to core 0, for as long as the test runs."""
    hog = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"])
    try:
        yield hog
    finally:
        hog.kill()
        hog.wait()


@pytest.mark.model
@pytest.mark.slow
def test_beside_a_cpu_hog_there_is_no_red_and_an_amber_names_the_load(cpu_hog, tmp_path):
    record = tmp_path / "hog.jsonl"
    proc = cli("run", "--headless", "--depth", "4k", "--n-gen", "32", "-o", "json", "--record", str(record))
    assert proc.returncode == 0, proc.stderr[-2000:]
    cliff = json.loads(proc.stdout)["cliff"]
    assert cliff["level"] != "red", cliff["text"]
    if cliff["level"] == "amber":
        assert "other processes used" in cliff["text"] and "CPU cores" in cliff["text"]
    assert not [a for a in alarms(record) if a.level == "red"]


@pytest.mark.model
def test_in_a_cgroup_held_to_half_a_cpu_the_quota_is_the_cause_named(tmp_path):
    from cgroup_fixtures import quota_cgroup

    record = tmp_path / "quota.jsonl"
    argv = [
        sys.executable,
        "-m",
        "cliff_tui",
        "run",
        "--headless",
        "--depth",
        "512",
        "--n-gen",
        "32",
        "-o",
        "json",
        "--record",
        str(record),
    ]  # the threads as the quota allows: one
    with quota_cgroup(50_000) as made:
        out, err = made.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).communicate(timeout=300)
    cause = f"its cgroup's CPU quota (0.5 CPUs, {made.path}) ran out in"
    cliff = json.loads(out)["cliff"]
    assert cliff["level"] != "red", cliff["text"]
    if cliff["level"] == "amber":  # a fall beyond the trend is put down to the quota, not to depth
        assert cause in cliff["text"]
    assert json.loads(out)["threads"] == 1
    events = open_recording(record).events
    if min(cpu_share().affinity, psutil.cpu_count(logical=False) or 1) >= 2:
        assert any(
            isinstance(e, Notice)
            and e.text.startswith("1 thread, not ")
            and f"cgroup {made.path} allows 0.5 CPUs of time" in e.text
            for e in events
        )
    run = next(iter(replay_all(open_recording(record)).runs.views.values()))
    assert cause in run.watch.cpu_cause, err[-2000:]  # named only where its periods often ran out
    rows = list(csv.DictReader(io.StringIO(export(str(record), "csv"))))
    assert rows[-1]["cpu_quota_cpus"] == "0.5" and int(rows[-1]["cpu_throttled_periods"]) > 0


@pytest.mark.model
@pytest.mark.slow
def test_readme_first_command_headless_is_linear_with_no_live_alarm(tmp_path):
    record = tmp_path / "tri.jsonl"
    proc = cli("triangulate", "--headless", "-o", "json", "--record", str(record), timeout=2400)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["verdict"].startswith("linear"), result["verdict"]
    assert_no_cliff(result["cliff"], record)


def test_the_gpu_trace_ends_red_with_shared_vram_named():
    store = Store()
    for event in demo.gpu_cliff_run():
        store.feed(event)
    (result,) = store.runs.results
    live = Store()  # the same rule live: before the run finished
    for event in demo.gpu_cliff_run():
        if not isinstance(event, RunFinished):
            live.feed(event)
    for verdict in (result.cliff, store.cliff_verdict(), live.cliff_verdict()):
        assert (verdict.level, verdict.tier, verdict.depth) == ("red", "GPU0 shared VRAM", 21_000)
        # the memory sign, then the decode beyond its trend as its corroboration
        assert [(e.sign, e.level) for e in verdict.evidence] == [(1, "red"), (3, "red")]
        assert verdict.text.startswith(
            "cliff on GPU0 shared VRAM: 1.62 GiB of GPU memory moved into system RAM near depth 21,000; "
            "decode fell 75% below its depth trend from depth 21,000"
        )
