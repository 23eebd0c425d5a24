"""A history graph of one or more rows on a fixed scale, one style per run of equal cells.

Textual's built-in ``Sparkline`` rescales to its data's own min–max and emits a full colour
sequence per cell; over SSH at 4 Hz that is ~100 KiB/s. This one maps values onto ``lo → hi``
(0 → the tier's capacity, or a zoom around the session's own range), stacks eighth blocks over
as many rows as it is given, draws a marked level (the cliff line) where no bar covers it, and
groups cells that share a style.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from rich.segment import Segment
from rich.style import Style

BARS = " ▁▂▃▄▅▆▇█"
GAP = "·"  # no reading at that time
MARK = "╌"
_EIGHTHS = len(BARS) - 1


@dataclass(frozen=True)
class Graph:
    values: Sequence[float | None]
    lo: float
    hi: float
    style_for: Callable[[float], Style] | None = None  # a value → the style of its bar
    default: Style = Style()
    mark: float | None = None  # a level drawn across the graph (the cliff line), where no bar covers it
    mark_style: Style = Style(color="red")

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
        heights = self.heights(width, rows)
        values = [None] * (width - len(self.values[-width:])) + list(self.values[-width:]) if width > 0 else []
        styles = [self.default if v is None or self.style_for is None else self.style_for(v) for v in values]
        mark_row, mark_level = self._mark_at(rows)
        lines = []
        for row in range(rows):  # row 0 is the top
            base = (rows - 1 - row) * _EIGHTHS
            line = []
            for h, style in zip(heights, styles):
                if h is None:
                    line.append((GAP if row == rows - 1 else " ", self.default))
                    continue
                level = min(max(h - base, 0), _EIGHTHS)
                if level == 0 and row == mark_row and h <= mark_level:
                    line.append((MARK, self.mark_style))
                else:
                    line.append((BARS[level], style if level else self.default))
            lines.append(line)
        return lines

    def _mark_at(self, rows: int) -> tuple[int | None, int]:
        if self.mark is None or self.hi <= self.lo or not self.lo <= self.mark <= self.hi:
            return None, 0
        level = round((self.mark - self.lo) / (self.hi - self.lo) * rows * _EIGHTHS)
        return rows - 1 - min(rows - 1, max(0, (level - 1) // _EIGHTHS)), level

    def segments(self, width: int, rows: int = 1) -> list[list[Segment]]:
        """The lines as segments, one per run of equal styles."""
        return [_runs(line) for line in self.cells(width, rows)]


def _runs(cells: list[tuple[str, Style]]) -> list[Segment]:
    out: list[Segment] = []
    chars: list[str] = []
    run_style: Style | None = None
    for char, style in cells:
        if style is not run_style and style != run_style:
            if chars:
                out.append(Segment("".join(chars), run_style))
            chars = []
            run_style = style
        chars.append(char)
    if chars:
        out.append(Segment("".join(chars), run_style))
    return out


def zoom_range(values: Sequence[float | None], min_span: float) -> tuple[float, float]:
    """A scale around the values' own range, a tenth of it free above and below, never narrower
    than ``min_span`` (so a flat series is a flat line, not magnified noise) nor below zero."""
    known = [v for v in values if v is not None]
    if not known:
        return 0.0, min_span
    lo, hi = min(known), max(known)
    pad = max((hi - lo) * 0.1, (min_span - (hi - lo)) / 2, 0.0)
    lo = max(0.0, lo - pad)
    return lo, max(hi + pad, lo + min_span)
