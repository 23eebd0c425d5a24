"""What one sample of the tiers costs in place (every 250 ms, as `watch` takes it) against the same
call hot (in a tight loop), idle and with RAM churning, part by part.

Each part of ``Sampler.sample()`` is wrapped with a thread-CPU timer. A round takes --seconds of
samples at 4 Hz, then 2,000 samples back to back; rounds alternate idle and churning (the helper of
``watch_cost.py``, allocating and freeing --churn GiB every second) --reps times.

    python bench/sampler_cost.py --reps 3 --seconds 30   # the figures in bench/RESULTS.md
    python bench/sampler_cost.py --reps 1 --seconds 10
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tui"), str(ROOT / "bench")]

from watch_cost import CHURN

from cliff_tui.probes import sampler as sampler_module
from cliff_tui.probes.sampler import Sampler

HOT_SAMPLES = 2000


class PartTimer:
    """Thread-CPU seconds spent in each wrapped call."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)

    def wrap(self, owner: object, name: str, label: str) -> None:
        call: Callable = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return call(*args, **kwargs)
            finally:
                self.spent[label] += time.thread_time() - t0

        setattr(owner, name, timed)


def timed_sampler() -> tuple[Sampler, PartTimer]:
    sampler, parts = Sampler(), PartTimer()
    parts.wrap(sampler.nvidia, "read", "NVML")
    if sampler.amd is not None:
        parts.wrap(sampler.amd, "read", "amdgpu")
    parts.wrap(sampler_module, "fill_shared", "shared VRAM")
    parts.wrap(sampler_module, "read_memory", "RAM and swap")
    parts.wrap(sampler_module, "read_cpu_busy_s", "CPU busy")
    parts.wrap(sampler._cgroup, "read", "cgroup")
    return sampler, parts


def per_sample_us(sampler: Sampler, parts: PartTimer, count: int, pause_s: float) -> dict[str, float]:
    parts.spent.clear()
    total = 0.0
    for _ in range(count):
        t0 = time.thread_time()
        sampler.sample()
        total += time.thread_time() - t0
        if pause_s:
            time.sleep(pause_s)
    return {"sample()": total / count * 1e6, **{k: v / count * 1e6 for k, v in parts.spent.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--churn", type=float, default=6, metavar="GIB")
    args = parser.parse_args()
    sampler, parts = timed_sampler()
    rows: list[tuple[str, dict[str, float], dict[str, float]]] = []
    for rep in range(args.reps):
        for load in ("idle", "churning"):
            helper = subprocess.Popen([sys.executable, "-c", CHURN, str(args.churn)]) if load == "churning" else None
            try:
                in_place = per_sample_us(sampler, parts, int(args.seconds * 4), 0.25)
                hot = per_sample_us(sampler, parts, HOT_SAMPLES, 0)
            finally:
                if helper is not None:
                    helper.kill()
                    helper.wait()
            rows.append((f"{load} {rep + 1}", in_place, hot))
    sampler.close()
    print("µs of thread CPU per sample, in place (4 Hz) / hot (back to back)\n")
    names = list(rows[0][1])
    print("| part | " + " | ".join(label for label, _, _ in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for name in names:
        cells = [f"{in_place.get(name, 0):,.0f} / {hot.get(name, 0):,.0f}" for _, in_place, hot in rows]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
