"""How often a cgroup's CPU quota ran out over the last seconds (``QuotaMeter``)."""

from __future__ import annotations

from cliff_tui.analysis.cpu_quota import QuotaMeter
from cliff_tui.records import CpuQuota


def quota(periods: int | None, throttled: int | None, path: str = "/job", cpus: float = 0.5) -> CpuQuota:
    return CpuQuota(path, cpus, periods, throttled)


def test_no_quota_no_use():
    meter = QuotaMeter()
    meter.observe(0.0, None)
    assert meter.use is None


def test_the_share_counts_only_the_periods_of_the_last_seconds():
    meter = QuotaMeter(window_s=10)
    meter.observe(0.0, quota(0, 0))
    assert meter.use.throttled_share is None  # one reading: nothing counted yet
    meter.observe(5.0, quota(50, 50))  # 5 s of periods, each ran out
    assert (meter.use.throttled_share, meter.use.seconds, meter.use.throttled) == (1.0, 5.0, True)
    for t in (10.0, 15.0, 20.0):  # then none ran out
        meter.observe(t, quota(int(t * 10), 50))
    use = meter.use
    assert use.throttled_share == 0.0 and use.seconds == 10.0 and not use.throttled


def test_too_few_periods_give_no_share():
    meter = QuotaMeter()
    meter.observe(0.0, quota(0, 0))
    meter.observe(1.0, quota(10, 10))
    assert meter.use.throttled_share is None
    meter.observe(2.0, quota(20, 10))
    assert meter.use.throttled_share == 0.5


def test_another_cgroup_or_counters_that_went_back_start_afresh():
    meter = QuotaMeter()
    meter.observe(0.0, quota(0, 0))
    meter.observe(3.0, quota(30, 30))
    meter.observe(4.0, quota(40, 40, path="/other"))
    assert meter.use.quota.path == "/other" and meter.use.throttled_share is None
    meter.observe(7.0, quota(70, 40, path="/other"))
    assert meter.use.throttled_share == 0.0
    meter.observe(8.0, quota(5, 5, path="/other"))  # made again under the same name
    assert meter.use.throttled_share is None


def test_unreadable_periods_keep_the_quota_without_a_share():
    meter = QuotaMeter()
    meter.observe(0.0, quota(0, 0))
    meter.observe(3.0, quota(None, None))
    assert meter.use.quota.cpus == 0.5 and meter.use.throttled_share is None


def test_a_clock_that_went_back_or_a_gap_longer_than_the_window_starts_afresh():
    meter = QuotaMeter(window_s=10)
    meter.observe(100.0, quota(0, 0))
    meter.observe(105.0, quota(50, 50))
    meter.observe(103.0, quota(60, 60))  # the clock set back
    assert (meter.use.throttled_share, meter.use.seconds) == (None, 0.0)
    meter.observe(108.0, quota(110, 60))
    assert meter.use.throttled_share == 0.0
    meter.observe(400.0, quota(3000, 3000))  # a suspended machine, a hole in a recording
    assert (meter.use.throttled_share, meter.use.seconds) == (None, 0.0)


def test_a_cgroup_that_ran_little_over_a_whole_window_has_a_share_of_its_few_periods():
    meter = QuotaMeter(window_s=10)
    meter.observe(0.0, quota(0, 0))
    meter.observe(5.0, quota(3, 1))
    assert meter.use.throttled_share is None  # few periods, and the window not over yet
    meter.observe(10.0, quota(16, 4))
    assert meter.use.throttled_share == 0.25 and meter.use.throttled
    meter.observe(20.0, quota(16, 4))  # nothing ran
    assert meter.use.throttled_share == 0.0
