"""How often a cgroup's CPU quota ran out over the last seconds (``QuotaMeter``)."""

from __future__ import annotations

from cliff_tui.analysis.cpu_quota import QuotaMeter
from cliff_tui.events import CpuQuota


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
