"""A cgroup's CPU quota running out: the share of its enforcement periods in which its processes
spent their quota and waited for the next period ("throttled", as docker stats and Kubernetes say).

The rules for counting periods live here: a run's verdict counts the periods of the whole run
(:class:`cliff_tui.analysis.cliff.RunWatch`), and :class:`QuotaMeter` those of the last seconds,
which a screen shows.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from cliff_tui.analysis import thresholds as th
from cliff_tui.records import CpuQuota

RECENT_S = 10.0


def periods_between(a: CpuQuota | None, b: CpuQuota | None) -> tuple[int, int] | None:
    """The periods and the throttled periods from reading ``a`` to reading ``b`` of one cgroup;
    None where either is missing or unread, they are of different cgroups, or the counters went
    back (the cgroup made again under the same name)."""
    if a is None or b is None or a.path != b.path:
        return None
    p0, p1, t0, t1 = a.periods, b.periods, a.throttled_periods, b.throttled_periods
    if p0 is None or p1 is None or t0 is None or t1 is None or p1 < p0:
        return None
    return p1 - p0, max(0, t1 - t0)


def throttled_share(periods: int, throttled: int, *, enough: bool = False) -> float | None:
    """The share of ``periods`` that ran out of quota; None below
    :data:`~cliff_tui.analysis.thresholds.THROTTLED_MIN_PERIODS` unless the count is ``enough``
    as it is (a cgroup that used little CPU over a whole window has few periods)."""
    if periods <= 0:
        return 0.0 if enough else None
    if periods < th.THROTTLED_MIN_PERIODS and not enough:
        return None
    return min(1.0, throttled / periods)


def ran_out_often(share: float | None) -> bool:
    """Often enough to slow what runs in the cgroup: each throttled period stalls it to its end."""
    return share is not None and share >= th.THROTTLED_SHARE


@dataclass(frozen=True)
class QuotaUse:
    """A cgroup's CPU quota and the share of its periods over the last ``seconds`` that ran out
    of it (None until enough periods were counted, or where they cannot be read)."""

    quota: CpuQuota
    throttled_share: float | None
    seconds: float

    @property
    def throttled(self) -> bool:
        return ran_out_often(self.throttled_share)


class QuotaMeter:
    """The readings of one cgroup's quota over a sliding window. A new cgroup, counters that went
    back, a clock that went back or a gap longer than the window start it afresh."""

    def __init__(self, window_s: float = RECENT_S) -> None:
        self.window_s = window_s
        self._quota: CpuQuota | None = None
        self._points: deque[tuple[float, CpuQuota]] = deque()

    def observe(self, t: float, quota: CpuQuota | None) -> None:
        self._quota = quota
        if quota is None or quota.periods is None or quota.throttled_periods is None:
            self._points.clear()
            return
        if self._points:
            last_t, last = self._points[-1]
            if periods_between(last, quota) is None or not last_t < t <= last_t + self.window_s:
                self._points.clear()
        self._points.append((t, quota))
        while len(self._points) > 2 and self._points[1][0] <= t - self.window_s:
            self._points.popleft()  # the oldest kept is the last one at or before the window's start

    @property
    def use(self) -> QuotaUse | None:
        """None where no quota applies."""
        if self._quota is None:
            return None
        if len(self._points) < 2:
            return QuotaUse(self._quota, None, 0.0)
        (t0, first), (t1, last) = self._points[0], self._points[-1]
        periods, throttled = periods_between(first, last) or (0, 0)
        return QuotaUse(self._quota, throttled_share(periods, throttled, enough=t1 - t0 >= self.window_s), t1 - t0)
