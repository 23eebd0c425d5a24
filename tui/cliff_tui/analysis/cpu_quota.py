"""How often a cgroup's CPU quota ran out lately: the share of its enforcement periods, over the
last seconds, in which its processes spent their quota and waited for the next period.

A run's verdict counts the periods of the whole run (:class:`cliff_tui.analysis.cliff.RunWatch`);
this is the live figure a screen shows beside it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from cliff_tui.analysis import thresholds as th
from cliff_tui.events import CpuQuota

RECENT_S = 10.0


@dataclass(frozen=True)
class QuotaUse:
    """A cgroup's CPU quota and the share of its periods over the last ``seconds`` that ran out
    of it (None until :data:`~cliff_tui.analysis.thresholds.THROTTLED_MIN_PERIODS` have passed,
    or where its periods cannot be read)."""

    quota: CpuQuota
    throttled_share: float | None
    seconds: float

    @property
    def throttled(self) -> bool:
        return self.throttled_share is not None and self.throttled_share >= th.THROTTLED_SHARE


class QuotaMeter:
    """The periods of one cgroup's quota over a sliding window; a new cgroup, or counters that
    went back (the cgroup made again under the same name), start it afresh."""

    def __init__(self, window_s: float = RECENT_S) -> None:
        self.window_s = window_s
        self._quota: CpuQuota | None = None
        self._points: deque[tuple[float, int, int]] = deque()  # t, periods, throttled periods

    def observe(self, t: float, quota: CpuQuota | None) -> None:
        previous, self._quota = self._quota, quota
        if quota is None or quota.periods is None or quota.throttled_periods is None:
            self._points.clear()
            return
        if previous is None or previous.path != quota.path or (self._points and quota.periods < self._points[-1][1]):
            self._points.clear()
        self._points.append((t, quota.periods, quota.throttled_periods))
        while len(self._points) > 2 and self._points[1][0] <= t - self.window_s:
            self._points.popleft()  # the oldest kept is the last one at or before the window's start

    @property
    def use(self) -> QuotaUse | None:
        """None where no quota applies."""
        if self._quota is None:
            return None
        if len(self._points) < 2:
            return QuotaUse(self._quota, None, 0.0)
        (t0, periods0, throttled0), (t1, periods1, throttled1) = self._points[0], self._points[-1]
        periods = periods1 - periods0
        share = None if periods < th.THROTTLED_MIN_PERIODS else min(1.0, max(0, throttled1 - throttled0) / periods)
        return QuotaUse(self._quota, share, t1 - t0)
