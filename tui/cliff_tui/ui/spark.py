"""A sparkline on a fixed scale with one style per run of equal cells.

Textual's built-in ``Sparkline`` rescales to its data's own min–max (a 0 → 1 MiB series fills the
height) and emits a full colour sequence per cell; over SSH at 4 Hz that is ~100 KiB/s. This one
maps values onto ``lo → hi`` (0 → the tier's total) and groups cells that share a style.
"""

from __future__ import annotations

from typing import Callable, Sequence

from rich.segment import Segment
from rich.style import Style

BARS = " ▁▂▃▄▅▆▇█"
GAP = "·"


class FixedSpark:
    def __init__(self, values: Sequence[float | None], lo: float, hi: float,
                 style_for: Callable[[float], Style] | None = None, default: Style | None = None) -> None:
        self.values = values
        self.lo, self.hi = lo, hi
        self.style_for = style_for
        self.default = default or Style()

    def cells(self, width: int) -> list[tuple[str, Style]]:
        """``width`` cells, the newest value rightmost; padding on the left until the series fills it."""
        values = self.values[-width:] if width > 0 else []
        span = self.hi - self.lo
        top = len(BARS) - 1
        style_for, default, lo = self.style_for, self.default, self.lo
        out: list[tuple[str, Style]] = [(" ", default)] * (width - len(values))
        for v in values:
            if v is None:
                out.append((GAP, default))
                continue
            fraction = 0.0 if span <= 0 else min(max((v - lo) / span, 0.0), 1.0)
            level = round(fraction * top)
            if level == 0 and v > lo:
                level = 1  # something, however small, is not nothing
            out.append((BARS[level], style_for(fraction) if style_for else default))
        return out

    def segments(self, width: int) -> list[Segment]:
        """One line of ``width`` cells, a segment per run of equal styles."""
        out: list[Segment] = []
        chars: list[str] = []
        run_style = None
        for char, style in self.cells(width):
            if style is not run_style and style != run_style:
                if chars:
                    out.append(Segment("".join(chars), run_style))
                chars = []
                run_style = style
            chars.append(char)
        if chars:
            out.append(Segment("".join(chars), run_style))
        return out
