"""The bounded series the screens draw from."""

from __future__ import annotations

from cliff_tui.history import Series


def series(values) -> Series:
    s = Series(capacity=100)
    for i, v in enumerate(values):
        s.append(float(i), v)
    return s


def test_tail_is_the_newest_values_in_order():
    assert series(range(10)).tail(3) == [7, 8, 9]
    assert series(range(2)).tail(5) == [0, 1]


def test_columns_hold_the_largest_of_their_points_and_are_drawn_once_complete():
    s = series([1, 5])
    assert s.columns(10, 3) == [5]  # before the first column is complete: the points so far
    assert s.columns_version(3) == 2
    s = series([1, 5, 2, 3, 9, 4, 6])  # columns of 3: [1 5 2] [3 9 4], and [6] being filled
    assert s.columns(10, 3) == [5, 9]
    assert s.columns(1, 3) == [9]
    version = s.columns_version(3)
    s.append(7.0, 8)  # into the column being filled: nothing drawn changes
    assert s.columns(10, 3) == [5, 9] and s.columns_version(3) == version
    s.append(8.0, 0)
    assert s.columns(10, 3) == [5, 9, 8] and s.columns_version(3) != version
    for t in (9.0, 10.0, 11.0):
        s.append(t, None)  # a column with no reading is a gap
    assert s.columns(10, 3) == [5, 9, 8, None]


def test_one_point_a_column_is_the_tail():
    assert series(range(6)).columns(4, 1) == [2, 3, 4, 5]


def test_a_full_ring_keeps_the_newest_points_in_order_gaps_included():
    s = Series(capacity=5)
    for i in range(12):
        s.append(float(i), None if i == 9 else i)
    assert len(s) == 5 and s.appended == 12
    assert s.tail(3) == [None, 10, 11] and s.tail(10) == [7, 8, None, 10, 11]
    assert s.points() == [(7.0, 7), (8.0, 8), (9.0, None), (10.0, 10), (11.0, 11)]
    assert s.since(8.5) == [(10.0, 10), (11.0, 11)]  # the gap has no value to give
    assert s.last == 11


def test_a_series_holds_the_same_memory_from_its_first_point_to_its_last():
    import tracemalloc

    s = Series(capacity=3600)
    tracemalloc.start()
    try:
        s.append(0.0, 1)
        held = tracemalloc.get_traced_memory()[0]
        for i in range(1, 7200):  # a day-long session, twice round the ring
            s.append(i * 0.25, 2**34 + i)
        grown = tracemalloc.get_traced_memory()[0] - held
    finally:
        tracemalloc.stop()
    assert grown < 1024, f"{grown} bytes more after the ring filled"


def test_columns_are_made_again_only_when_a_column_completes():
    s = series([1, 5, 2, 3])
    first = s.columns(10, 3)
    s.append(4.0, 7)  # into the column being filled
    assert s.columns(10, 3) is first
    s.append(5.0, 1)
    assert s.columns(10, 3) is not first and s.columns(10, 3) == [5, 7]
    assert s.columns(1, 3) == [7]  # another width is another picture
