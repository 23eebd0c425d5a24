"""The memory signs of one run (``RunWatch``) and the one verdict they give with the speed sign."""

from __future__ import annotations

import dataclasses

from cliff_tui.analysis.cliff import RunWatch, cliff_verdict
from cliff_tui.events import DecodeWindow, Sample
from cliff_tui.records import CpuQuota, ProcessReading, RamReading, SwapReading
from cliff_tui.units import GiB, MiB


def sample(t: float, swapped: int, faults: int = 0) -> Sample:
    process = ProcessReading(7, "worker", 200 * MiB, 0, swap_bytes=swapped, cpu_s=t, major_faults=faults)
    return Sample(t, RamReading(8 * GiB, 20 * GiB, 16 * GiB), SwapReading(swapped, GiB), process=process, cpu_busy_s=t)


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


def test_a_cache_paged_out_at_creation_read_back_by_the_first_windows_is_not_the_onset():
    """The windows of a real run in a 64 MiB cgroup (default model, depth 3,072): the two baseline
    windows read back what was paged out as the context was created, the shallow probes none."""
    watch = RunWatch(kv_on_gpu=False)
    watch.observe(sample(0, 0), 0)
    recorded = [
        ("baseline", 1, 8, 600),
        ("baseline", 9, 8, 836),
        ("probe", 384, 6, 112),
        ("probe", 768, 6, 0),
        ("probe", 1152, 6, 1),
        ("probe", 1536, 6, 0),
        ("probe", 1920, 6, 677),
        ("probe", 2304, 6, 2729),
        ("probe", 2688, 6, 24522),
        ("depth", 3072, 8, 43048),
        ("depth", 3080, 8, 44220),
    ]
    for phase, depth, n, faults in recorded:
        watch.observe(sample(depth / 100, 76 * MiB), depth)
        watch.decoded(window(depth, faults, phase, n))
    verdict = cliff_verdict(watch.evidence(), None)
    assert verdict.level == "red" and verdict.depth == 1920, verdict


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


def with_cpu(s: Sample, busy: float, quota: CpuQuota | None = None) -> Sample:
    """``s`` with every core's busy seconds at ``busy`` (the run itself used ``s.t``) and a CPU quota."""
    return dataclasses.replace(s, cpu_busy_s=busy, cpu_quota=quota)


def test_other_processes_busy_beside_the_run_are_its_cpu_cause():
    watch = RunWatch(kv_on_gpu=False)
    for t in range(11):
        watch.observe(with_cpu(sample(t, 0), busy=1.9 * t), 512)  # the run 1 core, the rest 0.9
    assert watch.cpu_cause == "other processes used 0.9 CPU cores while it decoded"
    quiet = RunWatch(kv_on_gpu=False)
    for t in range(11):
        quiet.observe(with_cpu(sample(t, 0), busy=1.1 * t), 512)
    assert quiet.cpu_cause is None


def test_a_cgroup_quota_running_out_is_the_cpu_cause_before_the_load():
    watch = RunWatch(kv_on_gpu=False)
    for t in range(11):  # 10 periods a second, 3 of them throttled
        quota = CpuQuota("/kubepods/pod1", 1.5, periods=100 + 10 * t, throttled_periods=7 + 3 * t)
        watch.observe(with_cpu(sample(t, 0), busy=1.9 * t, quota=quota), 512)
    assert watch.throttled_share == 0.3
    assert watch.cpu_cause == (
        "its cgroup's CPU quota (1.5 CPUs, /kubepods/pod1) ran out in 30% of the periods while it decoded"
    )


def test_a_quota_seldom_out_or_too_new_to_read_is_no_cause():
    seldom, new = RunWatch(kv_on_gpu=False), RunWatch(kv_on_gpu=False)
    for t in range(11):
        seldom.observe(with_cpu(sample(t, 0), 1.0 * t, CpuQuota("/c", 1.5, 10 * t, t // 2)), 512)
        new.observe(with_cpu(sample(t, 0), 1.0 * t, CpuQuota("/c", 1.5, t, t)), 512)  # 10 periods, all out
    assert seldom.throttled_share == 0.05 and seldom.cpu_cause is None
    assert new.throttled_share is None and new.cpu_cause is None


def test_a_cgroup_made_again_under_the_same_name_starts_counting_again():
    watch = RunWatch(kv_on_gpu=False)
    for t, (periods, throttled) in enumerate([(1000, 0), (1030, 0), (5, 5), (40, 40)]):
        watch.observe(with_cpu(sample(t, 0), 1.0 * t, CpuQuota("/a", 1.0, periods, throttled)), 512)
    assert watch.throttled_share == 35 / 65  # 30 + 35 periods; the drop from 1030 to 5 is no count
    assert watch.cpu_cause.startswith("its cgroup's CPU quota (1 CPU, /a) ran out in 54% of the periods")


def test_periods_of_another_cgroup_or_of_no_followed_process_are_not_counted():
    moved, unfollowed = RunWatch(kv_on_gpu=False), RunWatch(kv_on_gpu=False)
    for t, path in enumerate(["/a", "/a", "/b", "/b"]):
        quota = CpuQuota(path, 1.0, 30 * t, 30 * t)
        moved.observe(with_cpu(sample(t, 0), 1.0 * t, quota), 512)
        # without a followed process the quota read is the watcher's own cgroup's
        unfollowed.observe(dataclasses.replace(with_cpu(sample(t, 0), 1.0 * t, quota), process=None), 512)
    assert moved.throttled_share == 1.0 and moved._periods == 60  # /a → /a and /b → /b, not /a → /b
    assert unfollowed.throttled_share is None and unfollowed.cpu_cause is None
