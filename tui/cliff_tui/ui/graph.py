"""A history graph of one or more rows on a fixed scale, one style per run of equal cells.

Textual's built-in ``Sparkline`` rescales to its data's own min–max and emits a full colour
sequence per cell; over SSH at 4 Hz that is ~100 KiB/s. This one maps values onto ``lo → hi``
(0 → the tier's capacity, or a zoom around the session's own range), stacks eighth blocks over
as many rows as it is given, draws a marked level (the cliff line) where no bar covers it, and
groups cells that share a style.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style

BARS = " ▁▂▃▄▅▆▇█"
GAP = "·"  # no reading at that time
MARK = "╌"
_EIGHTHS = len(BARS) - 1
_BAR_CHARS = tuple(BARS)  # one object per character: a string's own index makes a new one each time
ONE_CELL = frozenset(BARS + GAP + MARK)  # every character a graph draws is one cell wide


def line_cells(line: Sequence[Segment]) -> int:
    """A line's width in cells. Rich measures a string through a cache of the last 4,096 it
    measured, and a reading's or a graph's text is new every time it moves: it would fill that
    cache and keep its strings alive (see bench/RESULTS.md, 'Watch CPU against btop'), and miss
    it every frame. ASCII and a graph's characters are counted as they are."""
    return sum(
        len(text) if text.isascii() or ONE_CELL.issuperset(text) else cell_len(text)
        for text, _, control in line
        if not control
    )


PLAIN_STYLE, MARK_STYLE = Style(), Style(color="red")  # immutable: one each serves every graph


