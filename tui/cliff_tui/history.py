"""Bounded per-metric history, so a day-long session keeps flat memory.

Each series is a ring of two preallocated arrays of doubles: the memory it holds is allocated
when the series is made and never grows, and it leaves no object per point for the collector.
"""

from __future__ import annotations

import math
from array import array

DEFAULT_CAPACITY = 3600  # 15 minutes at 4 Hz
GAP = math.nan  # a point with no reading, kept as a gap


class Series:
    """A ring buffer of (t, value) points; ``None`` values are kept as gaps."""

    __slots__ = ("_columns", "_times", "_values", "appended", "capacity")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._times = array("d", bytes(8 * capacity))
        self._values = array("d", bytes(8 * capacity))
        self.appended = 0  # ever, not just kept: tells a redraw whether anything new arrived
        self._columns: tuple[tuple[int, int, int], list[float | None]] | None = None  # the last asked for

    def append(self, t: float, value: float | None) -> None:
        i = self.appended % self.capacity
        self._times[i] = t
        self._values[i] = GAP if value is None else value
        self.appended += 1

    def __len__(self) -> int:
        return min(self.appended, self.capacity)

    @property
    def last(self) -> float | None:
        return self.tail(1)[0] if self.appended else None

    def tail(self, n: int) -> list[float | None]:
        """The newest ``n`` values, oldest first."""
        return [None if v != v else v for v in self._newest(self._values, n)]

    def points(self) -> list[tuple[float, float | None]]:
        """Every kept point, oldest first."""
        return list(zip(self._newest(self._times, len(self)), self.tail(len(self))))

    def _newest(self, ring: array, n: int) -> list[float]:
        n = min(n, len(self))
        if n <= 0:
            return []
        end = (self.appended - 1) % self.capacity + 1  # one past the newest
        if n <= end:
            return ring[end - n : end].tolist()
        return (ring[self.capacity - (n - end) :] + ring[:end]).tolist()

    def columns(self, n: int, per_column: int) -> list[float | None]:
        """The newest ``n`` complete columns of ``per_column`` points, each its largest value (None:
        a gap), grouped on the count of points since the start. A column is drawn once it is
        complete, so the picture moves once a column, not with every point; until the first one
        is complete, the points so far are shown as one. Made again only when they can have
        changed (:meth:`columns_version`): a screen asks on every frame."""
        key = (n, per_column, self.columns_version(per_column))
        if self._columns is None or self._columns[0] != key:
            self._columns = (key, self._make_columns(n, per_column))
        return self._columns[1]

    def _make_columns(self, n: int, per_column: int) -> list[float | None]:
        if per_column <= 1:
            return self.tail(n)
        complete = self.appended - self.appended % per_column
        filling = self.appended - complete if complete else 0  # the points of the column being filled
        points = self.tail(n * per_column + filling)
        if filling:
            points = points[:-filling]
        newest = per_column if complete else self.appended
        head = (len(points) - newest) % per_column
        chunks = ([points[:head]] if head else []) + [
            points[i : i + per_column] for i in range(head, len(points), per_column)
        ]
        return [max((v for v in chunk if v is not None), default=None) for chunk in chunks][-n:]

    def columns_version(self, per_column: int) -> int:
        """Changes exactly when :meth:`columns` can: a screen redraws the graph only then."""
        if per_column <= 1 or self.appended < per_column:
            return self.appended
        return per_column + self.appended // per_column

    def since(self, t0: float) -> list[tuple[float, float]]:
        """Points at or after ``t0`` that have a value (newest last)."""
        out: list[tuple[float, float]] = []
        for k in range(1, len(self) + 1):
            i = (self.appended - k) % self.capacity
            t = self._times[i]
            if t < t0:
                break
            v = self._values[i]
            if v == v:
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

    def names(self) -> list[str]:
        """The series made so far."""
        return list(self._series)

    def get(self, name: str) -> Series:
        return self._series.get(name) or Series(1)
