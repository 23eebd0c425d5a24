"""The cliff gauge: a run's context against the largest its tier holds before the cliff."""

from __future__ import annotations

from cliff_tui.analysis.gauge import CliffRoom, cliff_room, run_gauge
from cliff_tui.events import Sample
from cliff_tui.records import CgroupReading, GpuReading, RamReading, SwapReading
from cliff_tui.units import GiB, MiB


def test_a_run_on_ram_can_grow_by_the_room_left_above_the_reserve():
    # 22.5 KiB a cell, 4,352 cells allocated, 10 GiB left of a 24 GiB tier (reserve 1.2 GiB)
    room = CliffRoom("RAM", 24 * GiB, 10 * GiB)
    gauge = run_gauge(4096, 4352, 4352 * 22.5 * 1024, room)
    assert gauge.max_context == 4352 + int((10 * GiB - int(24 * GiB * 0.05)) / (22.5 * 1024))
    assert gauge.level == "ok" and gauge.fraction < 0.01


def test_a_run_past_the_line_is_red_and_one_near_it_amber():
    per_cell = 1 * MiB
    near = run_gauge(900, 1000, 1000 * per_cell, CliffRoom("GPU0 dedicated VRAM", 8 * GiB, 410 * MiB))
    assert near.max_context == 1000 and near.level == "amber"  # 410 MiB left, 409.6 of them the reserve
    past = run_gauge(1000, 1000, 1000 * per_cell, CliffRoom("GPU0 dedicated VRAM", 8 * GiB, 100 * MiB))
    assert past.max_context < 1000 and past.level == "red"


def test_the_cliff_tier_is_the_kv_caches_gpu_else_ram_under_its_cgroup_limit():
    gpu = GpuReading(0, "card", "nvidia", 6 * GiB, 8 * GiB)
    sample = Sample(1.0, RamReading(8 * GiB, 32 * GiB, 24 * GiB), SwapReading(0, 0), (gpu,))
    assert cliff_room(sample, "CUDA0") == CliffRoom("GPU0 dedicated VRAM", 8 * GiB, 2 * GiB)
    assert cliff_room(sample, "CPU").tier == "RAM"
    assert cliff_room(sample, "CPU").free_bytes == 24 * GiB
    limited = Sample(
        1.0,
        RamReading(8 * GiB, 32 * GiB, 24 * GiB),
        SwapReading(0, 0),
        cgroup=CgroupReading("/sys/fs/cgroup/x", 512 * MiB, 200 * MiB),
    )
    room = cliff_room(limited, "CPU")
    assert room.tier == "RAM (cgroup limit 512 MiB)"
    assert room.capacity_bytes == 512 * MiB and room.free_bytes == 312 * MiB
