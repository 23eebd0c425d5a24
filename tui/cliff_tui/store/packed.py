"""A bounded window of events kept as numbers in preallocated columns, not as objects.

A session keeps thousands of periodic readings (samples, server readings, their memory) for a
recording started late. As objects each costs about a kilobyte, and the window's memory grows
until it is full, half an hour into a session. Here each event is split into its *shape* (its
classes, tuple lengths, dict keys, strings, flags and ``None``s) and its numbers: the numbers go
into one array of doubles allocated when the first event arrives, the shape is shared by every
event that has it (a steady reading has one or a few). The window's memory is then taken at the
start and stays as it is; an event is built again, equal to the one kept, when it is asked for.

Only frozen dataclasses whose fields are all constructor arguments, with tuples, dicts, strings,
numbers, flags and ``None`` inside, can be kept this way (the events are).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

_FLOAT = "f"  # a float from the columns
_INT = "i"  # an int from the columns (exact up to 2**53)
_TUPLE = "t"  # (_TUPLE, length): a tuple of that many values
_DICT = "d"  # (_DICT, keys): a dict with those keys, in order
_VALUE = "v"  # (_VALUE, value): kept in the shape itself (strings, flags, None, larger ints)
EXACT_INT = 2**53

Shape = tuple[Any, ...]


@cache
def _field_count(cls: type) -> int:
    return len(dataclasses.fields(cls))


def split(value: object) -> tuple[Shape, list[float]]:
    """``value``'s shape and its numbers, in the order :func:`join` takes them back."""
    shape: list[Any] = []
    numbers: list[float] = []
    _split(value, shape, numbers)
    return tuple(shape), numbers


def _split(value: object, shape: list[Any], numbers: list[float]) -> None:
    kind = type(value)
    if kind is float:
        shape.append(_FLOAT)
        numbers.append(value)  # type: ignore[arg-type]
    elif kind is int and -EXACT_INT <= value <= EXACT_INT:  # type: ignore[operator]
        shape.append(_INT)
        numbers.append(float(value))  # type: ignore[arg-type]
    elif kind is tuple:
        shape.append((_TUPLE, len(value)))  # type: ignore[arg-type]
        for item in value:  # type: ignore[attr-defined]
            _split(item, shape, numbers)
    elif kind is dict:
        shape.append((_DICT, tuple(value)))  # type: ignore[arg-type]
        for item in value.values():  # type: ignore[attr-defined]
            _split(item, shape, numbers)
    elif dataclasses.is_dataclass(kind):
        shape.append(kind)
        for f in dataclasses.fields(kind):
            _split(getattr(value, f.name), shape, numbers)
    else:
        shape.append((_VALUE, value))


def join(shape: Shape, numbers: Iterator[float]) -> Any:
    """The value :func:`split` took apart."""
    return _joiner(iter(shape), numbers)()


def _joiner(tokens: Iterator[Any], numbers: Iterator[float]) -> Callable[[], Any]:
    def build() -> Any:
        token = next(tokens)
        if token == _FLOAT:
            return next(numbers)
        if token == _INT:
            return int(next(numbers))
        if isinstance(token, type):
            return token(*[build() for _ in range(_field_count(token))])
        tag, detail = token
        if tag == _TUPLE:
            return tuple([build() for _ in range(detail)])
        if tag == _DICT:
            return {key: build() for key in detail}
        return detail

    return build


class PackedRing:
    """The newest ``capacity`` of ``(seq, event)``, oldest first when iterated."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.appended = 0
        self._seqs = array("q", bytes(8 * capacity))
        self._shapes: list[Shape | None] = [None] * capacity
        self._width = 0  # numbers per row
        self._numbers = array("d")
        self._uses: dict[Shape, list[Any]] = {}  # shape → [the one kept, rows that have it]

    def __len__(self) -> int:
        return min(self.appended, self.capacity)

    def append(self, seq: int, event: object) -> None:
        shape, numbers = split(event)
        if len(numbers) > self._width:
            self._widen(len(numbers))
        row = self.appended % self.capacity
        self._release(self._shapes[row])
        self._shapes[row] = self._intern(shape)
        self._seqs[row] = seq
        start = row * self._width
        self._numbers[start : start + len(numbers)] = array("d", numbers)
        self.appended += 1

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        first = self.appended - len(self)
        for k in range(first, self.appended):
            row = k % self.capacity
            shape = self._shapes[row]
            assert shape is not None
            start = row * self._width
            yield self._seqs[row], join(shape, iter(self._numbers[start : start + self._width]))

    def _intern(self, shape: Shape) -> Shape:
        kept = self._uses.get(shape)
        if kept is None:
            kept = self._uses[shape] = [shape, 0]
        kept[1] += 1
        return kept[0]

    def _release(self, shape: Shape | None) -> None:
        if shape is None:
            return
        kept = self._uses[shape]
        kept[1] -= 1
        if not kept[1]:
            del self._uses[shape]

    def _widen(self, width: int) -> None:
        """Rows of ``width`` numbers from now on: the columns are allocated again, once, with the
        rows kept so far copied in."""
        old, old_width = self._numbers, self._width
        self._numbers = array("d", bytes(8 * self.capacity * width))
        for row in range(min(self.appended, self.capacity)):
            self._numbers[row * width : row * width + old_width] = old[row * old_width : (row + 1) * old_width]
        self._width = width
