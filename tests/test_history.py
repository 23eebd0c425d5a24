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
