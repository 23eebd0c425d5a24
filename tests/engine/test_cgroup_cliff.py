"""A real cliff on a CPU machine: the default model's decode inside a memory cgroup whose limit is
below its KV cache, with a swap file behind it (as root; skipped with the reason elsewhere).

SmolLM2-135M's f16 KV cache is 22.5 KiB a token: 73 MiB for the 3,328 cells of a run to depth
3,072, against a limit of 64 MiB. llama.cpp zeroes the whole cache when it creates the context,
so the cgroup is at its limit and cold pages are in swap from the start; decode at depth reads
every layer's cache for every token, and past the depth where the cache in use reaches this
limit (see bench/RESULTS.md, 'A real cliff in a memory cgroup') that no longer fits, so each
token reads megabytes back from swap. The probes of the shallow half (≤ 1,536) are below that and
give the run's own depth trend. One thread: llama.cpp's threads spin-wait at barriers, and on a
shared 2-core machine two of them turn other processes' load into stalls that would swamp that
trend (the same section).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from cgroup_cliff import MiB, Monitor, Sandbox, cache_outside, paging_onset
from cliff_tui.analysis.speed import robust_line
from cliff_tui.events import DecodeWindow
from cliff_tui.recording.reader import open_recording

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 64 * MiB
DEPTH = 3072
N_GEN = 16


def run_in(box: Sandbox, record: Path) -> tuple[dict, Monitor]:
    argv = [
        sys.executable,
        "-m",
        "cliff_tui",
        "run",
        "--headless",
        "--depth",
        str(DEPTH),
        "--n-gen",
        str(N_GEN),
        "-t",
        "1",
        "-o",
        "json",
        "--record",
        str(record),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tui"), os.environ.get("PYTHONPATH", "")]))
    with Monitor(box.cgroup, interval_s=0.05) as monitor:
        proc = box.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out), monitor


def decode_started_at(record: Path) -> float:
    for line in record.read_text().splitlines():
        event = json.loads(line)
        if event.get("type") == "progress" and event["phase"] == "decode":
            return event["t"]
    raise AssertionError("the recording has no decode phase")


@pytest.mark.model
@pytest.mark.slow
def test_decode_falls_off_a_cliff_when_the_kv_cache_is_paged_to_swap(memory_sandbox, tmp_path, smollm2):
    box = memory_sandbox(LIMIT, swap_bytes=1024 * MiB, swap_kind="file")
    cache_outside(smollm2)
    record = tmp_path / "run.jsonl"
    result, monitor = run_in(box, record)

    points = result["decode_points"]
    shallow = [(p["depth"], p["ms_per_token"]) for p in points if p["phase"] == "probe" and p["depth"] <= DEPTH / 2]
    trend = robust_line([d for d, _ in shallow], [ms for _, ms in shallow])
    assert trend is not None and len(shallow) >= 3
    trend_ms = trend.intercept + trend.slope * DEPTH
    measured_ms = statistics.median(p["ms_per_token"] for p in points if p["phase"] == "depth")
    # ≥ 50 % fewer tok/s than the run's own depth trend predicts at its depth
    assert measured_ms >= 2 * trend_ms, (measured_ms, trend_ms, points)

    # what is paged is anonymous memory (swap holds nothing else), and it is hot: during decode
    # the cgroup keeps reading pages back from swap, token after token
    kv_bytes = sum(result["kv_buffers"].values())
    assert kv_bytes > LIMIT
    assert monitor.peak("swap_bytes") >= 32 * MiB
    assert monitor.peak("vm_swap_bytes") >= 32 * MiB
    decoding = [s for s in monitor.samples if s.t >= decode_started_at(record)]
    assert len(decoding) >= 2
    faults_per_token = (decoding[-1].major_faults - decoding[0].major_faults) / N_GEN
    print(
        f"decode at {DEPTH}: {measured_ms:.1f} ms/token against a trend of {trend_ms:.1f}; swap "
        f"{monitor.peak('swap_bytes') / MiB:.1f} MiB (VmSwap {monitor.peak('vm_swap_bytes') / MiB:.1f}); "
        f"{faults_per_token:.0f} major faults a decoded token; verdict {result['verdict']}"
    )
    assert faults_per_token >= 256, faults_per_token  # ≥ 1 MiB a token read back

    # the one verdict: red, on swap, at the depth where decode began reading pages back by the
    # cgroup's own counter (not the worker's, which the verdict uses)
    cliff = result["cliff"]
    assert cliff["level"] == "red" and cliff["tier"] == "swap", cliff["text"]
    assert "PCIe" not in cliff["text"]
    windows = [e for e in open_recording(record).events if isinstance(e, DecodeWindow)]
    reading_back = paging_onset(monitor.samples, windows)
    assert reading_back is not None and reading_back > 0
    assert abs(cliff["depth"] - reading_back) <= 0.2 * reading_back, (cliff["depth"], reading_back, cliff["text"])
