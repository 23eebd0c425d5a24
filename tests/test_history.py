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


def test_columns_hold_the_largest_of_their_points_and_only_the_newest_moves():
    s = series([1, 5, 2, 3, 9, 4, 6])  # columns of 3: [1 5 2] [3 9 4] [6]
    assert s.columns(10, 3) == [5, 9, 6]
    assert s.columns(2, 3) == [9, 6]
    s.append(7.0, 8)  # the newest column takes it; the full ones keep their values
    assert s.columns(10, 3) == [5, 9, 8]
    s.append(8.0, None)
    s.append(9.0, None)
    s.append(10.0, None)  # a column with no reading is a gap
    assert s.columns(10, 3) == [5, 9, 8, None]


def test_one_point_a_column_is_the_tail():
    assert series(range(6)).columns(4, 1) == [2, 3, 4, 5]
