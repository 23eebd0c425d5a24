"""Bounded per-metric history, so a day-long session keeps flat memory."""

from __future__ import annotations

from collections import deque
from itertools import islice

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
        out = list(islice(reversed(self.values), n))  # a deque indexes its middle in O(n)
        out.reverse()
        return out

    def columns(self, n: int, per_column: int) -> list[float | None]:
        """The newest ``n`` complete columns of ``per_column`` points, each its largest value (None:
        a gap), grouped on the count of points since the start. A column is drawn once it is
        complete, so the picture moves once a column, not with every point; until the first one
        is complete, the points so far are shown as one."""
        if per_column <= 1:
            return self.tail(n)
        complete = self.appended - self.appended % per_column
        filling = self.appended - complete if complete else 0  # the points of the column being filled
        points = self.tail(n * per_column + filling)
        if filling:
            points = points[:-filling]
        newest = per_column if complete else self.appended
        head = (len(points) - newest) % per_column
        chunks = ([points[:head]] if head else []) + [points[i:i + per_column]
                                                       for i in range(head, len(points), per_column)]
        return [max((v for v in chunk if v is not None), default=None) for chunk in chunks][-n:]

    def columns_version(self, per_column: int) -> int:
        """Changes exactly when :meth:`columns` can: a screen redraws the graph only then."""
        if per_column <= 1 or self.appended < per_column:
            return self.appended
        return per_column + self.appended // per_column

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

