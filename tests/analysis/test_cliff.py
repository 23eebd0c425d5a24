"""The memory signs of one run (``RunWatch``) and the one verdict they give with the speed sign."""

from __future__ import annotations

from cliff_tui.analysis.cliff import RunWatch, cliff_verdict
from cliff_tui.events import DecodeWindow, ProcessReading, RamReading, Sample, SwapReading
from cliff_tui.units import GiB, MiB


def sample(t: float, swapped: int, faults: int = 0) -> Sample:
    process = ProcessReading(7, "worker", 200 * MiB, 0, swap_bytes=swapped, cpu_s=t, major_faults=faults)
    return Sample(t, RamReading(8 * GiB, 20 * GiB, 16 * GiB), SwapReading(swapped, GiB), process=process,
                  cpu_busy_s=t)


def window(depth: int, faults: int, phase: str = "probe", n: int = 8) -> DecodeWindow:
    return DecodeWindow(0.0, "r1", phase, depth, n, 20.0, 1.0, faults)


def test_decode_windows_reading_pages_back_name_the_depth_where_paging_began():
    watch = RunWatch(kv_on_gpu=False)
    watch.observe(sample(0, 0), 0)
    # the first window after the context is created reads its first pages back once: not paging
    watch.decoded(window(1, 8 * 80, "baseline"))
    watch.decoded(window(9, 8 * 2, "baseline"))
    for depth, per_token in ((512, 0), (1024, 1), (1536, 150), (2048, 600)):
        watch.observe(sample(depth / 100, 120 * MiB), depth)
        watch.decoded(window(depth, 8 * per_token))
    watch.observe(sample(30, 120 * MiB), 2048)
    verdict = cliff_verdict(watch.evidence(), None)
    assert verdict.level == "red" and verdict.tier == "swap"
    assert verdict.depth == 1536, verdict


def test_pages_in_swap_that_decode_never_reads_back_are_no_cliff():
    watch = RunWatch(kv_on_gpu=False)
    watch.observe(sample(0, 0), 0)
    for depth in (512, 1024, 1536, 2048):
        watch.observe(sample(depth / 100, 120 * MiB, faults=depth * 50), depth)  # the prefill's writes fault
        watch.decoded(window(depth, 8))
    verdict = cliff_verdict(watch.evidence(), None)
    assert verdict.level == "info" and "not read back" in verdict.text


def test_one_window_reading_back_does_not_flip_the_state():
    watch = RunWatch(kv_on_gpu=False)
    watch.observe(sample(0, 0), 0)
    for depth, per_token in ((512, 0), (1024, 300), (1536, 0), (2048, 0)):
        watch.decoded(window(depth, 8 * per_token))
        watch.observe(sample(depth / 100, 120 * MiB), depth)
    assert cliff_verdict(watch.evidence(), None).level == "info"