@dataclass(frozen=True)
class Graph:
    values: Sequence[float | None]
    lo: float
    hi: float
    style_for: Callable[[float], Style] | None = None  # a value → the style of its bar
    default: Style = PLAIN_STYLE
    mark: float | None = None  # a level drawn across the graph (the cliff line), where no bar covers it
    mark_style: Style = MARK_STYLE

    def heights(self, width: int, rows: int) -> list[int | None]:
        """Each column's bar height in eighths of a row, the newest value rightmost; None where
        there is no reading, and left padding (height 0) until the series fills the width."""
        values = self.values[-width:] if width > 0 else []
        span, top = self.hi - self.lo, rows * _EIGHTHS
        out: list[int | None] = [0] * (width - len(values))
        for v in values:
            if v is None:
                out.append(None)
                continue
            fraction = 0.0 if span <= 0 else min(max((v - self.lo) / span, 0.0), 1.0)
            out.append(max(round(fraction * top), 1 if v > self.lo else 0))  # something is not nothing
        return out

    def cells(self, width: int, rows: int = 1) -> list[list[tuple[str, Style]]]:
        """``rows`` lines of ``width`` (character, style) cells, the top line first."""
        chars, mark_row, marked = self._grid(self.heights(width, rows), rows)
        bar = self._bar_styles(width)
        return [
            [(ch, self.mark_style if row == mark_row and x in marked else bar[x]) for x, ch in enumerate(line)]
            for row, line in enumerate(chars)
        ]

    def segments(self, width: int, rows: int = 1) -> list[list[Segment]]:
        """The lines as segments, one per run of equal styles. Drawn once per distinct picture:
        values that move less than an eighth of a row draw the same one."""
        heights = self.heights(width, rows)
        bar = self._bar_styles(width)
        key = (tuple(heights), tuple(bar), rows, self._mark_at(rows), self.default, self.mark_style)
        drawn = _DRAWN.get(key)
        if drawn is None:
            drawn = self._draw(heights, bar, rows)
            if len(_DRAWN) >= _DRAWN_MAX:
                _DRAWN.pop(next(iter(_DRAWN)))
            _DRAWN[key] = drawn
        return drawn

    def _bar_styles(self, width: int) -> list[Style]:
        """Each column's style. A blank cell keeps its column's style (a space looks the same in
        any foreground colour), so the runs of a line are the runs of its columns."""
        shown = list(self.values[-width:]) if width > 0 else []
        values = [None] * (width - len(shown)) + shown
        return [self.default if v is None or self.style_for is None else self.style_for(v) for v in values]

    def _draw(self, heights: list[int | None], bar: list[Style], rows: int) -> list[list[Segment]]:
        chars, mark_row, marked = self._grid(heights, rows)
        runs = _runs(bar)
        lines = []
        for row, line in enumerate(chars):
            if row == mark_row and marked:
                styles = [self.mark_style if x in marked else style for x, style in enumerate(bar)]
                lines.append([Segment(line[a:b], style) for a, b, style in _runs(styles)])
            else:
                lines.append([Segment(line[a:b], style) for a, b, style in runs])
        return lines

    def _grid(self, heights: list[int | None], rows: int) -> tuple[list[str], int | None, frozenset[int]]:
        """Each line's characters (a string), from a table of the columns a bar height can give;
        the line the mark is on, and the columns where it is drawn."""
        columns = [_column(h, rows) for h in heights]
        chars = ["".join(line) for line in zip(*columns)] if columns else [""] * rows
        mark_row, _ = self._mark_at(rows)
        if mark_row is None:
            return chars, None, frozenset()
        base = (rows - 1 - mark_row) * _EIGHTHS
        marked = frozenset(x for x, h in enumerate(heights) if h is not None and h <= base)
        chars[mark_row] = "".join(MARK if x in marked else ch for x, ch in enumerate(chars[mark_row]))
        return chars, mark_row, marked

    def _mark_at(self, rows: int) -> tuple[int | None, int]:
        if self.mark is None or self.hi <= self.lo or not self.lo <= self.mark <= self.hi:
            return None, 0
        level = round((self.mark - self.lo) / (self.hi - self.lo) * rows * _EIGHTHS)
        return rows - 1 - min(rows - 1, max(0, (level - 1) // _EIGHTHS)), level


# The pictures drawn lately, by what they show (segments are immutable: shared safely).
_DRAWN: dict[tuple, list[list[Segment]]] = {}
_DRAWN_MAX = 16


@lru_cache(maxsize=4096)
def _column(height: int | None, rows: int) -> tuple[str, ...]:
    """One column's characters, top first: a bar ``height`` eighths tall, or a gap."""
    if height is None:
        return (" ",) * (rows - 1) + (GAP,)
    return tuple(_BAR_CHARS[min(max(height - (rows - 1 - row) * _EIGHTHS, 0), _EIGHTHS)] for row in range(rows))


def _runs(styles: list[Style]) -> list[tuple[int, int, Style]]:
    """(start, end, style) of each run of one style (the styles are shared objects: identity
    finds the runs)."""
    out: list[tuple[int, int, Style]] = []
    start = 0
    for x in range(1, len(styles) + 1):
        if x == len(styles) or styles[x] is not styles[start]:
            out.append((start, x, styles[start]))
            start = x
    return out


def zoom_range(values: Sequence[float | None], min_span: float, unit: float = 1.0) -> tuple[float, float]:
    """A scale around the values' own range, a tenth of it free above and below, never narrower
    than ``min_span`` (so a flat series is a flat line, not magnified noise) nor below zero; its
    ends on a round step of ``unit`` (1, 2, 5, 10… MiB for bytes): labels that read well, and a
    scale that does not move with every small change of the values."""
    known = [v for v in values if v is not None]
    if not known:
        return 0.0, min_span
    lo, hi = min(known), max(known)
    pad = max((hi - lo) * 0.1, (min_span - (hi - lo)) / 2, 0.0)
    step = _round_step(max(hi - lo + 2 * pad, min_span) / 4 / unit) * unit
    lo = max(0.0, math.floor((lo - pad) / step) * step)
    return lo, max(math.ceil((hi + pad) / step) * step, lo + min_span)


def _round_step(x: float) -> float:
    """The 1-2-5 step at or above ``x``."""
    if x <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(x))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= x)
