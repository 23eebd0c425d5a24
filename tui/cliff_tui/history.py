"""Bounded per-metric history, so a day-long session keeps flat memory."""

from __future__ import annotations

from collections import deque

DEFAULT_CAPACITY = 3600  # 15 minutes at 4 Hz


class Series:
    """A ring buffer of (t, value) points; ``None`` values are kept as gaps."""

    __slots__ = ("times", "values", "appended")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.times: deque[float] = deque(maxlen=capacity)
        self.values: deque[float | None] = deque(maxlen=capacity)
        self.appended = 0  # ever, not just kept: tells a redraw whether anything new arrived

    def append(self, t: float, value: float | None) -> None:
        self.times.append(t)
        self.values.append(value)
        self.appended += 1

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None

    def tail(self, n: int) -> list[float | None]:
        if n <= 0:
            return []
        start = max(0, len(self.values) - n)
        return [self.values[i] for i in range(start, len(self.values))]

    def since(self, t0: float) -> list[tuple[float, float]]:
        """Points at or after ``t0`` that have a value (newest last)."""
        out: list[tuple[float, float]] = []
        for t, v in zip(reversed(self.times), reversed(self.values)):
            if t < t0:
                break
            if v is not None:
                out.append((t, v))
        out.reverse()
        return out


class History:
    """Named series created on first use."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._series: dict[str, Series] = {}

    def add(self, name: str, t: float, value: float | None) -> None:
        series = self._series.get(name)
        if series is None:
            series = self._series[name] = Series(self.capacity)
        series.append(t, value)

    def get(self, name: str) -> Series:
        return self._series.get(name) or Series(1)

